//! The global free list: a Treiber stack of slab indices, one detectable CAS per push or pop.
//!
//! # The head word
//! A detectable word ([`crate::dcas`]): `slab + 1` as payload (zero: empty, so a zero-filled
//! heap has an empty list), tagged with the last writer's (tid, version). The tag changes on
//! every successful CAS, so a pop that read a stale `next` (the slab was popped and pushed back
//! in between) fails its CAS instead of corrupting the list.
//!
//! # Links and depth
//! A slab's `next` lives in its SWcc descriptor (read by poppers that do not own the slab, hence
//! atomic), and so does its *depth* (slabs below it, plus one), which a bounded list reads to
//! refuse a push; both are written by the pusher before its CAS and never while the slab is on
//! the list. The protocol only needs `next_of`, `depth_of` and `link` and is written over them
//! so the loom model can run it on ordinary memory.

use crate::dcas::{self, Writer};
use podkv_hw::sync::{AtomicU64, Ordering};

/// The link value meaning "no slab".
pub const NIL: u32 = 0;

/// The top slab plus one (zero: empty).
#[inline]
pub fn head_of(word: u64) -> u32 {
    dcas::payload(word)
}

/// Pushes `slab` (which the caller owns and no list holds) on an unbounded list.
/// `link(slab, next, depth)` stores the slab's links before each CAS attempt.
pub fn push(
    head: &AtomicU64,
    slab: u32,
    writer: &impl Writer,
    depth_of: impl Fn(u32) -> u32,
    link: impl Fn(u32, u32, u32),
) {
    let pushed = push_bounded(head, slab, None, writer, depth_of, link);
    debug_assert!(pushed);
}

/// Pushes `slab` unless the list already holds `limit` slabs; returns whether it did.
pub fn push_bounded(
    head: &AtomicU64,
    slab: u32,
    limit: Option<u32>,
    writer: &impl Writer,
    depth_of: impl Fn(u32) -> u32,
    link: impl Fn(u32, u32, u32),
) -> bool {
    let mut cur = head.load(Ordering::Acquire);
    loop {
        let top = head_of(cur);
        let depth = if top == NIL { 0 } else { depth_of(top - 1) };
        if limit.is_some_and(|limit| depth >= limit) {
            return false;
        }
        link(slab, top, depth + 1);
        podkv_hw::cas_site!("alloc.free_list.push.cas");
        match dcas::cas(head, cur, slab + 1, writer) {
            Ok(_) => return true,
            Err(seen) => cur = seen,
        }
    }
}

/// Pops a slab, which the caller then owns; `None` when the list is empty. `before(slab)` runs
/// before each CAS attempt (the caller logs the slab it is about to take).
pub fn pop(
    head: &AtomicU64,
    writer: &impl Writer,
    next_of: impl Fn(u32) -> u32,
    before: impl Fn(u32),
) -> Option<u32> {
    let mut cur = head.load(Ordering::Acquire);
    loop {
        let link = head_of(cur);
        if link == NIL {
            return None;
        }
        let next = next_of(link - 1);
        before(link - 1);
        podkv_hw::cas_site!("alloc.free_list.pop.cas");
        match dcas::cas(head, cur, next, writer) {
            Ok(_) => return Some(link - 1),
            Err(seen) => cur = seen,
        }
    }
}

/// Walks the list from `head` (for the checker: not safe against concurrent pops). Stops after
/// `limit` slabs so a cycle cannot hang it; returns the slabs seen.
pub fn walk(head: &AtomicU64, limit: usize, next_of: impl Fn(u32) -> u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut link = head_of(head.load(Ordering::Acquire));
    while link != NIL && out.len() <= limit {
        out.push(link - 1);
        link = next_of(link - 1);
    }
    out
}

#[cfg(all(test, not(podkv_loom)))]
mod tests {
    use super::*;
    use crate::dcas::{Tag, Untracked};
    use std::cell::Cell;

    struct Links {
        next: Vec<AtomicU64>,
        depth: Vec<AtomicU64>,
    }

    impl Links {
        fn new(n: usize) -> Links {
            Links {
                next: (0..n).map(|_| AtomicU64::new(0)).collect(),
                depth: (0..n).map(|_| AtomicU64::new(0)).collect(),
            }
        }
        fn next(&self, s: u32) -> u32 {
            self.next[s as usize].load(Ordering::Relaxed) as u32
        }
        fn depth(&self, s: u32) -> u32 {
            self.depth[s as usize].load(Ordering::Relaxed) as u32
        }
        fn link(&self, s: u32, n: u32, d: u32) {
            self.next[s as usize].store(u64::from(n), Ordering::Relaxed);
            self.depth[s as usize].store(u64::from(d), Ordering::Relaxed);
        }
    }

    #[test]
    fn lifo_order_and_empty() {
        let head = AtomicU64::new(0);
        let l = Links::new(4);
        let w = Untracked(Tag { tid: 1, ver: 7 });
        let seen = Cell::new(None);
        assert_eq!(pop(&head, &w, |s| l.next(s), |s| seen.set(Some(s))), None);
        push(&head, 2, &w, |s| l.depth(s), |s, n, d| l.link(s, n, d));
        push(&head, 0, &w, |s| l.depth(s), |s, n, d| l.link(s, n, d));
        assert_eq!(walk(&head, 10, |s| l.next(s)), vec![0, 2]);
        assert_eq!(
            pop(&head, &w, |s| l.next(s), |s| seen.set(Some(s))),
            Some(0)
        );
        assert_eq!(
            seen.get(),
            Some(0),
            "the popper names the slab before its CAS"
        );
        assert_eq!(pop(&head, &w, |s| l.next(s), |_| {}), Some(2));
        assert_eq!(pop(&head, &w, |s| l.next(s), |_| {}), None);
        assert_eq!(
            dcas::tag(head.load(Ordering::Relaxed)),
            Tag { tid: 1, ver: 7 },
            "the head names its last writer"
        );
    }

    #[test]
    fn bounded_lists_refuse_past_their_limit() {
        let head = AtomicU64::new(0);
        let l = Links::new(4);
        let w = Untracked(Tag { tid: 1, ver: 0 });
        let push2 = |s| {
            push_bounded(
                &head,
                s,
                Some(2),
                &w,
                |s| l.depth(s),
                |s, n, d| l.link(s, n, d),
            )
        };
        assert!(push2(0));
        assert!(push2(1));
        assert!(!push2(2));
        assert_eq!(pop(&head, &w, |s| l.next(s), |_| {}), Some(1));
        assert!(push2(2));
        assert_eq!(l.depth(2), 2);
    }
}
