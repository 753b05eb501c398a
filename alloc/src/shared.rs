//! The state every handle on one open heap shares: the mapping and its file, the geometry, the
//! components — [`SlabHeaps`], [`GlobalLists`], [`Slots`], the [`HugeHeap`] — and the mCAS
//! hook through which every multi-writer word changes. A [`crate::Heap`], each of its
//! [`crate::ThreadHandle`]s and its [`crate::HwccUser`]s hold it ([`Hold`]); so do, weakly, the
//! heap's background threads (the backer and the lease renewer, started here).
//!
//! # Closing
//! The heap closes (huge blocks unmapped, hazard record and slots given back, the mapping
//! gone) when the last holder lets go, on that holder's thread. A background thread must never
//! be that holder: a user whose last handle is gone may truncate or remove the file at once,
//! and a close that ran afterwards on the backer's thread would touch the file (a `SIGBUS`
//! once it is truncated) or back pages in it. So the background threads hold the state only
//! under [`Holding`], and a user lets go under it too: when a user lets go, no background
//! thread holds the state, and the close (if this was the last user) is done when the user's
//! drop returns.

use crate::backer::{Backer, RANGE_HWCC_USER};
use crate::domains::OFFSET_DOMAINS;
use crate::fault::Registration;
use crate::file::{HeapFile, Mapping};
use crate::global::GlobalLists;
use crate::huge::{HugeHeap, HugeView};
use crate::layout::{Geometry, Layout, OFFSET_HWCC_USER_BACKED};
use crate::mcas::HeapMcas;
use crate::offset::Offset;
use crate::slabs::SlabHeaps;
use crate::slot::Owner;
use crate::slots::Slots;
use podkv_hw::sync::AtomicU64;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, TryLockError, Weak};
use std::time::{Duration, Instant};

/// One open heap's state in this process (module docs).
pub(crate) struct Shared {
    // Fields drop in declaration order: everything that reads the mapping or holds the mCAS
    // hook (whose last holder stops this process's processor) comes before `mapping`.
    /// This heap's place in the SIGSEGV handler's registry: left first, so no handler uses the
    /// huge view below once it goes.
    pub(crate) _fault: Option<Registration>,
    /// This process's part of the huge heap: dropped next (unmapping huge blocks, giving its
    /// hazard record back) while the mapping below still stands.
    pub(crate) huge: Option<HugeHeap>,
    /// The thread slots (holding the mCAS hook, as `huge` does).
    pub(crate) slots: Slots,
    /// An `mcas` heap's region and processor: dropped (stopping a processor this process
    /// runs) while the mapping below still stands.
    pub(crate) mcas: Option<Arc<HeapMcas>>,
    pub(crate) slabs: SlabHeaps,
    pub(crate) lists: GlobalLists,
    pub(crate) mapping: Mapping,
    pub(crate) geometry: Geometry,
    pub(crate) layout: Layout,
    pub(crate) file: Arc<HeapFile>,
    /// This process as a slot owner.
    pub(crate) me: Owner,
    /// This process's cache domain in a `limited` heap ([`crate::domains`]); zero otherwise.
    /// Fixed at open (`heap::open::join_domains`), read by every thread of the process.
    pub(crate) domain: u64,
    pub(crate) recoverable: bool,
    /// Whether this process's threads morph sparse slabs ([`crate::Config::morph`]).
    pub(crate) morph: bool,
    /// Started once this process holds a slot of a lease heap (`Shared::hold`).
    pub(crate) renewer: OnceLock<()>,
    /// What the background threads hold the state under (module docs: closing).
    pub(crate) holding: Arc<Holding>,
}

/// A user's hold on an open heap's state: the one way a [`crate::Heap`], a thread handle or an
/// HWcc user area keeps it; letting go waits for a background thread that holds it (module
/// docs: closing).
pub(crate) struct Hold(ManuallyDrop<Arc<Shared>>);

impl Hold {
    pub(crate) fn new(shared: Arc<Shared>) -> Hold {
        Hold(ManuallyDrop::new(shared))
    }
}

impl Clone for Hold {
    fn clone(&self) -> Hold {
        Hold::new(Arc::clone(&self.0))
    }
}

impl std::ops::Deref for Hold {
    type Target = Arc<Shared>;

    #[inline]
    fn deref(&self) -> &Arc<Shared> {
        &self.0
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let holding = Arc::clone(&self.0.holding);
        // SAFETY: the field is dropped once, here, and not used after.
        holding.let_go(|| unsafe { ManuallyDrop::drop(&mut self.0) });
    }
}

/// The lock under which this process's background threads hold an open heap's state, and
/// under which a user lets go of theirs (module docs: closing). Process-local: no other
/// process ever sees it.
#[derive(Default)]
pub(crate) struct Holding {
    lock: Mutex<()>,
    /// The process whose background thread holds `lock` (0: none, or about to say). A child
    /// forked while the parent's backer held the lock inherits it held, by a thread the child
    /// does not have: a different pid here tells it not to wait.
    pid: AtomicU32,
}

impl Holding {
    /// Runs `work` on the state behind `weak` if the heap is still open; `None` once it is
    /// closed. For background threads only.
    pub(crate) fn with<R>(&self, weak: &Weak<Shared>, work: impl FnOnce(&Arc<Shared>) -> R) -> Option<R> {
        let _held = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        self.pid.store(std::process::id(), Ordering::Relaxed);
        let done = weak.upgrade().map(|shared| work(&shared));
        self.pid.store(0, Ordering::Relaxed);
        done
    }

    /// Runs `let_go` (a user's drop of its hold) while no background thread holds the state.
    fn let_go(&self, let_go: impl FnOnce()) {
        let start = Instant::now();
        loop {
            match self.lock.try_lock() {
                Ok(_held) => return let_go(),
                Err(TryLockError::Poisoned(held)) => {
                    let _held = held.into_inner();
                    return let_go();
                }
                Err(TryLockError::WouldBlock) => {
                    let pid = self.pid.load(Ordering::Relaxed);
                    let forked = pid != 0 && pid != std::process::id();
                    // A holder that has not yet said its pid says it within instants; one
                    // that never does was caught by a fork in between.
                    if forked || (pid == 0 && start.elapsed() > Duration::from_secs(1)) {
                        return let_go();
                    }
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
        }
    }
}

impl Shared {
    /// Notes that this process holds slot `i` (lease mode: starts the renewer on first use).
    pub(crate) fn hold(self: &Arc<Self>, i: u32) {
        if !self.slots.hold(i) {
            return;
        }
        self.renewer.get_or_init(|| {
            let weak = Arc::downgrade(self);
            let holding = Arc::clone(&self.holding);
            std::thread::Builder::new()
                .name("podkv-lease".into())
                .spawn(move || renew_leases(weak, holding))
                .expect("podkv: cannot start the lease renewer thread");
        });
    }

    /// This process's address of `offset`. The offset must lie inside the heap.
    #[inline]
    pub(crate) fn resolve(&self, offset: Offset) -> *mut u8 {
        debug_assert!(offset.0 < self.layout.total);
        self.mapping.base().wrapping_add(offset.0 as usize)
    }

    /// The offset of an address in this process's mapping, if it lies in the heap.
    pub(crate) fn offset_of(&self, ptr: *const u8) -> Option<Offset> {
        let rel = (ptr as usize).wrapping_sub(self.mapping.base() as usize);
        (rel < self.mapping.len()).then_some(Offset(rel as u64))
    }

    pub(crate) fn huge_view(&self) -> Option<&HugeView> {
        self.huge.as_ref().map(|h| &h.view)
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
        crate::mcas::cas_word(self.mcas.as_deref(), client, word, current, new)
    }

    /// The store of [`Shared::cas_word`]'s mechanism: a word no other thread may change
    /// concurrently (by contract of the caller), ordered after every earlier change of it.
    #[inline]
    pub(crate) fn store_word(&self, client: u32, word: &AtomicU64, value: u64) {
        crate::mcas::store_word(self.mcas.as_deref(), client, word, value);
    }

    /// Whether every process that has opened this `limited` heap so far is of this process's
    /// cache domain: then what a thread *just read* from its cache is what was last written
    /// there ([`crate::domains`]); always false in the other modes.
    #[inline]
    pub(crate) fn one_domain(&self) -> bool {
        crate::domains::only(self.mapping.header_word(OFFSET_DOMAINS), self.domain)
    }

    /// The header word holding how many bytes of the user's HWcc area are backed (raised by
    /// `HwccUser::back`).
    pub(crate) fn hwcc_user_backed_word(&self) -> &AtomicU64 {
        self.mapping.header_word(OFFSET_HWCC_USER_BACKED)
    }

    /// The backed part of the user's HWcc area, as heap offsets (the backer maps it as
    /// 2 MiB pages: the store's bucket words are read as randomly as its items).
    fn hwcc_user_backed(&self) -> std::ops::Range<u64> {
        let backed = self.hwcc_user_backed_word().load(Ordering::Acquire);
        let backed = backed.min(self.geometry.hwcc_user_bytes());
        self.layout.hwcc_user..self.layout.hwcc_user + backed
    }
}

/// Opening step 7: starts the backer on `shared`'s slab heaps, cold lists and 2 MiB pages,
/// holding it weakly so the thread ends once the heap is closed.
pub(crate) fn start_backer(shared: &Arc<Shared>, backer: Arc<Backer>) {
    let holding = Arc::clone(&shared.holding);
    let shared = Arc::downgrade(shared);
    let collapser = Arc::clone(&backer);
    Backer::start(backer, move |wanted| {
        if !wanted && !collapser.huge_pages() {
            return shared.strong_count() != 0;
        }
        holding
            .with(&shared, |shared| {
                if wanted {
                    shared.slabs.back_ahead();
                    shared.lists.back_cold_heads(shared.slabs.all());
                }
                // Also on idle wakes: the store backs its bucket words without waking the
                // backer. The area is never released, so its backed prefix has no hole.
                let area = shared.hwcc_user_backed();
                let words = crate::file::Words::of(&shared.mapping);
                collapser.collapse(words, RANGE_HWCC_USER, area.start, area.end);
            })
            .is_some()
    });
}

/// The lease renewer: every third of a lease, renews the slots this process holds; ends when
/// the heap is closed.
fn renew_leases(shared: Weak<Shared>, holding: Arc<Holding>) {
    loop {
        let renewed = holding.with(&shared, |shared| {
            shared.slots.renew_held(shared.me);
            shared.slots.lease / 3
        });
        let Some(period) = renewed else {
            return;
        };
        std::thread::sleep(period);
    }
}

