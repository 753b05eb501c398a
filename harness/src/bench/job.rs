//! A benchmark as the runner carries it to every worker process: which loop, which
//! allocator, and the sizes the loop needs.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Which microbenchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
pub enum Kind {
    /// Batches of fixed-size allocations then frees, thread-local (Hoard's threadtest).
    Threadtest,
    /// Producer/consumer hand-over in a ring of workers: every free is remote.
    Xmalloc,
}

impl Kind {
    /// `threadtest` or `xmalloc`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Threadtest => "threadtest",
            Kind::Xmalloc => "xmalloc",
        }
    }
}

/// An allocator to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
pub enum AllocatorName {
    /// The pod heap (shared memory; may span processes).
    Podkv,
    /// The pod heap with recovery logging and CAS acknowledgement off, to measure what
    /// recoverability costs (one process only).
    PodkvNonrecoverable,
    /// The pod heap in `limited` coherence mode (SWcc protocol on descriptors), to measure
    /// what the mode costs against `podkv` in one run (one process only).
    PodkvLimited,
    /// The pod heap in `lease` liveness mode (heartbeats watched, lapsed owners fenced), to
    /// measure what the mode costs against `podkv` (process mode) in one run (one process
    /// only).
    PodkvLease,
    /// mimalloc, linked in (process-local).
    Mimalloc,
    /// jemalloc, linked in with the `baselines` feature (process-local).
    Jemalloc,
    /// The system allocator (process-local).
    System,
    /// boost.interprocess's `managed_shared_memory` (feature `baselines`; may span processes).
    Boost,
}

impl AllocatorName {
    /// Whether workers of several processes can share it (the pod heap's memory and a boost
    /// segment are shared; `podkv-nonrecoverable`, `podkv-limited` and `podkv-lease` are
    /// one-process comparisons).
    pub fn spans_processes(self) -> bool {
        matches!(self, AllocatorName::Podkv | AllocatorName::Boost)
    }

    /// The name in flags and results.
    pub fn name(self) -> &'static str {
        match self {
            AllocatorName::Podkv => "podkv",
            AllocatorName::PodkvNonrecoverable => "podkv-nonrecoverable",
            AllocatorName::PodkvLimited => "podkv-limited",
            AllocatorName::PodkvLease => "podkv-lease",
            AllocatorName::Mimalloc => "mimalloc",
            AllocatorName::Jemalloc => "jemalloc",
            AllocatorName::System => "system",
            AllocatorName::Boost => "boost",
        }
    }
}

/// How podkv backs huge blocks (`podkv_alloc::HugeBacking`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
pub enum Backing {
    /// Every page at allocation.
    Reserve,
    /// Only the pages touched.
    Sparse,
}

impl Backing {
    pub(crate) fn to_alloc(self) -> podkv_alloc::HugeBacking {
        match self {
            Backing::Reserve => podkv_alloc::HugeBacking::Reserve,
            Backing::Sparse => podkv_alloc::HugeBacking::Sparse,
        }
    }
}

/// A benchmark run as the runner sends it to worker processes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BenchJob {
    /// threadtest or xmalloc.
    pub kind: Kind,
    /// The allocator measured.
    pub allocator: AllocatorName,
    /// Bytes per allocation.
    pub size: usize,
    /// Allocations per worker (a multiple of `batch` for threadtest).
    pub ops_per_worker: u64,
    /// Allocations of all workers.
    pub ops: u64,
    /// threadtest round / xmalloc hand-over batch.
    pub batch: usize,
    /// xmalloc: most blocks a producer keeps in its ring (0: the whole ring).
    pub window: usize,
    /// podkv: how every process backs huge blocks.
    pub huge_backing: Backing,
    /// podkv: the heap file every worker process opens; boost: the segment's name.
    pub heap: Option<PathBuf>,
    /// podkv, boost: worker `w`'s output ring, as an offset in the heap (a handle in the
    /// segment).
    pub rings: Vec<u64>,
}
