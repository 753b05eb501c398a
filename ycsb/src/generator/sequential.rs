//! `SequentialGenerator`: one cursor shared by every worker, `start + n++ % interval`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A shared cursor over `[start, end]` that wraps around.
///
/// # Fields
/// `counter` is shared by every clone (all workers); each `next_value` takes one number
/// with a single `fetch_add`, as YCSB's `AtomicLong.getAndIncrement`.
#[derive(Clone, Debug)]
pub struct Sequential {
    counter: Arc<AtomicU64>,
    start: u64,
    interval: u64,
}

impl Sequential {
    /// A cursor over `[start, end]`; `None` when the range is empty.
    pub fn new(start: u64, end: u64) -> Option<Self> {
        let interval = end.checked_sub(start)?.checked_add(1)?;
        let counter = Arc::new(AtomicU64::new(0));
        Some(Self {
            counter,
            start,
            interval,
        })
    }

    /// The next value; needs no RNG.
    #[inline]
    pub fn next_value(&self) -> u64 {
        self.start + self.counter.fetch_add(1, Ordering::Relaxed) % self.interval
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_and_is_shared_by_clones() {
        let a = Sequential::new(5, 7).unwrap();
        let b = a.clone();
        let drawn: Vec<u64> = (0..4)
            .flat_map(|_| [a.next_value(), b.next_value()])
            .collect();
        assert_eq!(drawn, [5, 6, 7, 5, 6, 7, 5, 6]);
    }
}
