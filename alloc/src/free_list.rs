//! The global free list: a Treiber stack of slab indices, one CAS per push or pop.
//!
//! # The head word
//! `slab + 1` in bits 0..32 (zero: empty, so a zero-filled heap has an empty list), the list's
//! length in bits 32..40 (kept only for bounded lists), and a tag in bits 40..64 that every
//! successful CAS increments, so a pop that read a stale `next` (the slab was popped and pushed
//! back in between) fails its CAS instead of corrupting the list (ABA: the tag would have to
//! wrap 2^24 times between one pop's load and its CAS).
//!
//! # Links
//! A slab's `next` lives in its SWcc descriptor (read by poppers that do not own the slab, hence
//! atomic); the protocol only needs `next_of` and `set_next` and is written over them so the loom
//! model can run it on ordinary memory.

use podkv_hw::sync::{AtomicU64, Ordering};

/// The link value meaning "no slab".
pub const NIL: u32 = 0;

/// Most slabs a bounded list can count.
pub const COUNT_BOUNDED_MAX: u32 = 255;

#[inline]
fn head_of(word: u64) -> u32 {
    word as u32
}

/// Slabs on a bounded list.
#[inline]
pub fn len_of(word: u64) -> u32 {
    ((word >> 32) & 0xFF) as u32
}

#[inline]
fn with_head(word: u64, link: u32, len: u32) -> u64 {
    let tag = (word >> 40).wrapping_add(1) & 0xFF_FFFF;
    tag << 40 | u64::from(len) << 32 | u64::from(link)
}

/// Pushes `slab` (which the caller owns and no list holds) on an unbounded list.
pub fn push(head: &AtomicU64, slab: u32, set_next: impl Fn(u32, u32)) {
    let pushed = push_bounded(head, slab, None, set_next);
    debug_assert!(pushed);
}

/// Pushes `slab` unless the list already holds `limit` slabs; returns whether it did.
pub fn push_bounded(
    head: &AtomicU64,
    slab: u32,
    limit: Option<u32>,
    set_next: impl Fn(u32, u32),
) -> bool {
    let mut cur = head.load(Ordering::Acquire);
    loop {
        let len = match limit {
            Some(limit) if len_of(cur) >= limit.min(COUNT_BOUNDED_MAX) => return false,
            Some(_) => len_of(cur) + 1,
            None => 0,
        };
        set_next(slab, head_of(cur));
        let new = with_head(cur, slab + 1, len);
        match head.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return true,
            Err(seen) => cur = seen,
        }
    }
}

/// Pops a slab, which the caller then owns; `None` when the list is empty.
pub fn pop(head: &AtomicU64, next_of: impl Fn(u32) -> u32) -> Option<u32> {
    let mut cur = head.load(Ordering::Acquire);
    loop {
        let link = head_of(cur);
        if link == NIL {
            return None;
        }
        let new = with_head(cur, next_of(link - 1), len_of(cur).saturating_sub(1));
        match head.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire) {
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

    #[test]
    fn lifo_order_and_empty() {
        let head = AtomicU64::new(0);
        let next: Vec<AtomicU64> = (0..4).map(|_| AtomicU64::new(0)).collect();
        let set = |s: u32, n: u32| next[s as usize].store(u64::from(n), Ordering::Relaxed);
        let get = |s: u32| next[s as usize].load(Ordering::Relaxed) as u32;
        assert_eq!(pop(&head, get), None);
        push(&head, 2, set);
        push(&head, 0, set);
        assert_eq!(walk(&head, 10, get), vec![0, 2]);
        assert_eq!(pop(&head, get), Some(0));
        assert_eq!(pop(&head, get), Some(2));
        assert_eq!(pop(&head, get), None);
        assert_eq!(
            head.load(Ordering::Relaxed) >> 40,
            4,
            "each CAS bumps the tag"
        );
    }

    #[test]
    fn bounded_lists_refuse_past_their_limit() {
        let head = AtomicU64::new(0);
        let next: Vec<AtomicU64> = (0..4).map(|_| AtomicU64::new(0)).collect();
        let set = |s: u32, n: u32| next[s as usize].store(u64::from(n), Ordering::Relaxed);
        let get = |s: u32| next[s as usize].load(Ordering::Relaxed) as u32;
        assert!(push_bounded(&head, 0, Some(2), set));
        assert!(push_bounded(&head, 1, Some(2), set));
        assert!(!push_bounded(&head, 2, Some(2), set));
        assert_eq!(len_of(head.load(Ordering::Relaxed)), 2);
        assert_eq!(pop(&head, get), Some(1));
        assert_eq!(len_of(head.load(Ordering::Relaxed)), 1);
        assert!(push_bounded(&head, 2, Some(2), set));
    }
}
