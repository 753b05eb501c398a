//! The opening steps' parts that read or claim before the heap is mapped whole (the module
//! `heap`'s "Opening" section): the format word, refusing foreign, truncated and too-small
//! files, and the huge heap's metadata and hazard record.

use super::config::Config;
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
    layout: &Layout,
    config: &Config,
    me: Owner,
    mcas: Option<Arc<HeapMcas>>,
) -> Result<Option<HugeHeap>, HeapError> {
    if geometry.huge_log2 == 0 {
        return Ok(None);
    }
    file.back(layout.huge_ranges, 8 * crate::layout::COUNT_HUGE_RANGES)?;
    file.back(layout.huge_hazard, layout.huge_data - layout.huge_hazard)?;
    // SAFETY: the header is backed and mapped; an AtomicU64 is valid for any bits.
    let backed = unsafe { &*(mapping.base().add(OFFSET_HUGE_BACKED as usize) as *const AtomicU64) };
    backed.store(1, Ordering::Release);
    let view = |record| HugeView::new(mapping.base(), geometry, layout, record, file.fd());
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

pub(super) fn install_or_read_geometry(file: &HeapFile, config: &Config) -> Result<Geometry, HeapError> {
    let len = file.len()?;
    if !file.is_device && len < SIZE_HEADER {
        let mut head = vec![0u8; len as usize];
        file.read_at(&mut head, 0)?;
        if head.iter().any(|&b| b != 0) {
            return Err(HeapError::Truncated {
                path: file.path.clone(),
                len,
                needed: SIZE_HEADER,
            });
        }
        file.back(0, SIZE_HEADER)?;
    }
    let word = header_word_cas(file, config)?;
    Geometry::from_word(word).map_err(|problem| match problem {
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
    })
}

/// Maps the header page alone and installs the configured format word if it is zero.
fn header_word_cas(file: &HeapFile, config: &Config) -> Result<u64, HeapError> {
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    // SAFETY: a fresh shared mapping of the file's first page, which is backed (checked above).
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
    // SAFETY: the page is mapped, 4 KiB aligned, and an AtomicU64 is valid for any bits.
    let word = unsafe { &*(page as *const AtomicU64) };
    let mut found = word.load(Ordering::Acquire);
    if found == 0 {
        let fresh = config.geometry()?.to_word();
        found = match word.compare_exchange(0, fresh, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => fresh,
            Err(other) => other,
        };
    }
    // SAFETY: unmapping the page mapped above; `word` is not used past this point.
    unsafe { libc::munmap(page, SIZE_HEADER as usize) };
    Ok(found)
}

/// Refuses a file shorter than the slabs its header says exist.
pub(super) fn refuse_truncated(
    file: &HeapFile,
    geometry: &Geometry,
    layout: &Layout,
) -> Result<(), HeapError> {
    let len = file.len()?;
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
