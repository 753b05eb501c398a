//! A single-producer single-consumer ring of block names, the hand-over queue of xmalloc.
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

    /// Adds `value`; false when full.
    #[inline]
    pub fn push(&self, value: u64) -> bool {
        let tail = self.tail.load(Ordering::Relaxed);
        if tail - self.head.load(Ordering::Acquire) == COUNT_RING_SLOTS as u64 {
            return false;
        }
        self.slots[tail as usize % COUNT_RING_SLOTS].store(value, Ordering::Relaxed);
        self.tail.store(tail + 1, Ordering::Release);
        true
    }

    /// Takes the oldest value, if any.
    #[inline]
    pub fn pop(&self) -> Option<u64> {
        let head = self.head.load(Ordering::Relaxed);
        if head == self.tail.load(Ordering::Acquire) {
            return None;
        }
        let value = self.slots[head as usize % COUNT_RING_SLOTS].load(Ordering::Relaxed);
        self.head.store(head + 1, Ordering::Release);
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_until_full_then_refuses() {
        // SAFETY: a ring is plain atomics; all-zero is an empty ring.
        let ring: Box<Ring> = unsafe { Box::new(std::mem::zeroed()) };
        assert_eq!(ring.pop(), None);
        for i in 0..COUNT_RING_SLOTS as u64 {
            assert!(ring.push(i));
        }
        assert!(!ring.push(99));
        for i in 0..COUNT_RING_SLOTS as u64 {
            assert_eq!(ring.pop(), Some(i));
        }
        assert_eq!(ring.pop(), None);
    }
}
