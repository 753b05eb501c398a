//! The heap: open (or create) a heap file, map it, and the public API over its components
//! (`Shared`: slab heaps, global lists, thread slots, huge heap), which every thread handle
//! shares.
//!
//! # Opening, with no coordinator (constitution rule 3)
//! 1. open the file (creating it, mode 0600, if asked); refuse read-only files;
//! 2. back the header page; if the format word is zero the file is a fresh heap: install the
//!    configured geometry with one CAS (0 → word). Every opener then decodes the same word;
//!    Before that CAS it claims the header's placement word (`place.rs`); a configured
//!    placement (`Config::placement`) naming a node not online here, or asked of a device, is
//!    refused before the file is created, and a fresh file's header page gets it before it is
//!    backed;
//! 3. refuse foreign, other-version and truncated files, and a recorded placement this process
//!    cannot apply;
//! 4. reserve the whole heap's address space (sized once for all growth: the slab heaps'
//!    maxima plus the huge heap, 1 TiB by default), map the file over everything but the
//!    huge data range (`file.rs`) and apply the recorded placement to that mapping; in a
//!    `limited` heap, note this process's cache domain in the header (`domains.rs`);
//! 5. back the fixed part (header, HWcc globals, thread slots, huge-heap metadata), claim a
//!    hazard record (by CAS on its owner word through the heap's hook) and join the SIGSEGV
//!    handler's registry (`huge/`, `fault.rs`).
//! 6. in an `mcas` heap, back and open (formatting if fresh) the mCAS region, borrow a process
//!    line for `nmp` and start a processor thread if none is alive (`mcas.rs`); this happens
//!    before step 5's claim of a hazard record, which goes through it.
//! 7. on a file (not a device), start this process's **backer** thread (`backer.rs`), which
//!    backs slabs ahead of growth and at the head of the cold lists. It holds the heap weakly:
//!    once the last `Heap` clone is dropped it sees that within `PERIOD_IDLE` (200 ms) and ends.
//!
//! One more thread starts later, not at open: in a lease heap (`Liveness::Lease`), the first
//! slot this process claims starts the **lease renewer** (`Shared::hold`), which renews the
//! leases of the slots the process holds every third of a lease and ends, as the backer does,
//! within a period of the heap's last clone being dropped.
//!
//! # Why the slab heaps are mapped eagerly
//! The small and large heaps only grow: a slab's file pages are backed before `len` says it
//! exists, and the file's length never shrinks. So one `MAP_SHARED` mapping of the whole slab
//! range at open already covers every slab any process will ever grow, and an offset published
//! after growth works in every process at once with no fault and no system call (temporal
//! pointer consistency for free). The mapping costs address space only; pages come in on
//! touch, and released slabs' pages leave with the punched hole. Huge blocks are different:
//! they come and go, so their range is reserved `PROT_NONE` and mapped block by block, by the
//! allocating process and, in every other process, by the SIGSEGV handler on first touch.
//!
//! Any number of processes may do this at once on a zero-filled file: the CAS picks one
//! geometry and every other step is idempotent.

mod config;
mod open;
mod place;

use open::{install_or_read_geometry, join_domains, open_huge, refuse_truncated};

pub use config::{default_path, huge_pages_default, morph_default, Config, ENV_HUGE_PAGES, ENV_MORPH};

use crate::backer::Backer;
use crate::check::HeapReport;
pub use crate::class::Kind;
pub use crate::global::List;
pub use crate::slabs::SlabHeap;
use crate::global::GlobalLists;
use crate::slabs::SlabHeaps;
use crate::slots::Slots;
use crate::error::{HeapError, ResolveError};
use crate::fault;
use crate::file::{HeapFile, Mapping, Words};
use crate::hazard;
use crate::huge::{Found, HugeBacking, HugeReport, HugeView};
use crate::layout::{Geometry, Layout, COUNT_GLOBAL_LINES, SIZE_GLOBAL_LINE};
use crate::mcas::HeapMcas;
use crate::offset::Offset;
use crate::process::SlotLife;
use crate::slab::SlabDesc;
use crate::slot::{Owner, Slot, SIZE_SLOT};
use crate::shared::{Hold, Shared};
use crate::thread::{Adoptions, Recovered, ThreadHandle};
pub use crate::thread::RecoveryHook;
use podkv_hw::mcas::McasKind;
use podkv_hw::sync::{AtomicU64, Ordering};
use podkv_hw::topology::Placement;
use podkv_hw::Coherence;
use std::path::Path;
use std::sync::{Arc, OnceLock};

/// Root words in the header, for the layers above (the store keeps its index root here).
pub const COUNT_ROOTS: usize = 32;
const OFFSET_ROOTS: u64 = 512;

/// An open heap: cheap to clone, shared by every thread of the process. Each allocating thread
/// takes a [`ThreadHandle`] with [`Heap::thread`].
#[derive(Clone)]
pub struct Heap {
    pub(crate) shared: Hold,
    adoptions: Arc<Adoptions>,
}

impl std::fmt::Debug for Heap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Heap")
            .field("path", &self.shared.file.path)
            .field("geometry", &self.shared.geometry)
            .finish()
    }
}

impl Heap {
    /// Opens the heap at `path`, creating a fresh one as `config` says: the steps in the
    /// module's "Opening" section, including the background threads it starts (the backer;
    /// in an `nmp` heap maybe an mCAS processor) and how they stop.
    pub fn open(path: impl AsRef<Path>, config: &Config) -> Result<Heap, HeapError> {
        let path = path.as_ref();
        place::refuse_configured(path, config)?;
        let file = Arc::new(HeapFile::open(path, config.create)?);
        let (geometry, placement) = install_or_read_geometry(&file, config)?;
        place::refuse_recorded(&file, &placement)?;
        let layout = geometry.layout();
        refuse_truncated(&file, &geometry, &layout)?;
        let mut mapping = Mapping::reserve(&file, layout.huge_data, layout.total)?;
        let domain = join_domains(&file, &mut mapping, &geometry, &layout)?;
        place::apply_to_mapping(&file, &mapping, layout.huge_data, &placement)?;
        file.back(0, layout.hwcc + COUNT_GLOBAL_LINES * SIZE_GLOBAL_LINE)?;
        // Up to the user's HWcc area, which its user backs as it grows (`HwccUser::back`).
        file.back(layout.slot_acks, layout.hwcc_user - layout.slot_acks)?;
        file.back(layout.slots, SIZE_SLOT as u64 * geometry.slots())?;
        file.back(layout.mcas, layout.mcas_bytes)?;
        let mcas = if geometry.coherence == Coherence::Mcas {
            // SAFETY: the mapping covers `0..huge_data` with the header, the HWcc globals, the
            // slots' and hazard records' words and the mCAS lines backed (above; remote words
            // are backed before `len` names their slabs), and `Shared` drops `mcas` (and `huge`
            // and `slots`, which hold the other references) before `mapping`.
            Some(Arc::new(unsafe {
                HeapMcas::open(mapping.base(), &geometry, &layout)?
            }))
        } else {
            None
        };
        let me = crate::process::me();
        let huge = open_huge(
            &file,
            &mapping,
            &geometry,
            &placement,
            config,
            me,
            mcas.clone(),
        )?;
        // On a full registry, dropping `huge` gives its hazard record back.
        let fault = match &huge {
            Some(huge) => Some(fault::register(huge.view).ok_or(HeapError::TooManyHeaps {
                count: fault::COUNT_HEAPS_MAX,
            })?),
            None => None,
        };
        let is_device = file.is_device;
        // The user's HWcc area (the store's bucket words) always: a few huge pages, read at
        // random by every lookup, and never released.
        let backer = Arc::new(Backer::new(config.huge_pages, true));
        let words = Words::of(&mapping);
        let slabs = SlabHeaps::new(&geometry, &layout, words, file.clone(), backer.clone());
        let slots = Slots::new(&geometry, &layout, words, mcas.clone(), config.lease);
        let lists = GlobalLists::new(file.clone(), backer.clone(), geometry.coherence);
        let heap = Heap {
            adoptions: Arc::default(),
            shared: Hold::new(Arc::new(Shared {
                _fault: fault,
                huge,
                mcas,
                mapping,
                file,
                geometry,
                layout,
                slabs,
                lists,
                me,
                domain,
                recoverable: config.recoverable,
                morph: config.morph,
                slots,
                renewer: OnceLock::new(),
                holding: Arc::default(),
            })),
        };
        if !is_device {
            crate::shared::start_backer(&heap.shared, backer);
        }
        Ok(heap)
    }

    /// Recovers every slot whose owner is dead: adopts it, finishes its logged step, runs the
    /// registered recovery hook ([`Heap::set_recovery_hook`]), gives its slabs back and
    /// releases it. Live threads are never waited for; a slot another thread adopts first is
    /// skipped. Returns what was done, per slot.
    pub fn recover_dead(&self) -> Vec<Recovered> {
        let hook = self.adoptions.hook();
        self.recover_dead_with(|handle, recovered| {
            if let Some(hook) = &hook {
                hook(handle, recovered);
            }
        })
    }

    /// As [`Heap::recover_dead`], with `settle` in place of the registered hook: it runs for
    /// each recovered slot while the adopting handle still holds it, so the application
    /// settles the block in flight ([`Recovered::in_flight`]) before anyone can claim the
    /// slot again. `settle` may claim slots of its own (another slot is then used).
    pub fn recover_dead_with(
        &self,
        mut settle: impl FnMut(&ThreadHandle, &Recovered),
    ) -> Vec<Recovered> {
        let mut done = Vec::new();
        for i in 0..self.shared.geometry.slots() {
            if let SlotLife::Dead(word) = self.slot_life(i) {
                if let Some(handle) = crate::thread::adopt(&self.shared, &self.adoptions, i, word) {
                    done.push(handle.recover_with(&mut settle));
                }
            }
        }
        done
    }

    /// Recovers every fenced slot of host `host` (lease mode: owners whose leases lapsed,
    /// [`crate::lease`]), as [`Heap::recover_dead`] recovers dead ones. Only for a host known
    /// stopped — powered off, or all its podkv processes gone: a process that was only paused
    /// would wake up writing into memory now reused. Slots of the host still beating are left
    /// alone.
    pub fn recover_host(&self, host: u16) -> Vec<Recovered> {
        let hook = self.adoptions.hook();
        let mut done = Vec::new();
        for i in 0..self.shared.geometry.slots() {
            let SlotLife::Fenced(word) = self.slot_life(i) else {
                continue;
            };
            if Owner::unpack(word).is_some_and(|o| o.host == host) {
                if let Some(handle) = crate::thread::adopt(&self.shared, &self.adoptions, i, word) {
                    done.push(handle.recover_with(&mut |handle, recovered| {
                        if let Some(hook) = &hook {
                            hook(handle, recovered);
                        }
                    }));
                }
            }
        }
        done
    }

    /// Slots this process held that an operator's [`Heap::recover_host`] took while it was
    /// stopped (its writes since may have gone to memory reused by others).
    pub fn slots_lost(&self) -> u64 {
        self.shared.slots.lost()
    }

    /// Registers (or with `None` removes) this process's recovery hook: run for every slot a
    /// thread of this process adopts from a dead owner while claiming ([`Heap::thread`]) and
    /// by [`Heap::recover_dead`], while the adopter holds the slot. The hook must not keep
    /// this `Heap` alive (hold a weak reference), or the heap is never closed.
    pub fn set_recovery_hook(&self, hook: Option<RecoveryHook>) {
        self.adoptions.set_hook(hook);
    }

    /// Thread slot `i`'s owner word ([`Owner`] packed, zero: free), in the HWcc region:
    /// read it freely; it changes only by [`Heap::try_claim_slot`] and a handle's release.
    pub fn slot_owner_word(&self, i: u64) -> &AtomicU64 {
        self.shared.slots.owner_word(i)
    }

    /// Thread slot `i`'s owner, if claimed.
    pub fn slot_owner(&self, i: u64) -> Option<Owner> {
        Owner::unpack(self.slot_owner_word(i).load(Ordering::Acquire))
    }

    /// Takes thread slot `i` for `owner` if its owner word holds `from` (zero: a free slot;
    /// else the word of a dead owner being adopted), by CAS through the heap's hook on this
    /// process's line (mCAS in an `mcas` heap); returns whether it did. In lease mode the slot's
    /// beat is advanced (and written back) first, so watchers see the new owner beat; after the CAS
    /// the slot is invalidated (SWcc: its last owner wrote it back, or died) and its claim
    /// count bumped. The caller holds the slot from then on: a [`ThreadHandle`] does this
    /// itself; tests use it to plant an owner (a dead process's, say).
    pub fn try_claim_slot(&self, i: u64, from: u64, owner: Owner) -> bool {
        self.shared.slots.try_claim(i, from, owner)
    }

    /// Every thread slot's HWcc owner word, in slot order: zero for a slot without an owner,
    /// live or dead. Such a slot holds no thread, so what its thread last published is no
    /// one's: a thread claims its slot before it publishes anything there, and an owner's
    /// death leaves the word set until its recovery has run. For scans over the slots that
    /// skip the free ones; read them with the ordering the scan needs.
    pub fn slot_owner_words(&self) -> &[podkv_hw::sync::mapped::AtomicU64] {
        self.shared.slots.owner_words()
    }

    /// Whether slot `i`'s owner is alive, dead (known stopped), fenced, or the slot free. In
    /// lease mode this is this process watching the owner's beat: it fences an owner it has
    /// seen silent for a lease ([`crate::lease`]).
    pub fn slot_life(&self, i: u64) -> SlotLife {
        self.shared.slots.life(i)
    }

    /// Claims a thread slot for the calling thread.
    pub fn thread(&self) -> Result<ThreadHandle, HeapError> {
        crate::thread::claim(self.shared.clone(), self.adoptions.clone())
    }

    /// This process's address of `offset`. The offset must lie inside the heap.
    #[inline]
    pub fn resolve(&self, offset: Offset) -> *mut u8 {
        self.shared.resolve(offset)
    }

    /// The offset of an address in this process's mapping, if it lies in the heap.
    pub fn offset_of(&self, ptr: *const u8) -> Option<Offset> {
        self.shared.offset_of(ptr)
    }

    /// Root word `i` of the header (for the layers above; zero in a fresh heap).
    pub fn root(&self, i: usize) -> &AtomicU64 {
        assert!(i < COUNT_ROOTS, "root {i} out of range");
        self.word(OFFSET_ROOTS + 8 * i as u64)
    }

    /// The memory policy the heap's header records, which this process applied to its mapping.
    pub fn placement(&self) -> Placement {
        let word = self.shared.mapping.header_word(place::OFFSET_PLACEMENT);
        Placement::from_word(word.load(Ordering::Acquire) & !place::FLAG_CLAIMED)
            .unwrap_or_default()
    }

    /// The heap's geometry.
    pub fn geometry(&self) -> Geometry {
        self.shared.geometry
    }

    /// Where its regions lie.
    pub fn layout(&self) -> Layout {
        self.shared.layout
    }

    /// The heap file's path.
    pub fn path(&self) -> &Path {
        &self.shared.file.path
    }

    /// Bytes of storage the heap file holds now.
    pub fn file_allocated_bytes(&self) -> Result<u64, HeapError> {
        self.shared.file.allocated_bytes()
    }

    /// Most bytes this heap's backers may have backed ahead of use: past its slab heaps'
    /// lengths (remote words, descriptors and slab data) and at the heads of their cold lists
    /// (module `backer`): file storage that [`Heap::file_allocated_bytes`] counts before any
    /// slab uses it.
    pub fn back_ahead_bytes(&self) -> u64 {
        self.shared.slabs.slack_bytes()
    }

    /// The file's apparent length.
    pub fn file_len(&self) -> Result<u64, HeapError> {
        self.shared.file.len()
    }

    /// The small or large slab heap's placement.
    pub fn slab_heap(&self, kind: Kind) -> &SlabHeap {
        self.shared.slabs.get(kind)
    }

    /// Thread slot `i`.
    pub fn slot(&self, i: u64) -> &Slot {
        self.shared.slots.slot(i)
    }

    /// Slab `slab`'s descriptor in `heap`. The slab must be below the heap's `len`.
    pub fn desc(&self, heap: &SlabHeap, slab: u32) -> &SlabDesc {
        self.slab_heap(heap.kind).desc(slab)
    }

    /// Slab `slab`'s remote-free word in `heap` (HWcc).
    pub fn remote(&self, heap: &SlabHeap, slab: u32) -> &AtomicU64 {
        self.slab_heap(heap.kind).remote(slab)
    }

    /// Slabs `heap` has grown to (HWcc `len`, a detectable word).
    pub fn len(&self, heap: &SlabHeap) -> u32 {
        self.slab_heap(heap.kind).len()
    }

    pub(crate) fn huge_view(&self) -> Option<&HugeView> {
        self.shared.huge_view()
    }

    /// Unmaps every huge allocation this process has mapped that was freed since, withdrawing
    /// its hazard offsets so its owner can reclaim it, then sweeps a few released slots
    /// (`huge/owner.rs`). Huge allocations and frees do this themselves; a process that only
    /// reads huge blocks calls it now and then. Returns allocations reclaimed by the sweep.
    pub fn collect_huge(&self) -> usize {
        let Some(huge) = &self.shared.huge else {
            return 0;
        };
        huge.collect(&self.shared.slots, &|slot| self.shared.hold(slot))
    }

    /// Changes how this process backs the huge blocks it allocates from now on (no effect on a
    /// heap without a huge heap).
    pub fn set_huge_backing(&self, backing: HugeBacking) {
        if let Some(huge) = &self.shared.huge {
            huge.set_backing(backing);
        }
    }

    /// The live or freed huge allocation starting at `offset`: its slot, descriptor and length.
    pub fn huge_allocation(&self, offset: Offset) -> Option<Found> {
        self.shared.huge.as_ref()?.allocation(offset)
    }

    /// This process's address of `[offset, offset + len)`, checked: for offsets that came from
    /// outside the process (a file, a socket, another process's bug). The range must lie inside
    /// one grown slab of the small or large heap or inside one live huge allocation, which is
    /// mapped here if it is not yet. Anything else is an error, never a wild mapping.
    pub fn resolve_checked(&self, offset: Offset, len: u64) -> Result<*mut u8, ResolveError> {
        let refuse = ResolveError {
            offset: offset.0,
            len,
        };
        let end = offset.0.checked_add(len.max(1)).ok_or(refuse)?;
        for kind in Kind::ALL {
            let heap = self.slab_heap(kind);
            if let Some((slab, in_slab)) = heap.slab_of(offset.0) {
                let fits = in_slab + (end - offset.0) <= heap.slab_bytes();
                return if fits && slab < heap.len() {
                    Ok(self.resolve(offset))
                } else {
                    Err(refuse)
                };
            }
        }
        let view = self.huge_view().ok_or(refuse)?;
        view.map_checked(offset.0, end).ok_or(refuse)?;
        Ok(self.resolve(offset))
    }

    /// Walks all metadata, checks every invariant and gathers statistics (`check.rs`).
    pub fn check(&self) -> HeapReport {
        let report = HeapReport {
            hwcc_bytes: self.hwcc_bytes(),
            file_bytes: self.file_allocated_bytes().unwrap_or(0),
            ..HeapReport::default()
        };
        let mut report = HeapReport::walk(&self.shared, report);
        report.huge = self.check_huge(&mut report.problems);
        report
    }

    /// The slab-utilisation census (`census.rs`): each class's slabs by occupancy, live and
    /// slab bytes. Read-only; one walk over all metadata, as [`Heap::check`].
    pub fn census(&self) -> crate::Census {
        crate::Census::of_report(&self.check())
    }

    /// The disowned slabs worth draining at `percent` of their blocks live at most
    /// (`sparse.rs`): read-only, one pass over the slab descriptors.
    pub fn sparse_slabs(&self, percent: u32) -> crate::SparseSlabs {
        crate::SparseSlabs::of_heap(&self.shared, percent)
    }

    /// Checks the huge heap, appending one line per violated invariant to `problems`.
    pub fn check_huge(&self, problems: &mut Vec<String>) -> HugeReport {
        let Some(view) = self.huge_view() else {
            return HugeReport::default();
        };
        let released = |slot: u32| self.shared.slots.peek(u64::from(slot)) == SlotLife::Free;
        HugeReport::check(view, &self.shared.geometry, released, problems)
    }

    /// The user's HWcc area (`hwcc_user.rs`): where the store keeps its multi-writer words.
    pub fn hwcc_user(&self) -> crate::HwccUser {
        crate::HwccUser::new(self.shared.clone())
    }

    /// The mCAS implementation of an `mcas` heap (`None` in other modes).
    pub fn mcas_kind(&self) -> Option<McasKind> {
        self.shared.mcas.as_deref().map(HeapMcas::kind)
    }

    /// mCAS operations (CAS and store on multi-writer words) this process has sent to an
    /// `mcas` heap's region; zero in other modes, where no change goes through mCAS.
    pub fn mcas_ops(&self) -> u64 {
        self.shared.mcas.as_deref().map_or(0, HeapMcas::ops)
    }

    /// Bytes of HWcc memory in use: the global lines plus one remote word per slab grown, plus
    /// the huge heap's reservation array (constant, 8 KiB) and hazard records' owner words
    /// (512 B) when there is a huge heap, plus an acknowledgement and an owner word per thread
    /// slot ever claimed, plus an `mcas` heap's region lines (uncachable too), plus the backed
    /// prefix of the user's HWcc area (`HwccUser::backed`: what the store uses).
    pub fn hwcc_bytes(&self) -> u64 {
        let claimed = (0..self.shared.geometry.slots())
            .filter(|&i| self.slot(i).generation.load(Ordering::Relaxed) != 0)
            .count() as u64;
        let huge = if self.shared.huge.is_some() {
            8 * (crate::layout::COUNT_HUGE_RANGES + hazard::COUNT_HAZARD_RECORDS)
        } else {
            0
        };
        huge + self.shared.layout.mcas_bytes
            + self.hwcc_user().backed()
            + 16 * claimed
            + COUNT_GLOBAL_LINES * SIZE_GLOBAL_LINE
            + Kind::ALL
                .iter()
                .map(|&k| 8 * u64::from(self.len(self.slab_heap(k))))
                .sum::<u64>()
    }

    /// Slabs of `heap` that hold memory: those it has grown to less those on its cold list
    /// (their pages released), that is the slabs in use, the empty ones kept warm and the
    /// unsized ones. Read without a lock ([`GlobalLists::count`]).
    pub fn held_slabs(&self, heap: &SlabHeap) -> u32 {
        let cold = self.shared.lists.count(heap, crate::global::List::Cold);
        self.len(heap).saturating_sub(cold)
    }

    /// Bytes of slab memory the heap holds, both slab heaps ([`Heap::held_slabs`]).
    pub fn held_bytes(&self) -> u64 {
        let held = |kind| {
            let heap = self.slab_heap(kind);
            u64::from(self.held_slabs(heap)) * heap.slab_bytes()
        };
        Kind::ALL.into_iter().map(held).sum()
    }

    fn word(&self, offset: u64) -> &AtomicU64 {
        // SAFETY: callers pass offsets of 8-byte-aligned words in backed metadata (header,
        // globals, remote words below `len`); AtomicU64 is valid for any bits.
        unsafe { &*(self.resolve(Offset(offset)) as *const AtomicU64) }
    }
}

