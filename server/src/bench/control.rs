//! The control block that starts, stops and collects benchmark workers, in the pod heap when
//! workers are separate processes (offsets only, so every process reads the same block) and in
//! ordinary memory when they are threads.
//!
//! # Fields
//! Parameters are written by the launcher before any worker starts; `ready` is
//! incremented by workers; `go` is set once by the launcher; each worker writes only its own
//! `elapsed_ns` entry and each process only its own `pss`/`faults` entry.

use std::sync::atomic::{AtomicU64, Ordering};

/// Most workers (processes × threads) in one run.
pub const COUNT_WORKERS_MAX: usize = 256;

/// The control block.
#[repr(C, align(64))]
pub struct Control {
    /// 0: threadtest, 1: xmalloc.
    pub kind: AtomicU64,
    /// Block size.
    pub size: AtomicU64,
    /// Allocations per worker.
    pub ops_per_worker: AtomicU64,
    /// threadtest batch / xmalloc hand-over batch.
    pub batch: AtomicU64,
    /// Threads per process.
    pub threads: AtomicU64,
    /// Processes.
    pub processes: AtomicU64,
    /// Workers ready at the start line.
    pub ready: AtomicU64,
    /// Set once to start every worker.
    pub go: AtomicU64,
    /// Offset (or address) of worker `i`'s output ring.
    pub rings: [AtomicU64; COUNT_WORKERS_MAX],
    /// Each worker's timed nanoseconds.
    pub elapsed_ns: [AtomicU64; COUNT_WORKERS_MAX],
    /// Each process's proportional set size at the end of its timed run.
    pub pss: [AtomicU64; COUNT_WORKERS_MAX],
    /// Each process's minor page faults during the run.
    pub faults: [AtomicU64; COUNT_WORKERS_MAX],
    /// xmalloc: most blocks a producer keeps in its ring (0: the whole ring).
    pub window: AtomicU64,
    /// podkv: how every process backs huge blocks (`HugeBacking as u64`).
    pub huge_backing: AtomicU64,
}

impl Control {
    /// Bytes of a control block.
    pub const SIZE: usize = std::mem::size_of::<Control>();

    /// Workers in the run.
    pub fn workers(&self) -> usize {
        (self.threads.load(Ordering::Acquire) * self.processes.load(Ordering::Acquire)) as usize
    }

    /// Waits (spinning politely) until `word` reaches `target`.
    pub fn wait_for(word: &AtomicU64, target: u64) {
        while word.load(Ordering::Acquire) < target {
            std::thread::yield_now();
        }
    }
}
