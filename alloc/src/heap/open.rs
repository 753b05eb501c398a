//! The opening steps' parts that read or claim before the heap is mapped whole (the module
//! `heap`'s "Opening" section): the format word, refusing foreign, truncated and too-small
//! files, the placement word's claim, the huge heap's metadata and hazard record, and the
//! cache domain's note in the header.

use super::config::Config;
use super::place;
use crate::error::HeapError;
use crate::file::{HeapFile, Mapping};
use crate::hazard;
use crate::huge::{HugeHeap, HugeView};
use crate::layout::{FormatProblem, Geometry, Layout, FORMAT_VERSION, MAGIC, SIZE_HEADER};
use crate::mcas::{cas_as_process, HeapMcas};
use crate::slabs::SlabHeap;
use crate::class::Kind;
use crate::slot::Owner;
use podkv_hw::sync::{AtomicU64, Ordering};
use podkv_hw::topology::Placement;
use podkv_hw::Coherence;
use std::sync::Arc;

/// Header word: non-zero once an opener has backed the huge heap's metadata, so a file cut
/// short of it is known truncated (zero, as in a fresh heap: not yet backed).
const OFFSET_HUGE_BACKED: u64 = 256;

/// The huge heap's part of opening: back its metadata, claim this process's hazard record and
/// join the SIGSEGV handler's registry.
pub(super) fn open_huge(
    file: &Arc<HeapFile>,
    mapping: &Mapping,
    geometry: &Geometry,
    placement: &Placement,
    config: &Config,
    me: Owner,
    mcas: Option<Arc<HeapMcas>>,
) -> Result<Option<HugeHeap>, HeapError> {
    if geometry.huge_log2 == 0 {
        return Ok(None);
    }
    let layout = &geometry.layout();
    file.back(layout.huge_ranges, 8 * crate::layout::COUNT_HUGE_RANGES)?;
    file.back(layout.huge_hazard, layout.huge_data - layout.huge_hazard)?;
    // SAFETY: the header is backed and mapped; an AtomicU64 is valid for any bits.
    let backed = unsafe { &*(mapping.base().add(OFFSET_HUGE_BACKED as usize) as *const AtomicU64) };
    backed.store(1, Ordering::Release);
    let view =
        |record| HugeView::new(mapping.base(), geometry, layout, record, file.fd(), placement);
    let needed = view(0).end_of_allocations();
    if !file.is_device && file.len()? < needed {
        return Err(HeapError::Truncated {
            path: file.path.clone(),
            len: file.len()?,
            needed,
        });
    }
    let cas = |word: &AtomicU64, current, new| cas_as_process(mcas.as_deref(), word, current, new);
    let record = view(0)
        .hazards()
        .claim(me, cas)
        .ok_or(HeapError::NoHazardRecord {
            count: hazard::COUNT_HAZARD_RECORDS,
        })?;
    Ok(Some(HugeHeap::new(
        view(record),
        config.huge_backing,
        me,
        mcas,
        file.clone(),
    )))
}

/// Installs (on a fresh heap) or reads the header's format word and placement word: the
/// geometry and the placement every opener of this file uses.
pub(super) fn install_or_read_geometry(
    file: &HeapFile,
    config: &Config,
) -> Result<(Geometry, Placement), HeapError> {
    let len = file.len()?;
    let fresh = !file.is_device && len < SIZE_HEADER;
    if fresh {
        let mut head = vec![0u8; len as usize];
        file.read_at(&mut head, 0)?;
        if head.iter().any(|&b| b != 0) {
            return Err(HeapError::Truncated {
                path: file.path.clone(),
                len,
                needed: SIZE_HEADER,
            });
        }
    }
    let (word, placement) = header_words(file, config, fresh)?;
    let geometry = Geometry::from_word(word).map_err(|problem| match problem {
        FormatProblem::Foreign(magic) => HeapError::Foreign {
            path: file.path.clone(),
            magic,
            expected: MAGIC,
        },
        FormatProblem::Version(found) => HeapError::Version {
            path: file.path.clone(),
            found,
            expected: FORMAT_VERSION,
        },
        FormatProblem::Corrupt(what) => HeapError::Corrupt {
            path: file.path.clone(),
            what: what.to_owned(),
        },
    })?;
    Ok((geometry, place::decode(file, placement)?))
}

/// The header page mapped alone, unmapped on drop.
struct HeaderPage(*mut libc::c_void);

impl HeaderPage {
    fn map(file: &HeapFile) -> Result<HeaderPage, HeapError> {
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: a fresh shared mapping of the file's first page; nothing is touched until
        // the page is backed.
        let page = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                SIZE_HEADER as usize,
                prot,
                libc::MAP_SHARED,
                file.fd(),
                0,
            )
        };
        if page == libc::MAP_FAILED {
            return Err(HeapError::Map {
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(HeaderPage(page))
    }

    /// The header word at `offset`.
    ///
    /// # Safety
    /// The page is backed.
    unsafe fn word(&self, offset: u64) -> &AtomicU64 {
        // SAFETY: the page is mapped and backed (the caller's contract), `offset` is an
        // 8-byte aligned header offset, and an AtomicU64 is valid for any bits.
        unsafe { &*(self.0.add(offset as usize) as *const AtomicU64) }
    }
}

impl Drop for HeaderPage {
    fn drop(&mut self) {
        // SAFETY: unmapping the page mapped in `map`; no word borrowed from it outlives `self`.
        unsafe { libc::munmap(self.0, SIZE_HEADER as usize) };
    }
}

/// Maps the header page alone and, if the format word is zero, claims the placement word and
/// then installs the configured format word (the order the placement word's map in `place.rs`
/// relies on). A `fresh` file has no header yet: the configured placement is applied to the
/// page before it is backed, so the creator backs nothing outside its placement.
fn header_words(file: &HeapFile, config: &Config, fresh: bool) -> Result<(u64, u64), HeapError> {
    let page = HeaderPage::map(file)?;
    if fresh {
        place::apply(file, page.0.cast(), SIZE_HEADER, &config.placement)?;
        file.back(0, SIZE_HEADER)?;
    }
    // SAFETY: the header page is backed: by a former opener, or just above.
    let (word, placement) = unsafe { (page.word(0), page.word(place::OFFSET_PLACEMENT)) };
    let mut found = word.load(Ordering::Acquire);
    if found == 0 {
        let fresh = config.geometry()?.to_word();
        // A lost claim means a racing creator's placement stands, as its format word may.
        let _ = placement.compare_exchange(
            0,
            place::claim_word(config),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        found = match word.compare_exchange(0, fresh, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => fresh,
            Err(other) => other,
        };
    }
    Ok((found, placement.load(Ordering::Acquire)))
}

/// Refuses a file shorter than the slabs its header says exist.
pub(super) fn refuse_truncated(
    file: &HeapFile,
    geometry: &Geometry,
    layout: &Layout,
) -> Result<(), HeapError> {
    let mut needed = 0;
    for kind in Kind::ALL {
        let heap = SlabHeap::new(kind, geometry, layout, None);
        let mut word = [0u8; 8];
        if file.read_at(&mut word, heap.len_at)? == 8 {
            let slabs = u64::from(crate::dcas::payload(u64::from_le_bytes(word)));
            if slabs > heap.max {
                return Err(HeapError::Corrupt {
                    path: file.path.clone(),
                    what: format!(
                        "{} heap length {slabs} over its maximum {}",
                        kind.name(),
                        heap.max
                    ),
                });
            }
            if slabs > 0 {
                needed = needed.max(heap.data_at + (slabs << heap.shift));
            }
        }
    }
    let mut backed = [0u8; 8];
    if geometry.huge_log2 != 0
        && file.read_at(&mut backed, OFFSET_HUGE_BACKED)? == 8
        && u64::from_le_bytes(backed) != 0
    {
        needed = needed.max(layout.huge_data);
    }
    // The length is read after the words that say what must exist: another opener backs its
    // part of the file before it sets them, so a length read first could predate a backing
    // whose word is read next, and a heap growing under us would look truncated.
    let len = file.len()?;
    if !file.is_device && len < needed {
        return Err(HeapError::Truncated {
            path: file.path.clone(),
            len,
            needed,
        });
    }
    if file.is_device && len < layout.total {
        return Err(HeapError::Config(format!(
            "device {} has {len} bytes but the heap's geometry needs {}",
            file.path.display(),
            layout.total
        )));
    }
    Ok(())
}

/// Opening: under the coherence model (a test mode), this process's cache of the heap's SWcc
/// part; then this process's cache domain joins a `limited` heap's domain word, before it
/// writes anything of the heap ([`crate::domains`]). The domain, or zero in another mode.
pub(super) fn join_domains(
    file: &HeapFile,
    mapping: &mut Mapping,
    geometry: &Geometry,
    layout: &Layout,
) -> Result<u64, HeapError> {
    if geometry.coherence.is_swcc() {
        mapping.model(file, layout.slots, layout.huge_data)?;
    }
    if geometry.coherence != Coherence::Limited {
        return Ok(0);
    }
    let domain = podkv_hw::model::cache_domain(mapping.base().wrapping_add(layout.slots as usize))
        .unwrap_or_else(|| u64::from(crate::process::host_id()));
    crate::domains::join(mapping.header_word(crate::domains::OFFSET_DOMAINS), domain);
    Ok(domain)
}
