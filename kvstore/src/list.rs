//! The link protocol: a Harris–Michael sorted list where every change is one CAS on a link.
//!
//! # Links
//! A link word holds a node's offset; bit 0 ([`MARK`]) set in a node's *own* `next` word means
//! the node is logically gone and its `next` is frozen: no CAS that expects an unmarked value
//! can change it again.
//!
//! # Steps (each is one CAS; the CAS is the linearization point)
//! - insert `new` between `prev` and `curr`: `prev: curr → new` (with `new.next = curr`);
//! - delete `curr`: `curr.next: succ → succ | MARK`;
//! - replace `curr` by `new` (same key): `curr.next: succ → new | MARK` with `new.next = succ`.
//!   The key is never absent: a reader at `curr` sees it marked and steps to `new`.
//! - snip (cleanup, any thread): `prev: curr → curr.next & !MARK` for a marked `curr`; the thread
//!   whose snip succeeds — and only it — retires `curr` (a node has one predecessor link).
//!
//! Readers ([`lookup`]) never write: they skip marked nodes without snipping, so lookups never
//! write shared memory (the only store a `get` makes is its epoch announcement, a line owned by
//! its own slot). Writers ([`find`]) snip what they pass.
//!
//! # Invariant
//! `keys along any path from a head are strictly increasing among unmarked nodes`, and a node is
//! retired exactly once, after it is unreachable from every head (checked by `check::walk`).

use podkv_hw::sync::{AtomicU64, Ordering};
use std::cmp::Ordering as Order;

/// Bit 0 of a node's `next`: the node is deleted or replaced.
pub const MARK: u64 = 1;

/// What a search looks for: a split order and a key (empty for a sentinel).
#[derive(Clone, Copy, Debug)]
pub struct Probe<'k> {
    /// The split order (see `item::item_order`).
    pub order: u64,
    /// The key.
    pub key: &'k [u8],
}

/// The nodes a list runs over: their `next` words and their order against a probe.
pub trait Nodes {
    /// The `next` word of node `at`.
    fn next(&self, at: u64) -> &AtomicU64;
    /// Node `at` compared with `probe` (`Less`: the node comes first).
    fn order(&self, at: u64, probe: &Probe<'_>) -> Order;
    /// Called just before this thread tries the CAS that snips the marked node `at`, and with
    /// zero after a snip CAS that failed: the store logs it so recovery of a thread killed
    /// between a successful snip and `retire` finds the node (`recover`).
    #[inline]
    fn snipping(&self, _at: u64) {}
}

/// Where a search stopped: `prev` is the link to `curr` (zero: the end).
pub struct Position<'n> {
    /// The link that points to `curr`, unmarked when read.
    pub prev: &'n AtomicU64,
    /// The first node not before the probe (or zero).
    pub curr: u64,
    /// `curr.next` as read, unmarked (meaningful when `curr != 0`).
    pub succ: u64,
    /// Whether `curr` holds the probe's key.
    pub found: bool,
}

/// Finds the probe's position from `head`, snipping marked nodes on the way and passing each
/// node it unlinked to `retire`.
pub fn find<'n, N: Nodes>(
    nodes: &'n N,
    head: &'n AtomicU64,
    probe: &Probe<'_>,
    retire: &mut impl FnMut(u64),
) -> Position<'n> {
    'again: loop {
        let mut prev = head;
        let mut curr = prev.load(Ordering::Acquire);
        loop {
            if curr == 0 {
                return Position {
                    prev,
                    curr,
                    succ: 0,
                    found: false,
                };
            }
            let next = nodes.next(curr).load(Ordering::Acquire);
            if next & MARK != 0 {
                nodes.snipping(curr);
                match snip(prev, curr, next & !MARK) {
                    true => retire(curr),
                    false => {
                        nodes.snipping(0);
                        continue 'again;
                    }
                }
                curr = next & !MARK;
                continue;
            }
            match nodes.order(curr, probe) {
                Order::Less => {
                    prev = nodes.next(curr);
                    curr = next;
                }
                order => {
                    let found = order == Order::Equal;
                    return Position {
                        prev,
                        curr,
                        succ: next,
                        found,
                    };
                }
            }
        }
    }
}

/// One CAS: unlinks marked `curr` from `prev`; whether this thread did it.
#[inline]
fn snip(prev: &AtomicU64, curr: u64, succ: u64) -> bool {
    prev.compare_exchange(curr, succ, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
}

/// The node holding the probe's key, or zero. Read-only: never writes a link.
#[inline]
pub fn lookup<N: Nodes>(nodes: &N, head: &AtomicU64, probe: &Probe<'_>) -> u64 {
    let mut curr = head.load(Ordering::Acquire);
    while curr != 0 {
        let next = nodes.next(curr).load(Ordering::Acquire);
        if next & MARK == 0 {
            match nodes.order(curr, probe) {
                Order::Less => {}
                Order::Equal => return curr,
                Order::Greater => return 0,
            }
        }
        curr = next & !MARK;
    }
    0
}

/// Inserts `new` (not yet published) at `pos` (which did not find the key): one CAS.
pub fn try_insert<N: Nodes>(nodes: &N, pos: &Position<'_>, new: u64) -> bool {
    nodes.next(new).store(pos.curr, Ordering::Relaxed);
    pos.prev
        .compare_exchange(pos.curr, new, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
}

/// Replaces `pos.curr` (found) by `new` (same key, not yet published): one CAS on
/// `curr.next`. On success the caller then calls [`unlink`].
pub fn try_replace<N: Nodes>(nodes: &N, pos: &Position<'_>, new: u64) -> bool {
    nodes.next(new).store(pos.succ, Ordering::Relaxed);
    nodes
        .next(pos.curr)
        .compare_exchange(pos.succ, new | MARK, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
}

/// Deletes `pos.curr` (found): one CAS marking its `next`. On success call [`unlink`].
pub fn try_delete<N: Nodes>(nodes: &N, pos: &Position<'_>) -> bool {
    nodes
        .next(pos.curr)
        .compare_exchange(
            pos.succ,
            pos.succ | MARK,
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .is_ok()
}

/// After a successful replace or delete: tries to snip `pos.curr`; if another thread's CAS
/// moved `prev` first, searches again so the node is snipped (and retired) by someone.
pub fn unlink<N: Nodes>(
    nodes: &N,
    head: &AtomicU64,
    pos: &Position<'_>,
    probe: &Probe<'_>,
    retire: &mut impl FnMut(u64),
) {
    let next = nodes.next(pos.curr).load(Ordering::Acquire) & !MARK;
    nodes.snipping(pos.curr);
    if snip(pos.prev, pos.curr, next) {
        retire(pos.curr);
    } else {
        nodes.snipping(0);
        find(nodes, head, probe, retire);
    }
}
