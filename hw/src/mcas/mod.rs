//! mCAS: compare-and-swap performed by memory, for pods with no inter-host cache coherence.
//!
//! Without coherence a CPU CAS is not atomic across hosts: each host's cache may own the line
//! at once. CXLALLOC §4 instead keeps every multi-writer word in a small uncachable
//! (device-biased) region and lets near-memory logic (the NMP) compare and swap it, serialising
//! operations per target address.
//!
//! # Contract
//! [`Mcas::cas`]`(target, expected, new)` atomically replaces the word at mapping offset
//! `target` by `new` if it holds `expected`, and returns the word's previous value either way
//! (success iff `previous == expected`). [`Mcas::load`] reads the word from memory;
//! [`Mcas::store`] writes it, ordered with every mCAS on it. Targets are offsets in the
//! [`Region`]'s target range, 8-byte aligned; anything else is [`McasError::BadTarget`]. An
//! [`Mcas`] serves one thread at a time (it owns that thread's request line).
//!
//! # Implementations, chosen in one place ([`McasKind`], [`Mcas::open`])
//! | kind | file | what it is |
//! | --- | --- | --- |
//! | `flush-cas` | [`flush_cas`] | evict the target's line, then a CPU CAS: the emulation prior work used (CXLALLOC §5.4.1 `sw_flush_cas`). Atomic only where hardware coherence exists, as on this machine. |
//! | `nmp` | [`nmp`], [`processor`] | a software near-memory processor speaking the FPGA's protocol over `spwr`/`sprd` lines in shared memory; runs as a thread or its own process (`podkv mcas-nmp`). |
//! | `device` | [`device`] | a real NMP mapped from a device file: not available on this machine. |

pub mod device;
pub mod flush_cas;
pub mod nmp;
pub mod park;
pub mod processor;
pub mod region;

pub use flush_cas::FlushCas;
pub use nmp::{NmpClient, NmpOptions};
pub use processor::{ensure_processor, Liveness, Processor, ProcessorHandle, Start};
pub use region::{Region, RegionFile, Window};

use std::time::Duration;

/// Why an mCAS did not complete.
#[derive(Debug, thiserror::Error)]
pub enum McasError {
    /// The target is not an aligned offset inside the region's targets; nothing changed.
    #[error("mCAS target offset {0} is not an aligned word of the mCAS region's targets")]
    BadTarget(u64),
    /// The processor stopped beating while this request was pending, before any processor took
    /// it. The request is withdrawn and took no effect: sending it again is safe.
    #[error("the mCAS processor is dead: no heartbeat for {0:?}")]
    ProcessorDead(Duration),
    /// No processor has claimed the region (none started, or the last one stopped cleanly).
    /// The request took no effect.
    #[error("no mCAS processor serves this region (start one with `podkv mcas-nmp`)")]
    NoProcessor,
    /// The processor took this request and then died (a successor found it journalled, or the
    /// client gave up on it once taken): the swap may or may not have happened.
    #[error("the mCAS processor died during this request; its outcome is unknown")]
    OutcomeUnknown,
    /// Another live processor already serves the region.
    #[error("an mCAS processor (pid {pid}) already serves this region")]
    AlreadyServed {
        /// Process id recorded in the region's claim word.
        pid: u32,
    },
    /// The client id has no line in the region.
    #[error("client {client} out of range: the region has lines for {count} clients")]
    BadClient {
        /// The client id asked for.
        client: u32,
        /// Clients the region serves.
        count: u32,
    },
    /// The bytes are not an mCAS region this build can use.
    #[error("bad mCAS region: {0}")]
    BadRegion(String),
    /// The `device` implementation: no mCAS hardware here.
    #[error("{0}")]
    DeviceUnavailable(String),
    /// Opening or mapping a region file failed.
    #[error("mCAS region file: {0}")]
    Io(#[from] std::io::Error),
}

/// Which mCAS implementation to use: the one place the choice is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum McasKind {
    /// Evict the line, then CPU CAS.
    FlushCas,
    /// The software near-memory processor.
    Nmp,
    /// A hardware near-memory processor behind a device file.
    Device,
}

impl McasKind {
    /// Every kind, for `--help` texts and sweeps.
    pub const ALL: [McasKind; 3] = [McasKind::FlushCas, McasKind::Nmp, McasKind::Device];

    /// The kind's name, as parsed.
    pub const fn name(self) -> &'static str {
        match self {
            McasKind::FlushCas => "flush-cas",
            McasKind::Nmp => "nmp",
            McasKind::Device => "device",
        }
    }
}

impl std::fmt::Display for McasKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for McasKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        McasKind::ALL
            .into_iter()
            .find(|kind| kind.name() == s)
            .ok_or_else(|| format!("unknown mCAS kind `{s}` (known: flush-cas, nmp, device)"))
    }
}

/// One thread's handle on mCAS, whichever implementation [`McasKind`] chose.
#[derive(Debug)]
pub enum Mcas {
    /// See [`FlushCas`].
    FlushCas(FlushCas),
    /// See [`NmpClient`].
    Nmp(NmpClient),
}

impl Mcas {
    /// Opens `kind` on `region` as client `client` (the caller's thread-slot index: unique
    /// among live threads; only `nmp` uses it).
    pub fn open(
        kind: McasKind,
        region: &Region,
        client: u32,
        options: NmpOptions,
    ) -> Result<Mcas, McasError> {
        match kind {
            McasKind::FlushCas => Ok(Mcas::FlushCas(FlushCas::new(region.clone()))),
            McasKind::Nmp => Ok(Mcas::Nmp(NmpClient::new(region.clone(), client, options)?)),
            McasKind::Device => Err(device::unavailable()),
        }
    }

    /// Compare-and-swap at `target`: the previous value (success iff it equals `expected`).
    #[inline]
    pub fn cas(&self, target: u64, expected: u64, new: u64) -> Result<u64, McasError> {
        match self {
            Mcas::FlushCas(m) => m.cas(target, expected, new),
            Mcas::Nmp(m) => m.cas(target, expected, new).map(|reply| reply.previous),
        }
    }

    /// The word at `target`, read from memory.
    #[inline]
    pub fn load(&self, target: u64) -> Result<u64, McasError> {
        match self {
            Mcas::FlushCas(m) => m.load(target),
            Mcas::Nmp(m) => m.load(target),
        }
    }

    /// Writes `value` at `target`, ordered with every mCAS on it.
    #[inline]
    pub fn store(&self, target: u64, value: u64) -> Result<(), McasError> {
        match self {
            Mcas::FlushCas(m) => m.store(target, value),
            Mcas::Nmp(m) => m.store(target, value),
        }
    }

    /// Adds `delta` (wrapping) to the word at `target` by an mCAS loop; returns the previous
    /// value. The allocator's remote-free decrement is `fetch_add(t, -1i64 as u64)`.
    pub fn fetch_add(&self, target: u64, delta: u64) -> Result<u64, McasError> {
        let mut seen = self.load(target)?;
        loop {
            let previous = self.cas(target, seen, seen.wrapping_add(delta))?;
            if previous == seen {
                return Ok(previous);
            }
            seen = previous;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_by_name_and_unknown_names_are_refused() {
        for kind in McasKind::ALL {
            assert_eq!(kind.name().parse::<McasKind>(), Ok(kind));
        }
        assert!("cas".parse::<McasKind>().is_err());
    }
}
