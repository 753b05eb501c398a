//! Compaction: moving items out of sparse slabs so that the slabs empty and their memory goes
//! back to the OS, as memcached's slab mover rescues the items of a page it takes.
//!
//! When the sizes written shift (values grow over a day, a cluster's keys are rewritten with
//! new sizes), the slabs of the old size classes stay half full: their items go one by one as
//! their keys are rewritten elsewhere, and nothing of their size comes to fill the holes.
//! Slab morphing (the allocator's) cannot reuse a half-full slab for a larger class, as the
//! old blocks left would block most new ones. So a slab's owner gives up its sparse slabs of
//! classes whose sparse slabs' items fit in two slabs fewer (`Handle::disown_sparse`: a
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

use crate::arena::Arena;
use crate::command::{Outcome, Step};
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
}

/// A compaction pass walked in slices of buckets (`Handle::compact_begin`,
/// `Handle::compact_slice`), so that a server's worker answers its clients between slices
/// instead of stalling for a walk of the whole index.
#[derive(Debug)]
pub struct CompactPass {
    /// The slabs to drain, named when the pass began; `None` once the pass is done. A slab
    /// reused meanwhile costs wasted moves at most: a move copies the item unchanged.
    sparse: Option<podkv_alloc::SparseSlabs>,
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
pub(crate) fn compact<A: Arena>(p: Parts<'_, A>, percent: u32) -> CompactReport {
    let mut pass = begin(p, percent);
    while !slice(p, &mut pass, u64::MAX) {}
    pass.report
}

/// Starts a pass: gives up this handle's sparse slabs, then names the slabs to drain.
pub(crate) fn begin<A: Arena>(p: Parts<'_, A>, percent: u32) -> CompactPass {
    let disowned = disown_sparse(p, percent);
    let sparse = p.shared().arena.sparse_slabs(percent);
    CompactPass {
        report: CompactReport {
            disowned: u64::from(disowned),
            slabs: sparse.as_ref().map_or(0, |s| s.len() as u64),
            ..CompactReport::default()
        },
        sparse: sparse.filter(|s| !s.is_empty()),
        next: 0,
    }
}

/// Walks `buckets` more buckets of `pass`, moving the items found in its slabs; whether the
/// pass is done. The last slice frees the items moved out, so the slabs go back now.
pub(crate) fn slice<A: Arena>(p: Parts<'_, A>, pass: &mut CompactPass, buckets: u64) -> bool {
    let Some(sparse) = &pass.sparse else {
        return true;
    };
    let report = &mut pass.report;
    let next = maintain::each_bucket_from(
        p.reclaim,
        pass.next,
        buckets,
        |at| sparse.holds(at),
        |at| {
            if let Some(bytes) = move_item(p, at) {
                report.moved += 1;
                report.moved_bytes += bytes as u64;
            }
        },
    );
    let Some(next) = next else {
        pass.sparse = None;
        if pass.report.moved > 0 {
            // The items moved out are this handle's to free.
            p.reclaim.collect_all();
        }
        return true;
    };
    pass.next = next;
    false
}

/// The owner's half (`Handle::disown_sparse`): frees what the handle holds back (its
/// reclaimable limbo and its spares, kept for rewrites of a size a shift no longer writes),
/// which would pin the slabs it gives up, then gives up its sparse slabs; how many.
pub(crate) fn disown_sparse<A: Arena>(p: Parts<'_, A>, percent: u32) -> u32 {
    p.reclaim.collect_all();
    A::disown_sparse(&p.slot().thread, percent)
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
