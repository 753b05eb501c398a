//! One thread's place in the store: the arena slot it claimed, that slot's record in the heap,
//! and the record's log words, written before each step that recovery must be able to finish
//! (the tags are in `layout`, the settling `match` in `recover`).
//!
//! Every other component of a handle acts *for* a slot and gets it as an argument: `Slot`
//! holds no state of theirs, only who this thread is and where its record lives.

use crate::arena::{alloc_zeroed, Arena};
use crate::item::View;
use crate::layout::SlotRecord;
use crate::reclaim::epoch::{self, Words};
use crate::shared::Shared;
use crate::StoreError;
use podkv_hw::swcc::WriteBackBatch;
use podkv_hw::sync::mapped::{AtomicU64, Ordering};
use std::cell::RefCell;
use std::sync::Arc;

/// A claimed arena slot and its record (see the module doc). Not `Send`: the arena's thread
/// handle is the thread's.
pub(crate) struct Slot<A: Arena> {
    pub(crate) shared: Arc<Shared<A>>,
    /// The lines of this slot's own words stored since the last [`Slot::write_back_puts`]
    /// (SWcc; empty under `Hardware`): written back together, one fence. Declared before
    /// `thread`, so dropping the slot writes them back before the arena slot is released.
    puts: RefCell<WriteBackBatch>,
    pub(crate) thread: A::Thread,
    pub(crate) index: u32,
    /// Offset of this slot's record (`Shared::slot(index)`): a set reaches it 6–10 times (pin,
    /// logs, limbo), and each `Shared::slot` re-read the descriptor for the array.
    record_at: u64,
    /// Offset of this slot's announcement (`Shared::announce_at(index)`).
    announce_at: u64,
    /// The store's view with this process's hint (taken with this slot's thread if no handle
    /// took it before: `Shared::domain_hint`): the view every operation of the handle reads
    /// and writes objects through.
    view: View,
}

impl<A: Arena> Slot<A> {
    /// The slot `thread` holds in the store `shared` (its record not settled yet).
    pub(crate) fn new(shared: Arc<Shared<A>>, thread: A::Thread) -> Slot<A> {
        let index = A::slot_index(&thread);
        let record_at = shared.slot_at(index);
        let announce_at = shared.announce_at(index);
        let puts = RefCell::new(shared.view.coherence().write_back_batch());
        let view = shared.view().with_hint(shared.domain_hint(&thread));
        let slot = Slot {
            shared,
            puts,
            thread,
            index,
            record_at,
            announce_at,
            view,
        };
        slot.fresh_slot(index);
        slot
    }

    /// Makes slot `i`'s record and limbo bags fresh: this slot's last owner, or the dead
    /// owner of slot `i` that this thread recovers, may have been another host (SWcc;
    /// nothing under `Hardware`).
    pub(crate) fn fresh_slot(&self, i: u32) {
        let view = self.view();
        if !view.is_swcc() {
            return;
        }
        self.fresh_record(self.shared.slot_at(i));
        let mut bag = self.shared.slot(i).limbo.load(Ordering::Relaxed);
        while bag != 0 {
            if podkv_hw::site!("store.slot.adopt_invalidate") {
                view.invalidate(bag, crate::layout::SIZE_BAG);
            }
            bag = view.word(bag).load(Ordering::Relaxed);
        }
    }

    /// The store this slot is in.
    #[inline]
    pub(crate) fn shared(&self) -> &Shared<A> {
        &self.shared
    }

    /// The node view, with this process's hint (see the field).
    #[inline]
    pub(crate) fn view(&self) -> View {
        self.view
    }

    /// This slot's record.
    #[inline]
    pub(crate) fn record(&self) -> &SlotRecord {
        // SAFETY: as `Shared::slot`: `record_at` is that record's offset, never freed; its
        // words are atomics.
        unsafe { &*(self.view().ptr(self.record_at) as *const SlotRecord) }
    }

    /// This slot's epoch announcement (in the store's HWcc block).
    #[inline]
    pub(crate) fn announce(&self) -> &AtomicU64 {
        self.view().word(self.announce_at)
    }

    /// Stores a word of this slot's own (its record, its limbo bags). Under SWcc its line
    /// joins the lines this operation stored, which [`Slot::write_back_puts`] writes back
    /// together when the operation ends (at unpin), each line once with one fence: so a
    /// recoverer or the slot's next owner (another host, after this one died or released
    /// the slot) reads what the steps said (rule 5). A word is read by others only after
    /// its owner is gone, and a process of this host judges a dead owner (its dirty lines
    /// are this host's cache), so a step's words need not reach memory one by one.
    #[inline]
    pub(crate) fn put(&self, word: &AtomicU64, value: u64) {
        word.store(value, Ordering::Relaxed);
        let view = self.view();
        if view.is_swcc() && podkv_hw::site!("store.slot.write_back") {
            let ptr = (word as *const AtomicU64).cast::<u8>();
            self.puts.borrow_mut().push(ptr, 8);
        }
    }

    /// Adds the line of a claim this thread just won ([`View::claim_removed`]) to the lines
    /// written back before it unpins ([`Slot::write_back_puts`]): a recoverer reads the claim
    /// once this pin has ended (`recover::grace`), so one fence serves every claim and step
    /// of the operation.
    ///
    /// [`View::claim_removed`]: crate::item::View::claim_removed
    #[inline]
    pub(crate) fn put_claim(&self, at: u64, block: bool) {
        let view = self.view();
        if view.is_swcc() && podkv_hw::site!("store.claim.write_back") {
            let (ptr, len) = view.claim_line(at, block);
            self.puts.borrow_mut().push(ptr, len);
        }
    }

    /// Writes back the lines [`Slot::put`] stored since the last call, with one fence.
    #[inline]
    pub(crate) fn write_back_puts(&self) {
        if self.view().is_swcc() {
            self.puts.borrow_mut().finish();
        }
    }

    /// Makes this slot's record fresh (a slot taken over from another host, or a dead
    /// slot's record read by its recoverer).
    pub(crate) fn fresh_record(&self, at: u64) {
        let view = self.view();
        if view.is_swcc() && podkv_hw::site!("store.slot.invalidate") {
            view.invalidate(at, crate::layout::SIZE_SLOT_RECORD);
        }
    }

    /// Snapshots the allocator's step word before an `ALLOC_*` step is logged.
    #[inline]
    pub(crate) fn before_alloc(&self) {
        let step = A::step(&self.thread);
        self.put(&self.record().alloc_step, step);
    }

    /// Writes this slot's item step.
    #[inline]
    pub(crate) fn log(&self, tag: u64, at: u64) {
        self.put(&self.record().log, at | tag);
    }

    /// Writes this slot's bucket block step.
    #[inline]
    pub(crate) fn block_log(&self, tag: u64, at: u64) {
        self.put(&self.record().block_log, at | tag);
    }

    /// Writes this slot's limbo step and where its block is referenced from.
    #[inline]
    pub(crate) fn limbo_log(&self, tag: u64, block: u64, from: u64) {
        let record = self.record();
        self.put(&record.limbo_at, from);
        self.put(&record.limbo_log, block | tag);
    }

    /// A zeroed block of `size` bytes from this slot's allocator (the caller logged the step).
    pub(crate) fn alloc_zeroed(&self, size: usize) -> Result<u64, StoreError> {
        alloc_zeroed::<A>(&self.thread, self.view(), size)
    }

    /// Frees a block through this slot's allocator (the caller logged the step).
    #[inline]
    pub(crate) fn free(&self, at: u64) {
        A::free(&self.thread, at);
    }
}

/// The epoch's words as this slot's thread changes them: the heap's hook in an `mcas` heap
/// (`Shared::cas_word`), CPU atomics of HWcc memory elsewhere.
impl<A: Arena> Words for Slot<A> {
    #[inline]
    fn load(&self, word: &AtomicU64, order: Ordering) -> u64 {
        if self.shared.has_hook() {
            self.shared.load_word(word)
        } else {
            word.load(order)
        }
    }

    /// A plain load, also in an `mcas` heap: the line as this host's cache holds it, which a
    /// fresh load (evict, then load) refills.
    #[inline]
    fn load_cached(&self, word: &AtomicU64, order: Ordering) -> u64 {
        word.load(order)
    }

    /// A pin's announcement.
    #[inline]
    fn store_fenced(&self, word: &AtomicU64, value: u64) {
        if self.shared.has_hook() {
            podkv_hw::cas_site!("store.epoch.pin.store");
            self.shared.store_word(&self.thread, word, value);
            podkv_hw::sync::mapped::fence(Ordering::SeqCst);
        } else {
            epoch::Cpu.store_fenced(word, value);
        }
    }

    /// An unpin's announcement.
    #[inline]
    fn store(&self, word: &AtomicU64, value: u64) {
        if self.shared.has_hook() {
            podkv_hw::cas_site!("store.epoch.unpin.store");
            self.shared.store_word(&self.thread, word, value);
        } else {
            epoch::Cpu.store(word, value);
        }
    }

    /// An advance of the global epoch.
    #[inline]
    fn cas(&self, word: &AtomicU64, current: u64, new: u64) -> Result<u64, u64> {
        podkv_hw::cas_site!("store.epoch.advance.cas");
        self.shared.cas_word(&self.thread, word, current, new)
    }
}
