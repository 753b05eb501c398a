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
//! - per worker: a heartbeat (operations done), a pause acknowledgement, its op-latency maximum,
//!   and its latency figures (below);
//! - the window word: odd from a kill until the dead process's slots are recovered.
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
//!    stalled on the dead one); the slowest operation any live worker saw is reported.
//!
//! # Latency while a process is dead and recovered (nobody blocks)
//! The living are not paused for the kill or the recovery: the coordinator kills, leaves the
//! dead slots unrecovered for `--dead-ms` while the others work on, then recovers them, and
//! only then pauses everyone to settle and check. Each worker times every operation (wall
//! clock and its thread's CPU time) into one of two histograms: operations that overlapped a
//! kill-to-recovery window, and the others. The run reports, over the live workers, the
//! slowest window operation against the normal p99.9, and fails if a window passed in which
//! no live worker finished an operation.

use anyhow::{bail, ensure, Context};
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
/// Words per worker in the record file.
const FIELDS: usize = 10;
/// Latency figures per worker (ns): normal p99.9 wall and CPU, window maximum wall and CPU,
/// operations that overlapped a window, normal maximum wall and CPU.
const LAT_CALM_P999: usize = 0;
const LAT_CALM_CPU_P999: usize = 1;
const LAT_WINDOW_MAX: usize = 2;
const LAT_WINDOW_CPU_MAX: usize = 3;
const LAT_WINDOW_OPS: usize = 4;
const LAT_CALM_MAX: usize = 5;
const LAT_CALM_CPU_MAX: usize = 6;

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
}

/// The shared record file.
struct Record {
    words: &'static [AtomicU64],
}

impl Record {
    const LEN: usize = RECORDS + SLOTS_MAX + FIELDS * WORKERS_MAX + 8;

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
        &self.words[RECORDS + SLOTS_MAX + FIELDS * w + field]
    }
    fn heartbeat(&self, w: usize) -> &AtomicU64 {
        self.worker(w, 0)
    }
    fn paused(&self, w: usize) -> &AtomicU64 {
        self.worker(w, 1)
    }
    fn max_latency_ns(&self, w: usize) -> &AtomicU64 {
        self.worker(w, 2)
    }
    /// A worker's latency figure `which` (`LAT_*`), published at each pause.
    fn latency(&self, w: usize, which: usize) -> &AtomicU64 {
        self.worker(w, 3 + which)
    }
    /// The pause epoch: odd while the coordinator wants everyone paused.
    fn pause(&self) -> &AtomicU64 {
        &self.words[RECORDS + SLOTS_MAX + FIELDS * WORKERS_MAX]
    }
    /// The window: odd from a kill until the dead process's slots are recovered.
    fn window(&self) -> &AtomicU64 {
        &self.words[RECORDS + SLOTS_MAX + FIELDS * WORKERS_MAX + 1]
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
    let spawn = |w: u32, seed: u64| -> anyhow::Result<Child> {
        Ok(Command::new(&exe)
            .args(["heap", "chaos-worker"])
            .arg(&args.path)
            .args(["--worker", &w.to_string()])
            .args(["--workers", &args.processes.to_string()])
            .args(["--seed", &seed.to_string()])
            .spawn()?)
    };
    let mut rng = podkv_alloc::stress::Rng::new(args.seed);
    let mut children = Workers(
        (0..args.processes)
            .map(|w| spawn(w, args.seed * 1000 + u64::from(w)))
            .collect::<Result<_, _>>()?,
    );
    let children = &mut children.0;
    // Start once every worker works.
    for w in 0..args.processes as usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        while record.heartbeat(w).load(Acquire) == 0 {
            ensure!(
                Instant::now() < deadline,
                "worker {w} did not start working in 30 s"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let mut recoveries = Vec::new();
    let mut settled_allocs = 0u64;
    let mut settled_frees = 0u64;
    let mut max_latency_live = 0u64;
    let mut latency = [0u64; 7];
    let mut window_beats = Vec::new();
    let start = Instant::now();
    for round in 0..args.kills {
        std::thread::sleep(Duration::from_micros(
            1000 + rng.below(args.round_ms.max(2) * 1000),
        ));
        let victim = rng.below(u64::from(args.processes)) as usize;
        // The window: from the kill until the dead slots are recovered, the living work on,
        // and each of them must finish operations while the dead slots are unrecovered.
        let living: Vec<usize> = (0..args.processes as usize)
            .filter(|&w| w != victim)
            .collect();
        record.window().fetch_add(1, AcqRel);
        // SAFETY: signalling our own child.
        unsafe { libc::kill(children[victim].id() as i32, libc::SIGKILL) };
        children[victim].wait()?;
        let dead_beats: Vec<u64> = living
            .iter()
            .map(|&w| record.heartbeat(w).load(Acquire))
            .collect();
        std::thread::sleep(Duration::from_millis(args.dead_ms));
        let deadline = Instant::now() + Duration::from_secs(10);
        for (&w, &beat) in living.iter().zip(&dead_beats) {
            while record.heartbeat(w).load(Acquire) == beat {
                ensure!(
                    Instant::now() < deadline,
                    "round {round}: worker {w} finished no operation in 10 s while worker {victim} was dead"
                );
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        let done: u64 = living
            .iter()
            .zip(&dead_beats)
            .map(|(&w, &beat)| record.heartbeat(w).load(Acquire) - beat)
            .sum();
        let recovered = heap.recover_dead();
        record.window().fetch_add(1, AcqRel);
        window_beats.push(done);
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
            max_latency_live = max_latency_live.max(record.max_latency_ns(w).load(Acquire));
            for (which, figure) in latency.iter_mut().enumerate() {
                *figure = (*figure).max(record.latency(w, which).load(Acquire));
            }
        }
        recoveries.extend(recovered.iter().map(|r| r.took));
        let (allocs, frees) = settle(&heap, &record, &[victim as u64], &recovered)?;
        settled_allocs += allocs;
        settled_frees += frees;
        verify(&heap, &record)
            .with_context(|| format!("round {round}, after killing worker {victim}"))?;
        children[victim] = spawn(
            victim as u32,
            args.seed * 1000 + u64::from(round) * 64 + victim as u64,
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
    recoveries.sort();
    let pct = |p: f64| recoveries[((recoveries.len() - 1) as f64 * p) as usize];
    println!(
        "chaos: {} kills of {} processes in {:.1} s: no leak, no loss, no double free; {} untaken allocations and {} unfinished frees settled",
        args.kills,
        args.processes,
        start.elapsed().as_secs_f64(),
        settled_allocs,
        settled_frees
    );
    println!(
        "recovery of one dead slot ({} recoveries): median {:.1} µs, p99 {:.1} µs, max {:.1} µs; slowest live operation during the rounds {:.2} ms",
        recoveries.len(),
        pct(0.5).as_secs_f64() * 1e6,
        pct(0.99).as_secs_f64() * 1e6,
        pct(1.0).as_secs_f64() * 1e6,
        max_latency_live as f64 / 1e6
    );
    window_beats.sort_unstable();
    let us = |ns: u64| ns as f64 / 1e3;
    println!(
        "while a process was dead and recovered ({} ms or more, then recovery; {} windows): every live worker kept finishing operations ({} to {} per window, median {}); slowest overlapping operation {:.1} µs wall, {:.1} µs CPU, against a normal p99.9 of {:.1} µs wall, {:.1} µs CPU and a normal maximum of {:.1} µs wall, {:.1} µs CPU ({} window operations)",
        args.dead_ms,
        window_beats.len(),
        window_beats.first().copied().unwrap_or(0),
        window_beats.last().copied().unwrap_or(0),
        window_beats.get(window_beats.len() / 2).copied().unwrap_or(0),
        us(latency[LAT_WINDOW_MAX]),
        us(latency[LAT_WINDOW_CPU_MAX]),
        us(latency[LAT_CALM_P999]),
        us(latency[LAT_CALM_CPU_P999]),
        us(latency[LAT_CALM_MAX]),
        us(latency[LAT_CALM_CPU_MAX]),
        latency[LAT_WINDOW_OPS],
    );
    let _ = std::fs::remove_file(record_path(&args.path));
    Ok(())
}

/// This thread's CPU time in ns.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One worker's operation latencies: normal, and overlapping a kill-to-recovery window.
struct Latencies {
    calm: [hdrhistogram::Histogram<u64>; 2],
    window: [hdrhistogram::Histogram<u64>; 2],
}

impl Latencies {
    fn new() -> Latencies {
        let h =
            || hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("bounds");
        Latencies {
            calm: [h(), h()],
            window: [h(), h()],
        }
    }

    fn record(&mut self, in_window: bool, wall_ns: u64, cpu_ns: u64) {
        let to = if in_window {
            &mut self.window
        } else {
            &mut self.calm
        };
        to[0].saturating_record(wall_ns);
        to[1].saturating_record(cpu_ns);
    }

    fn publish(&self, record: &Record, w: usize) {
        let figures = [
            (LAT_CALM_P999, self.calm[0].value_at_quantile(0.999)),
            (LAT_CALM_CPU_P999, self.calm[1].value_at_quantile(0.999)),
            (LAT_WINDOW_MAX, self.window[0].max()),
            (LAT_WINDOW_CPU_MAX, self.window[1].max()),
            (LAT_WINDOW_OPS, self.window[0].len()),
            (LAT_CALM_MAX, self.calm[0].max()),
            (LAT_CALM_CPU_MAX, self.calm[1].max()),
        ];
        for (which, value) in figures {
            record.latency(w, which).store(value, Release);
        }
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
pub fn worker(path: &Path, w: u64, workers: u64, seed: u64) -> anyhow::Result<()> {
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
    let mut latencies = Latencies::new();
    loop {
        let epoch = record.pause().load(Acquire);
        if epoch % 2 == 1 {
            if epoch != paused_epoch {
                latencies.publish(&record, w_idx);
                record.paused(w_idx).store(epoch, Release);
                paused_epoch = epoch;
            }
            std::thread::sleep(Duration::from_micros(100));
            continue;
        }
        let window = record.window().load(Acquire);
        let (begin, cpu) = (Instant::now(), thread_cpu_ns());
        step(&t, &record, &mut rng, w, workers);
        let ns = begin.elapsed().as_nanos() as u64;
        let cpu_ns = thread_cpu_ns().saturating_sub(cpu);
        let in_window = window % 2 == 1 || record.window().load(Acquire) != window;
        latencies.record(in_window, ns, cpu_ns);
        record.max_latency_ns(w_idx).fetch_max(ns, Relaxed);
        record.heartbeat(w_idx).fetch_add(1, Release);
    }
}

/// One random operation: allocate, free or hand over.
fn step(
    t: &ThreadHandle,
    record: &Record,
    rng: &mut podkv_alloc::stress::Rng,
    w: u64,
    workers: u64,
) {
    let i = rng.below(RECORDS as u64) as usize;
    let r = record.record(i).load(Acquire);
    let roll = rng.below(100);
    if r == 0 {
        if roll >= 60 {
            return;
        }
        if record
            .record(i)
            .compare_exchange(0, pack(0, w, RESERVED), AcqRel, Relaxed)
            .is_err()
        {
            return;
        }
        let size = if rng.below(10) == 0 {
            2048 + rng.below(120 << 10) as usize
        } else {
            8 + rng.below(1000) as usize
        };
        record.last(t.slot_index()).store(0, Release);
        let off = t
            .allocate(Layout::from_size_align(size, 8).expect("layout"))
            .expect("chaos heap exhausted");
        // SAFETY: a fresh block of at least 8 bytes.
        unsafe { (t.resolve(off) as *mut u64).write_volatile(i as u64) };
        record.record(i).store(pack(off.0, w, UNSETTLED), Release);
        record.last(t.slot_index()).store(off.0, Release);
        record.record(i).store(pack(off.0, w, SETTLED), Release);
    } else if owner_of(r) == w && state_of(r) == SETTLED {
        if roll < 50 {
            let to = rng.below(workers);
            let _ = record.record(i).compare_exchange(
                r,
                pack(offset_of(r), to, SETTLED),
                AcqRel,
                Relaxed,
            );
        } else {
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
