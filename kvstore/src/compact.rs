//! Compaction: moving items out of sparse slabs so that the slabs empty and their memory goes
//! back to the OS, as memcached's slab mover rescues the items of a page it takes.
//!
//! When the sizes written shift (values grow over a day, a cluster's keys are rewritten with
//! new sizes), the slabs of the old size classes stay half full: their items go one by one as
//! their keys are rewritten elsewhere, and nothing of their size comes to fill the holes.
//! Slab morphing (the allocator's) cannot reuse a half-full slab for a larger class, as the
//! old blocks left would block most new ones. So a slab's owner gives up its sparse slabs,
//! the sparsest first, while their items fit in the slabs it keeps (`Handle::disown_sparse`: a
//! disowned slab is taken by its last free, whoever frees, while a slab on its owner's list
//! takes other slots' frees back only once its owner allocates from it again); one pass over
//! the buckets then copies each visible item found in a disowned slab at most the share live
//! ([`podkv_alloc::SparseSlabs`]) into a new block, and swaps the copy in by the write loop's
//! CAS on its bucket. The copy is the item unchanged (CAS token and all), so a client sees no
//! difference; a concurrent write of the key wins, and the copy is freed.
//!
//! The write loop's own logging and recovery cover a move (a crash leaves the old item or the
//! copy published, never both, and the other freed), and its SWcc rules are the writes'.
//! A move never evicts: a copy with no room fails, and the item stays where it is.
//!
//! # Over a memory limit
//! A pass may also be given the bytes of slab memory the heap holds over a limit (`over`,
//! from [`Map::held_bytes`](crate::Map::held_bytes) against the store's capacity, as
//! memcached's `-m` bounds its pages). The owner then also gives up its sparsest slabs that
//! hold as much, whatever their class (the only slab of a class the shift left behind
//! included), and the pass evicts their items instead of moving them: a move would take a new
//! block of the class, and the class may have no other slab. The fewest live blocks per byte
//! go first, so the fewest items go.
//!
//! # The index's blocks
//! A bucket holding more than one item names a block of their entries, in a small class of
//! its own. Every write of the bucket replaces it, but a bucket no write touches keeps its
//! block for good: nothing expires it. So the walk also moves a block it finds in a slab being
//! drained or emptied (`maintain::move_block`, the write loop's CAS with the same entries),
//! or a server left idle over its limit would hold those slabs for ever (the index's blocks
//! of a size shift lie in slabs the blocks of later writes thinned). The pass takes every
//! new block from the allocator, none from the handle's spares, which are blocks it retired
//! (from the slabs being drained, among others).

use crate::arena::Arena;
use crate::command::{Outcome, Step};
use crate::index;
use crate::maintain;
use crate::writer::Parts;

/// Share of its blocks live, in percent, at most, for a slab to be drained by default
/// (`podkv serve --drain`): half, so that two slabs' items fit in one.
pub const PERCENT_DRAIN: u32 = 50;

/// What one compaction pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CompactReport {
    /// This handle's own sparse slabs it gave up first.
    pub disowned: u64,
    /// Disowned slabs named to drain when the pass started.
    pub slabs: u64,
    /// Items moved out of them.
    pub moved: u64,
    /// Bytes of the items moved.
    pub moved_bytes: u64,
    /// Slabs given up for the memory over a limit (`over`), whose items are evicted.
    pub emptied: u64,
    /// Items evicted from them.
    pub evicted: u64,
    /// Index blocks (a bucket's entries, when it holds more than one item) moved out of the
    /// slabs drained or emptied: they never expire, so a slab that holds one would otherwise
    /// stay until a write to its bucket.
    pub blocks: u64,
}

/// A compaction pass walked in slices of buckets (`Handle::compact_begin`,
/// `Handle::compact_slice`), so that a server's worker answers its clients between slices
/// instead of stalling for a walk of the whole index.
#[derive(Debug)]
pub struct CompactPass {
    /// The slabs to drain, named when the pass began; `None` once the pass is done. A slab
    /// reused meanwhile costs wasted moves at most: a move copies the item unchanged.
    sparse: Option<podkv_alloc::SparseSlabs>,
    /// The slabs given up for the memory over a limit: their items are evicted, not moved.
    to_empty: podkv_alloc::SparseSlabs,
    /// The next bucket to walk.
    next: u64,
    report: CompactReport,
}

impl CompactPass {
    /// What the pass did so far.
    pub fn report(&self) -> CompactReport {
        self.report
    }

    /// Whether every bucket was walked (or there was nothing to drain).
    pub fn is_done(&self) -> bool {
        self.sparse.is_none()
    }
}

/// One pass: moves every visible item that lies in a slab worth draining at `percent` live
/// at most (see the module docs). Nothing when the arena names no such slab.
pub(crate) fn compact<A: Arena>(p: Parts<'_, A>, percent: u32, over: u64) -> CompactReport {
    let mut pass = begin(p, percent, over);
    while !slice(p, &mut pass, u64::MAX) {}
    pass.report
}

/// Starts a pass: gives up this handle's sparse slabs, and its sparsest for `over` bytes of
/// slab memory over a limit, then names the slabs to drain.
pub(crate) fn begin<A: Arena>(p: Parts<'_, A>, percent: u32, over: u64) -> CompactPass {
    let disowned = disown_sparse(p, percent, over);
    let sparse = p.shared().arena.sparse_slabs(percent);
    let to_empty = disowned.to_empty;
    CompactPass {
        report: CompactReport {
            disowned: u64::from(disowned.count),
            slabs: sparse.as_ref().map_or(0, |s| s.len() as u64),
            emptied: to_empty.len() as u64,
            ..CompactReport::default()
        },
        sparse: sparse.filter(|s| !s.is_empty() || !to_empty.is_empty()),
        to_empty,
        next: 0,
    }
}

/// Walks `buckets` more buckets of `pass`, moving the items found in its slabs; whether the
/// pass is done. The last slice frees the items moved out, so the slabs go back now.
pub(crate) fn slice<A: Arena>(p: Parts<'_, A>, pass: &mut CompactPass, buckets: u64) -> bool {
    let Some(sparse) = &pass.sparse else {
        return true;
    };
    let (report, to_empty) = (&mut pass.report, &pass.to_empty);
    let drained = |at| sparse.holds(at) || to_empty.holds(at);
    // The bucket blocks a pass makes (for the items it moves or evicts, and the blocks it
    // moves) come from the allocator: the handle's spares are blocks it retired, in the slabs
    // being drained among others.
    let next = p.reclaim.fresh_blocks(|| {
        maintain::each_bucket_from(
            p.reclaim,
            pass.next,
            buckets,
            drained,
            |at| {
                if to_empty.holds(at) {
                    report.evicted += u64::from(maintain::evict_exact(p.reclaim, p.buckets, at));
                } else if let Some(bytes) = move_item(p, at) {
                    report.moved += 1;
                    report.moved_bytes += bytes as u64;
                }
            },
            |word, tag| {
                if drained(index::object(word)) {
                    report.blocks += u64::from(maintain::move_block(p.reclaim, tag, drained));
                }
            },
        )
    });
    let Some(next) = next else {
        pass.sparse = None;
        if pass.report.moved + pass.report.evicted + pass.report.blocks > 0 {
            // The items and blocks moved out are this handle's to free.
            p.reclaim.collect_all();
        }
        return true;
    };
    pass.next = next;
    false
}

/// The owner's half (`Handle::disown_sparse`): frees what the handle holds back (its
/// reclaimable limbo and its spares, kept for rewrites of a size a shift no longer writes),
/// which would pin the slabs it gives up, then gives up its sparse slabs, and its sparsest
/// for `over` bytes.
pub(crate) fn disown_sparse<A: Arena>(
    p: Parts<'_, A>,
    percent: u32,
    over: u64,
) -> podkv_alloc::Disowned {
    p.reclaim.collect_all();
    A::disown_sparse(&p.slot().thread, percent, over)
}

/// Moves item `at` into a new block if it is still its key's visible item: its size if it
/// did. The caller is pinned, so `at` stays readable.
fn move_item<A: Arena>(p: Parts<'_, A>, at: u64) -> Option<usize> {
    let view = p.shared().view();
    view.fresh_item(at);
    view.fresh_value(at);
    let mut moved = false;
    let outcome = p.update(view.key(at), |current| {
        moved = false;
        if current != Some(at) {
            return Ok(Step::Keep(Outcome::NotFound));
        }
        let copy = p.copy_item(at)?;
        moved = true;
        Ok(Step::Put(copy, Outcome::Stored))
    });
    (outcome.is_ok() && moved).then(|| view.item_size(at))
}
