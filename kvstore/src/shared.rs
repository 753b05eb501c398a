//! What every handle of one open store shares: the arena, the descriptor's place, the clock.
//!
//! [`Shared`] is the store as this process mapped it. It owns opening (find the descriptor
//! at the root, or [`create`] one and let the root CAS decide), the descriptor's facts
//! (limits, size, counters) and the rules every reader applies to an item (visibility under
//! expiry and `flush_all`). It knows no handle: per-thread state lives in the components a
//! [`crate::Handle`] holds (`slot`, `reclaim`, `buckets`, `writer`).

use crate::arena::{alloc_zeroed, Arena};
use crate::config::{Clock, Eviction, StoreConfig, Table};
use crate::index;
use crate::item::{self, View};
use crate::layout::*;
use crate::StoreError;
use podkv_alloc::HwccUser;
use podkv_hw::sync::mapped::{AtomicU64, AtomicUsize, Ordering};
use podkv_hw::Coherence;
use std::sync::OnceLock;

/// One open store: see the module doc. Held in an `Arc` by the map and by every handle.
pub(crate) struct Shared<A: Arena> {
    pub(crate) arena: A,
    pub(crate) view: View,
    pub(crate) desc_at: u64,
    /// The descriptor's `hwcc_at`, read once at open (every operation reaches the block).
    pub(crate) hwcc_at: u64,
    /// This process's address of that block: a get reaches it twice (pin, visibility), and
    /// mapping the offset each time cost it 3 instructions of its 210.
    hw: *const HwccWords,
    pub(crate) clock: Clock,
    /// The heap's mCAS hook (`Arena::mcas_hook`), taken once at open: `Some` only in an
    /// `mcas` heap, where every multi-writer word changes through it (see
    /// [`Shared::cas_word`]); `None` where those words are HWcc memory.
    hook: Option<HwccUser>,
    /// [`Shared::value_max`], set once the descriptor is validated (0 before): fixed for the
    /// store's life, and computing it asked the heap's geometry on every write.
    value_max: AtomicUsize,
    /// This process's domain's index in the store's [`DomainTable`], taken at its first
    /// handle ([`Shared::domain_hint`]; 0: none).
    hint: OnceLock<u64>,
}

// SAFETY: `View` is a base address into memory shared on purpose; all shared words are atomics.
unsafe impl<A: Arena> Send for Shared<A> {}
// SAFETY: as above.
unsafe impl<A: Arena> Sync for Shared<A> {}

/// What [`create`] leaves for opening: the descriptor that won the root, and the thread it
/// claimed, with the allocator's report if that claim adopted a dead owner's slot (the
/// store's log of that slot is settled once the descriptor is known).
pub(crate) struct Created<A: Arena> {
    pub(crate) desc_at: u64,
    pub(crate) thread: A::Thread,
    pub(crate) adopted: Option<(podkv_alloc::InFlight, u64)>,
}

impl<A: Arena> Shared<A> {
    /// Opens the store in `arena` given the root as this process read it (`seen`): zero
    /// makes a descriptor and lets the root CAS decide (another process may have installed
    /// one since). Also returns what `create` claimed, for the caller to settle.
    pub(crate) fn open(
        arena: A,
        config: &StoreConfig,
        seen: u64,
    ) -> Result<(Shared<A>, Option<Created<A>>), StoreError> {
        let view = View::new(arena.base()).with_coherence(arena.coherence());
        let mut desc_at = seen;
        let mut created = None;
        if desc_at == 0 {
            let made = create(&arena, view, config)?;
            desc_at = made.desc_at;
            created = Some(made);
        }
        let view = view.with_domain(cache_domain(view, desc_at));
        let mut shared = Shared {
            arena,
            view,
            desc_at,
            hwcc_at: 0,
            hw: std::ptr::null(),
            clock: config.clock.clone(),
            hook: None,
            value_max: AtomicUsize::new(0),
            hint: OnceLock::new(),
        };
        shared.hook = shared.arena.mcas_hook();
        if view.is_swcc() && podkv_hw::site!("store.open.invalidate") {
            view.invalidate(desc_at, std::mem::size_of::<Descriptor>());
        }
        shared.validate_descriptor()?;
        shared.hwcc_at = shared.desc().hwcc_at;
        shared.hw = shared.view.ptr(shared.hwcc_at) as *const HwccWords;
        shared.validate_hwcc()?;
        let value_max = shared.value_max_now();
        shared.value_max.store(value_max, Ordering::Relaxed);
        Ok((shared, created))
    }

    fn validate_descriptor(&self) -> Result<(), StoreError> {
        let d = self.desc();
        if d.magic == MAGIC && d.version != VERSION {
            return Err(StoreError::Version {
                found: d.version,
                expected: VERSION,
            });
        }
        if d.magic != MAGIC {
            return Err(StoreError::Corrupt(format!(
                "root names {:#x}, which is not a podkv store descriptor (version {VERSION})",
                self.desc_at
            )));
        }
        if d.slots < u64::from(self.arena.slots()) {
            return Err(StoreError::Corrupt(
                "fewer slot records than heap slots".into(),
            ));
        }
        Ok(())
    }

    /// The multi-writer words a creator sets before publishing (table size, epoch, first
    /// segment) are never zero afterwards: zero means the creator's stores never reached
    /// memory (in an `mcas` heap, a missing write-back), and a table of size zero would
    /// recurse without end looking for bucket 0's segment.
    fn validate_hwcc(&self) -> Result<(), StoreError> {
        let hw = self.hw();
        let size = self.load_word(&hw.size.word);
        let epoch = self.load_word(&hw.epoch.word);
        let first = self.load_word(&hw.directory[0]);
        if size == 0 || epoch == 0 || first == 0 {
            return Err(StoreError::Corrupt(format!(
                "the store's shared words at {:#x} read zero (table size {size}, epoch {epoch}, \
                 first segment {first:#x}): its creator's stores never reached memory",
                self.hwcc_at
            )));
        }
        Ok(())
    }

    /// The descriptor.
    #[inline]
    pub(crate) fn desc(&self) -> &Descriptor {
        // SAFETY: `desc_at` was published by the root CAS after its fields were written and is
        // never freed (INVARIANT: root[0] ≠ 0 ⇒ a live descriptor); its shared words are atomics.
        unsafe { &*(self.view.ptr(self.desc_at) as *const Descriptor) }
    }

    /// The store's multi-writer words.
    #[inline]
    pub(crate) fn hw(&self) -> &HwccWords {
        // SAFETY: `hw` is this process's address of `hwcc_at`, the block the descriptor's
        // creator carved and initialised before publishing the descriptor, never freed while
        // the store exists (set at open, before any handle exists); its words are atomics.
        unsafe { &*self.hw }
    }

    /// Whether the store's multi-writer words change through the heap's mCAS hook.
    #[inline]
    pub(crate) fn has_hook(&self) -> bool {
        self.hook.is_some()
    }

    /// A fresh load of one of the store's multi-writer words (the [`HwccWords`], the
    /// announcements, bucket words): through the hook in an `mcas` heap (the line is evicted
    /// first, since the area is not coherent there), a plain load of HWcc memory elsewhere.
    #[inline]
    pub(crate) fn load_word(&self, word: &AtomicU64) -> u64 {
        match &self.hook {
            Some(hook) => hook.load(word),
            None => word.load(Ordering::Acquire),
        }
    }

    /// The CAS of one of the store's multi-writer words for `thread`: mCAS in an `mcas`
    /// heap, CPU CAS of HWcc memory elsewhere. Each caller names its site just before with
    /// `podkv_hw::cas_site!`, so a test may turn it into a torn CPU CAS. `Ok` with the
    /// previous value on success, `Err` with the value found.
    #[inline]
    pub(crate) fn cas_word(
        &self,
        thread: &A::Thread,
        word: &AtomicU64,
        current: u64,
        new: u64,
    ) -> Result<u64, u64> {
        match &self.hook {
            Some(hook) => A::hook_cas(hook, thread, word, current, new),
            None => {
                // The site named no hook CAS here: disarm it for the allocator's next one.
                podkv_hw::model::take_cas_off();
                word.compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire)
            }
        }
    }

    /// The store of [`Shared::cas_word`]'s mechanism (named by `cas_site!` the same way).
    #[inline]
    pub(crate) fn store_word(&self, thread: &A::Thread, word: &AtomicU64, value: u64) {
        match &self.hook {
            Some(hook) => A::hook_store(hook, thread, word, value),
            None => {
                podkv_hw::model::take_cas_off();
                word.store(value, Ordering::Release);
            }
        }
    }

    /// Replaces a multi-writer word by `f(seen)` (wrapping counters, maxima) and returns the
    /// value it replaced: one `fetch_update` of HWcc memory, a loop of hook CASes in an
    /// `mcas` heap (mCAS has no fetch-and-add). `arm` names the site before each CAS.
    pub(crate) fn update_word(
        &self,
        thread: &A::Thread,
        word: &AtomicU64,
        arm: impl Fn(),
        f: impl Fn(u64) -> u64,
    ) -> u64 {
        let Some(hook) = &self.hook else {
            let update = |seen| Some(f(seen));
            let seen = word.fetch_update(Ordering::AcqRel, Ordering::Acquire, update);
            return seen.unwrap_or_else(|seen| seen);
        };
        let mut seen = hook.load(word);
        loop {
            arm();
            match A::hook_cas(hook, thread, word, seen, f(seen)) {
                Ok(_) => return seen,
                Err(now) => seen = now,
            }
        }
    }

    /// Adds `delta` (wrapping) to a counter word; returns the value before. A `fetch_add` of
    /// HWcc memory; in an `mcas` heap as [`Shared::update_word`].
    #[inline]
    pub(crate) fn add_word(
        &self,
        thread: &A::Thread,
        word: &AtomicU64,
        delta: u64,
        arm: impl Fn(),
    ) -> u64 {
        if self.hook.is_none() {
            return word.fetch_add(delta, Ordering::AcqRel);
        }
        self.update_word(thread, word, arm, |seen| seen.wrapping_add(delta))
    }

    /// Offset of slot `i`'s announcement (in the HWcc block, after the [`HwccWords`]).
    #[inline]
    pub(crate) fn announce_at(&self, i: u32) -> u64 {
        self.hwcc_at + size_hwcc_block(u64::from(i)) as u64
    }

    /// Slot `i`'s epoch announcement.
    #[inline]
    pub(crate) fn announce(&self, i: u32) -> &AtomicU64 {
        self.view.word(self.announce_at(i))
    }

    /// Bytes of HWcc memory this store's words take: its [`HwccWords`] and announcements,
    /// and the segments of bucket words made so far.
    pub(crate) fn hwcc_bytes(&self) -> u64 {
        let segments = self.segments().count() as u64;
        size_hwcc_block(self.desc().slots) as u64 + segments * SIZE_SEGMENT as u64
    }

    /// The offsets of the segments of bucket words made so far, with their index.
    pub(crate) fn segments(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        (0..COUNT_SEGMENTS)
            .map(|i| (i, self.segment(i)))
            .filter(|&(_, seg)| seg != 0)
    }

    /// Directory entry `i`: its segment's offset, 0 while not made. An entry changes once,
    /// 0 → segment, so a non-zero value read plainly is final; a zero is read again through
    /// the hook ([`Shared::load_word`]: in an `mcas` heap a cached zero may be stale).
    #[inline]
    pub(crate) fn segment(&self, i: usize) -> u64 {
        let entry = &self.hw().directory[i];
        match entry.load(Ordering::Acquire) {
            0 => self.load_word(entry),
            seg => seg,
        }
    }

    /// Offset of slot record `i`.
    #[inline]
    pub(crate) fn slot_at(&self, i: u32) -> u64 {
        self.desc().slots_at + u64::from(i) * std::mem::size_of::<SlotRecord>() as u64
    }

    /// Slot record `i`.
    #[inline]
    pub(crate) fn slot(&self, i: u32) -> &SlotRecord {
        let at = self.slot_at(i);
        // SAFETY: `i < slots` (arena slots ≤ descriptor slots, checked at open); the array is
        // never freed and its words are atomics.
        unsafe { &*(self.view.ptr(at) as *const SlotRecord) }
    }

    /// The node view, without a hint: it neither names what it writes with this domain's
    /// hint nor trusts a hinted object (rule 2b). A handle's [`Slot::view`] carries the hint.
    ///
    /// [`Slot::view`]: crate::slot::Slot::view
    #[inline]
    pub(crate) fn view(&self) -> View {
        self.view
    }

    /// This process's cache domain's hint (`index`, # Bucket words): its entry in the
    /// store's [`DomainTable`], found or taken (by hook CAS 0 → the domain's name, on the
    /// first free entry) on the first call, which a handle makes with its thread. Zero where
    /// objects need no SWcc, or when every entry is another domain's: then this process
    /// writes without a hint and trusts none. Two domains never share an entry (the CAS), so
    /// a hint names one domain for the store's life.
    pub(crate) fn domain_hint(&self, thread: &A::Thread) -> u64 {
        *self.hint.get_or_init(|| {
            let domain = self.view.domain();
            if domain == 0 {
                return 0;
            }
            for (i, name) in self.hw().domains.names.iter().enumerate() {
                let mut seen = self.load_word(name);
                if seen == 0 {
                    podkv_hw::cas_site!("store.domain.take.cas");
                    seen = self
                        .cas_word(thread, name, 0, domain)
                        .map_or_else(|found| found, |_| domain);
                }
                if seen == domain {
                    return i as u64 + 1;
                }
            }
            0
        })
    }

    /// Now, in Unix seconds.
    #[inline]
    pub(crate) fn now(&self) -> u32 {
        self.clock.now()
    }

    /// Longest key this store accepts.
    pub(crate) fn key_max(&self) -> usize {
        self.desc().key_max as usize
    }

    /// Longest value this store accepts (and the heap serves today).
    #[inline]
    pub(crate) fn value_max(&self) -> usize {
        self.value_max.load(Ordering::Relaxed)
    }

    /// [`value_max`](Self::value_max) from the descriptor and the heap.
    fn value_max_now(&self) -> usize {
        let block = self.arena.block_max() - item::SIZE_HEADER - self.key_max();
        (self.desc().value_max as usize).min(block)
    }

    /// log2 of the bucket count now.
    #[inline]
    pub(crate) fn buckets_log2(&self) -> u32 {
        (self.load_word(&self.hw().size.word) & !FIXED) as u32
    }

    /// log2 of the bucket count as this process's cache has it: a size the table had, maybe
    /// not the latest (the size only grows). An index look's first size (`index::read`): in
    /// an `mcas` heap it saves the fresh load's eviction, and a fresh load refills the line.
    #[inline]
    pub(crate) fn buckets_log2_cached(&self) -> u32 {
        (self.hw().size.word.load(Ordering::Acquire) & !FIXED) as u32
    }

    /// Items linked and their bytes as the shared counters say now (approximate: handles
    /// publish their deltas in batches).
    pub(crate) fn usage(&self) -> (u64, u64) {
        let d = self.hw();
        let count = self.load_word(&d.count.word) as i64;
        let used = self.load_word(&d.used.word) as i64;
        (count.max(0) as u64, used.max(0) as u64)
    }

    /// Items evicted since the store was made, by every process (the per-slot counters).
    pub(crate) fn evictions(&self) -> u64 {
        (0..self.arena.slots())
            .map(|i| {
                let word = &self.slot(i).evictions;
                if self.view.is_swcc() && podkv_hw::site!("store.evictions.invalidate") {
                    self.view.invalidate(self.view.offset_of(word), 8);
                }
                word.load(Ordering::Relaxed)
            })
            .sum()
    }

    /// Bytes of items the store may hold (`None`: until the heap is full).
    pub(crate) fn capacity(&self) -> Option<u64> {
        Some(self.desc().capacity).filter(|&c| c != 0)
    }

    /// A key of 1 to `key_max` bytes, or the error a command returns.
    #[inline]
    pub(crate) fn check_key(&self, key: &[u8]) -> Result<(), StoreError> {
        let max = self.key_max();
        if key.is_empty() || key.len() > max {
            return Err(StoreError::KeyLength {
                len: key.len(),
                max,
            });
        }
        Ok(())
    }

    /// Whether `item` is visible now (not expired, not flushed).
    #[inline]
    pub(crate) fn visible(&self, item: u64, now: u32) -> bool {
        self.visible_when(item, || now)
    }

    /// As [`visible`](Self::visible), reading the clock only if the answer depends on it (an
    /// item with an expiry, or a delayed `flush_all` pending): most reads need no clock.
    #[inline]
    pub(crate) fn visible_when(&self, item: u64, now: impl Fn() -> u32) -> bool {
        let m = self.view.meta(item);
        if m.expiry != 0 && m.expiry <= now() {
            return false;
        }
        let (oldest_cas, oldest) = self.flush_marks();
        if oldest_cas != 0 && m.cas < oldest_cas {
            return false;
        }
        oldest == 0 || u64::from(m.time) > oldest || oldest > u64::from(now())
    }

    /// `flush_all`'s marks as they are now: `(oldest_cas, oldest_live)`. They share a line,
    /// so the first load (fresh: through the hook, which evicts the line in an `mcas` heap)
    /// brings the line that the second, plain load reads: what it reads is at least as new
    /// as that eviction, as a second evicting load's would be.
    #[inline]
    pub(crate) fn flush_marks(&self) -> (u64, u64) {
        let marks = &self.hw().flush;
        let oldest_cas = self.load_word(&marks.oldest_cas);
        (oldest_cas, marks.oldest_live.load(Ordering::Acquire))
    }
}

/// The cache domain this process reads and writes the store's SWcc memory through (`item`,
/// # Writer domain): under the model each heap mapping is a cache of its own; on real
/// hardware every process of a host shares the host's (coherent) caches, so the host id
/// names it. Zero where items need no SWcc.
fn cache_domain(view: View, desc_at: u64) -> u64 {
    if !view.is_swcc() {
        return 0;
    }
    podkv_hw::model::cache_domain(view.ptr(desc_at))
        .unwrap_or_else(|| u64::from(podkv_alloc::process::host_id()))
}

/// Makes a descriptor, its slot records and segment 0 (holding bucket 0's word, made
/// empty), installs it at the root; returns whichever descriptor won. If another process's descriptor won, the slot
/// this claimed may be one its dead owner used in that store: the report of the adoption is
/// taken at once (it belongs to this claim only) and returned for settling.
pub(crate) fn create<A: Arena>(
    arena: &A,
    view: View,
    config: &StoreConfig,
) -> Result<Created<A>, StoreError> {
    let thread = arena.thread()?;
    let adopted = A::adoption(&thread);
    let slots = u64::from(arena.slots());
    // The HWcc block first: a heap without room for it is refused before a block is taken.
    let hwcc_at = arena.hwcc_block(&thread, size_hwcc_block(slots))?;
    let seg0 = arena.hwcc_block(&thread, SIZE_SEGMENT)?;
    let desc_at = alloc_zeroed::<A>(&thread, view, std::mem::size_of::<Descriptor>())?;
    let slots_at = alloc_zeroed::<A>(&thread, view, slots as usize * SIZE_SLOT_RECORD)?;
    // The HWcc area's first words are stored plainly (nothing can name them yet); in an
    // `mcas` heap that area is not coherent, so under the model of non-coherent caches they
    // stay in this process's copy until written back below.
    let first_store = |word: &AtomicU64, value: u64| match arena.coherence() {
        Coherence::Mcas => podkv_hw::model::cpu_store(word, value),
        _ => word.store(value, Ordering::Relaxed),
    };
    // Bucket 0 is the ancestor of every bucket: made from birth.
    first_store(view.word(seg0), index::EMPTY);
    // SAFETY: a fresh zeroed block of `size_of::<Descriptor>()` bytes, unpublished.
    let d = unsafe { &mut *(view.ptr(desc_at) as *mut Descriptor) };
    d.magic = MAGIC;
    d.version = VERSION;
    d.key_max = config.key_max as u64;
    d.value_max = config.value_max as u64;
    d.capacity = config.capacity.unwrap_or(0);
    d.evict = u64::from(config.eviction == Eviction::SampledOldest);
    d.slots_at = slots_at;
    d.slots = slots;
    d.hwcc_at = hwcc_at;
    let size = match config.table {
        Table::Growing => SHIFT_BUCKETS_START,
        Table::Fixed(n) => FIXED | u64::from(n).min(SHIFT_BUCKETS_MAX),
    };
    // SAFETY: a fresh zeroed block of `size_hwcc_block(slots)` bytes this creator carved,
    // unpublished; its words are atomics.
    let hw = unsafe { &*(view.ptr(hwcc_at) as *const HwccWords) };
    first_store(&hw.size.word, size);
    first_store(&hw.epoch.word, 2);
    first_store(&hw.directory[0], seg0);
    if view.is_swcc() && podkv_hw::site!("store.create.write_back") {
        view.write_back(desc_at, std::mem::size_of::<Descriptor>());
        view.write_back(slots_at, slots as usize * SIZE_SLOT_RECORD);
    }
    // In an `mcas` heap the HWcc area is not coherent either: the words stored plainly above
    // reach memory before the root names them (the hook's loads read memory).
    if arena.coherence() == Coherence::Mcas && podkv_hw::site!("store.create.hwcc_write_back") {
        view.write_back(hwcc_at, std::mem::offset_of!(HwccWords, directory) + 8);
        view.write_back(seg0, 8);
    }
    let root: &AtomicU64 = arena.root();
    let desc_at = match root.compare_exchange(0, desc_at, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => desc_at,
        Err(winner) => {
            for at in [slots_at, desc_at] {
                A::free(&thread, at);
            }
            arena.hwcc_unused(&thread, seg0);
            arena.hwcc_unused(&thread, hwcc_at);
            winner
        }
    };
    Ok(Created {
        desc_at,
        thread,
        adopted,
    })
}
