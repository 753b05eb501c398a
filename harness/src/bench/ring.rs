//! A single-producer single-consumer ring of block names, the hand-over queue of xmalloc.
//! Values move in batches: one index store publishes many, so the ring's own cache-line traffic
//! does not drown the allocator's.
//!
//! It lives in whatever memory its owner gives it: the pod heap when producer and consumer are
//! separate processes, an ordinary allocation when they are threads.
//!
//! # Fields
//! - `head`: next slot to read; written only by the consumer.
//! - `tail`: next slot to write; written only by the producer.
//! - `slots`: written by the producer before it publishes `tail` (release), read by the
//!   consumer after it reads `tail` (acquire).

use std::sync::atomic::{AtomicU64, Ordering};

/// Slots in a ring (a power of two).
pub const COUNT_RING_SLOTS: usize = 4096;

/// The ring's memory: two indices on their own cache lines, then the slots.
#[repr(C, align(64))]
pub struct Ring {
    head: AtomicU64,
    _pad_head: [u64; 7],
    tail: AtomicU64,
    _pad_tail: [u64; 7],
    slots: [AtomicU64; COUNT_RING_SLOTS],
}

impl Ring {
    /// Bytes a ring needs.
    pub const SIZE: usize = std::mem::size_of::<Ring>();

    /// Adds as many of `values` as fit, publishing them with one store; returns how many.
    #[inline]
    pub fn push_many(&self, values: &[u64]) -> usize {
        self.push_many_within(values, COUNT_RING_SLOTS)
    }

    /// As [`Ring::push_many`], but keeps at most `bound` values in the ring (the producer's
    /// window: huge blocks in flight are bounded by the heap's descriptors, not the ring).
    #[inline]
    pub fn push_many_within(&self, values: &[u64], bound: usize) -> usize {
        let tail = self.tail.load(Ordering::Relaxed);
        let held = tail - self.head.load(Ordering::Acquire);
        let room = (bound.min(COUNT_RING_SLOTS) as u64).saturating_sub(held);
        let n = values.len().min(room as usize);
        for (i, &value) in values[..n].iter().enumerate() {
            self.slots[(tail as usize + i) % COUNT_RING_SLOTS].store(value, Ordering::Relaxed);
        }
        self.tail.store(tail + n as u64, Ordering::Release);
        n
    }

    /// Takes every value published so far, oldest first, giving each to `f`; returns how many.
    #[inline]
    pub fn pop_all(&self, mut f: impl FnMut(u64)) -> u64 {
        let head = self.head.load(Ordering::Relaxed);
        let tail = self.tail.load(Ordering::Acquire);
        for i in head..tail {
            f(self.slots[i as usize % COUNT_RING_SLOTS].load(Ordering::Relaxed));
        }
        self.head.store(tail, Ordering::Release);
        tail - head
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_until_full_then_refuses() {
        // SAFETY: a ring is plain atomics; all-zero is an empty ring.
        let ring: Box<Ring> = unsafe { Box::new(std::mem::zeroed()) };
        let mut seen = Vec::new();
        assert_eq!(ring.pop_all(|v| seen.push(v)), 0);
        let values: Vec<u64> = (0..COUNT_RING_SLOTS as u64 + 10).collect();
        assert_eq!(ring.push_many(&values[..100]), 100);
        assert_eq!(
            ring.push_many(&values[100..]),
            COUNT_RING_SLOTS - 100,
            "only what fits"
        );
        assert_eq!(ring.push_many(&[1]), 0);
        assert_eq!(ring.pop_all(|v| seen.push(v)), COUNT_RING_SLOTS as u64);
        assert_eq!(seen, values[..COUNT_RING_SLOTS]);
        assert_eq!(ring.push_many(&[7, 8]), 2, "wraps around");
        seen.clear();
        ring.pop_all(|v| seen.push(v));
        assert_eq!(seen, [7, 8]);
        assert_eq!(ring.push_many_within(&values[..10], 4), 4, "a window of 4");
        assert_eq!(ring.push_many_within(&values[..10], 4), 0);
    }
}
