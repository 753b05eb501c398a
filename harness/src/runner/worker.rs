//! One process of a run: its target, its workers' sources, one pinned thread per worker,
//! and what it measured.
//!
//! Every worker thread goes through the phases in order: untimed set-up, `ready`, wait
//! for `go`, run its source to the end (or to `stop` in the timed phase), `done` (see
//! [`super::control`]). Only the last phase is timed.

use super::ab::Windows;
use super::control::{Control, COUNT_OPS_PER_PROGRESS};
use super::cpus::{allowed_cpus, pin_to};
use super::metrics::{ticks, Recorder, Tally};
use super::pacing::{Pacing, Schedule};
use super::report::{CoherenceOps, ProcessReport};
use super::source::{Source, TraceShare, Values};
use super::spec::{Job, RunSpec};
use super::targets::kv::KvTarget;
use super::targets::paired::Paired;
use super::targets::store::StoreTarget;
use super::targets::{null::NullTarget, Outcome, Session, Target, TargetSpec};
use crate::process_stats;
use podkv_hw::swcc::Counts;
use podkv_traces::Partitioner;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

/// Runs process `process` of `spec`; any failure also raises `failed` in the control block.
pub fn run_process(spec: &RunSpec, ctl: &Control, process: usize) -> anyhow::Result<ProcessReport> {
    let result = match &spec.job {
        Job::Bench(job) => crate::bench::process::worker_process(spec, job, ctl, process),
        Job::Ycsb(_) | Job::Replay { .. } => run_target(spec, ctl, process),
    };
    if result.is_err() {
        ctl.failed.store(1, Ordering::Release);
    }
    result
}

fn run_target(spec: &RunSpec, ctl: &Control, process: usize) -> anyhow::Result<ProcessReport> {
    match &spec.target {
        TargetSpec::Null => run_sources(spec, ctl, process, &NullTarget),
        TargetSpec::Dashmap => {
            let target = KvTarget(podkv_store::DashBaseline::new());
            run_sources(spec, ctl, process, &target)
        }
        TargetSpec::Mimalloc => run_sources(
            spec,
            ctl,
            process,
            &StoreTarget::local(&spec.store_config())?,
        ),
        TargetSpec::Embedded { heap } => {
            let config = spec.store_config();
            let target = StoreTarget::open(heap, &config)?;
            match &spec.ab_heap {
                None => run_sources(spec, ctl, process, &target),
                Some(other) => {
                    let b = StoreTarget::open(other, &config)?;
                    run_sources(spec, ctl, process, &Paired { a: target, b })
                }
            }
        }
        TargetSpec::Boost { segment, bytes } => {
            let config = spec.store_config();
            run_sources(
                spec,
                ctl,
                process,
                &StoreTarget::boost(segment, *bytes, &config)?,
            )
        }
        TargetSpec::Memcached {
            servers,
            timeout_ms,
        } => {
            let timeout = timeout_ms.map(std::time::Duration::from_millis);
            let target = crate::runner::memcached::MemcachedTarget::new(servers.clone(), timeout);
            run_sources(spec, ctl, process, &target)
        }
    }
}

/// This process's workers, as global indices.
fn workers_of(spec: &RunSpec, process: usize) -> Range<usize> {
    process * spec.threads..(process + 1) * spec.threads
}

fn run_sources<T: Target>(
    spec: &RunSpec,
    ctl: &Control,
    process: usize,
    target: &T,
) -> anyhow::Result<ProcessReport> {
    let part = workers_of(spec, process);
    match &spec.job {
        Job::Ycsb(job) => {
            let workload = job.args().workload()?;
            let mut per_thread: Vec<Vec<podkv_ycsb::OpStream>> =
                (0..spec.threads).map(|_| Vec::new()).collect();
            for &phase in &job.phases() {
                let streams = podkv_ycsb::OpStream::streams_part(
                    &workload,
                    phase,
                    spec.workers(),
                    part.clone(),
                )?;
                for (t, s) in streams.into_iter().enumerate() {
                    per_thread[t].push(s);
                }
            }
            run_threads(spec, ctl, process, target, per_thread)
        }
        Job::Replay { trace } => {
            let paced = matches!(spec.pacing, Pacing::Timestamps { .. });
            let (shares, origin) = read_shares(trace, spec.workers(), part)?;
            let per_thread = shares
                .into_iter()
                .map(|r| vec![TraceShare::new(r, paced.then_some(origin))])
                .collect();
            run_threads(spec, ctl, process, target, per_thread)
        }
        Job::Bench(_) => unreachable!("run_process runs benchmarks in crate::bench::process"),
    }
}

/// Reads the trace once and keeps the requests of this process's workers, in order; also
/// the trace's first timestamp (every worker's pace starts from it).
fn read_shares(
    trace: &std::path::Path,
    workers: usize,
    part: Range<usize>,
) -> anyhow::Result<(Vec<Vec<podkv_traces::Request>>, u64)> {
    let partitioner = Partitioner::new(workers)?;
    let mut shares: Vec<Vec<podkv_traces::Request>> = part.clone().map(|_| Vec::new()).collect();
    let mut origin = None;
    for request in podkv_traces::requests(trace)? {
        let request = request?;
        origin.get_or_insert(request.timestamp);
        let w = partitioner.worker_of(request.key.as_bytes());
        if part.contains(&w) {
            shares[w - part.start].push(request);
        }
    }
    Ok((shares, origin.unwrap_or(0)))
}

fn run_threads<T: Target, S: Source + Send>(
    spec: &RunSpec,
    ctl: &Control,
    process: usize,
    target: &T,
    per_thread: Vec<Vec<S>>,
) -> anyhow::Result<ProcessReport> {
    let kinds = spec.job.kind_names().len();
    let timed = spec.job.phase_count() - 1;
    let cpus = allowed_cpus();
    let first = process * spec.threads;
    let sampling = AtomicBool::new(false);
    let (tallies, faults, pss_samples) = std::thread::scope(|s| {
        let sampler = s.spawn(|| process_stats::sample_pss(&sampling));
        let handles: Vec<_> = per_thread
            .into_iter()
            .enumerate()
            .map(|(t, sources)| {
                let cpus = &cpus;
                s.spawn(move || {
                    let w = first + t;
                    if spec.pin && !cpus.is_empty() {
                        pin_to(cpus[w % cpus.len()]);
                    }
                    let result = run_worker(spec, target, ctl, w, sources, timed);
                    if result.is_err() {
                        ctl.failed.store(1, Ordering::Release);
                    }
                    result
                })
            })
            .collect();
        // Raised however this closure ends (a worker's panic too), so the sampler returns.
        let stop_sampling = RaiseOnDrop(&sampling);
        let faults = ctl.wait_for(&ctl.go[timed], 1).map(|()| {
            let mcas = target.mcas_ops();
            (
                process_stats::minor_faults(),
                process_stats::monotonic_ns(),
                mcas,
            )
        });
        let tallies: Vec<anyhow::Result<(Tally, Counts)>> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect();
        drop(stop_sampling);
        let samples = sampler
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        (tallies, faults, samples)
    });
    let (faults, timed_from_ns, mcas_from) = faults?;
    let (tally, swcc) = merge_workers(kinds, tallies)?;
    let coherence = target
        .mcas_ops()
        .zip(mcas_from)
        .map(|(now, from)| CoherenceOps {
            writebacks: swcc.lines_written_back,
            invalidations: swcc.lines_invalidated,
            mcas: now.saturating_sub(from),
        });
    Ok(ProcessReport {
        process,
        tally: tally.to_wire(),
        pss_bytes: process_stats::pss_bytes(),
        page_faults: process_stats::minor_faults().saturating_sub(faults),
        hwcc_bytes: target.hwcc_bytes(),
        coherence,
        servers: target.server_tallies(),
        pss_samples,
        timed_from_ns,
        server_version: target.server_version(),
    })
}

/// The process's tally and coherence counts: its workers' merged (the first worker's error
/// if any failed).
fn merge_workers(
    kinds: usize,
    workers: Vec<anyhow::Result<(Tally, Counts)>>,
) -> anyhow::Result<(Tally, Counts)> {
    let mut tally = Tally::new(kinds);
    let mut swcc = Counts::default();
    for worker in workers {
        let (t, counts) = worker?;
        tally.merge(&t);
        swcc.lines_written_back += counts.lines_written_back;
        swcc.lines_invalidated += counts.lines_invalidated;
    }
    Ok((tally, swcc))
}

/// Raises its flag when dropped.
struct RaiseOnDrop<'a>(&'a AtomicBool);

impl Drop for RaiseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// One worker thread: every phase in order (only the timed one paced; the run's first
/// worker, `w == 0`, settles the target before it, once every worker is done with the
/// untimed load); returns the timed phase's tally and what this thread's SWcc rules did
/// during it.
fn run_worker<T: Target, S: Source>(
    spec: &RunSpec,
    target: &T,
    ctl: &Control,
    w: usize,
    sources: Vec<S>,
    timed: usize,
) -> anyhow::Result<(Tally, Counts)> {
    let kinds = spec.job.kind_names().len();
    let mut session = target.session(w)?;
    let mut swcc = Counts::default();
    let mut values = Values::default();
    let mut tally = Tally::new(kinds);
    for (phase, source) in sources.into_iter().enumerate() {
        if phase == timed && w == 0 {
            // After every worker's last operation of the load: the settling is theirs too.
            if phase > 0 {
                ctl.wait_for(&ctl.done[phase - 1], spec.workers() as u64)?;
            }
            session.settle()?;
        }
        ctl.start_line(phase)?;
        let stoppable = phase == timed;
        let swcc_from = podkv_hw::swcc::counts();
        let at = Loop {
            ctl,
            w,
            kinds,
            stoppable,
        };
        let recorder = if stoppable && spec.pacing.is_open() {
            let schedule = Schedule::start(&spec.pacing, spec.workers());
            run_source_paced(source, &mut session, &mut values, at, &schedule)?
        } else {
            match spec.ab_window_ticks.filter(|_| stoppable) {
                Some(ticks) => {
                    let sides = Windowed {
                        windows: Windows::new(ticks),
                        set: 0,
                    };
                    let recorder = run_source(source, &mut session, &mut values, at, sides);
                    podkv_hw::ab::set(false);
                    session.direct(None);
                    recorder?
                }
                None => run_source(source, &mut session, &mut values, at, NoSides)?,
            }
        };
        ctl.finish_line(phase);
        if phase == timed {
            tally = recorder.into_tally();
            swcc = podkv_hw::swcc::counts().since(swcc_from);
        }
    }
    Ok((tally, swcc))
}

/// Publishes a timed loop's count every [`COUNT_OPS_PER_PROGRESS`] operations; true when the
/// loop is to stop there (`stoppable`: the timed phase, which `--duration` may end).
#[inline(always)]
fn progress(ctl: &Control, w: usize, done: u64, stoppable: bool) -> bool {
    if done % COUNT_OPS_PER_PROGRESS != 0 {
        return false;
    }
    ctl.progress[w].store(done, Ordering::Relaxed);
    stoppable && ctl.stop.load(Ordering::Relaxed) != 0
}

/// Ends a timed loop: stops its clock, publishes its count, finishes its source.
fn end_loop<S: Source>(
    mut recorder: Recorder,
    source: S,
    ctl: &Control,
    w: usize,
    done: u64,
) -> anyhow::Result<Recorder> {
    recorder.stop();
    ctl.progress[w].store(done, Ordering::Relaxed);
    source.finish()?;
    Ok(recorder)
}

/// Where a timed loop runs: its control block, its worker, the operation kinds, and whether
/// the control block may stop it (the timed phase).
#[derive(Clone, Copy)]
struct Loop<'c> {
    ctl: &'c Control,
    w: usize,
    kinds: usize,
    stoppable: bool,
}

/// What [`run_source`] tells apart in each operation besides its kind: the side of the A/B
/// switch it ran on (`--ab-windows`), or nothing.
trait Side {
    /// The side of an operation that starts at tick `start`, the switch set to it; `None`
    /// when nothing is told apart.
    fn side(&mut self, start: u64) -> Option<usize>;
}

/// A plain run: the loop keeps no side (the call inlines away).
struct NoSides;

impl Side for NoSides {
    #[inline(always)]
    fn side(&mut self, _start: u64) -> Option<usize> {
        None
    }
}

/// `--ab-windows`: the window's side, and the side this worker last set the switch to.
struct Windowed {
    windows: Windows,
    set: usize,
}

impl Side for Windowed {
    #[inline(always)]
    fn side(&mut self, start: u64) -> Option<usize> {
        Some(self.windows.side(start, &mut self.set))
    }
}

/// The timed loop: next op, tick, perform, tick, record (and, with A/B windows, the
/// operation's time on its side too). A paired target (`--ab-heap`) first performs the
/// operation on the other side's store, before the clock starts.
#[inline(never)]
fn run_source<S: Source, X: Session>(
    mut source: S,
    session: &mut X,
    values: &mut Values,
    at: Loop<'_>,
    mut sides: impl Side,
) -> anyhow::Result<Recorder> {
    let mut recorder = Recorder::new(at.kinds);
    let mut done = 0u64;
    recorder.start();
    while let Some(op) = source.next_op()? {
        let mut start = ticks();
        let side = sides.side(start);
        if let Some(side) = side {
            if session.direct(Some(1 - side)) {
                S::perform(op, session, values)?;
                session.direct(Some(side));
                start = ticks();
            }
        }
        let (kind, outcome) = S::perform(op, session, values)?;
        let took = ticks().wrapping_sub(start);
        recorder.record(kind, took, outcome == Outcome::Hit);
        if let Some(side) = side {
            recorder.record_side(side, took);
        }
        done += 1;
        if progress(at.ctl, at.w, done, at.stoppable) {
            break;
        }
    }
    end_loop(recorder, source, at.ctl, at.w, done)
}

/// The open-loop timed loop: each operation waits for its intended send time, and its
/// latency runs from that time, so queueing behind a slow answer is measured (see
/// [`super::pacing`]).
fn run_source_paced<S: Source, X: Session>(
    mut source: S,
    session: &mut X,
    values: &mut Values,
    at: Loop<'_>,
    schedule: &Schedule,
) -> anyhow::Result<Recorder> {
    let mut recorder = Recorder::new(at.kinds);
    let mut done = 0u64;
    recorder.start();
    loop {
        let due = schedule.due(done, source.next_due_ns());
        let Some(op) = source.next_op()? else {
            break;
        };
        let late = schedule.wait_until(due);
        let start = ticks();
        let (kind, outcome) = S::perform(op, session, values)?;
        let end = ticks();
        recorder.record(
            kind,
            end.wrapping_sub(start) + late,
            outcome == Outcome::Hit,
        );
        done += 1;
        if progress(at.ctl, at.w, done, true) {
            break;
        }
    }
    end_loop(recorder, source, at.ctl, at.w, done)
}
