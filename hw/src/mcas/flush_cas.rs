//! `flush-cas`: evict the target's cache line, then a CPU CAS.
//!
//! The emulation of mCAS that prior work used and CXLALLOC measures as `sw_flush_cas`
//! (§5.4.1): the eviction sends the CAS to memory rather than to a possibly stale cached copy.
//! It is atomic only because this machine's caches *are* coherent; on a pod without HWcc two
//! hosts could both succeed. Use it to measure, and `nmp` (or a device) to model the protocol.

use super::{McasError, Region};
use crate::persist;
use crate::sync::mapped::{AtomicU64, Ordering};

/// mCAS emulated by flush + CPU CAS. Stateless apart from the region: any number of threads
/// may share one.
#[derive(Clone, Debug)]
pub struct FlushCas {
    region: Region,
}

impl FlushCas {
    /// Emulated mCAS on `region`'s targets.
    pub fn new(region: Region) -> FlushCas {
        FlushCas { region }
    }

    /// The target word, its line evicted and fenced so the next access goes to memory.
    #[inline]
    fn evicted(&self, target: u64) -> Result<&AtomicU64, McasError> {
        let word = self
            .region
            .target(target)
            .ok_or(McasError::BadTarget(target))?;
        let addr = self.region.window().addr(target);
        crate::model::evict_plain(addr, 8);
        persist::evict(addr, 8);
        persist::fence_full();
        Ok(word)
    }

    /// Compare-and-swap at `target`; returns the previous value.
    #[inline]
    pub fn cas(&self, target: u64, expected: u64, new: u64) -> Result<u64, McasError> {
        let word = self.evicted(target)?;
        Ok(
            match word.compare_exchange(expected, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(previous) | Err(previous) => previous,
            },
        )
    }

    /// The word at `target`, read after evicting its line.
    pub fn load(&self, target: u64) -> Result<u64, McasError> {
        Ok(self.evicted(target)?.load(Ordering::Acquire))
    }

    /// Writes `value` at `target` (an atomic swap, so it orders with concurrent CASes).
    pub fn store(&self, target: u64, value: u64) -> Result<(), McasError> {
        self.evicted(target)?.swap(value, Ordering::AcqRel);
        Ok(())
    }
}
