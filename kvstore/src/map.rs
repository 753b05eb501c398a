//! The embedding API: [`Map`] (one open store, shared by threads) and [`Handle`] (one thread's
//! seat at it). Both are thin: the work is in the components they hold and the command
//! modules they call.
//!
//! - `Map` holds the `Shared` store (arena, descriptor, clock) and opens it;
//! - `Handle` holds its `Reclaim` (its thread's `Slot` — arena slot, heap record, logs —
//!   and its pins, limbo schedule and spares), its `Buckets` part (growth debt, batched
//!   counters, sampling seed) and its `Writer` (CAS tokens, lost races); a command borrows
//!   them as one `Parts` and runs in `memcached`, `meta` or `maintain`.

use crate::arena::{Arena, PodArena};
use crate::buckets::Buckets;
use crate::check::{self, CheckReport, StoreReport};
use crate::command::{Count, Counted, Delete, Mode, Outcome, Read, StoreExtra};
use crate::compact::{self, CompactPass, CompactReport};
use crate::config::StoreConfig;
use crate::crawler::Crawler;
use crate::kvmap::Recycling;
#[cfg(feature = "baselines")]
use crate::local_arena::LocalArena;
use crate::maintain::{self, CrawlReport};
use crate::memcached::{self, Guard};
use crate::meta::{self, MetaRead};
use crate::reclaim::Reclaim;
use crate::recover::{self, Settled};
use crate::shared::{Created, Shared};
use crate::slot::Slot;
use crate::writer::{Parts, Writer};
use crate::StoreError;
use podkv_alloc::Heap;
use podkv_hw::sync::mapped::Ordering;
use podkv_hw::Coherence;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The index over arena `A`: [`crate::Store`] in the pod heap, `LocalStore` (feature
/// `baselines`) in process memory. Cheap to clone (an `Arc`).
pub struct Map<A: Arena> {
    pub(crate) inner: Arc<Shared<A>>,
    /// What opening settled for a slot `create` adopted (see [`Map::settled_at_open`]).
    settled_at_open: Option<Settled>,
}

impl<A: Arena> Clone for Map<A> {
    fn clone(&self) -> Self {
        Map {
            inner: self.inner.clone(),
            settled_at_open: self.settled_at_open,
        }
    }
}

impl<A: Arena> std::fmt::Debug for Map<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Map")
            .field("descriptor", &self.inner.desc_at)
            .finish()
    }
}

impl<A: Arena> Map<A> {
    /// Opens the store in `arena`, creating it if the root is empty. Refuses, before writing
    /// anything, an arena whose coherence mode the store does not serve
    /// ([`SERVED_COHERENCE`]).
    pub fn open_in(arena: A, config: &StoreConfig) -> Result<Map<A>, StoreError> {
        let mode = arena.coherence();
        if !SERVED_COHERENCE.contains(&mode) {
            return Err(StoreError::UnservedCoherence { mode });
        }
        let seen = arena.root().load(Ordering::Acquire);
        Map::open_seen(arena, config, seen)
    }

    /// As [`Map::open_in`], given the root as this process read it: zero makes a descriptor
    /// and lets the root CAS decide (another process may have installed one since).
    pub(crate) fn open_seen(
        arena: A,
        config: &StoreConfig,
        seen: u64,
    ) -> Result<Map<A>, StoreError> {
        let (shared, created) = Shared::open(arena, config, seen)?;
        let mut map = Map {
            inner: Arc::new(shared),
            settled_at_open: None,
        };
        if let Some(Created {
            thread,
            adopted: Some(report),
            ..
        }) = created
        {
            // The slot `create` claimed was a dead owner's: settle its store log with the
            // allocator's report while the slot is still held (as `recover_dead` does).
            let h = Handle::new(map.clone(), thread);
            let done = recover::settle(&h.reclaim, h.slot_index(), Some(report));
            drop(h);
            map.settled_at_open = Some(done);
        }
        Ok(map)
    }

    /// Now, in Unix seconds.
    #[inline]
    pub fn now(&self) -> u32 {
        self.inner.now()
    }

    /// Longest key this store accepts.
    pub fn key_max(&self) -> usize {
        self.inner.key_max()
    }

    /// Longest value this store accepts (and the heap serves today).
    #[inline]
    pub fn value_max(&self) -> usize {
        self.inner.value_max()
    }

    /// log2 of the bucket count now.
    pub fn buckets_log2(&self) -> u32 {
        self.inner.buckets_log2()
    }

    /// Items linked and their bytes (header + key + value) as the shared counters say now:
    /// approximate, since each handle publishes its deltas in batches (`flush_counters`).
    pub fn usage(&self) -> (u64, u64) {
        self.inner.usage()
    }

    /// Items evicted to make room since the store was made, by every process (the sum of the
    /// per-slot counters in the heap; exact once the evicting threads have returned).
    pub fn evictions(&self) -> u64 {
        self.inner.evictions()
    }

    /// Bytes of items the store may hold (`None`: until the heap is full), as its creator set.
    pub fn capacity(&self) -> Option<u64> {
        self.inner.capacity()
    }

    /// Bytes of slab memory the store's arena holds, items' blocks free or not
    /// ([`podkv_alloc::Heap::held_bytes`]): what a memory limit bounds, as memcached's `-m`
    /// bounds its slab pages. `None` for an arena without slabs of its own.
    pub fn held_bytes(&self) -> Option<u64> {
        self.inner.arena.held_bytes()
    }

    /// A handle for the calling thread (claims an arena slot). Recovers dead slots first
    /// ([`Map::recover_dead`]), so a killed process's in-flight blocks are settled with the
    /// allocator's report rather than by a silent adoption of its slot.
    pub fn handle(&self) -> Result<Handle<A>, StoreError> {
        self.recover_dead()?;
        self.handle_unrecovered()
    }

    /// A handle without recovering dead slots first; the slot's own record is settled
    /// (a slot adopted from a dead owner by the arena leaves its store log behind).
    pub(crate) fn handle_unrecovered(&self) -> Result<Handle<A>, StoreError> {
        let thread = self.inner.arena.thread()?;
        let h = Handle::new(self.clone(), thread);
        recover::settle(&h.reclaim, h.slot_index(), None);
        Ok(h)
    }

    /// What opening settled when the slot claimed to create the store had a dead owner: the
    /// allocator's report of that adoption and what store recovery did with it. `None` when
    /// this open found the store made or claimed a free slot.
    pub fn settled_at_open(&self) -> Option<Settled> {
        self.settled_at_open
    }

    /// Recovers every thread slot whose owner died: the arena's recovery finishes each one's
    /// allocator step, then, while the slot is still held, a handle of this process (made at
    /// the first dead slot) settles the store's log of it ([`crate::recover`]) and releases
    /// its epoch announcement. Safe to run from any number of live processes at once; returns
    /// what was settled here.
    pub fn recover_dead(&self) -> Result<Vec<Settled>, StoreError> {
        let mut h: Option<Handle<A>> = None;
        let mut settled = Vec::new();
        let mut failed = None;
        self.inner
            .arena
            .recover_dead_with(&mut |slot, in_flight, step| {
                if h.is_none() {
                    match self.handle_unrecovered() {
                        Ok(handle) => h = Some(handle),
                        Err(e) => {
                            failed.get_or_insert(e);
                            return;
                        }
                    }
                }
                if let Some(h) = &h {
                    let report = Some((in_flight, step));
                    settled.push(recover::settle(&h.reclaim, slot, report));
                }
            });
        match failed {
            Some(e) => Err(e),
            None => Ok(settled),
        }
    }

    /// Walks the index and limbo lists. Run it on a quiescent store (no writer running):
    /// concurrent writes make it report transient states as problems.
    pub fn walk(&self) -> StoreReport {
        check::walk(&self.inner)
    }

    /// Starts the store's maintenance thread with the expiry crawler, a pass every
    /// `interval` ([`spawn_maintainer`](Self::spawn_maintainer)).
    pub fn spawn_crawler(&self, interval: Duration) -> Crawler {
        self.spawn_maintainer(Some(interval))
    }

    /// Starts the store's maintenance thread (its own handle and slot) until the returned
    /// [`Crawler`] is dropped: it makes the table whole soon after a doubling, off the
    /// operations' path ([`Handle::make_whole`], every
    /// [`GROWTH_POLL`](crate::crawler::GROWTH_POLL) while the table grew), and, given a
    /// `crawl` interval, runs the expiry crawler every interval ([`Handle::crawl`]).
    pub fn spawn_maintainer(&self, crawl: Option<Duration>) -> Crawler {
        let map = self.clone();
        Crawler::spawn(crawl, move || {
            // No free slot: nothing to maintain with; `stop` reports zero passes.
            let h = map.handle().ok()?;
            // The size whose table this thread made whole: splits never come undone, so it
            // stays whole until the size changes.
            let mut whole = None;
            Some(move |crawl_due: bool| {
                let mut pass = CrawlReport::default();
                if whole != Some(map.buckets_log2()) {
                    let made;
                    (made, whole) = h.make_whole();
                    pass.buckets_made = made;
                }
                if crawl_due {
                    let crawled = h.crawl();
                    (pass.visited, pass.reclaimed) = (crawled.visited, crawled.reclaimed);
                }
                if crawl_due || pass.buckets_made > 0 {
                    h.collect();
                }
                pass
            })
        })
    }
}

/// The coherence modes whose heaps the store serves: all three (README, Coherence). In
/// `limited` and `mcas` the store's multi-writer words are in the heap's user HWcc area
/// (changed through the heap's mCAS hook in `mcas`), and items, bucket blocks and slot words
/// follow the SWcc rules. A mode added to `Coherence` later is refused until it is listed.
pub const SERVED_COHERENCE: &[Coherence] =
    &[Coherence::Hardware, Coherence::Limited, Coherence::Mcas];

impl Map<PodArena> {
    /// Opens (creating if needed) the heap at `path` and the store in it. Any number of
    /// processes may do this at once; they agree on one store (root CAS).
    pub fn open(path: impl AsRef<Path>, config: StoreConfig) -> Result<Map<PodArena>, StoreError> {
        let heap = Heap::open(path, &config.heap)?;
        Map::open_heap(heap, &config)
    }

    /// Opens the store in an already opened heap (root 0).
    ///
    /// Refuses, before writing anything, a heap whose coherence mode the store does not
    /// serve ([`SERVED_COHERENCE`]; the check is `open_in`'s, so no way in skips it).
    pub fn open_heap(heap: Heap, config: &StoreConfig) -> Result<Map<PodArena>, StoreError> {
        Map::open_in(
            PodArena {
                heap,
                root_index: 0,
            },
            config,
        )
    }

    /// The heap the store lives in.
    pub fn heap(&self) -> &Heap {
        &self.inner.arena.heap
    }

    /// Walks the store and the allocator and proves every live block belongs to exactly one
    /// item, bucket block, limbo bag or limbo entry (or the descriptor / slot array).
    /// Run on a quiescent heap.
    pub fn check(&self) -> CheckReport {
        check::reconcile(self.walk(), &self.heap().check())
    }
}

#[cfg(feature = "baselines")]
impl Map<LocalArena> {
    /// A fresh index in process memory (mimalloc).
    pub fn new_local(config: &StoreConfig) -> Result<Map<LocalArena>, StoreError> {
        Map::open_in(LocalArena::default(), config)
    }
}

/// One thread's handle on a [`Map`]: its arena slot, its epoch pin, and batched counters.
/// Not `Send`: it holds the thread's slot.
pub struct Handle<A: Arena> {
    map: Map<A>,
    /// Reclamation, holding this thread's slot (see `reclaim::reclaimer`).
    pub(crate) reclaim: Reclaim<A>,
    buckets: Buckets,
    writer: Writer,
}

impl<A: Arena> std::fmt::Debug for Handle<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle")
            .field("slot", &self.slot_index())
            .finish()
    }
}

impl<A: Arena> Drop for Handle<A> {
    /// Publishes the counters and empties this slot's limbo if the epoch lets it within a
    /// few tries; what remains waits for the slot's next owner.
    fn drop(&mut self) {
        self.flush_counters();
        self.reclaim.release();
    }
}

impl<A: Arena> Handle<A> {
    /// A handle on `map` for the slot `thread` holds (its record not settled yet).
    fn new(map: Map<A>, thread: A::Thread) -> Handle<A> {
        let slot = Slot::new(map.inner.clone(), thread);
        let buckets = Buckets::new(slot.index);
        Handle {
            map,
            reclaim: Reclaim::new(slot),
            buckets,
            writer: Writer::default(),
        }
    }

    /// The components a command acts through, borrowed.
    #[inline]
    pub(crate) fn parts(&self) -> Parts<'_, A> {
        Parts {
            reclaim: &self.reclaim,
            buckets: &self.buckets,
            writer: &self.writer,
        }
    }

    /// The map this handle works on.
    pub fn map(&self) -> &Map<A> {
        &self.map
    }

    /// The arena slot this handle holds.
    pub fn slot_index(&self) -> u32 {
        self.reclaim.slot().index
    }

    /// Write-loop passes of this handle whose insert, replace or delete CAS failed because
    /// another writer changed the link first, so the write searched again (process-local; for
    /// benchmarks: contention on hot keys shows here).
    pub fn lost_races(&self) -> u64 {
        self.writer.lost_races()
    }

    /// How this handle's new items were found (spares reused or the allocator) and how often
    /// its periodic collects found the epoch stuck and yielded (process-local; for
    /// benchmarks: a machine too busy for reclamation to keep up shows here).
    pub fn recycling(&self) -> Recycling {
        self.reclaim.recycling()
    }

    /// Tries to advance the epoch and frees every limbo entry old enough; drops empty bags.
    pub fn collect(&self) {
        self.reclaim.collect();
    }

    /// Publishes this handle's batched counters (and grows the table if due).
    pub fn flush_counters(&self) {
        self.buckets.flush_counters(self.reclaim.slot());
    }

    /// `get`/`gets`: the visible item of `key`, read in place through a guard.
    #[inline]
    pub fn get(&self, key: &[u8]) -> Result<Option<Guard<'_, A>>, StoreError> {
        memcached::get(self.parts(), key)
    }

    /// `set`/`add`/`replace`/`append`/`prepend`/`cas`, with memcached's `exptime`.
    #[inline]
    pub fn store(
        &self,
        mode: Mode,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: i64,
    ) -> Result<Outcome, StoreError> {
        self.store_with(mode, key, value, flags, exptime, StoreExtra::default())
            .map(|(outcome, _)| outcome)
    }

    /// As [`store`](Self::store), with the meta protocol's extras (`ms C I E`), also
    /// returning the CAS token of the item it linked (0 when it stored nothing). Every
    /// condition is decided inside the write loop on the item the CAS replaces, so no write
    /// can slip between the comparison and the store.
    #[inline]
    pub fn store_with(
        &self,
        mode: Mode,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: i64,
        extra: StoreExtra,
    ) -> Result<(Outcome, u64), StoreError> {
        memcached::store_with(self.parts(), mode, key, value, flags, exptime, extra)
    }

    /// `set key flags exptime`.
    #[inline]
    pub fn set(
        &self,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: i64,
    ) -> Result<(), StoreError> {
        self.store(Mode::Set, key, value, flags, exptime).map(drop)
    }

    /// `delete key`: `Deleted` or `NotFound`.
    pub fn delete(&self, key: &[u8]) -> Result<Outcome, StoreError> {
        memcached::delete(self.parts(), key)
    }

    /// `incr key delta`: the new value, `None` if absent.
    pub fn incr(&self, key: &[u8], delta: u64) -> Result<Option<u64>, StoreError> {
        self.counter(key, delta, false)
    }

    /// `decr key delta`: the new value (stops at 0), `None` if absent.
    pub fn decr(&self, key: &[u8], delta: u64) -> Result<Option<u64>, StoreError> {
        self.counter(key, delta, true)
    }

    fn counter(&self, key: &[u8], delta: u64, decrement: bool) -> Result<Option<u64>, StoreError> {
        let count = Count {
            decrement,
            delta,
            ..Default::default()
        };
        Ok(match self.meta_counter(key, count)? {
            Counted::Value { value, .. } => Some(value),
            _ => None,
        })
    }

    /// `touch key exptime`: `Touched` or `NotFound`.
    pub fn touch(&self, key: &[u8], exptime: i64) -> Result<Outcome, StoreError> {
        memcached::touch_item(self.parts(), key, exptime).map(|(outcome, _)| outcome)
    }

    /// `gat`/`gats`: touch and return the touched item (memcached returns it even when the
    /// new expiry has already passed).
    pub fn gat(&self, key: &[u8], exptime: i64) -> Result<Option<Guard<'_, A>>, StoreError> {
        memcached::gat(self.parts(), key, exptime)
    }

    /// `flush_all [delay]`: every item stored before now (or before `delay` seconds from now,
    /// memcached's rules for `exptime`) becomes invisible then; the crawler reclaims them.
    pub fn flush_all(&self, delay: i64) {
        memcached::flush_all(self.parts(), delay);
    }

    /// `mg`: a plain read when nothing in it can change the item, else one update that may
    /// touch, create, or win the token, deciding `W` by the replace CAS (a plain read's
    /// answer when that update finds no room). `None`: a miss.
    pub fn meta_get(&self, key: &[u8], read: Read) -> Result<Option<MetaRead<'_, A>>, StoreError> {
        meta::get(self.parts(), key, read)
    }

    /// `ms`: [`store_with`](Self::store_with), except that when the new item cannot be made
    /// the old one is removed whatever the mode, as memcached's `ms` does.
    #[inline]
    pub fn meta_set(
        &self,
        mode: Mode,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: i64,
        extra: StoreExtra,
    ) -> Result<(Outcome, u64), StoreError> {
        meta::set(self.parts(), mode, key, value, flags, exptime, extra)
    }

    /// `md`: `Deleted` (removed, or marked stale with `I`), `NotFound`, or `Exists` when `C`
    /// does not match — compared inside the write loop.
    pub fn meta_delete(&self, key: &[u8], delete: Delete) -> Result<Outcome, StoreError> {
        meta::delete(self.parts(), key, delete)
    }

    /// `ma` (and `incr`/`decr`): the value must be a decimal `u64` (`NonNumeric` otherwise);
    /// a shorter result is padded with spaces to the old length and keeps the meta state (as
    /// memcached's in-place update), a longer one is a new item with the state clear.
    pub fn meta_counter(&self, key: &[u8], count: Count) -> Result<Counted, StoreError> {
        meta::counter(self.parts(), key, count)
    }

    /// One pass of the expiry crawler over every made bucket: removes invisible items.
    pub fn crawl(&self) -> CrawlReport {
        maintain::crawl(&self.reclaim, &self.buckets)
    }

    /// Makes every bucket of the table's newer half that no write has made yet (a doubling
    /// late in a load leaves most of them to this; `Buckets` # Growth): the buckets made,
    /// and the size (log2) whose table is now whole, `None` when there was no room for a
    /// bucket's block. What the maintenance thread runs ([`Map::spawn_maintainer`]).
    pub fn make_whole(&self) -> (u64, Option<u32>) {
        self.buckets.make_whole(&self.reclaim)
    }

    /// One compaction pass (`compact`): gives up this handle's own sparse slabs
    /// ([`disown_sparse`](Self::disown_sparse)), then moves every visible item out of the
    /// disowned slabs at most `percent` live, unchanged, so that they empty. With `over`
    /// bytes of slab memory over a limit ([`held_bytes`](Self::held_bytes)), it also gives
    /// up its sparsest slabs that hold as much, and evicts their items.
    pub fn compact(&self, percent: u32, over: u64) -> CompactReport {
        compact::compact(self.parts(), percent, over)
    }

    /// Begins a [`compact`](Self::compact) pass to walk in slices
    /// ([`compact_slice`](Self::compact_slice)): gives up this handle's sparse slabs (and
    /// the sparsest for `over` bytes) and names the slabs to drain.
    pub fn compact_begin(&self, percent: u32, over: u64) -> CompactPass {
        compact::begin(self.parts(), percent, over)
    }

    /// Walks up to `buckets` more buckets of `pass`, moving the items of its slabs; whether
    /// the pass is done. Between slices the handle serves as usual.
    pub fn compact_slice(&self, pass: &mut CompactPass, buckets: u64) -> bool {
        compact::slice(self.parts(), pass, buckets)
    }

    /// The owner's half of compaction: gives up this handle's sparse slabs at most `percent`
    /// in use, the sparsest first, while their items fit in the slabs kept, so that a
    /// compaction pass (any handle's, any process's) empties them; how many. A walk of this
    /// handle's own slab lists: cheap enough for a worker to call every few seconds.
    /// It first frees what the handle holds back (limbo, spares), which would pin them.
    pub fn disown_sparse(&self, percent: u32) -> u32 {
        compact::disown_sparse(self.parts(), percent, 0).count
    }
}
