//! `CounterGenerator` and `AcknowledgedCounterGenerator`: the shared sequence numbers
//! that name inserted records.
//!
//! # Counter
//!
//! `next_value` hands out `start, start+1, …` with one `fetch_add`; `last_value` is the
//! last number handed out (`next - 1`).
//!
//! # Acknowledged counter and its window
//!
//! A run-phase insert takes a number from the counter, inserts the record, then
//! *acknowledges* the number. Readers must only pick records that exist, so the counter's
//! `last_value` is `limit`: the highest number below which every number has been
//! acknowledged. Acks arrive out of order, so each lands in a window of 2^20 flags
//! (`number & WINDOW_MASK`); whoever wins the try-lock then slides `limit` forward over
//! the contiguous run of set flags, clearing them. An ack that loses the try-lock leaves
//! its flag for the next winner, as in YCSB.
//!
//! YCSB quirk kept: the slide stops at `index == limit & WINDOW_MASK`, comparing an
//! absolute index with a slot number; in practice the slide ends at the first clear flag.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use crate::error::YcsbError;

/// Size of the acknowledgement window, 2^20, as in YCSB.
pub const WINDOW_SIZE: usize = 1 << 20;

const WINDOW_MASK: i64 = WINDOW_SIZE as i64 - 1;

/// Something whose latest value bounds which records exist ([`super::SkewedLatest`]'s
/// basis).
pub trait Basis {
    /// The newest record number that may be read; `-1` when none exists.
    fn last_value(&self) -> i64;
}

/// Who takes numbers from a counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Takers {
    /// Any number of threads: every step is an atomic read-modify-write.
    Many,
    /// One thread only (a stream that is the only worker of its part): a plain load and
    /// store for each step, which gives the same numbers without the locked instructions
    /// (~20 cycles each, and a drain of the store buffer).
    One,
}

/// A shared counter starting at `start`.
///
/// # Fields
/// `next` is taken by any worker with one `fetch_add` (by its one taker with a load and a
/// store under [`Takers::One`]); never written otherwise.
#[derive(Debug)]
pub struct Counter {
    next: AtomicI64,
    takers: Takers,
}

impl Counter {
    /// A counter whose first value is `start`, taken from by any thread.
    pub fn new(start: i64) -> Self {
        Self::with_takers(start, Takers::Many)
    }

    /// A counter whose first value is `start`, taken from by `takers`.
    pub fn with_takers(start: i64, takers: Takers) -> Self {
        Self {
            next: AtomicI64::new(start),
            takers,
        }
    }

    /// Takes the next number.
    #[inline]
    pub fn next_value(&self) -> i64 {
        match self.takers {
            Takers::Many => self.next.fetch_add(1, Ordering::Relaxed),
            Takers::One => {
                let next = self.next.load(Ordering::Relaxed);
                self.next.store(next + 1, Ordering::Relaxed);
                next
            }
        }
    }
}

impl Basis for Counter {
    #[inline]
    fn last_value(&self) -> i64 {
        self.next.load(Ordering::Relaxed) - 1
    }
}

/// A counter whose [`Basis::last_value`] only moves past acknowledged numbers.
///
/// Invariant: every number `<= limit` taken from `counter` has been acknowledged, and
/// no flag for a number `<= limit` is set.
///
/// # Fields
/// - `counter`: taken by any worker (`fetch_add`).
/// - `window`: flag `n & WINDOW_MASK` set by the worker acknowledging `n`; cleared only by
///   the holder of `sliding`.
/// - `limit`: written only by the holder of `sliding`; read by any worker (Acquire).
/// - `sliding`: YCSB's `ReentrantLock`, only ever `tryLock`ed, so no one waits on it; not
///   taken at all under [`Takers::One`], whose one taker always wins it.
#[derive(Debug)]
pub struct AcknowledgedCounter {
    counter: Counter,
    window: Box<[AtomicBool]>,
    limit: AtomicI64,
    sliding: AtomicBool,
}

impl AcknowledgedCounter {
    /// A counter whose first value is `start`; nothing is acknowledged yet, so
    /// `last_value` is `start - 1`.
    pub fn new(start: i64) -> Self {
        Self::with_takers(start, Takers::Many)
    }

    /// As [`AcknowledgedCounter::new`], numbers taken and acknowledged by `takers`.
    pub fn with_takers(start: i64, takers: Takers) -> Self {
        Self {
            counter: Counter::with_takers(start, takers),
            window: (0..WINDOW_SIZE).map(|_| AtomicBool::new(false)).collect(),
            limit: AtomicI64::new(start - 1),
            sliding: AtomicBool::new(false),
        }
    }

    /// Takes the next number (not yet visible through `last_value`).
    #[inline]
    pub fn next_value(&self) -> i64 {
        self.counter.next_value()
    }

    /// Makes `value` visible once every smaller number is acknowledged too.
    ///
    /// Fails when `value`'s window slot is still flagged, i.e. more than 2^20 numbers
    /// are outstanding.
    pub fn acknowledge(&self, value: i64) -> Result<(), YcsbError> {
        let slot = &self.window[(value & WINDOW_MASK) as usize];
        if slot.load(Ordering::Acquire) {
            return Err(YcsbError::AckWindowFull {
                window: WINDOW_SIZE,
            });
        }
        if self.counter.takers == Takers::One {
            // The one taker acknowledges in order: `value` is `limit + 1`, and the slide
            // would set its flag only to clear it and stop at the next, clear, one. So
            // `limit` moves alone (the slide stays for any other case).
            let limit = self.limit.load(Ordering::Relaxed);
            let next = &self.window[((value + 1) & WINDOW_MASK) as usize];
            if value == limit + 1 && !next.load(Ordering::Relaxed) {
                self.limit.store(value, Ordering::Release);
                return Ok(());
            }
            slot.store(true, Ordering::Release);
            self.slide_limit();
            return Ok(());
        }
        slot.store(true, Ordering::Release);
        if self
            .sliding
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            self.slide_limit();
            self.sliding.store(false, Ordering::Release);
        }
        Ok(())
    }

    /// Moves `limit` over the contiguous acknowledged numbers after it. Caller holds
    /// `sliding`.
    fn slide_limit(&self) {
        let limit = self.limit.load(Ordering::Relaxed);
        let before_first_slot = limit & WINDOW_MASK;
        let mut index = limit + 1;
        while index != before_first_slot {
            let slot = &self.window[(index & WINDOW_MASK) as usize];
            if !slot.load(Ordering::Acquire) {
                break;
            }
            slot.store(false, Ordering::Relaxed);
            index += 1;
        }
        self.limit.store(index - 1, Ordering::Release);
    }
}

impl Basis for AcknowledgedCounter {
    /// Inlined: every run-phase operation reads it (a call cost more than the load).
    #[inline]
    fn last_value(&self) -> i64 {
        self.limit.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_hands_out_a_sequence() {
        let c = Counter::new(10);
        assert_eq!(c.last_value(), 9);
        assert_eq!([c.next_value(), c.next_value()], [10, 11]);
        assert_eq!(c.last_value(), 11);
    }

    #[test]
    fn counter_is_unique_across_threads() {
        let c = Counter::new(0);
        let mut all: Vec<i64> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| s.spawn(|| (0..5_000).map(|_| c.next_value()).collect::<Vec<_>>()))
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        });
        all.sort_unstable();
        assert!(all.iter().copied().eq(0..20_000));
    }

    #[test]
    fn limit_waits_for_the_gap() {
        let c = AcknowledgedCounter::new(100);
        let [a, b, d] = [c.next_value(), c.next_value(), c.next_value()];
        assert_eq!(c.last_value(), 99);
        c.acknowledge(b).unwrap();
        c.acknowledge(d).unwrap();
        assert_eq!(c.last_value(), 99, "100 is not acknowledged yet");
        c.acknowledge(a).unwrap();
        assert_eq!(c.last_value(), 102);
    }

    #[test]
    fn one_taker_gets_what_many_get() {
        let (one, many) = (
            AcknowledgedCounter::with_takers(7, Takers::One),
            AcknowledgedCounter::new(7),
        );
        let mut held = Vec::new();
        for i in 0..5_000 {
            let (a, b) = (one.next_value(), many.next_value());
            assert_eq!(a, b);
            held.push(a);
            if i % 7 == 0 {
                // Acknowledge out of order: the newest first, then the rest.
                while let Some(v) = held.pop() {
                    one.acknowledge(v).unwrap();
                    many.acknowledge(v).unwrap();
                    assert_eq!(one.last_value(), many.last_value());
                }
            }
        }
        // In order, as a stream acknowledges: the one taker's shortcut.
        for v in held {
            one.acknowledge(v).unwrap();
            many.acknowledge(v).unwrap();
            assert_eq!(one.last_value(), many.last_value());
        }
        for _ in 0..5_000 {
            let (a, b) = (one.next_value(), many.next_value());
            assert_eq!(a, b);
            one.acknowledge(a).unwrap();
            many.acknowledge(b).unwrap();
            assert_eq!(one.last_value(), a);
            assert_eq!(many.last_value(), a);
        }
    }

    #[test]
    fn a_full_window_is_an_error() {
        let c = AcknowledgedCounter::new(0);
        // 0 stays unacknowledged, so 1..WINDOW_SIZE pile up; WINDOW_SIZE maps onto 1's slot.
        for v in 1..WINDOW_SIZE as i64 {
            c.acknowledge(v).unwrap();
        }
        assert!(matches!(
            c.acknowledge(WINDOW_SIZE as i64 + 1),
            Err(YcsbError::AckWindowFull { .. })
        ));
        c.acknowledge(0).unwrap();
        // YCSB's slide stops at slot `limit & WINDOW_MASK` (= WINDOW_SIZE - 1 here), one
        // short of the acknowledged run; the next acknowledgement carries it on.
        assert_eq!(c.last_value(), WINDOW_SIZE as i64 - 2);
        c.acknowledge(WINDOW_SIZE as i64).unwrap();
        assert_eq!(c.last_value(), WINDOW_SIZE as i64);
    }

    use proptest::prelude::*;

    proptest! {
        #[test]
        fn any_order_of_acks_ends_at_the_last_number(
            order in Just((0..64i64).collect::<Vec<_>>()).prop_shuffle()
        ) {
            let c = AcknowledgedCounter::new(0);
            let mut acked = [false; 64];
            for v in order {
                c.acknowledge(v).unwrap();
                acked[v as usize] = true;
                let expect = acked.iter().position(|a| !a).map_or(63, |p| p as i64 - 1);
                prop_assert_eq!(c.last_value(), expect);
            }
        }
    }
}
