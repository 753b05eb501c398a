//! `podkv heap chaos`: several processes allocate, free and hand blocks to each other on one
//! heap while one of them is killed with SIGKILL at a random moment, round after round; after
//! each kill the dead process's slots are recovered (by
//! [`podkv_alloc::Heap::recover_dead`]), the killed worker is restarted, and the whole heap is
//! checked against the application's own record.
//!
//! # Map
//! - `record`: the application's record, a file every chaos process maps;
//! - `coordinator`: the rounds — kill and control windows, settling, checking, restarts;
//! - `worker`: one worker process, its operations and their timing;
//! - `report`: what the run found, read from the record's histograms as hdrhistograms.
//!
//! # The application's record (a file beside the heap, `<heap>.chaos`)
//! - a table of records, each `offset | owner << 48 | state << 56` or zero: a block some worker
//!   holds. A worker claims a free record (CAS 0 → `RESERVED`), allocates, stores the offset
//!   (`UNSETTLED`: only its allocator knows it), notes the offset in `last[slot]`, then marks it
//!   `SETTLED`. Hand-over is one CAS of the owner field. A free marks the record `FREEING`,
//!   frees, and clears it;
//! - `last[slot]`: the block each thread slot last handed to its worker;
//! - per worker: a heartbeat (operations done) and a pause acknowledgement;
//! - the pause word, and the window word: odd from a kill until the dead process's slots are
//!   recovered;
//! - per worker: its latency histograms (below).
//!
//! # After each kill (all live workers paused at a safe point between operations)
//! 1. `recover_dead` finishes every dead slot's step and reports, per slot, a block it had
//!    taken for an allocation or a free it finished;
//! 2. the dead worker's records are settled: a reported allocation that no record and no
//!    `last` names was never handed over and is freed; a `FREEING` record whose free recovery
//!    did not report is freed now; `RESERVED` records are cleared;
//! 3. the heap must be valid and its live blocks exactly the records' blocks (no leak, none
//!    lost), each block's stamp must name its record (no block handed out twice); a double free
//!    panics in `free`. Every live worker must reach its next safe point after the kill (none
//!    stalled on the dead one).
//!
//! # Latency while a process is dead and recovered (nobody blocks)
//! The living are not paused for the kill or the recovery: the coordinator kills, leaves the
//! dead slots unrecovered for `--dead-ms` while the others work on, then recovers them, and
//! only then pauses everyone to settle and check. Each worker times every operation (an
//! allocation, a free or a hand-over; a draw that finds nothing to do is not one) three ways
//! (wall clock; its thread's CPU time; wall clock less its run-queue wait, see
//! `record::MEASURES`) into histograms in the record file (hdrhistogram's layout, 2
//! significant digits), one for operations that overlapped a
//! kill-to-recovery window, one for those that overlapped a control window, and one for the
//! others. The histograms outlive a killed worker, so the report covers every operation of
//! the run, summed over all workers.
//!
//! A control window is the kill window's A/A control. Each round has one of each, in random
//! order and after random waits (so neither sits nearer the last restart), and the control
//! window lasts as long as the last kill window did: the victim rests instead of dying (or,
//! after the kill, stays dead and recovered), and the others work on exactly as they do while
//! it is dead. So the report sets the slowest kill-window operation against the normal p99.9
//! (the criterion) *and* against what the very same statistic gives with nobody
//! killed. If the kill windows' tail is no longer than the control windows', nobody waited for
//! the dead; whatever both show beyond the normal p99.9 is the machine's (preemption,
//! interrupts, the hypervisor), not the kill's. The run fails if a window passed in which no
//! live worker finished an operation.

mod coordinator;
mod record;
mod report;
mod worker;

use podkv_alloc::Config;
use std::path::{Path, PathBuf};

/// Options of `podkv heap chaos`.
#[derive(clap::Args, Debug, Clone)]
pub struct ChaosArgs {
    /// Heap file (created fresh).
    pub path: PathBuf,
    /// Worker processes.
    #[arg(long, default_value_t = 3)]
    pub processes: u32,
    /// Kills (one per round).
    #[arg(long, default_value_t = 200)]
    pub kills: u32,
    /// Longest a round runs before its kill, in ms (the kill falls at a random moment).
    #[arg(long, default_value_t = 40)]
    pub round_ms: u64,
    /// Seed of the kill schedule and the workers' choices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// How long a killed process's slots stay unrecovered while the others work on, in ms.
    #[arg(long, default_value_t = 2)]
    pub dead_ms: u64,
    /// Coherence mode of the fresh heap: `hardware`, `limited` or `mcas`.
    #[arg(long, default_value = "hardware")]
    pub coherence: podkv_hw::Coherence,
    /// With `--coherence mcas`: `flush-cas` or `nmp` (the coordinator, never killed, runs
    /// the processor).
    #[arg(long, default_value = "flush-cas")]
    pub mcas_impl: podkv_hw::mcas::McasKind,
    /// Timings of a fixed busy loop each worker takes before the first round, the machine's
    /// floor: how far the slowest of as many timings of code that never waits lies above
    /// their p99.9 here. 0: none.
    #[arg(long, default_value_t = 100_000)]
    pub floor_timings: u64,
}

/// The geometry of every chaos heap.
fn config() -> Config {
    Config {
        small_bytes: 1 << 30,
        large_bytes: 4 << 30,
        slots: 256,
        ..Config::default()
    }
}

/// Runs the chaos test and prints what it found; an error names the first violation.
pub fn run(args: &ChaosArgs) -> anyhow::Result<()> {
    coordinator::run(args)
}

/// One worker process of `podkv heap chaos`.
pub fn worker(path: &Path, w: u64, workers: u64, seed: u64, floor: u64) -> anyhow::Result<()> {
    worker::run(path, w, workers, seed, floor)
}
