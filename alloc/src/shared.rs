//! The state every handle on one open heap shares: the mapping and its file, the geometry, the
//! components — [`SlabHeaps`], [`GlobalLists`], [`Slots`], the [`HugeHeap`] — and the mCAS
//! hook through which every multi-writer word changes. A [`crate::Heap`] and each of its
//! [`crate::ThreadHandle`]s hold it; so do, weakly, the heap's background threads (the
//! backer and the lease renewer, started here).

use crate::backer::Backer;
use crate::fault::Registration;
use crate::file::{HeapFile, Mapping};
use crate::global::GlobalLists;
use crate::huge::{HugeHeap, HugeView};
use crate::layout::{Geometry, Layout};
use crate::mcas::HeapMcas;
use crate::offset::Offset;
use crate::slabs::SlabHeaps;
use crate::slot::Owner;
use crate::slots::Slots;
use podkv_hw::sync::AtomicU64;
use std::sync::{Arc, OnceLock};

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
    pub(crate) recoverable: bool,
    /// Whether this process's threads morph sparse slabs ([`crate::Config::morph`]).
    pub(crate) morph: bool,
    /// Started once this process holds a slot of a lease heap (`Shared::hold`).
    pub(crate) renewer: OnceLock<()>,
}

impl Shared {
    /// Notes that this process holds slot `i` (lease mode: starts the renewer on first use).
    pub(crate) fn hold(self: &Arc<Self>, i: u32) {
        if !self.slots.hold(i) {
            return;
        }
        self.renewer.get_or_init(|| {
            let weak = Arc::downgrade(self);
            std::thread::Builder::new()
                .name("podkv-lease".into())
                .spawn(move || renew_leases(weak))
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
}

/// Opening step 7: starts the backer on `shared`'s slab heaps and cold lists, holding it
/// weakly so the thread ends once the heap is closed.
pub(crate) fn start_backer(shared: &Arc<Shared>, backer: Arc<Backer>) {
    let shared = Arc::downgrade(shared);
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

/// The lease renewer: every third of a lease, renews the slots this process holds; ends when
/// the heap is closed.
fn renew_leases(shared: std::sync::Weak<Shared>) {
    loop {
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let period = shared.slots.lease / 3;
        shared.slots.renew_held(shared.me);
        drop(shared);
        std::thread::sleep(period);
    }
}

