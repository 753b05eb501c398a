//! The shared runner: drives a workload (YCSB, a trace) against a target with `P` processes
//! of `T` pinned threads, and reports throughput, latency, hits, memory and faults.
//!
//! # Map
//! - [`spec`]: [`spec::RunArgs`] / [`spec::RunSpec`]: what to run; the spec travels to worker
//!   processes as JSON;
//! - [`launch_processes`]: the launcher — control file, worker processes (`podkv
//!   run-worker`), start lines, `--duration`, progress bar, every process's report; shared
//!   by `podkv ycsb` / `podkv replay` ([`launch`]) and `podkv bench` ([`spec::Job::Bench`]);
//! - [`worker`]: one process — target, sources, pinned worker threads (`podkv_hw::cpus`),
//!   the timed loop; a benchmark's process is `crate::bench::process`'s;
//! - [`control`]: start/stop barriers in a shared-memory file;
//! - [`source`]: YCSB streams and trace shares as target commands; [`pacing`]: open-loop
//!   send times (`--target-rate`, `--pace timestamps`);
//! - [`targets`]: the [`targets::Target`] trait; `null`, `dashmap`, `mimalloc`, `embedded`;
//!   [`memcached`]: the memcached client target;
//! - [`metrics`]: per-kind histograms and hit/miss counts; [`report`]: every process's report,
//!   merged into the table and NDJSON record; [`ab`]: `--ab-windows`, time per operation on
//!   each side of `podkv_hw::ab`'s switch;
//! - [`suite`]: TOML experiment suites; [`plot`]: plots from NDJSON;
//! - [`cli`]: `podkv ycsb`, `podkv replay`, `podkv suite`, `podkv plot`.
//!
//! # Phases
//! A YCSB run has a load phase and a run phase (`--phase`); a replay has one phase (its
//! requests are read into memory, per worker, before it). Only the last phase is timed:
//! `--phase both` loads untimed and times the run; `--phase load` times the load.
//!
//! # Cost
//! The runner's own cost per operation is what a run against `--target null` reports as
//! `cpu_ns_per_op` (CPU time of the timed loops / ops); `podkv suite scripts/runner-cost.toml`
//! runs every shipped workload that way. It is generation plus bookkeeping: two unfenced
//! time-stamp-counter reads per operation into a flat, hdrhistogram-shaped array
//! ([`metrics`]), and the generators inlined whole into the timed loop, operations built in
//! place and lent to it (`OpStream::next_ref`). Instructions per operation (callgrind with
//! `--toggle-collect='*run_source*'`) are the stable measure on a shared VM; the history of
//! both is in `docs/history/2026-11-25-runner-cost.md`.

pub mod ab;
pub mod cli;
pub mod control;
pub mod memcached;
pub mod metrics;
pub mod pacing;
pub mod plot;
pub mod report;
pub mod source;
pub mod spec;
pub mod suite;
pub mod targets;
pub mod worker;

use anyhow::Context;
use control::{Control, ControlFile};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use report::{ProcessReport, RunRecord};
use spec::RunSpec;
use std::process::{Child, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Runs `spec`: its record (also printed as a table, and appended to `json` if given).
pub fn launch(spec: &RunSpec, json: Option<&std::path::Path>) -> anyhow::Result<RunRecord> {
    let (reports, wall) = launch_processes(spec, &|ctl| worker::run_process(spec, ctl, 0))?;
    let record = RunRecord::from_reports(spec, &reports, wall)?;
    record.print_table(spec.job.kind_names());
    if let Some(path) = json {
        record.append_json(path)?;
    }
    Ok(record)
}

/// The launcher: starts `spec`'s workers and holds them to the control file's barriers
/// (progress bar on stderr for a timed phase over a second, `--duration`); returns every
/// process's report and the wall time.
///
/// With one process the workers are threads of this one, run by `local` (so it may share
/// what the caller holds, e.g. an open heap); with more, each process is `podkv run-worker`
/// re-executed from this binary, which reaches [`worker::run_process`].
pub fn launch_processes(
    spec: &RunSpec,
    local: &(dyn Fn(&Control) -> anyhow::Result<ProcessReport> + Sync),
) -> anyhow::Result<(Vec<ProcessReport>, Duration)> {
    spec.validate()?;
    let expected = spec.job.expected_ops()?;
    let ctl_file = ControlFile::create()?;
    let ctl = ctl_file.control();
    let started = Instant::now();
    let reports = if spec.processes == 1 {
        std::thread::scope(|s| {
            let worker = s.spawn(|| {
                let report = local(ctl);
                if report.is_err() {
                    ctl.failed.store(1, Ordering::Release);
                }
                report
            });
            let coordinated = coordinate(spec, ctl, &mut [], expected);
            let report = worker
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p));
            // The worker's own error says what went wrong; the coordinator's only that it did.
            report.and_then(|r| coordinated.map(|()| vec![r]))
        })?
    } else {
        run_processes(spec, &ctl_file, expected)?
    };
    Ok((reports, started.elapsed()))
}

fn run_processes(
    spec: &RunSpec,
    ctl_file: &ControlFile,
    expected: Option<u64>,
) -> anyhow::Result<Vec<ProcessReport>> {
    let exe = std::env::current_exe()?;
    let spec_json = serde_json::to_string(spec)?;
    let mut children = Vec::new();
    for p in 0..spec.processes {
        let mut command = std::process::Command::new(&exe);
        command
            .arg("run-worker")
            .arg("--control")
            .arg(ctl_file.path())
            .args(["--process", &p.to_string(), "--spec", &spec_json])
            .stdout(Stdio::piped());
        if spec.hosts_apart {
            command.env("PODKV_HOST_ID", (p + 1).to_string());
        }
        let child = command.spawn().context("cannot start a worker process")?;
        children.push(child);
    }
    let coordinated = coordinate(spec, ctl_file.control(), &mut children, expected);
    if coordinated.is_err() {
        ctl_file.control().failed.store(1, Ordering::Release);
    }
    let mut reports = Vec::new();
    for child in children {
        let out = child.wait_with_output()?;
        anyhow::ensure!(
            out.status.success(),
            "a worker process failed: {}",
            out.status
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().last().unwrap_or_default();
        reports.push(serde_json::from_str(line).context("bad report from a worker process")?);
    }
    coordinated?;
    Ok(reports)
}

/// The hidden `podkv run-worker`: one worker process; prints its report as one JSON line.
pub fn worker_main(control: &std::path::Path, process: usize, spec: &str) -> anyhow::Result<()> {
    // SAFETY: prctl(PR_SET_PDEATHSIG) only sets a signal for this process: a worker must
    // not outlive its launcher (a killed run would leave it spinning at a barrier).
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    let spec: RunSpec = serde_json::from_str(spec).context("bad --spec")?;
    let ctl_file = ControlFile::open(control)?;
    let report = worker::run_process(&spec, ctl_file.control(), process)?;
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

/// The launcher's side of the barriers: start each phase when every worker is ready,
/// stop the timed phase at `--duration`, show progress.
fn coordinate(
    spec: &RunSpec,
    ctl: &Control,
    children: &mut [Child],
    expected: Option<u64>,
) -> anyhow::Result<()> {
    let workers = spec.workers() as u64;
    let timed = spec.job.phase_count() - 1;
    for phase in 0..=timed {
        wait_all(ctl, &ctl.ready[phase], workers, children, || ())?;
        for p in &ctl.progress[..spec.workers()] {
            p.store(0, Ordering::Relaxed);
        }
        let start = Instant::now();
        ctl.go[phase].store(1, Ordering::Release);
        if phase < timed {
            wait_all(ctl, &ctl.done[phase], workers, children, || ())?;
            continue;
        }
        let bar = Progress::new(expected);
        let deadline = spec.duration.map(Duration::from_secs_f64);
        wait_all(ctl, &ctl.done[phase], workers, children, || {
            bar.update(start, ctl.progress_sum(spec.workers()));
            if deadline.is_some_and(|d| start.elapsed() >= d) {
                ctl.stop.store(1, Ordering::Release);
            }
        })?;
        bar.finish();
    }
    Ok(())
}

/// Waits for `word` to reach `target`, calling `tick` about every 10 ms; fails when a
/// worker process exits early or any process reports a failure.
fn wait_all(
    ctl: &Control,
    word: &std::sync::atomic::AtomicU64,
    target: u64,
    children: &mut [Child],
    mut tick: impl FnMut(),
) -> anyhow::Result<()> {
    let mut last_tick = Instant::now();
    while word.load(Ordering::Acquire) < target {
        anyhow::ensure!(
            ctl.failed.load(Ordering::Acquire) == 0,
            "a worker failed (see its message above)"
        );
        for child in children.iter_mut() {
            if let Some(status) = child.try_wait()? {
                anyhow::ensure!(
                    status.success() || word.load(Ordering::Acquire) >= target,
                    "a worker process exited early: {status}"
                );
            }
        }
        if last_tick.elapsed() >= Duration::from_millis(10) {
            tick();
            last_tick = Instant::now();
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok(())
}

/// The progress bar of the timed phase: on stderr, shown once the phase has lasted a
/// second, never when stderr is not a terminal.
struct Progress {
    bar: ProgressBar,
    shown: std::cell::Cell<bool>,
}

impl Progress {
    fn new(expected: Option<u64>) -> Self {
        let bar = match expected {
            Some(n) => ProgressBar::with_draw_target(Some(n), ProgressDrawTarget::hidden())
                .with_style(
                    ProgressStyle::with_template(
                        "{elapsed_precise} [{wide_bar}] {human_pos}/{human_len} ops ({per_sec}, eta {eta})",
                    )
                    .expect("valid template"),
                ),
            None => ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden()).with_style(
                ProgressStyle::with_template("{elapsed_precise} {spinner} {human_pos} ops ({per_sec})")
                    .expect("valid template"),
            ),
        };
        Self {
            bar,
            shown: false.into(),
        }
    }

    fn update(&self, start: Instant, done: u64) {
        if !self.shown.get() && start.elapsed() >= Duration::from_secs(1) {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
            self.shown.set(true);
        }
        self.bar.set_position(done);
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
