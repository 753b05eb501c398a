//! The coordinator of `podkv heap chaos`: it starts the workers, and each round opens a kill
//! window and a control window in random order, then pauses the living, settles the dead
//! worker's records, checks the heap against the record, and restarts the dead worker.

use super::record::{
    offset_of, owner_of, pack, state_of, Record, FREEING, RECORDS, RESERVED, SETTLED, UNSETTLED,
    WORKERS_MAX,
};
use super::report::{self, Observed};
use super::ChaosArgs;
use anyhow::{bail, ensure, Context};
use podkv_alloc::stress::Rng;
use podkv_alloc::{Config, Heap, InFlight, Offset, Recovered};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::atomic::Ordering::*;
use std::time::{Duration, Instant};

/// Runs the chaos test and prints what it found; an error names the first violation.
pub(super) fn run(args: &ChaosArgs) -> anyhow::Result<()> {
    ensure!(
        (2..=WORKERS_MAX as u32).contains(&args.processes),
        "--processes must be 2..={WORKERS_MAX}"
    );
    let mut chaos = Coordinator::start(args)?;
    chaos.wait_started()?;
    let start = Instant::now();
    for round in 0..args.kills {
        chaos.round(round)?;
        if args.kills >= 20 && (round + 1) % (args.kills / 10) == 0 {
            eprintln!(
                "chaos: {}/{} kills, {:.1} s",
                round + 1,
                args.kills,
                start.elapsed().as_secs_f64()
            );
        }
    }
    chaos.finish()?;
    report::print(args, &chaos.record, &chaos.observed, start.elapsed());
    Record::remove(&args.path);
    Ok(())
}

/// The coordinator's state across rounds.
struct Coordinator<'a> {
    args: &'a ChaosArgs,
    heap: Heap,
    record: Record,
    exe: PathBuf,
    rng: Rng,
    children: Workers,
    /// How long the last kill window lasted: the next control window lasts as long.
    window_len: Duration,
    observed: Observed,
}

impl<'a> Coordinator<'a> {
    /// Creates the heap and the record, and starts every worker.
    fn start(args: &'a ChaosArgs) -> anyhow::Result<Self> {
        let _ = std::fs::remove_file(&args.path);
        let fresh = Config {
            coherence: args.coherence,
            mcas: args.mcas_impl,
            ..super::config()
        };
        let heap = Heap::open(&args.path, &fresh)?;
        let record = Record::open(&args.path, true)?;
        let mut chaos = Coordinator {
            args,
            heap,
            record,
            exe: std::env::current_exe()?,
            rng: Rng::new(args.seed),
            children: Workers(Vec::new()),
            window_len: Duration::from_millis(args.dead_ms),
            observed: Observed::default(),
        };
        for w in 0..args.processes {
            let child = chaos.spawn(w, args.seed * 1000 + u64::from(w), args.floor_timings)?;
            chaos.children.0.push(child);
        }
        Ok(chaos)
    }

    /// Starts worker `w` with `seed`, timing the machine's floor `floor` times first.
    fn spawn(&self, w: u32, seed: u64, floor: u64) -> anyhow::Result<Child> {
        Ok(Command::new(&self.exe)
            .args(["heap", "chaos-worker"])
            .arg(&self.args.path)
            .args(["--worker", &w.to_string()])
            .args(["--workers", &self.args.processes.to_string()])
            .args(["--seed", &seed.to_string()])
            .args(["--floor", &floor.to_string()])
            .spawn()?)
    }

    /// Waits until every worker works (after timing the floor: a few µs a timing, 50 allowed).
    fn wait_started(&self) -> anyhow::Result<()> {
        let start_within =
            Duration::from_secs(30) + Duration::from_micros(50 * self.args.floor_timings);
        for w in 0..self.args.processes as usize {
            let deadline = Instant::now() + start_within;
            while self.record.heartbeat(w).load(Acquire) == 0 {
                ensure!(
                    Instant::now() < deadline,
                    "worker {w} did not start working in {start_within:?}"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        Ok(())
    }

    /// One round: a kill window and a control window, then settle, check and restart.
    fn round(&mut self, round: u32) -> anyhow::Result<()> {
        let args = self.args;
        let victim = self.rng.below(u64::from(args.processes)) as usize;
        let living: Vec<usize> = (0..args.processes as usize)
            .filter(|&w| w != victim)
            .collect();
        // Two windows a round, in random order, each after a random wait: the kill window
        // (from the kill until the dead slots are recovered, the living work on, and each of
        // them must finish operations while the dead slots are unrecovered), and the control
        // window (the kill window's A/A control: nobody is killed, the victim only rests or
        // stays dead and recovered, for as long as the last kill window lasted).
        let control_first = self.rng.below(2) == 0;
        let mut recovered = Vec::new();
        for kill in [!control_first, control_first] {
            std::thread::sleep(Duration::from_micros(
                500 + self.rng.below(args.round_ms.max(2) * 500),
            ));
            if kill {
                recovered = self.kill_window(round, victim, &living)?;
            } else {
                self.control_window(round, victim, &living)?;
            }
        }
        self.pause_living(round, victim)?;
        let observed = &mut self.observed;
        observed
            .recoveries
            .extend(recovered.iter().map(|r| (r.took, r.took_cpu)));
        let (allocs, frees) = settle(&self.heap, &self.record, &[victim as u64], &recovered)?;
        observed.settled_allocs += allocs;
        observed.settled_frees += frees;
        verify(&self.heap, &self.record)
            .with_context(|| format!("round {round}, after killing worker {victim}"))?;
        self.restart(round, victim)
    }

    /// The control window: the victim rests for as long as the last kill window lasted, and
    /// each of the living must finish operations meanwhile.
    fn control_window(
        &mut self,
        round: u32,
        victim: usize,
        living: &[usize],
    ) -> anyhow::Result<()> {
        let record = &self.record;
        let opened = Instant::now();
        record.rest(victim).store(1, Release);
        record.control().fetch_add(1, AcqRel);
        let beats = heartbeats(record, living);
        std::thread::sleep(self.window_len);
        let done = progress(record, living, &beats)
            .with_context(|| format!("round {round}, while worker {victim} rested"))?;
        record.control().fetch_add(1, AcqRel);
        record.rest(victim).store(0, Release);
        self.observed.control_time += opened.elapsed();
        self.observed.control_beats.push(done);
        Ok(())
    }

    /// The kill window: the victim is killed, its slots stay unrecovered for `--dead-ms` while
    /// each of the living must finish operations, then they are recovered.
    fn kill_window(
        &mut self,
        round: u32,
        victim: usize,
        living: &[usize],
    ) -> anyhow::Result<Vec<Recovered>> {
        let record = &self.record;
        let opened = Instant::now();
        record.window().fetch_add(1, AcqRel);
        let child = &mut self.children.0[victim];
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        child.wait()?;
        let beats = heartbeats(record, living);
        std::thread::sleep(Duration::from_millis(self.args.dead_ms));
        let done = progress(record, living, &beats)
            .with_context(|| format!("round {round}, while worker {victim} was dead"))?;
        let recovered = self.heap.recover_dead();
        record.window().fetch_add(1, AcqRel);
        self.window_len = opened.elapsed();
        self.observed.window_time += self.window_len;
        self.observed.window_beats.push(done);
        Ok(recovered)
    }

    /// Pauses the living at a safe point; a worker that does not get there in time stalled.
    fn pause_living(&mut self, round: u32, victim: usize) -> anyhow::Result<()> {
        let epoch = self.record.pause().fetch_add(1, AcqRel) + 1;
        for w in (0..self.args.processes as usize).filter(|&w| w != victim) {
            let deadline = Instant::now() + Duration::from_secs(10);
            while self.record.paused(w).load(Acquire) != epoch {
                if let Ok(Some(status)) = self.children.0[w].try_wait() {
                    bail!("round {round}: worker {w} exited: {status}");
                }
                ensure!(
                    Instant::now() < deadline,
                    "round {round}: worker {w} stalled (no safe point in 10 s)"
                );
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        Ok(())
    }

    /// Restarts the victim and lets everyone go on; the next round starts once the restarted
    /// worker works (so every kill hits one).
    fn restart(&mut self, round: u32, victim: usize) -> anyhow::Result<()> {
        let seed = self.args.seed * 1000 + u64::from(round) * 64 + victim as u64;
        self.children.0[victim] = self.spawn(victim as u32, seed, 0)?;
        let beat = self.record.heartbeat(victim).load(Acquire);
        self.record.pause().fetch_add(1, AcqRel);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.record.heartbeat(victim).load(Acquire) == beat {
            ensure!(
                Instant::now() < deadline,
                "round {round}: restarted worker {victim} did not start working in 10 s"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
        Ok(())
    }

    /// Stops everyone, recovers, settles, and drains the table: the heap must end empty.
    fn finish(&mut self) -> anyhow::Result<()> {
        for child in self.children.0.iter_mut() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
            child.wait()?;
        }
        let (heap, record) = (&self.heap, &self.record);
        let recovered = heap.recover_dead();
        let everyone: Vec<u64> = (0..u64::from(self.args.processes)).collect();
        let (allocs, frees) = settle(heap, record, &everyone, &recovered)?;
        self.observed.settled_allocs += allocs;
        self.observed.settled_frees += frees;
        verify(heap, record)?;
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
        Ok(())
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
    recovered: &[Recovered],
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
