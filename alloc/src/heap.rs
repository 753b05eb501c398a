//! The heap: open (or create) a heap file, map it, and the operations shared by every thread
//! handle: growth, the global free lists, and the slab heaps' metadata.
//!
//! # Opening, with no coordinator (constitution rule 3)
//! 1. open the file (creating it, mode 0600, if asked); refuse read-only files;
//! 2. back the header page; if the format word is zero the file is a fresh heap: install the
//!    configured geometry with one CAS (0 → word). Every opener then decodes the same word;
//! 3. refuse foreign, other-version and truncated files;
//! 4. reserve the whole heap's address space (sized once for all growth: the slab heaps'
//!    maxima plus the huge heap, 1 TiB by default) and map the file over everything but the
//!    huge data range (`file.rs`);
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
//! slot this process claims starts the **lease renewer** (`Heap::hold`), which renews the
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

use crate::backer::Backer;
pub use crate::class::Kind;
pub use crate::global::List;
pub use crate::slabs::SlabHeap;
use crate::class::{SHIFT_LARGE_SLAB, SHIFT_SMALL_SLAB};
use crate::global::GlobalLists;
use crate::slabs::SlabHeaps;
use crate::error::HeapError;
use crate::fault::{self, Registration};
use crate::file::{HeapFile, Mapping, Words};
use crate::hazard;
use crate::huge::{HugeBacking, HugeProcess, HugeView};
use crate::layout::{
    FormatProblem, Geometry, Layout, COUNT_GLOBAL_LINES, FORMAT_VERSION, MAGIC, SIZE_GLOBAL_LINE,
    SIZE_HEADER,
};
use crate::mcas::{cas_as_process, HeapMcas};
use crate::offset::Offset;
use crate::process::{Liveness, SlotLife};
use crate::slab::SlabDesc;
use crate::slot::{Owner, Slot, SIZE_SLOT};
use crate::thread::{Recovered, ThreadHandle};
use podkv_hw::mcas::McasKind;
use podkv_hw::sync::{AtomicU64, Ordering};
use podkv_hw::Coherence;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// Root words in the header, for the layers above (the store keeps its index root here).
pub const COUNT_ROOTS: usize = 32;
const OFFSET_ROOTS: u64 = 512;
/// Header word: non-zero once an opener has backed the huge heap's metadata, so a file cut
/// short of it is known truncated (zero, as in a fresh heap: not yet backed).
const OFFSET_HUGE_BACKED: u64 = 256;

/// How to open a heap, and the geometry a fresh heap gets.
#[derive(Clone, Debug)]
pub struct Config {
    /// Most bytes of small slabs (rounded up to a power of two of 64 KiB slabs).
    pub small_bytes: u64,
    /// Most bytes of large slabs (rounded up to a power of two of 512 KiB slabs).
    pub large_bytes: u64,
    /// Thread slots (rounded up to a power of two; at most 16384).
    pub slots: u64,
    /// Coherence mode of a fresh heap.
    pub coherence: Coherence,
    /// Liveness mode of a fresh heap: how a dead slot owner is recognised.
    pub liveness: Liveness,
    /// Create the file if it does not exist.
    pub create: bool,
    /// Log every step in the recovery words and acknowledge detectable CAS (this process's
    /// choice, default on). Off only to measure what recoverability costs: a process that
    /// crashes with it off may leak the slabs it was moving.
    pub recoverable: bool,
    /// Address space of a fresh heap's huge heap (rounded up to a power of two, 2 GiB to
    /// 32 TiB; zero: no huge heap, blocks over 512 KiB are unsupported). 1 TiB by default: one
    /// reservation sized once for all growth, so no mapping ever moves.
    pub huge_bytes: u64,
    /// How this process backs the huge blocks it allocates.
    pub huge_backing: HugeBacking,
    /// The mCAS implementation of a fresh `mcas` heap: `flush-cas` (the default) or `nmp`.
    /// Ignored (left `flush-cas`) in other modes.
    pub mcas: McasKind,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            small_bytes: 64 << 30,
            large_bytes: 64 << 30,
            slots: 1024,
            coherence: Coherence::Hardware,
            liveness: Liveness::Process,
            create: true,
            recoverable: true,
            huge_bytes: 1 << 40,
            huge_backing: HugeBacking::Reserve,
            mcas: McasKind::FlushCas,
        }
    }
}

impl Config {
    /// The geometry a fresh heap opened with this configuration gets.
    pub fn geometry(&self) -> Result<Geometry, HeapError> {
        let log2 = |n: u64| n.max(1).next_power_of_two().trailing_zeros();
        let geometry = Geometry {
            small_slabs_log2: log2(self.small_bytes.div_ceil(1 << SHIFT_SMALL_SLAB)),
            large_slabs_log2: log2(self.large_bytes.div_ceil(1 << SHIFT_LARGE_SLAB)),
            slots_log2: log2(self.slots),
            coherence: self.coherence,
            liveness: self.liveness,
            huge_log2: if self.huge_bytes == 0 {
                0
            } else {
                log2(self.huge_bytes)
            },
            mcas: if self.coherence == Coherence::Mcas {
                self.mcas
            } else {
                McasKind::FlushCas
            },
        };
        geometry
            .validate()
            .map_err(|why| HeapError::Config(why.to_owned()))?;
        Ok(geometry)
    }
}

/// The default heap path for a name: `/dev/shm/podkv-<name>`.
pub fn default_path(name: &str) -> PathBuf {
    PathBuf::from(format!("/dev/shm/podkv-{name}"))
}

pub(crate) struct Shared {
    /// This heap's place in the SIGSEGV handler's registry: left first, so no handler uses the
    /// huge view below once it goes.
    _fault: Option<Registration>,
    /// Dropped next: dropped (leaving the SIGSEGV registry, unmapping huge blocks) while the
    /// mapping below still stands.
    pub(crate) huge: Option<HugeProcess>,
    /// An `mcas` heap's region and processor: dropped (stopping a processor this process
    /// runs) while the mapping below still stands.
    pub(crate) mcas: Option<Arc<HeapMcas>>,
    pub(crate) mapping: Mapping,
    pub(crate) geometry: Geometry,
    pub(crate) layout: Layout,
    pub(crate) file: Arc<HeapFile>,
    pub(crate) slabs: SlabHeaps,
    pub(crate) lists: GlobalLists,
    /// This process as a slot owner.
    pub(crate) me: Owner,
    pub(crate) recoverable: bool,
    /// Slots this process holds, whose leases its renewer keeps fresh (lease mode only).
    pub(crate) held: Mutex<Vec<u32>>,
    pub(crate) renewer: OnceLock<()>,
    /// The application's hook for slots adopted while claiming (process-local).
    pub(crate) recovery_hook: Mutex<Option<RecoveryHook>>,
    /// Reports of slots this process's threads adopted while claiming, with the slot's claim
    /// generation then, until the claiming handle takes them (one per slot at most; a report
    /// of an earlier claim of the slot is never handed out; process-local).
    pub(crate) adoptions: Mutex<Vec<(u64, Recovered)>>,
}

/// What the application runs for a slot recovered from a dead owner, while the adopting
/// handle (the first argument) still holds the slot: typically it settles the block the
/// report names as in flight ([`crate::InFlight`]) against its own records.
pub type RecoveryHook = Arc<dyn Fn(&ThreadHandle, &Recovered) + Send + Sync>;

/// An open heap: cheap to clone, shared by every thread of the process. Each allocating thread
/// takes a [`ThreadHandle`] with [`Heap::thread`].
#[derive(Clone)]
pub struct Heap {
    pub(crate) shared: Arc<Shared>,
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
        let file = HeapFile::open(path, config.create)?;
        let geometry = install_or_read_geometry(&file, config)?;
        let layout = geometry.layout();
        refuse_truncated(&file, &geometry, &layout)?;
        file.back(0, layout.hwcc + COUNT_GLOBAL_LINES * SIZE_GLOBAL_LINE)?;
        file.back(layout.slot_acks, layout.hwcc_end - layout.slot_acks)?;
        file.back(layout.slots, SIZE_SLOT as u64 * geometry.slots())?;
        file.back(layout.mcas, layout.mcas_bytes)?;
        let mapping = Mapping::reserve(&file, layout.huge_data, layout.total)?;
        let mcas = if geometry.coherence == Coherence::Mcas {
            // SAFETY: the mapping covers `0..huge_data` with the header, the HWcc globals, the
            // slots' and hazard records' words and the mCAS lines backed (above; remote words
            // are backed before `len` names their slabs), and `Shared` drops `mcas` (and
            // `huge`, which holds the other reference) before `mapping`.
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
            &layout,
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
        let file = Arc::new(file);
        let backer = Arc::new(Backer::default());
        let words = Words::of(&mapping);
        let slabs = SlabHeaps::new(&geometry, &layout, words, file.clone(), backer.clone());
        let lists = GlobalLists::new(file.clone(), backer.clone(), geometry.coherence);
        let heap = Heap {
            shared: Arc::new(Shared {
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
                recoverable: config.recoverable,
                held: Mutex::new(Vec::new()),
                renewer: OnceLock::new(),
                recovery_hook: Mutex::new(None),
                adoptions: Mutex::new(Vec::new()),
            }),
        };
        if !is_device {
            let shared = Arc::downgrade(&heap.shared);
            Backer::start(backer, move |wanted| {
                if !wanted {
                    return shared.strong_count() != 0;
                }
                let Some(shared) = shared.upgrade() else {
                    return false;
                };
                shared.slabs.back_ahead();
                shared.lists.back_cold_heads(shared.slabs.all());
                true
            });
        }
        Ok(heap)
    }

    /// Notes that this process holds slot `i` (lease mode: starts the renewer on first use).
    pub(crate) fn hold(&self, i: u32) {
        if self.shared.geometry.liveness != Liveness::Lease {
            return;
        }
        self.shared
            .held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(i);
        self.shared.renewer.get_or_init(|| {
            let weak = Arc::downgrade(&self.shared);
            std::thread::Builder::new()
                .name("podkv-lease".into())
                .spawn(move || renew_leases(weak))
                .expect("podkv: cannot start the lease renewer thread");
        });
    }

    /// Notes that this process no longer holds slot `i`.
    pub(crate) fn unhold(&self, i: u32) {
        if self.shared.geometry.liveness == Liveness::Lease {
            self.shared
                .held
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|&h| h != i);
        }
    }

    /// Recovers every slot whose owner is dead: adopts it, finishes its logged step, runs the
    /// registered recovery hook ([`Heap::set_recovery_hook`]), gives its slabs back and
    /// releases it. Live threads are never waited for; a slot another thread adopts first is
    /// skipped. Returns what was done, per slot.
    pub fn recover_dead(&self) -> Vec<Recovered> {
        let hook = self.recovery_hook();
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
                if let Some(handle) = ThreadHandle::adopt(self, i, word) {
                    done.push(handle.recover_with(&mut settle));
                }
            }
        }
        done
    }

    /// Registers (or with `None` removes) this process's recovery hook: run for every slot a
    /// thread of this process adopts from a dead owner while claiming ([`Heap::thread`]) and
    /// by [`Heap::recover_dead`], while the adopter holds the slot. The hook must not keep
    /// this `Heap` alive (hold a weak reference), or the heap is never closed.
    pub fn set_recovery_hook(&self, hook: Option<RecoveryHook>) {
        *self
            .shared
            .recovery_hook
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = hook;
    }

    pub(crate) fn recovery_hook(&self) -> Option<RecoveryHook> {
        self.shared
            .recovery_hook
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Keeps the report of a slot adopted while claiming, for its claiming handle.
    pub(crate) fn keep_adoption(&self, recovered: Recovered) {
        let generation = self.claims_of(recovered.slot);
        let mut kept = self
            .shared
            .adoptions
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        kept.retain(|(_, r)| r.slot != recovered.slot);
        kept.push((generation, recovered));
    }

    /// Takes the kept report of slot `slot`'s adoption, if it was made by its current claim.
    pub(crate) fn take_adoption(&self, slot: u32) -> Option<Recovered> {
        let generation = self.claims_of(slot);
        let mut kept = self
            .shared
            .adoptions
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let at = kept.iter().position(|(_, r)| r.slot == slot)?;
        let (made, recovered) = kept.swap_remove(at);
        (made == generation).then_some(recovered)
    }

    /// Thread slot `i`'s owner word ([`Owner`] packed, zero: free), in the HWcc region:
    /// read it freely; it changes only by [`Heap::try_claim_slot`] and a handle's release.
    pub fn slot_owner_word(&self, i: u64) -> &AtomicU64 {
        assert!(i < self.shared.geometry.slots());
        self.word(self.shared.layout.slot_owners + 8 * i)
    }

    /// Thread slot `i`'s owner, if claimed.
    pub fn slot_owner(&self, i: u64) -> Option<Owner> {
        Owner::unpack(self.slot_owner_word(i).load(Ordering::Acquire))
    }

    /// Takes thread slot `i` for `owner` if its owner word holds `from` (zero: a free slot;
    /// else the word of a dead owner being adopted), by CAS through the heap's hook on this
    /// process's line (mCAS in an `mcas` heap); returns whether it did. The lease is renewed
    /// (and written back) first, so nobody sees the new owner's lease expired; after the CAS
    /// the slot is invalidated (SWcc: its last owner wrote it back, or died) and its claim
    /// count bumped. The caller holds the slot from then on: a [`ThreadHandle`] does this
    /// itself; tests use it to plant an owner (a dead process's, say).
    pub fn try_claim_slot(&self, i: u64, from: u64, owner: Owner) -> bool {
        let word = self.slot_owner_word(i);
        if word.load(Ordering::Acquire) != from {
            return false;
        }
        let slot = self.slot(i);
        let coherence = self.shared.geometry.coherence;
        slot.lease
            .store(crate::process::lease_until(), Ordering::Release);
        coherence.write_back((&slot.lease as *const AtomicU64).cast(), 8);
        if self.cas_word_as_process(word, from, owner.pack()).is_err() {
            return false;
        }
        let (bytes, len) = slot.bytes();
        coherence.invalidate(bytes, len);
        // The owner's own word now: a plain increment.
        let claims = slot.generation.load(Ordering::Relaxed);
        slot.generation.store(claims + 1, Ordering::Release);
        true
    }

    /// Gives slot `i`, held by `owner`, back: writes the slot back (SWcc), then CASes its owner
    /// word from `owner` to zero on the slot's own line. False if the word no longer names
    /// `owner` (in lease mode, an adopter judged it dead meanwhile).
    pub(crate) fn release_slot(&self, i: u32, owner: Owner) -> bool {
        let (bytes, len) = self.slot(u64::from(i)).bytes();
        self.shared.geometry.coherence.write_back(bytes, len);
        let word = self.slot_owner_word(u64::from(i));
        self.cas_word(i, word, owner.pack(), 0).is_ok()
    }

    fn claims_of(&self, slot: u32) -> u64 {
        self.slot(u64::from(slot))
            .generation
            .load(Ordering::Acquire)
    }

    /// Whether slot `i`'s owner is alive, dead, or the slot free.
    pub fn slot_life(&self, i: u64) -> SlotLife {
        crate::process::life_of(
            self.slot_owner_word(i),
            self.slot(i),
            self.shared.geometry.liveness,
            self.shared.geometry.coherence,
        )
    }

    /// Claims a thread slot for the calling thread.
    pub fn thread(&self) -> Result<ThreadHandle, HeapError> {
        ThreadHandle::claim(self.clone())
    }

    /// This process's address of `offset`. The offset must lie inside the heap.
    #[inline]
    pub fn resolve(&self, offset: Offset) -> *mut u8 {
        debug_assert!(offset.0 < self.shared.layout.total);
        self.shared.mapping.base().wrapping_add(offset.0 as usize)
    }

    /// The offset of an address in this process's mapping, if it lies in the heap.
    pub fn offset_of(&self, ptr: *const u8) -> Option<Offset> {
        let rel = (ptr as usize).wrapping_sub(self.shared.mapping.base() as usize);
        (rel < self.shared.mapping.len()).then_some(Offset(rel as u64))
    }

    /// Root word `i` of the header (for the layers above; zero in a fresh heap).
    pub fn root(&self, i: usize) -> &AtomicU64 {
        assert!(i < COUNT_ROOTS, "root {i} out of range");
        self.word(OFFSET_ROOTS + 8 * i as u64)
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

    /// Thread slot `i`'s acknowledgement word: the help array of detectable CAS, in the HWcc
    /// region and changed only through [`Heap::cas_word`] (`ThreadHandle::acknowledge`).
    pub(crate) fn slot_ack(&self, i: u64) -> &AtomicU64 {
        assert!(i < self.shared.geometry.slots());
        // SAFETY: the word lies in the HWcc region, backed at open and mapped for the heap's
        // lifetime, 8-byte aligned; an AtomicU64 is valid for any bits.
        unsafe {
            &*(self.resolve(Offset(self.shared.layout.slot_acks + 8 * i)) as *const AtomicU64)
        }
    }

    /// Thread slot `i`.
    pub fn slot(&self, i: u64) -> &Slot {
        assert!(i < self.shared.geometry.slots());
        // SAFETY: slot `i` lies in the slots region, which is backed at open and mapped for the
        // heap's lifetime; a slot is plain atomics, valid for any bytes.
        unsafe {
            &*(self.resolve(Offset(self.shared.layout.slots + i * SIZE_SLOT as u64)) as *const Slot)
        }
    }

    /// Slab `slab`'s descriptor in `heap`. The slab must be below the heap's `len`.
    pub fn desc<'h>(&self, heap: &'h SlabHeap, slab: u32) -> &'h SlabDesc {
        heap.desc(slab)
    }

    /// Slab `slab`'s remote-free word in `heap` (HWcc).
    pub fn remote<'h>(&self, heap: &'h SlabHeap, slab: u32) -> &'h AtomicU64 {
        heap.remote(slab)
    }

    /// Slabs `heap` has grown to (HWcc `len`, a detectable word).
    pub fn len(&self, heap: &SlabHeap) -> u32 {
        heap.len()
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

    /// The one way a multi-writer word (global list heads, heap lengths, remote words, the
    /// huge reservation array, the slots' acknowledgement and owner words, the hazard records'
    /// owner words) changes by CAS, on behalf of thread slot `client`: memory-side
    /// CAS in an `mcas` heap, CPU CAS otherwise (hardware coherent there). Replaces `word` by
    /// `new` if it holds `current`: `Ok(current)`, or `Err(seen)`.
    #[inline]
    pub(crate) fn cas_word(
        &self,
        client: u32,
        word: &AtomicU64,
        current: u64,
        new: u64,
    ) -> Result<u64, u64> {
        match &self.shared.mcas {
            Some(mcas) => mcas.cas(client, word, current, new),
            None => crate::dcas::cpu_cas(word, current, new),
        }
    }

    /// [`Heap::cas_word`] for a thread that holds no slot (or not the one it changes): on the
    /// process line of an `nmp` heap, one thread of the process at a time; claims of slots and
    /// hazard records, and the release of this process's hazard record, go this way.
    pub(crate) fn cas_word_as_process(
        &self,
        word: &AtomicU64,
        current: u64,
        new: u64,
    ) -> Result<u64, u64> {
        cas_as_process(self.shared.mcas.as_deref(), word, current, new)
    }

    /// The store of [`Heap::cas_word`]'s mechanism: a word no other thread may change
    /// concurrently (by contract of the caller), ordered after every earlier change of it.
    #[inline]
    pub(crate) fn store_word(&self, client: u32, word: &AtomicU64, value: u64) {
        match &self.shared.mcas {
            Some(mcas) => mcas.store(client, word, value),
            None => crate::dcas::cpu_store(word, value),
        }
    }

    /// Bytes of HWcc memory in use: the global lines plus one remote word per slab grown, plus
    /// the huge heap's reservation array (constant, 8 KiB) and hazard records' owner words
    /// (512 B) when there is a huge heap, plus an acknowledgement and an owner word per thread
    /// slot ever claimed, plus an `mcas` heap's region lines (uncachable too).
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
            + 16 * claimed
            + COUNT_GLOBAL_LINES * SIZE_GLOBAL_LINE
            + Kind::ALL
                .iter()
                .map(|&k| 8 * u64::from(self.len(self.slab_heap(k))))
                .sum::<u64>()
    }

    fn word(&self, offset: u64) -> &AtomicU64 {
        // SAFETY: callers pass offsets of 8-byte-aligned words in backed metadata (header,
        // globals, remote words below `len`); AtomicU64 is valid for any bits.
        unsafe { &*(self.resolve(Offset(offset)) as *const AtomicU64) }
    }
}

/// The lease renewer: every third of a lease, renews the slots this process holds; ends when
/// the heap is closed.
fn renew_leases(shared: std::sync::Weak<Shared>) {
    let period = crate::process::LEASE / 3;
    loop {
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let heap = Heap { shared };
        let until = crate::process::lease_until();
        let held = heap
            .shared
            .held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for i in held {
            let lease = &heap.slot(u64::from(i)).lease;
            lease.store(until, Ordering::Release);
            // SWcc: other hosts judge the owner by this line.
            heap.shared
                .geometry
                .coherence
                .write_back((lease as *const AtomicU64).cast(), 8);
        }
        drop(heap);
        std::thread::sleep(period);
    }
}

/// The huge heap's part of opening: back its metadata, claim this process's hazard record and
/// join the SIGSEGV handler's registry.
fn open_huge(
    file: &HeapFile,
    mapping: &Mapping,
    geometry: &Geometry,
    layout: &Layout,
    config: &Config,
    me: Owner,
    mcas: Option<Arc<HeapMcas>>,
) -> Result<Option<HugeProcess>, HeapError> {
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
    Ok(Some(HugeProcess::new(
        view(record),
        config.huge_backing,
        me,
        mcas,
    )))
}

fn install_or_read_geometry(file: &HeapFile, config: &Config) -> Result<Geometry, HeapError> {
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
fn refuse_truncated(
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
