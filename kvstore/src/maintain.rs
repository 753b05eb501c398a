//! Eviction and the expiry crawler: both remove one *exact* item by one CAS (a concurrent
//! replace of the same key wins, and the newer item stays).
//!
//! # Eviction policy: sampled oldest-written
//! Lookups never write shared memory, so nothing can record a read: CLOCK's reference bit and
//! LRU's bump are both writes on the read path (on CXL, a cache-line write-back per hit, and
//! contention on hot keys). We evict instead by *write age*: sample up to
//! [`COUNT_SAMPLE`] items from random buckets and remove an invisible one (expired or flushed)
//! if any, else the one with the smallest CAS token — tokens are handed out in write order,
//! so this is approximate FIFO by last write (Redis-style sampling, without an access clock).
//! Hot keys that are rewritten stay young; read-only hot keys can be evicted, the price of
//! read-only lookups.
//!
//! # Eviction where the item needs room
//! An item lives in the heap region of its size (small, large or huge), in a block of its
//! size class. A write whose allocation fails (its region is full, whatever the others hold)
//! evicts by the same policy among the items of that region only, those of its exact size
//! first, then those of its class (`evict_for`), and the write loop retries once the
//! victims are reclaimed (`writer`: `Parts::room_after_oom`).

use crate::arena::Arena;
use crate::buckets::{Buckets, Table};
use crate::index::{self, Change, Memory};
use crate::layout::COUNT_SEGMENT;
use crate::reclaim::Reclaim;
use crate::StoreError;
use podkv_hw::sync::mapped::Ordering;

/// Items examined per eviction.
pub const COUNT_SAMPLE: usize = 8;
/// Buckets visited per eviction at most.
const COUNT_SAMPLE_BUCKETS: usize = 8;
/// Buckets visited per eviction for room at most: more than [`COUNT_SAMPLE_BUCKETS`], as
/// most items sampled may belong to another region and not count towards the sample.
const COUNT_SAMPLE_BUCKETS_ROOM: usize = 64;

/// What one crawl did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CrawlReport {
    /// Items looked at.
    pub visited: u64,
    /// Expired or flushed items removed.
    pub reclaimed: u64,
    /// Buckets of the table's newer half the pass made, which no write had (`Buckets::make_whole`).
    pub buckets_made: u64,
}

/// Evicts until `used + size ≤ capacity`, or fails with out-of-memory when eviction is off
/// or finds nothing.
pub(crate) fn make_room<A: Arena>(
    reclaim: &Reclaim<A>,
    buckets: &Buckets,
    size: u64,
) -> Result<(), StoreError> {
    let slot = reclaim.slot();
    let d = slot.shared().desc();
    let mut tries = 0;
    while buckets.used_now(slot.shared()) + size > d.capacity {
        if d.evict == 0 || tries > 64 {
            return Err(StoreError::OutOfMemory);
        }
        if !evict_one(reclaim, buckets) {
            tries += 8;
        }
        tries += 1;
    }
    Ok(())
}

/// Evicts one item chosen by the sampled-oldest policy; whether it removed one. Removing
/// a visible item counts as an eviction (this slot's counter, `Map::evictions`); an
/// invisible one is a reclaimed expiry, as memcached counts them.
pub(crate) fn evict_one<A: Arena>(reclaim: &Reclaim<A>, buckets: &Buckets) -> bool {
    let _pin = reclaim.pin();
    let victim = sample_oldest(reclaim, buckets, COUNT_SAMPLE_BUCKETS, |_| Some(0));
    victim.is_some_and(|v| remove_victim(reclaim, buckets, v))
}

/// Evicts one item whose block makes room where a new item of `size` bytes needs it, after
/// its allocation failed: by the sampled-oldest policy among the items of the same region,
/// those of exactly `size` first (the evicting handle reuses the block as a spare, whoever
/// allocated it), then those of the same size class (the block goes back to its slab),
/// then any of the region (its slab may empty and take the new class) — memcached's
/// per-class tail eviction, by sampling. Items of other regions are never taken: they free
/// nothing where the write needs it. Whether it removed one.
#[cold]
pub(crate) fn evict_for<A: Arena>(reclaim: &Reclaim<A>, buckets: &Buckets, size: usize) -> bool {
    let _pin = reclaim.pin();
    let shared = reclaim.slot().shared();
    let (arena, view) = (&shared.arena, shared.view());
    let want = arena.block_class(size);
    let rank = |at: u64| {
        let len = view.item_size(at);
        let class = arena.block_class(len);
        match () {
            _ if class.region != want.region => None,
            _ if len == size => Some(0),
            _ if class == want => Some(1),
            _ => Some(2),
        }
    };
    let victim = sample_oldest(reclaim, buckets, COUNT_SAMPLE_BUCKETS_ROOM, rank);
    victim.is_some_and(|v| remove_victim(reclaim, buckets, v))
}

/// A sampled item to remove: whether it was visible, and where it is.
#[derive(Clone, Copy)]
struct Victim {
    visible: bool,
    at: u64,
}

/// Samples up to [`COUNT_SAMPLE`] items that `rank` admits, from at most `buckets_max` random
/// buckets, and picks an invisible one if any, else the best-ranked, oldest-written one
/// (smallest rank, then smallest CAS token). The caller is pinned.
fn sample_oldest<A: Arena>(
    reclaim: &Reclaim<A>,
    buckets: &Buckets,
    buckets_max: usize,
    rank: impl Fn(u64) -> Option<u8>,
) -> Option<Victim> {
    let shared = reclaim.slot().shared();
    let now = shared.now();
    let view = shared.view();
    let mut best: Option<(bool, u8, u64, u64)> = None; // (visible, rank, cas, item)
    let mut seen = 0;
    let table = Table { reclaim };
    for _ in 0..buckets_max {
        let (bucket, word) = buckets.sample(reclaim);
        index::owned(&table, bucket, word, |_, at| {
            view.fresh_item(at);
            let Some(rank) = rank(at) else {
                return true;
            };
            let candidate = (shared.visible(at, now), rank, view.meta(at).cas, at);
            if best.is_none_or(|b| (candidate.0, candidate.1, candidate.2) < (b.0, b.1, b.2)) {
                best = Some(candidate);
            }
            seen += 1;
            seen < COUNT_SAMPLE
        });
        if seen >= COUNT_SAMPLE {
            break;
        }
    }
    best.map(|(visible, _, _, at)| Victim { visible, at })
}

/// Evicts `item` if its bucket still holds it (compaction's removal of the items of a slab
/// given up for memory over a limit): a visible one counts as an eviction, an invisible one
/// as a reclaimed expiry; whether this call removed it. The caller is pinned.
pub(crate) fn evict_exact<A: Arena>(reclaim: &Reclaim<A>, buckets: &Buckets, at: u64) -> bool {
    let shared = reclaim.slot().shared();
    shared.view().fresh_item(at);
    let visible = shared.visible(at, shared.now());
    remove_victim(reclaim, buckets, Victim { visible, at })
}

/// Removes a sampled victim, counting a visible one as an eviction; whether this call did.
fn remove_victim<A: Arena>(reclaim: &Reclaim<A>, buckets: &Buckets, victim: Victim) -> bool {
    let removed = remove_exact(reclaim, buckets, victim.at);
    if removed && victim.visible {
        let counter = &reclaim.slot().record().evictions;
        reclaim
            .slot()
            .put(counter, counter.load(Ordering::Relaxed) + 1);
    }
    removed
}

/// Removes `item` if its bucket still holds it: one CAS; whether this call did it.
fn remove_exact<A: Arena>(reclaim: &Reclaim<A>, buckets: &Buckets, item: u64) -> bool {
    let _pin = reclaim.pin();
    let slot = reclaim.slot();
    let shared = slot.shared();
    let view = shared.view();
    let table = Table { reclaim };
    let h = view.tag(item);
    loop {
        let Ok((word, w)) = index::write_target(&table, h, shared.buckets_log2_cached(), || {
            shared.buckets_log2()
        }) else {
            return false;
        };
        if index::find(&table, w, h, |entry| index::object(entry) == item) == 0 {
            return false;
        }
        let mut change = Change::read(w);
        change.drop = item;
        let Ok(next) = index::make(&table, &change) else {
            return false;
        };
        slot.put(&slot.record().unlink, item);
        table.replacing(w);
        let won = table.cas(word, w, next);
        table.replaced(w, next, won);
        if won {
            buckets.account(slot, -1, -(view.item_size(item) as i64));
            reclaim.retire(item);
            return true;
        }
        slot.put(&slot.record().unlink, 0);
    }
}

/// Copies the bucket block that holds the entry of `tag` into a new block if `moves` names
/// it (compaction's move of an index block out of a slab being drained): one CAS, as a write
/// of the bucket would make (a concurrent write wins, and its own new block leaves the slab
/// as well); whether this call moved it. The old block is retired as a write's is.
pub(crate) fn move_block<A: Arena>(
    reclaim: &Reclaim<A>,
    tag: u64,
    moves: impl Fn(u64) -> bool,
) -> bool {
    let _pin = reclaim.pin();
    let shared = reclaim.slot().shared();
    let table = Table { reclaim };
    loop {
        let Ok((word, w)) = index::write_target(&table, tag, shared.buckets_log2_cached(), || {
            shared.buckets_log2()
        }) else {
            return false;
        };
        if !index::is_block(w) || !moves(index::object(w)) {
            return false;
        }
        let Ok(next) = index::make(&table, &Change::of(w)) else {
            return false;
        };
        table.replacing(w);
        let won = table.cas(word, w, next);
        table.replaced(w, next, won);
        if won {
            return true;
        }
    }
}

/// One pass of the expiry crawler over every made bucket: removes invisible items.
pub(crate) fn crawl<A: Arena>(reclaim: &Reclaim<A>, buckets: &Buckets) -> CrawlReport {
    let mut report = CrawlReport::default();
    let shared = reclaim.slot().shared();
    let now = shared.now();
    let (mut visited, mut reclaimed) = (0, 0);
    each_bucket(
        reclaim,
        |at| {
            shared.view().fresh_item(at);
            visited += 1;
            !shared.visible(at, now)
        },
        |at| reclaimed += u64::from(remove_exact(reclaim, buckets, at)),
        |_, _| {},
    );
    (report.visited, report.reclaimed) = (visited, reclaimed);
    buckets.flush_counters(reclaim.slot());
    report
}

/// Walks every made bucket, pinned one bucket at a time: `pick` chooses among the items the
/// bucket owns, then `act` runs on each item picked, still pinned (a pass's own changes to
/// the bucket come after its read), then, if the word read names a block, `block(word,
/// tag)` with the tag of an entry the bucket owns. The expiry crawl's walk.
pub(crate) fn each_bucket<A: Arena>(
    reclaim: &Reclaim<A>,
    pick: impl FnMut(u64) -> bool,
    act: impl FnMut(u64),
    block: impl FnMut(u64, u64),
) {
    each_bucket_from(reclaim, 0, u64::MAX, pick, act, block);
}

/// [`each_bucket`] for at most `count` buckets from bucket `from`, as the table is now: the
/// bucket to go on from, or `None` past the table's end. Compaction's walk, in slices: a
/// table that doubles meanwhile splits some items to buckets past a slice already walked,
/// which the next pass finds.
pub(crate) fn each_bucket_from<A: Arena>(
    reclaim: &Reclaim<A>,
    from: u64,
    count: u64,
    mut pick: impl FnMut(u64) -> bool,
    mut act: impl FnMut(u64),
    mut block: impl FnMut(u64, u64),
) -> Option<u64> {
    let end = 1u64 << reclaim.slot().shared().buckets_log2();
    let stop = from.saturating_add(count).min(end);
    let table = Table { reclaim };
    let mut picked = Vec::new();
    for bucket in from..stop {
        if bucket % COUNT_SEGMENT == 0 && table.bucket(bucket, false).is_none() {
            continue;
        }
        let _pin = reclaim.pin();
        let Some(word) = table.bucket(bucket, false).map(|w| table.load(w)) else {
            continue;
        };
        if word == 0 {
            continue;
        }
        picked.clear();
        let mut tag = None;
        index::owned(&table, bucket, word, |t, at| {
            tag.get_or_insert(t);
            if pick(at) {
                picked.push(at);
            }
            true
        });
        for &at in &picked {
            act(at);
        }
        if let (true, Some(tag)) = (index::is_block(word), tag) {
            block(word, tag);
        }
    }
    (stop < end).then_some(stop)
}
