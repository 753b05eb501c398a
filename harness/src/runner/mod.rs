//! The shared runner: drives a workload (YCSB, a trace) against a target with `P` processes
//! of `T` pinned threads, and reports throughput, latency, hits, memory and faults.
//!
//! # Map
//! - [`spec`]: [`spec::RunArgs`] / [`spec::RunSpec`]: what to run; the spec travels to worker
//!   processes as JSON;
//! - [`launch_processes`]: the launcher — control file, worker processes (`podkv
//!   run-worker`), start lines, `--duration`, progress bar, every process's report; shared
//!   by `podkv ycsb` / `podkv replay` ([`launch`]) and `podkv bench` ([`spec::Job::Bench`]);
//! - [`worker`]: one process — target, sources, pinned worker threads ([`cpus`]), the timed
//!   loop; a benchmark's process is `crate::bench::process`'s;
//! - [`control`]: start/stop barriers in a shared-memory file;
//! - [`source`]: YCSB streams and trace shares as target commands;
//! - [`targets`]: the [`targets::Target`] trait; `null`, `dashmap`, `mimalloc`, `embedded`;
//!   [`memcached`]: the memcached client target;
//! - [`metrics`]: per-kind histograms and hit/miss counts; [`report`]: every process's report,
//!   merged into the table and NDJSON record;
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
//! `cpu_ns_per_op` (CPU time of the timed loops / ops): `podkv suite
//! scripts/runner-cost.toml` runs every shipped workload that way (one thread, 10 M
//! records, 10 M ops). It is generation plus bookkeeping:
//! - two time-stamp-counter reads around every operation: plain `rdtsc`, no `rdtscp` or
//!   `lfence` (~10 ns each on this VM, measured alone). Unfenced reads may drift a few
//!   cycles into the neighbouring instructions, which is noise at the resolution of the
//!   histograms (2 significant digits); every operation still gets its latency recorded,
//!   into a flat, hdrhistogram-shaped array ([`metrics`]);
//! - generation, inlined whole into the timed loop: the operation is built in place in its
//!   stream and lent to the loop (`OpStream::next_ref`); key names from a 4-digit table
//!   after two divisions by 10^8, 8-byte keys computed in one word; FNV-64 rounds over
//!   zero octets folded into one multiply;
//! - the zipfian tail `floor(n * pow(x, alpha))` from `podkv_ycsb::generator::Power`: a
//!   table of `c^alpha` and a binomial series, libm deciding only when the result lies
//!   within `2^-42` (relative) of an integer: libm's answer always, at ~9 ns instead of
//!   ~30 (measured alone);
//! - a one-thread process's insert counters without locked instructions
//!   (`podkv_ycsb::generator::Takers::One`): the same numbers.
//!
//! Values cost nothing here: the loop slices a buffer of ASCII zeros (no RNG draws, and the
//! op dump holds no values), so there is no value stream to make cheaper.
//!
//! Instructions per operation in the timed loop, the stable metric on this shared VM
//! (`valgrind --tool=callgrind --toggle-collect='*run_source*' podkv ycsb --workload W
//! --target null --records 1000000 --ops 200000 --phase run --no-pin`, Ir / ops), before
//! session 3 → before session 4 → before session 5 → now: a 750 → 527 → 402 → 399, b 738
//! → 516 → 390 → 388, c 736 → 514 → 389 → 386, d 696 → 482 → 371 → 367, e 789 → 567 →
//! 436 → 433, f 752 → 529 → 405 → 402, load 445 → 335 → 303 → 286, cxlalloc-a 582 → 475
//! → 361 → 355, cxlalloc-d 565 → 466 → 345 → 341.
//!
//! ## Where the time goes
//! The VM has no hardware counters (`perf stat -e cycles` says "not supported"), but
//! `perf record -e cpu-clock` samples where time is spent (`perf annotate` of
//! `run_source`, workload a): the zipfian's `Power` ~22%, the two `rdtsc` ~17% (most of
//! it charged to the instruction after the second), key digits ~13%, the draw of `u`
//! and the op chooser ~8%, FNV ~5%, the histogram ~4%, ChaCha8's block function ~5%.
//! A zipfian operation is one long chain of dependent steps (`u`, `x`, the table load,
//! the series, the floor, FNV, the reduction, FNV, the digits), and the reorder window
//! (224 entries on this Cascade Lake) holds about half of an operation's ~400
//! instructions, so operations overlap little: shortening the chain pays, not only
//! dropping instructions. Taking `n *
//! c^alpha` while the series is evaluated (one multiply off the chain) gained ~3%; a lone
//! taker's in-order acknowledgement moving `limit` without the window's flag took 17
//! instructions off every insert.
//! Tried and not kept: digits by SWAR arithmetic instead of the 40 KB table (+47
//! instructions an operation and slower: the table's loads are independent and hide in
//! the window); `n / 10^16` beside `n / 10^8` in the key split; a `[0.75, 1)` power table
//! with one series term fewer (half the table, a multiply-add off the chain): each
//! within the noise (under 0.5%).
//!
//! ## Measuring it
//! Single runs swing by 20–60% with the machine, and the swing is not the workload's:
//! back-to-back runs of a, c and d slow down together for seconds at a time and recover
//! together; pinned, at `SCHED_FIFO` and without address randomisation (`chrt -f 10
//! setarch -R`), 300 of 314 runs of d over 75 s lay in 76.3–77.2 ns and the rest
//! (85–108) in two bursts while another tenant's rustc ran; runs with address
//! randomisation spread the same way; a spinner at FIFO priority on the other CPU (an
//! integer multiply chain, `pause`, or a 64 MiB memory walk) moved nothing. (Workload
//! d's growing zeta costs one libm `pow` per insert: 9 instructions an operation on
//! average, not the 25 ns of its slow runs, which were such bursts.) So the suite runs
//! 10 M operations per workload (~1 s each) and its figure is the median of five or more
//! suites; `chrt -f 10` (root) keeps the worker from being preempted on its CPU.
//!
//! Session 5, binaries before and after, eleven suites each, interleaved, `podkv suite
//! scripts/runner-cost.toml` (six plain, five under `chrt -f 10`; load average 2.2–4.9,
//! other engineers building; minimum, then median, before → after): a 89 → 86 (103 → 98),
//! b 82 → 81 (88 → 85), c 81 → 79 (96 → 91), d 78 → 78 (103 → 99), e 89 → 87 (118 →
//! 101), f 87 → 87 (109 → 94), load 49 → 47 (71 → 56), cxlalloc-a 92 → 90 (125 → 97),
//! cxlalloc-d 72 → 71 (84 → 90). The medians at that load are the machine's; the
//! minimums are what quiet stretches give (single runs there, `chrt -f 10 setarch -R`,
//! min of 7, before → after: a 87.2 → 84.6, f 87.5 → 84.8, d 76.6 → 74.5, cxlalloc-a
//! 91.1 → 88.9). Every workload is under 100 ns; b, c, d, load and cxlalloc-d are under
//! 85, a at it, e and f ~2 ns over, cxlalloc-a ~5 over (its chooser picks among three
//! kinds at random, and its key chooser redraws ~1.2 times a read). The streams are
//! pinned by `ycsb/tests/op_digest.rs`, and `power`'s and `zipfian`'s tests compare
//! every shortcut with libm.

pub mod cli;
pub mod control;
pub mod cpus;
pub mod memcached;
pub mod metrics;
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
        let child = std::process::Command::new(&exe)
            .arg("run-worker")
            .arg("--control")
            .arg(ctl_file.path())
            .args(["--process", &p.to_string(), "--spec", &spec_json])
            .stdout(Stdio::piped())
            .spawn()
            .context("cannot start a worker process")?;
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
