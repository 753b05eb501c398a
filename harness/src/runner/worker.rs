//! One process of a run: its target, its workers' sources, one pinned thread per worker,
//! and what it measured.
//!
//! Every worker thread goes through the phases in order: untimed set-up, `ready`, wait
//! for `go`, run its source to the end (or to `stop` in the timed phase), `done` (see
//! [`super::control`]). Only the last phase is timed.

use super::ab::{Lag, NoSides, Side, Windowed};
use super::control::{Control, COUNT_OPS_PER_PROGRESS};
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
use podkv_hw::cpus::{allowed_to_process, pin_to};
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
        TargetSpec::Embedded { heap } => run_embedded(spec, ctl, process, heap),
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

/// The store in `heap`, alone or paired with `--ab-target`'s target.
fn run_embedded(
    spec: &RunSpec,
    ctl: &Control,
    process: usize,
    heap: &std::path::Path,
) -> anyhow::Result<ProcessReport> {
    let config = spec.store_config();
    let a = StoreTarget::open(heap, &config)?;
    match &spec.ab_target {
        None => run_sources(spec, ctl, process, &a),
        Some(TargetSpec::Embedded { heap }) => {
            let b = StoreTarget::open(heap, &config)?;
            run_sources(spec, ctl, process, &Paired { a, b })
        }
        Some(TargetSpec::Mimalloc) => {
            let b = StoreTarget::local(&config)?;
            run_sources(spec, ctl, process, &Paired { a, b })
        }
        Some(TargetSpec::Dashmap) => {
            let b = KvTarget(podkv_store::DashBaseline::new());
            run_sources(spec, ctl, process, &Paired { a, b })
        }
        Some(TargetSpec::Null) => run_sources(spec, ctl, process, &Paired { a, b: NullTarget }),
        Some(other) => anyhow::bail!("--ab-target {} is not served", other.name()),
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
    let cpus = allowed_to_process();
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
                    let sides = Windowed::new(ticks);
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

/// The timed loop: next op, tick, perform, tick, record (and, with A/B windows, the
/// operation's time on its side too, a paired target's stores catching up untimed, see
/// [`Lag`]).
#[inline(never)]
fn run_source<S: Source, X: Session>(
    mut source: S,
    session: &mut X,
    values: &mut Values,
    at: Loop<'_>,
    mut sides: impl Side,
) -> anyhow::Result<Recorder> {
    let mut recorder = Recorder::new(at.kinds);
    let mut lag = Lag::new();
    let mut done = 0u64;
    recorder.start();
    while let Some(op) = source.next_op()? {
        let mut start = ticks();
        let side = sides.side(start);
        if let Some(side) = side {
            if lag.switch::<S, X>(side, session, values)? {
                start = ticks();
            }
        }
        let (kind, outcome) = S::perform(op, session, values)?;
        let took = ticks().wrapping_sub(start);
        recorder.record(kind, took, outcome == Outcome::Hit);
        if let Some(side) = side {
            recorder.record_side(side, took);
            lag.ran(op);
        }
        done += 1;
        if progress(at.ctl, at.w, done, at.stoppable) {
            break;
        }
    }
    let recorder = end_loop(recorder, source, at.ctl, at.w, done)?;
    lag.finish::<S, X>(session, values)?;
    Ok(recorder)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::control::ControlFile;
    use podkv_traces::Command;

    /// Operations named by number, each a `get` of its number.
    struct Numbers(std::vec::IntoIter<u32>, u32);

    impl Source for Numbers {
        type Op = u32;

        fn next_op(&mut self) -> anyhow::Result<Option<&u32>> {
            Ok(self.0.next().map(|n| {
                self.1 = n;
                &self.1
            }))
        }

        fn perform<X: Session>(
            op: &u32,
            session: &mut X,
            _: &mut Values,
        ) -> anyhow::Result<(usize, Outcome)> {
            Ok((0, session.execute(Command::Get, &op.to_le_bytes(), &[])?))
        }

        fn finish(self) -> anyhow::Result<()> {
            Ok(())
        }
    }

    /// A paired session that logs which store ran which operation.
    #[derive(Default)]
    struct Logged {
        to: Option<usize>,
        log: Vec<(usize, u32)>,
    }

    impl Session for Logged {
        fn execute(&mut self, _: Command, key: &[u8], _: &[u8]) -> anyhow::Result<Outcome> {
            let n = u32::from_le_bytes(key.try_into().unwrap());
            let store = self.to.expect("the timed loop directs every command");
            self.log.push((store, n));
            Ok(Outcome::Hit)
        }

        fn direct(&mut self, store: Option<usize>) -> bool {
            self.to = store;
            true
        }
    }

    /// Sides as scripted, one per operation.
    struct Scripted(std::vec::IntoIter<usize>);

    impl Side for Scripted {
        fn side(&mut self, _start: u64) -> Option<usize> {
            self.0.next()
        }
    }

    /// A paired target's timed loop: each store runs every operation in order, and each timed
    /// operation comes right after one on its own store (the catching up, or the previous
    /// timed one), never right after the other store's.
    #[test]
    fn paired_stores_catch_up_at_each_change_of_side() {
        let file = ControlFile::create().unwrap();
        let at = Loop {
            ctl: file.control(),
            w: 0,
            kinds: 1,
            stoppable: true,
        };
        let sides = vec![0, 0, 1, 1, 1, 0, 1];
        let source = Numbers((0..sides.len() as u32).collect::<Vec<_>>().into_iter(), 0);
        let mut session = Logged::default();
        let recorder = run_source(
            source,
            &mut session,
            &mut Values::default(),
            at,
            Scripted(sides.clone().into_iter()),
        )
        .unwrap();
        assert_eq!(recorder.into_tally().ab.ops, [3, 4]);
        let all: Vec<u32> = (0..sides.len() as u32).collect();
        for store in 0..2 {
            let ran: Vec<u32> = session
                .log
                .iter()
                .filter(|e| e.0 == store)
                .map(|e| e.1)
                .collect();
            assert_eq!(ran, all, "store {store} ran every operation in order");
        }
        for (n, &side) in sides.iter().enumerate() {
            let at = session
                .log
                .iter()
                .position(|&e| e == (side, n as u32))
                .unwrap();
            assert!(
                at == 0 || session.log[at - 1].0 == side,
                "operation {n}, timed on store {side}, follows {:?}",
                session.log[at - 1]
            );
        }
    }
}
