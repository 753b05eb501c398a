//! `podkv heap chaos`: several processes allocate, free and hand blocks to each other on one
//! heap while one of them is killed with SIGKILL at a random moment, round after round; after
//! each kill the dead process's slots are recovered (by [`Heap::recover_dead`]), the killed
//! worker is restarted, and the whole heap is checked against the application's own record.
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
//! (wall clock; its thread's CPU time; wall clock less its run-queue wait, see [`MEASURES`])
//! into log-linear histograms in the record file, one for operations that overlapped a
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

use anyhow::{bail, ensure, Context};
use podkv_alloc::file::Calls;
use podkv_alloc::{Config, Heap, InFlight, Offset, ThreadHandle};
use std::alloc::Layout;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::time::{Duration, Instant};

const RECORDS: usize = 8192;
const SLOTS_MAX: usize = 16384;
const WORKERS_MAX: usize = 64;
const MASK_OFFSET: u64 = (1 << 48) - 1;
const RESERVED: u64 = 1;
const UNSETTLED: u64 = 2;
const SETTLED: u64 = 3;
const FREEING: u64 = 4;
/// How an operation's latency is measured: wall clock; the thread's CPU time; and wall clock
/// less the time the thread waited on a run queue (runnable, but another task had the CPU:
/// `run_delay` in `/proc/thread-self/schedstat`). The third still counts every wait an
/// operation could cause itself (spinning, sleeping, blocking in the kernel) and leaves out
/// only the scheduler's preemption, which on a machine with fewer cores than runnable
/// processes dominates the wall clock's tail.
const MEASURES: usize = 3;
const MEASURE_NAMES: [&str; MEASURES] = ["wall", "CPU", "wall less run-queue wait"];
/// Operations that overlapped a kill-to-recovery window, ones that overlapped a control window
/// (the same wait with one worker resting instead of dead: the A/A control), and the others.
const PHASE_CALM: usize = 0;
const PHASE_WINDOW: usize = 1;
const PHASE_CONTROL: usize = 2;
/// Not operations: a fixed busy loop each first-started worker times before it starts work,
/// the machine's floor (what the same timing gives for code that never waits).
const PHASE_FLOOR: usize = 3;
const PHASES: usize = 4;
/// Log-linear latency buckets (ns): 32 per power of two, so a bucket is within 3% of its
/// values; 1248 reach past an hour.
const SUB_BITS: u32 = 5;
const BUCKETS: usize = 1280;
/// Words per worker in the record file: heartbeat, pause acknowledgement, rest request, then
/// per phase the operations that backed pages (`fallocate`) and those that released pages,
/// then per measure and phase the slowest operation that did neither.
const FIELDS: usize = 3 + 2 * PHASES + MEASURES * PHASES;
/// Words per worker of latency histograms: a maximum and the buckets, per measure and phase.
const HISTOGRAM: usize = BUCKETS + 1;
const HISTOGRAMS: usize = MEASURES * PHASES * HISTOGRAM;

/// The latency bucket of `ns`.
fn bucket(ns: u64) -> usize {
    let sub = 1u64 << SUB_BITS;
    if ns < sub {
        return ns as usize;
    }
    let e = 63 - ns.leading_zeros();
    let index = sub + u64::from(e - SUB_BITS) * sub + ((ns >> (e - SUB_BITS)) - sub);
    (index as usize).min(BUCKETS - 1)
}

/// The highest latency (ns) that falls in bucket `b`.
fn bucket_high(b: usize) -> u64 {
    let sub = 1u64 << SUB_BITS;
    let b = b as u64;
    if b < sub {
        return b;
    }
    let e = SUB_BITS as u64 + (b - sub) / sub;
    let low = (sub + (b - sub) % sub) << (e - SUB_BITS as u64);
    low + (1 << (e - SUB_BITS as u64)) - 1
}

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

/// The shared record file.
struct Record {
    words: &'static [AtomicU64],
}

impl Record {
    /// Where the per-worker fields, the control words (pause, window) and the histograms start.
    const AT_WORKERS: usize = RECORDS + SLOTS_MAX;
    const AT_CONTROL: usize = Self::AT_WORKERS + FIELDS * WORKERS_MAX;
    const AT_HISTOGRAMS: usize = Self::AT_CONTROL + 8;
    const LEN: usize = Self::AT_HISTOGRAMS + HISTOGRAMS * WORKERS_MAX;

    fn open(path: &Path, create: bool) -> anyhow::Result<Record> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(create)
            .open(path)
            .with_context(|| format!("open {}", path.display()))?;
        let len = Self::LEN * 8;
        file.set_len(len as u64)?;
        // SAFETY: a shared mapping of a file we sized, leaked for the process's lifetime.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        ensure!(ptr != libc::MAP_FAILED, "cannot map {}", path.display());
        // SAFETY: `len` bytes mapped, 8-aligned; AtomicU64 is valid for any bits.
        let words = unsafe { std::slice::from_raw_parts(ptr as *const AtomicU64, Self::LEN) };
        Ok(Record { words })
    }
    fn record(&self, i: usize) -> &AtomicU64 {
        &self.words[i]
    }
    fn last(&self, slot: u32) -> &AtomicU64 {
        &self.words[RECORDS + slot as usize]
    }
    fn worker(&self, w: usize, field: usize) -> &AtomicU64 {
        &self.words[Self::AT_WORKERS + FIELDS * w + field]
    }
    fn heartbeat(&self, w: usize) -> &AtomicU64 {
        self.worker(w, 0)
    }
    fn paused(&self, w: usize) -> &AtomicU64 {
        self.worker(w, 1)
    }
    /// Non-zero while the coordinator wants worker `w` idle (it rests through a control window,
    /// as a killed worker would be dead through a kill window).
    fn rest(&self, w: usize) -> &AtomicU64 {
        self.worker(w, 2)
    }
    /// Worker `w`'s count of operations in `phase` that backed pages (`release` false) or
    /// released them (true).
    fn calls(&self, w: usize, phase: usize, release: bool) -> &AtomicU64 {
        self.worker(w, 3 + 2 * phase + usize::from(release))
    }
    /// Worker `w`'s slowest operation of `measure` in `phase` that made no system call.
    fn quiet_max(&self, w: usize, measure: usize, phase: usize) -> &AtomicU64 {
        self.worker(w, 3 + 2 * PHASES + measure * PHASES + phase)
    }
    /// Counts one operation that made system calls (`calls`), or notes the latencies of one
    /// that made none (this worker is the only writer of its fields).
    fn count_calls(&self, w: usize, phase: usize, calls: Calls, ns: [u64; MEASURES]) {
        for (release, made) in [(false, calls.backs), (true, calls.releases)] {
            if made > 0 {
                let count = self.calls(w, phase, release);
                count.store(count.load(Relaxed) + 1, Relaxed);
            }
        }
        if calls != Calls::default() {
            return;
        }
        for (measure, ns) in ns.into_iter().enumerate() {
            let max = self.quiet_max(w, measure, phase);
            if ns > max.load(Relaxed) {
                max.store(ns, Relaxed);
            }
        }
    }
    /// Over every worker: operations in `phase` that backed pages, operations that released
    /// pages, and the slowest operation of `measure` in `phase` that did neither.
    fn calls_and_quiet_max(&self, measure: usize, phase: usize) -> (u64, u64, u64) {
        (0..WORKERS_MAX).fold((0, 0, 0), |(backs, releases, max), w| {
            (
                backs + self.calls(w, phase, false).load(Acquire),
                releases + self.calls(w, phase, true).load(Acquire),
                max.max(self.quiet_max(w, measure, phase).load(Acquire)),
            )
        })
    }
    /// Worker `w`'s latency histogram of `measure` in `phase`: its maximum, then its buckets.
    /// Kept across the worker's restarts: a killed worker's operations stay counted.
    fn histogram(&self, w: usize, measure: usize, phase: usize) -> &[AtomicU64] {
        let at = Self::AT_HISTOGRAMS + HISTOGRAMS * w + (measure * PHASES + phase) * HISTOGRAM;
        &self.words[at..at + HISTOGRAM]
    }

    /// Counts one operation's latencies (this worker is the only writer of its histograms).
    fn count_latency(&self, w: usize, phase: usize, ns: [u64; MEASURES]) {
        for (measure, ns) in ns.into_iter().enumerate() {
            let h = self.histogram(w, measure, phase);
            if ns > h[0].load(Relaxed) {
                h[0].store(ns, Relaxed);
            }
            let b = &h[1 + bucket(ns)];
            b.store(b.load(Relaxed) + 1, Relaxed);
        }
    }

    /// The latency distribution of `measure` in `phase` over every worker.
    fn latencies(&self, measure: usize, phase: usize) -> Distribution {
        let mut counts = vec![0u64; BUCKETS];
        let mut max = 0;
        for w in 0..WORKERS_MAX {
            let h = self.histogram(w, measure, phase);
            max = max.max(h[0].load(Acquire));
            for (count, b) in counts.iter_mut().zip(&h[1..]) {
                *count += b.load(Acquire);
            }
        }
        Distribution { counts, max }
    }
    /// The pause epoch: odd while the coordinator wants everyone paused.
    fn pause(&self) -> &AtomicU64 {
        &self.words[Self::AT_CONTROL]
    }
    /// The window: odd from a kill until the dead process's slots are recovered.
    fn window(&self) -> &AtomicU64 {
        &self.words[Self::AT_CONTROL + 1]
    }
    /// The control window: odd while one worker rests as long as a killed one stays dead.
    fn control(&self) -> &AtomicU64 {
        &self.words[Self::AT_CONTROL + 2]
    }
}

const fn pack(offset: u64, owner: u64, state: u64) -> u64 {
    offset | owner << 48 | state << 56
}
const fn offset_of(r: u64) -> u64 {
    r & MASK_OFFSET
}
const fn owner_of(r: u64) -> u64 {
    (r >> 48) & 0xFF
}
const fn state_of(r: u64) -> u64 {
    r >> 56
}

fn record_path(heap: &Path) -> PathBuf {
    let mut p = heap.as_os_str().to_owned();
    p.push(".chaos");
    PathBuf::from(p)
}

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
    ensure!(
        (2..=WORKERS_MAX as u32).contains(&args.processes),
        "--processes must be 2..={WORKERS_MAX}"
    );
    let _ = std::fs::remove_file(&args.path);
    let fresh = Config {
        coherence: args.coherence,
        mcas: args.mcas_impl,
        ..config()
    };
    let heap = Heap::open(&args.path, &fresh)?;
    let record = Record::open(&record_path(&args.path), true)?;
    let exe = std::env::current_exe()?;
    let spawn = |w: u32, seed: u64, floor: u64| -> anyhow::Result<Child> {
        Ok(Command::new(&exe)
            .args(["heap", "chaos-worker"])
            .arg(&args.path)
            .args(["--worker", &w.to_string()])
            .args(["--workers", &args.processes.to_string()])
            .args(["--seed", &seed.to_string()])
            .args(["--floor", &floor.to_string()])
            .spawn()?)
    };
    let mut rng = podkv_alloc::stress::Rng::new(args.seed);
    let mut children = Workers(
        (0..args.processes)
            .map(|w| spawn(w, args.seed * 1000 + u64::from(w), args.floor_timings))
            .collect::<Result<_, _>>()?,
    );
    let children = &mut children.0;
    // Start once every worker works (after timing the floor: a few µs a timing, 50 allowed).
    let start_within = Duration::from_secs(30) + Duration::from_micros(50 * args.floor_timings);
    for w in 0..args.processes as usize {
        let deadline = Instant::now() + start_within;
        while record.heartbeat(w).load(Acquire) == 0 {
            ensure!(
                Instant::now() < deadline,
                "worker {w} did not start working in {start_within:?}"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let mut recoveries = Vec::new();
    let mut settled_allocs = 0u64;
    let mut settled_frees = 0u64;
    let mut window_beats = Vec::new();
    let mut control_beats = Vec::new();
    let mut window_len = Duration::from_millis(args.dead_ms);
    // How long the kill and the control windows were open, in all.
    let (mut window_time, mut control_time) = (Duration::ZERO, Duration::ZERO);
    let start = Instant::now();
    for round in 0..args.kills {
        let victim = rng.below(u64::from(args.processes)) as usize;
        let living: Vec<usize> = (0..args.processes as usize)
            .filter(|&w| w != victim)
            .collect();
        // Two windows a round, in random order, each after a random wait: the kill window
        // (from the kill until the dead slots are recovered, the living work on, and each of
        // them must finish operations while the dead slots are unrecovered), and the control
        // window (the kill window's A/A control: nobody is killed, the victim only rests or
        // stays dead and recovered, for as long as the last kill window lasted).
        let control_first = rng.below(2) == 0;
        let mut recovered = Vec::new();
        for kill in [!control_first, control_first] {
            std::thread::sleep(Duration::from_micros(
                500 + rng.below(args.round_ms.max(2) * 500),
            ));
            if !kill {
                let opened = Instant::now();
                record.rest(victim).store(1, Release);
                record.control().fetch_add(1, AcqRel);
                let beats = heartbeats(&record, &living);
                std::thread::sleep(window_len);
                let done = progress(&record, &living, &beats)
                    .with_context(|| format!("round {round}, while worker {victim} rested"))?;
                record.control().fetch_add(1, AcqRel);
                record.rest(victim).store(0, Release);
                control_time += opened.elapsed();
                control_beats.push(done);
                continue;
            }
            let opened = Instant::now();
            record.window().fetch_add(1, AcqRel);
            // SAFETY: signalling our own child.
            unsafe { libc::kill(children[victim].id() as i32, libc::SIGKILL) };
            children[victim].wait()?;
            let beats = heartbeats(&record, &living);
            std::thread::sleep(Duration::from_millis(args.dead_ms));
            let done = progress(&record, &living, &beats)
                .with_context(|| format!("round {round}, while worker {victim} was dead"))?;
            recovered = heap.recover_dead();
            record.window().fetch_add(1, AcqRel);
            window_len = opened.elapsed();
            window_time += window_len;
            window_beats.push(done);
        }
        // Pause the living at a safe point; a worker that does not get there in time stalled.
        let epoch = record.pause().fetch_add(1, AcqRel) + 1;
        for w in (0..args.processes as usize).filter(|&w| w != victim) {
            let deadline = Instant::now() + Duration::from_secs(10);
            while record.paused(w).load(Acquire) != epoch {
                if let Ok(Some(status)) = children[w].try_wait() {
                    bail!("round {round}: worker {w} exited: {status}");
                }
                ensure!(
                    Instant::now() < deadline,
                    "round {round}: worker {w} stalled (no safe point in 10 s)"
                );
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        recoveries.extend(recovered.iter().map(|r| (r.took, r.took_cpu)));
        let (allocs, frees) = settle(&heap, &record, &[victim as u64], &recovered)?;
        settled_allocs += allocs;
        settled_frees += frees;
        verify(&heap, &record)
            .with_context(|| format!("round {round}, after killing worker {victim}"))?;
        children[victim] = spawn(
            victim as u32,
            args.seed * 1000 + u64::from(round) * 64 + victim as u64,
            0,
        )?;
        let beat = record.heartbeat(victim).load(Acquire);
        record.pause().fetch_add(1, AcqRel);
        // The next round starts once the restarted worker works (so every kill hits one).
        let deadline = Instant::now() + Duration::from_secs(10);
        while record.heartbeat(victim).load(Acquire) == beat {
            ensure!(
                Instant::now() < deadline,
                "round {round}: restarted worker {victim} did not start working in 10 s"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
        if args.kills >= 20 && (round + 1) % (args.kills / 10) == 0 {
            eprintln!(
                "chaos: {}/{} kills, {:.1} s",
                round + 1,
                args.kills,
                start.elapsed().as_secs_f64()
            );
        }
    }
    // Stop everyone, recover, settle, and drain the table: the heap must end empty.
    for child in children.iter_mut() {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        child.wait()?;
    }
    let recovered = heap.recover_dead();
    let everyone: Vec<u64> = (0..u64::from(args.processes)).collect();
    let (a, f) = settle(&heap, &record, &everyone, &recovered)?;
    settled_allocs += a;
    settled_frees += f;
    verify(&heap, &record)?;
    {
        let t = heap.thread()?;
        for i in 0..RECORDS {
            let r = record.record(i).swap(0, AcqRel);
            if r != 0 {
                t.free(Offset(offset_of(r)));
            }
        }
    }
    let report = heap.check();
    ensure!(report.is_valid(), "final check: {:?}", report.problems);
    ensure!(
        report.live_blocks() == 0,
        "final check: {} blocks leaked",
        report.live_blocks()
    );
    let (mut wall, mut cpu): (Vec<Duration>, Vec<Duration>) = recoveries.into_iter().unzip();
    wall.sort();
    cpu.sort();
    // The quantile `p` of `sorted`, in µs.
    let pct = |sorted: &[Duration], p: f64| {
        sorted[((sorted.len() - 1) as f64 * p) as usize].as_secs_f64() * 1e6
    };
    println!(
        "chaos: {} kills of {} processes in {:.1} s: no leak, no loss, no double free; {} untaken allocations and {} unfinished frees settled",
        args.kills,
        args.processes,
        start.elapsed().as_secs_f64(),
        settled_allocs,
        settled_frees
    );
    println!(
        "recovery of one dead slot ({} recoveries): median {:.1} µs, p99 {:.1} µs, max {:.1} µs (its CPU time: median {:.1}, p99 {:.1}, max {:.1} µs); slowest operation of any worker {:.2} ms",
        wall.len(),
        pct(&wall, 0.5),
        pct(&wall, 0.99),
        pct(&wall, 1.0),
        pct(&cpu, 0.5),
        pct(&cpu, 0.99),
        pct(&cpu, 1.0),
        [PHASE_CALM, PHASE_WINDOW, PHASE_CONTROL]
            .map(|phase| record.latencies(0, phase).max)
            .into_iter()
            .max()
            .unwrap_or(0) as f64
            / 1e6
    );
    window_beats.sort_unstable();
    control_beats.sort_unstable();
    let ops = |phase| record.latencies(0, phase).len();
    let total = ops(PHASE_CALM) + ops(PHASE_WINDOW) + ops(PHASE_CONTROL);
    println!(
        "while a process was dead and recovered ({} ms or more, then recovery; {} windows): every live worker kept finishing operations ({} to {} per window, median {}); {} of {} operations overlapped a kill window (open {:.2} s in all)",
        args.dead_ms,
        window_beats.len(),
        window_beats.first().copied().unwrap_or(0),
        window_beats.last().copied().unwrap_or(0),
        window_beats.get(window_beats.len() / 2).copied().unwrap_or(0),
        ops(PHASE_WINDOW),
        total,
        window_time.as_secs_f64(),
    );
    println!(
        "control: as many windows as long with nobody killed (the victim rests, or stays dead and recovered; {} to {} operations per window, median {}; {} operations, open {:.2} s in all): what the same statistics give without a kill",
        control_beats.first().copied().unwrap_or(0),
        control_beats.last().copied().unwrap_or(0),
        control_beats.get(control_beats.len() / 2).copied().unwrap_or(0),
        ops(PHASE_CONTROL),
        control_time.as_secs_f64(),
    );
    let us = |ns: u64| ns as f64 / 1e3;
    for (m, name) in MEASURE_NAMES.iter().enumerate() {
        let [calm, window, control] =
            [PHASE_CALM, PHASE_WINDOW, PHASE_CONTROL].map(|phase| record.latencies(m, phase));
        let p999 = calm.quantile(0.999).max(1);
        println!(
            "  {name}: slowest operation in a kill window {:.1} µs = {:.2}x the normal p99.9, in a control window {:.1} µs = {:.2}x (kill / control {:.2}x); normal p50 {:.1}, p99 {:.1}, p99.9 {:.1}, p99.99 {:.1}, max {:.1} µs; p99.9 in kill windows {:.1}, in control windows {:.1} µs",
            us(window.max),
            window.max as f64 / p999 as f64,
            us(control.max),
            control.max as f64 / p999 as f64,
            window.max as f64 / control.max.max(1) as f64,
            us(calm.quantile(0.5)),
            us(calm.quantile(0.99)),
            us(p999),
            us(calm.quantile(0.9999)),
            us(calm.max),
            us(window.quantile(0.999)),
            us(control.quantile(0.999)),
        );
        // The tail's density, steadier than one maximum: if kill windows made operations wait,
        // more of theirs would pass the calm p99.99 than the control windows'. Per operation
        // and per second, as the machine's own slow moments come per second: kill windows,
        // where the dead process's exit takes CPU, hold fewer operations per second.
        let p9999 = calm.quantile(0.9999);
        let [in_window, in_control] = [&window, &control].map(|d| d.above(p9999));
        println!(
            "    over the normal p99.99 ({:.1} µs): {in_window} in kill windows ({:.0} per million operations, {:.0} per second), {in_control} in control windows ({:.0}, {:.0}); calm {:.0} per million",
            us(p9999),
            window.per_million_above(p9999),
            in_window as f64 / window_time.as_secs_f64().max(1e-9),
            control.per_million_above(p9999),
            in_control as f64 / control_time.as_secs_f64().max(1e-9),
            calm.per_million_above(p9999),
        );
        let [(calm_backs, calm_releases, _), (window_backs, window_releases, window_quiet), (control_backs, control_releases, control_quiet)] =
            [PHASE_CALM, PHASE_WINDOW, PHASE_CONTROL]
                .map(|phase| record.calls_and_quiet_max(m, phase));
        println!(
            "    without the operations that backed or released pages themselves (backed / released: {window_backs} / {window_releases} in kill windows, {control_backs} / {control_releases} in control windows, {calm_backs} / {calm_releases} calm): slowest in a kill window {:.1} µs = {:.2}x the normal p99.9, in a control window {:.1} µs = {:.2}x",
            us(window_quiet),
            window_quiet as f64 / p999 as f64,
            us(control_quiet),
            control_quiet as f64 / p999 as f64,
        );
    }
    let floor = ops(PHASE_FLOOR);
    if floor > 0 {
        let ratios: Vec<String> = MEASURE_NAMES
            .iter()
            .enumerate()
            .map(|(m, name)| {
                let d = record.latencies(m, PHASE_FLOOR);
                format!(
                    "{name} {:.0}x (p50 {:.2}, p99.9 {:.2}, max {:.1} µs)",
                    d.max as f64 / d.quantile(0.999).max(1) as f64,
                    us(d.quantile(0.5)),
                    us(d.quantile(0.999)),
                    us(d.max)
                )
            })
            .collect();
        println!(
            "machine floor: {floor} timings of a fixed busy loop that never waits, taken the same way by the {} workers at once before the first kill; the slowest against their p99.9: {}",
            args.processes,
            ratios.join("; ")
        );
    }
    let _ = std::fs::remove_file(record_path(&args.path));
    Ok(())
}

/// This thread's CPU time in ns.
fn thread_cpu_ns() -> u64 {
    podkv_alloc::process::thread_cpu_time().as_nanos() as u64
}

/// This thread's run-queue wait so far (ns), read from `/proc/thread-self/schedstat`
/// ("CPU time, run-queue wait, time slices"); kept open and read with `pread`.
struct RunDelay(std::fs::File);

impl RunDelay {
    fn open() -> anyhow::Result<RunDelay> {
        let file = std::fs::File::open("/proc/thread-self/schedstat")
            .context("open /proc/thread-self/schedstat (needs a kernel with sched_info)")?;
        let delay = RunDelay(file);
        ensure!(
            delay.read().is_some(),
            "unreadable /proc/thread-self/schedstat"
        );
        Ok(delay)
    }

    fn read(&self) -> Option<u64> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 96];
        let n = self.0.read_at(&mut buf, 0).ok()?;
        let text = std::str::from_utf8(&buf[..n]).ok()?;
        text.split_ascii_whitespace().nth(1)?.parse().ok()
    }
}

/// A latency distribution summed over the workers.
struct Distribution {
    counts: Vec<u64>,
    max: u64,
}

impl Distribution {
    fn len(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The latency (ns) at quantile `q`: the top of the bucket holding it (at most the maximum).
    fn quantile(&self, q: f64) -> u64 {
        let rank = ((self.len() as f64 * q).ceil() as u64).max(1);
        let mut seen = 0;
        for (b, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return bucket_high(b).min(self.max);
            }
        }
        self.max
    }

    /// Operations in buckets above the one holding `ns`.
    fn above(&self, ns: u64) -> u64 {
        self.counts[(bucket(ns) + 1).min(BUCKETS)..].iter().sum()
    }

    /// Operations per million in buckets above the one holding `ns`.
    fn per_million_above(&self, ns: u64) -> f64 {
        self.above(ns) as f64 * 1e6 / self.len().max(1) as f64
    }
}

/// The worker processes, killed if the coordinator stops early.
struct Workers(Vec<Child>);

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
            let _ = child.wait();
        }
    }
}

/// The heartbeats (operations done) of `workers`.
fn heartbeats(record: &Record, workers: &[usize]) -> Vec<u64> {
    workers
        .iter()
        .map(|&w| record.heartbeat(w).load(Acquire))
        .collect()
}

/// Waits until each of `workers` finished an operation since `beats`; returns how many they
/// finished together. Ten seconds without one is a stalled worker.
fn progress(record: &Record, workers: &[usize], beats: &[u64]) -> anyhow::Result<u64> {
    let deadline = Instant::now() + Duration::from_secs(10);
    for (&w, &beat) in workers.iter().zip(beats) {
        while record.heartbeat(w).load(Acquire) == beat {
            ensure!(
                Instant::now() < deadline,
                "worker {w} finished no operation in 10 s"
            );
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    Ok(heartbeats(record, workers)
        .iter()
        .zip(beats)
        .map(|(now, beat)| now - beat)
        .sum())
}

/// Settles the dead workers' records after recovery (once per recovery); returns
/// (allocations freed, frees finished).
fn settle(
    heap: &Heap,
    record: &Record,
    dead: &[u64],
    recovered: &[podkv_alloc::Recovered],
) -> anyhow::Result<(u64, u64)> {
    let t = heap.thread()?;
    // A reserved record holds offset 0, which is never a block: no special case needed.
    let held = |off: u64| (0..RECORDS).any(|i| offset_of(record.record(i).load(Acquire)) == off);
    let (mut allocs, mut frees) = (0, 0);
    let mut freed_by_recovery = Vec::new();
    for r in recovered {
        match r.in_flight {
            InFlight::Alloc(off) => {
                if !held(off.0) && record.last(r.slot).load(Acquire) != off.0 {
                    t.free(off);
                    allocs += 1;
                }
            }
            InFlight::Free(off) => freed_by_recovery.push(off.0),
            InFlight::None => {}
        }
        record.last(r.slot).store(0, Release);
    }
    for i in 0..RECORDS {
        let r = record.record(i).load(Acquire);
        if r == 0 || !dead.contains(&owner_of(r)) {
            continue;
        }
        match state_of(r) {
            RESERVED => record.record(i).store(0, Release),
            UNSETTLED => record
                .record(i)
                .store(pack(offset_of(r), owner_of(r), SETTLED), Release),
            FREEING => {
                if !freed_by_recovery.contains(&offset_of(r)) {
                    t.free(Offset(offset_of(r)));
                }
                frees += 1;
                record.record(i).store(0, Release);
            }
            _ => {}
        }
    }
    Ok((allocs, frees))
}

/// The heap is valid and holds exactly the records' blocks, each stamped with its record.
fn verify(heap: &Heap, record: &Record) -> anyhow::Result<()> {
    let report = heap.check();
    ensure!(report.is_valid(), "heap invariants: {:?}", report.problems);
    let mut held = 0u64;
    for i in 0..RECORDS {
        let r = record.record(i).load(Acquire);
        if r == 0 {
            continue;
        }
        ensure!(
            state_of(r) == SETTLED,
            "record {i} left in state {}",
            state_of(r)
        );
        held += 1;
        // SAFETY: a block the record holds is allocated and at least 8 bytes.
        let stamp = unsafe { (heap.resolve(Offset(offset_of(r))) as *const u64).read_volatile() };
        ensure!(
            stamp == i as u64,
            "block {:#x} of record {i} carries the stamp of record {stamp}: handed out twice",
            offset_of(r)
        );
    }
    ensure!(
        report.live_blocks() == held,
        "the heap has {} live blocks, the records hold {held}: {}",
        report.live_blocks(),
        if report.live_blocks() > held {
            "leaked"
        } else {
            "lost"
        }
    );
    Ok(())
}

/// One worker process of `podkv heap chaos`.
pub fn worker(path: &Path, w: u64, workers: u64, seed: u64, floor: u64) -> anyhow::Result<()> {
    let heap = Heap::open(
        path,
        &Config {
            create: false,
            ..config()
        },
    )?;
    let record = Record::open(&record_path(path), false)?;
    let t = heap.thread()?;
    let mut rng = podkv_alloc::stress::Rng::new(seed);
    let w_idx = w as usize;
    let mut paused_epoch = 0;
    let run_delay = RunDelay::open()?;
    let mut x = seed;
    for _ in 0..floor {
        let waited = run_delay.read().unwrap_or(0);
        let cpu = thread_cpu_ns();
        let begin = Instant::now();
        for k in 0..64 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(k));
        }
        let ns = begin.elapsed().as_nanos() as u64;
        let cpu_ns = thread_cpu_ns().saturating_sub(cpu);
        let queued = run_delay.read().unwrap_or(0).saturating_sub(waited);
        record.count_latency(w_idx, PHASE_FLOOR, [ns, cpu_ns, ns.saturating_sub(queued)]);
    }
    loop {
        let epoch = record.pause().load(Acquire);
        if epoch % 2 == 1 {
            if epoch != paused_epoch {
                record.paused(w_idx).store(epoch, Release);
                paused_epoch = epoch;
            }
            std::thread::sleep(Duration::from_micros(100));
            continue;
        }
        if record.rest(w_idx).load(Acquire) != 0 {
            std::thread::sleep(Duration::from_micros(100));
            continue;
        }
        let Some(op) = choose(&record, &mut rng, w, workers) else {
            continue;
        };
        let (window, control) = (
            record.window().load(Acquire),
            record.control().load(Acquire),
        );
        // The readings nest around the operation so that the wall clock times it alone.
        let waited = run_delay.read().unwrap_or(0);
        let cpu = thread_cpu_ns();
        let calls = podkv_alloc::file::calls_on_this_thread();
        let begin = Instant::now();
        perform(&t, &record, op, w);
        let ns = begin.elapsed().as_nanos() as u64;
        let calls = podkv_alloc::file::calls_on_this_thread() - calls;
        let cpu_ns = thread_cpu_ns().saturating_sub(cpu);
        let queued = run_delay.read().unwrap_or(0).saturating_sub(waited);
        let phase = phase_of(
            [window, record.window().load(Acquire)],
            [control, record.control().load(Acquire)],
        );
        let ns = [ns, cpu_ns, ns.saturating_sub(queued)];
        record.count_latency(w_idx, phase, ns);
        record.count_calls(w_idx, phase, calls, ns);
        record.heartbeat(w_idx).fetch_add(1, Release);
    }
}

/// The phase of an operation from the window and control words read before and after it
/// (each odd while its window is open): a kill window if it overlapped one, else a control
/// window if it overlapped one, else calm.
fn phase_of(window: [u64; 2], control: [u64; 2]) -> usize {
    let overlapped = |[before, after]: [u64; 2]| before % 2 == 1 || after != before;
    if overlapped(window) {
        PHASE_WINDOW
    } else if overlapped(control) {
        PHASE_CONTROL
    } else {
        PHASE_CALM
    }
}

/// An operation of a worker's: allocate a block for a record it reserved, hand a block it
/// holds to a worker, or free one.
enum Op {
    Allocate { i: usize, size: usize },
    HandOver { i: usize, r: u64, to: u64 },
    Free { i: usize, r: u64 },
}

/// Draws the next operation: a random record, which the worker reserves if it is free (and the
/// draw says allocate) or acts on if it holds its block; `None` when there is nothing to do.
fn choose(record: &Record, rng: &mut podkv_alloc::stress::Rng, w: u64, workers: u64) -> Option<Op> {
    let i = rng.below(RECORDS as u64) as usize;
    let r = record.record(i).load(Acquire);
    let roll = rng.below(100);
    if r == 0 {
        if roll >= 60 {
            return None;
        }
        record
            .record(i)
            .compare_exchange(0, pack(0, w, RESERVED), AcqRel, Relaxed)
            .ok()?;
        let size = if rng.below(10) == 0 {
            2048 + rng.below(120 << 10) as usize
        } else {
            8 + rng.below(1000) as usize
        };
        Some(Op::Allocate { i, size })
    } else if owner_of(r) == w && state_of(r) == SETTLED {
        if roll < 50 {
            Some(Op::HandOver {
                i,
                r,
                to: rng.below(workers),
            })
        } else {
            Some(Op::Free { i, r })
        }
    } else {
        None
    }
}

/// Performs one operation.
fn perform(t: &ThreadHandle, record: &Record, op: Op, w: u64) {
    match op {
        Op::Allocate { i, size } => {
            record.last(t.slot_index()).store(0, Release);
            let off = t
                .allocate(Layout::from_size_align(size, 8).expect("layout"))
                .expect("chaos heap exhausted");
            // SAFETY: a fresh block of at least 8 bytes.
            unsafe { (t.resolve(off) as *mut u64).write_volatile(i as u64) };
            record.record(i).store(pack(off.0, w, UNSETTLED), Release);
            record.last(t.slot_index()).store(off.0, Release);
            record.record(i).store(pack(off.0, w, SETTLED), Release);
        }
        Op::HandOver { i, r, to } => {
            let _ = record.record(i).compare_exchange(
                r,
                pack(offset_of(r), to, SETTLED),
                AcqRel,
                Relaxed,
            );
        }
        Op::Free { i, r } => {
            // SAFETY: a block this worker holds.
            let stamp = unsafe { (t.resolve(Offset(offset_of(r))) as *const u64).read_volatile() };
            assert_eq!(stamp, i as u64, "block of record {i} overwritten");
            record
                .record(i)
                .store(pack(offset_of(r), w, FREEING), Release);
            t.free(Offset(offset_of(r)));
            record.record(i).store(0, Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_latency_falls_in_a_bucket_whose_top_is_within_3_percent_above_it() {
        let mut v = 0u64;
        while v < 1 << 42 {
            let b = bucket(v);
            let high = bucket_high(b);
            assert!(high >= v, "{v} in bucket {b} topped at {high}");
            assert!(high - v <= v / 32, "{v}: bucket top {high} too far");
            assert_eq!(bucket(high), b, "top of bucket {b}");
            if b > 0 {
                assert!(bucket_high(b - 1) < v, "{v} belongs lower than {b}");
            }
            v = v + 1 + v / 7;
        }
        assert!(bucket(1 << 42) < BUCKETS);
    }

    #[test]
    fn an_operation_counts_in_the_window_it_overlapped() {
        let cases = [
            ([2, 2], [4, 4], PHASE_CALM, "no window"),
            ([3, 3], [4, 4], PHASE_WINDOW, "inside a kill window"),
            ([2, 3], [4, 4], PHASE_WINDOW, "a kill window opened"),
            ([3, 4], [4, 4], PHASE_WINDOW, "a kill window closed"),
            ([2, 4], [4, 4], PHASE_WINDOW, "a whole kill window"),
            ([2, 2], [5, 5], PHASE_CONTROL, "inside a control window"),
            ([2, 2], [4, 5], PHASE_CONTROL, "a control window opened"),
            ([2, 2], [5, 6], PHASE_CONTROL, "a control window closed"),
            ([2, 3], [5, 6], PHASE_WINDOW, "both: the kill's"),
        ];
        for (window, control, phase, what) in cases {
            assert_eq!(phase_of(window, control), phase, "{what}");
        }
    }

    #[test]
    fn every_word_of_the_record_belongs_to_one_field() {
        let mut owner = vec![None; Record::LEN];
        let mut claim = |i: usize, what: String| {
            assert!(i < Record::LEN, "{what} at {i} is past the record");
            if let Some(other) = owner[i].replace(what.clone()) {
                panic!("{what} and {other} share word {i}");
            }
        };
        // A record over plain memory, only to compute the fields' places.
        let words: &'static [AtomicU64] =
            Box::leak((0..Record::LEN).map(|_| AtomicU64::new(0)).collect());
        let r = Record { words };
        let at = |word: &AtomicU64| word.as_ptr() as usize;
        let offset = |word: &AtomicU64, r: &Record| (at(word) - at(&r.words[0])) / 8;
        for w in 0..WORKERS_MAX {
            claim(offset(r.heartbeat(w), &r), format!("heartbeat {w}"));
            claim(offset(r.paused(w), &r), format!("paused {w}"));
            claim(offset(r.rest(w), &r), format!("rest {w}"));
            for phase in 0..PHASES {
                for release in [false, true] {
                    let word = r.calls(w, phase, release);
                    claim(offset(word, &r), format!("calls {w} {phase} {release}"));
                }
                for measure in 0..MEASURES {
                    let word = r.quiet_max(w, measure, phase);
                    claim(offset(word, &r), format!("quiet {w} {measure} {phase}"));
                    let h = r.histogram(w, measure, phase);
                    for (b, word) in h.iter().enumerate() {
                        claim(
                            offset(word, &r),
                            format!("histogram {w} {measure} {phase} {b}"),
                        );
                    }
                }
            }
            if w == 0 {
                claim(offset(r.pause(), &r), "pause".into());
                claim(offset(r.window(), &r), "window".into());
                claim(offset(r.control(), &r), "control".into());
            }
        }
    }

    #[test]
    fn quantiles_come_from_the_summed_counts_and_never_exceed_the_maximum() {
        let mut counts = vec![0u64; BUCKETS];
        counts[bucket(500)] = 998;
        counts[bucket(40_000)] = 1;
        counts[bucket(900_000)] = 1;
        let d = Distribution {
            counts,
            max: 900_000,
        };
        assert_eq!(d.len(), 1000);
        assert_eq!(d.quantile(0.5), bucket_high(bucket(500)));
        assert_eq!(d.quantile(0.999), bucket_high(bucket(40_000)));
        assert_eq!(d.quantile(1.0), 900_000);
        assert_eq!(d.above(500), 2);
        assert_eq!(d.per_million_above(500), 2000.0);
        assert_eq!(d.per_million_above(40_000), 1000.0);
        assert_eq!(d.per_million_above(900_000), 0.0);
    }
}
