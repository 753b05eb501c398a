//! What a run executes, as the launcher hands it to every worker process (as JSON): the
//! job (a YCSB workload, a trace replay or an allocator benchmark), the target, and how many
//! processes × threads run it.

use super::control::COUNT_WORKERS_MAX;
use super::pacing::Pacing;
use super::source;
use super::targets::TargetSpec;
use crate::bench::job::BenchJob;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Runner flags shared by `podkv ycsb` and `podkv replay`.
#[derive(clap::Args, Clone, Debug)]
pub struct RunArgs {
    /// What to run against: `embedded` (the podkv store in a pod heap), `mimalloc` (the
    /// same index in process-local memory), `boost` (the same index in a boost.interprocess
    /// segment; feature `baselines`), `dashmap`, `null` (nothing: measures the
    /// runner), or `memcached://HOST:PORT[,HOST:PORT...]`.
    #[arg(long, default_value = "embedded", value_name = "TARGET")]
    pub target: String,
    /// Heap file of `--target embedded` [default: a fresh file under /dev/shm, removed
    /// afterwards].
    #[arg(long, value_name = "PATH")]
    pub heap: Option<PathBuf>,
    /// Worker processes (the runner re-executes podkv); only targets that can be shared
    /// (embedded, boost, memcached, null) allow more than one.
    #[arg(long, default_value_t = 1, value_name = "P")]
    pub processes: usize,
    /// End the timed phase after this many seconds, even if operations remain.
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// Do not pin worker threads to CPUs.
    #[arg(long)]
    pub no_pin: bool,
    /// Each worker process takes a host id of its own (`PODKV_HOST_ID` = 1 + its index), as
    /// if the pod's processes ran on separate hosts: in a `limited` or `mcas` heap every read
    /// of an item another process wrote then pays the SWcc reader rule, which processes of
    /// one host, sharing its caches, skip. The memory of this machine stays coherent, so only
    /// the cost changes. Needs `--processes` above 1 and `--target embedded`.
    #[arg(long)]
    pub hosts_apart: bool,
    /// Store targets (`embedded`, `mimalloc`, `boost`): a bucket table of exactly 2^LOG2
    /// buckets that never grows, as CXLALLOC's evaluation sizes its table for the records it
    /// loads (10–26; about log2 of the records for one item per bucket). Applies when the run
    /// creates the store; a store in an existing heap keeps its table. [default: a table that
    /// doubles past two items per bucket and splits its buckets as writes come to them]
    #[arg(long, value_name = "LOG2")]
    pub fixed_buckets: Option<u32>,
    /// Append one NDJSON record of the run to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Open loop: offer this many operations per second over the whole run, shared evenly by
    /// the workers (as YCSB's `-target`). Each operation is sent at its intended time and its
    /// latency runs from then, so time queued behind a slow answer counts (no coordinated
    /// omission); the record's `latency_from` says `intended`. Only the timed phase is paced.
    /// [default: closed loop, each worker sends when its last operation answered]
    #[arg(long, value_name = "OPS")]
    pub target_rate: Option<f64>,
    /// For comparing two variants of code in one run: cut the timed phase into windows of
    /// MICROS microseconds, set the A/B switch (`podkv_hw::ab`) on or off in each (drawn at
    /// random, the same in every worker process), and report the time per operation with it
    /// on over the time with it off (`ab on/off`, `ab_on_over_off` in the record), and each
    /// side's latency percentiles (`ab latency on/off`, `ab_latency_us`). Windows far
    /// shorter than the machine's own drift cancel it: two runs on a shared VM differ by a
    /// fifth or more, two sides of one run by a percent (try 1000). The switch does nothing
    /// in the project's own code: branch on `podkv_hw::ab::on()` in an experiment's build, or
    /// build with the `podkv-hw/ab-sites` feature, which switches off the coherence sites
    /// `PODKV_AB_SITES` names (`scripts/coherence-costs`). On an unchanged build the ratio is
    /// the method's own noise.
    #[arg(long, value_name = "MICROS")]
    pub ab_windows: Option<u64>,
    /// With `--ab-windows` and `--target embedded`: compare two heaps in one run instead of
    /// two builds. Every operation runs on the store in `--heap` and on the store in this
    /// heap file (created with the defaults if it does not exist; make it with `podkv heap
    /// create` to choose its coherence mode, placement or geometry). Each window's operations
    /// run on its side's store, timed: this heap's while the switch is on, `--heap`'s while it
    /// is off. When the side changes, the other store first runs them, untimed, so both stores
    /// see every operation and stay alike. `ab on/off` is then this heap's time per operation
    /// over `--heap`'s, with the machine's drift cancelled; whole runs can only compare across
    /// drift. The run takes about twice as long; the coherence, page-fault and PSS figures
    /// cover both heaps, the HWcc bytes are this heap's.
    #[arg(long, value_name = "PATH")]
    pub ab_heap: Option<PathBuf>,
    /// As `--ab-heap`, against another target instead of a second heap: `dashmap`,
    /// `mimalloc` (the same index in process-local memory), `null` (the runner alone), or
    /// `embedded` (the store in `--ab-heap`'s heap, which is the default when `--ab-heap` is
    /// given). `ab on/off` is then this target's time per operation over the store's in
    /// `--heap`. Process-local targets need `--processes 1`.
    #[arg(long, value_name = "TARGET")]
    pub ab_target: Option<String>,
}

/// A YCSB job as sent to worker processes (the `podkv ycsb` flags that shape operations).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct YcsbJob {
    /// `--workload`.
    pub workload: Option<String>,
    /// `-P`.
    pub property_files: Vec<PathBuf>,
    /// `-p`.
    pub properties: Vec<String>,
    /// `--records`.
    pub records: Option<u64>,
    /// `--ops`.
    pub ops: Option<u64>,
    /// `--seed`.
    pub seed: Option<u64>,
    /// `--phase`: `load`, `run` or `both`.
    pub phase: String,
}

impl YcsbJob {
    /// The job of `podkv ycsb` flags.
    pub fn from_args(a: &podkv_ycsb::YcsbArgs) -> Self {
        let phase = match a.phase {
            podkv_ycsb::PhaseArg::Load => "load",
            podkv_ycsb::PhaseArg::Run => "run",
            podkv_ycsb::PhaseArg::Both => "both",
        };
        Self {
            workload: a.workload.clone(),
            property_files: a.property_files.clone(),
            properties: a.properties.clone(),
            records: a.records,
            ops: a.ops,
            seed: a.seed,
            phase: phase.into(),
        }
    }

    /// Back to `podkv ycsb` flags (threads and dumping aside).
    pub fn args(&self) -> podkv_ycsb::YcsbArgs {
        podkv_ycsb::YcsbArgs {
            workload: self.workload.clone(),
            property_files: self.property_files.clone(),
            properties: self.properties.clone(),
            records: self.records,
            ops: self.ops,
            seed: self.seed,
            phase: self.phase_arg(),
            threads: 1,
            dry_run: false,
            dump_ops: None,
        }
    }

    fn phase_arg(&self) -> podkv_ycsb::PhaseArg {
        match self.phase.as_str() {
            "load" => podkv_ycsb::PhaseArg::Load,
            "run" => podkv_ycsb::PhaseArg::Run,
            _ => podkv_ycsb::PhaseArg::Both,
        }
    }

    /// The phases, in order; the last one is timed. A workload with no run-phase operations
    /// (CXLALLOC's `load`, `operationcount=0`) asked for both runs its load phase alone,
    /// timed: a timed run phase of nothing would report 0 ops/s.
    pub fn phases(&self) -> Vec<podkv_ycsb::Phase> {
        let phases = self.phase_arg().phases();
        let empty_run = || self.args().workload().is_ok_and(|w| w.operation_count == 0);
        if phases == [podkv_ycsb::Phase::Load, podkv_ycsb::Phase::Run] && empty_run() {
            return vec![podkv_ycsb::Phase::Load];
        }
        phases.to_vec()
    }
}

/// What a run executes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Job {
    /// A YCSB workload.
    Ycsb(YcsbJob),
    /// A trace replay.
    Replay {
        /// The trace file (CSV, .zst or Parquet).
        trace: PathBuf,
    },
    /// An allocator benchmark (`podkv bench threadtest|xmalloc`); its target is `null`:
    /// the job names the allocator it drives.
    Bench(BenchJob),
}

/// The one "kind" of a benchmark's operations: an allocation with its free.
const NAMES_BENCH: [&str; 1] = ["alloc"];

impl Job {
    /// Names of the operation kinds, indexed as the sources report them.
    pub fn kind_names(&self) -> &'static [&'static str] {
        match self {
            Job::Ycsb(_) => &source::NAMES_YCSB,
            Job::Replay { .. } => &podkv_traces::Op::NAMES,
            Job::Bench(_) => &NAMES_BENCH,
        }
    }

    /// Number of phases (the last is timed).
    pub fn phase_count(&self) -> usize {
        match self {
            Job::Ycsb(j) => j.phases().len(),
            Job::Replay { .. } | Job::Bench(_) => 1,
        }
    }

    /// `ycsb`, `replay`, or the benchmark (`threadtest`, `xmalloc`).
    pub fn kind(&self) -> &'static str {
        match self {
            Job::Ycsb(_) => "ycsb",
            Job::Replay { .. } => "replay",
            Job::Bench(b) => b.kind.name(),
        }
    }

    /// The workload's name in results: the YCSB workload, or the trace's file name.
    pub fn workload_name(&self) -> String {
        match self {
            Job::Ycsb(j) => j.workload.clone().unwrap_or_else(|| "core".into()),
            Job::Replay { trace } => trace.file_name().map_or_else(
                || trace.display().to_string(),
                |n| n.to_string_lossy().into(),
            ),
            Job::Bench(b) => b.allocator.name().into(),
        }
    }

    /// Operations the timed phase will run, when known in advance.
    pub fn expected_ops(&self) -> anyhow::Result<Option<u64>> {
        Ok(match self {
            Job::Ycsb(j) => {
                let w = j.args().workload()?;
                Some(match j.phases().last() {
                    Some(podkv_ycsb::Phase::Load) => w.load_count,
                    _ => w.operation_count,
                })
            }
            Job::Replay { .. } => None,
            Job::Bench(b) => Some(b.ops),
        })
    }
}

impl Job {
    /// Bytes of every item the job could hold at once, each with `slack` bytes beyond its key
    /// and value: a YCSB job's records plus its operations (each at most one new item) at the
    /// largest value and a key of 64 bytes; a replay's requests, each at its own sizes. Zero for a benchmark.
    pub fn most_item_bytes(&self, slack: u64) -> anyhow::Result<u64> {
        Ok(match self {
            Job::Ycsb(y) => {
                let w = y.args().workload()?;
                let value = w.fields.count * w.fields.length.max;
                (w.record_count + w.operation_count) * (value + 64 + slack)
            }
            Job::Replay { trace } => {
                let mut sum = 0u64;
                for request in podkv_traces::requests(trace)? {
                    let r = request?;
                    sum += r.key.len() as u64 + u64::from(r.value_size) + slack;
                }
                sum
            }
            Job::Bench(_) => 0,
        })
    }
}

/// The target of `--ab-target` and `--ab-heap`: `embedded` (the default with `--ab-heap`)
/// needs the heap, the others refuse one.
fn ab_target(args: &RunArgs) -> anyhow::Result<Option<TargetSpec>> {
    let heap = args.ab_heap.clone();
    let target = match (args.ab_target.as_deref(), &heap) {
        (None, None) => return Ok(None),
        (None | Some("embedded"), Some(_)) => "embedded",
        (Some("embedded"), None) => {
            anyhow::bail!("--ab-target embedded needs --ab-heap: the heap of the second store")
        }
        (Some(name), Some(_)) => {
            anyhow::bail!("--ab-heap is the heap of --ab-target embedded: {name} has none")
        }
        (Some(name), None) => name,
    };
    TargetSpec::parse(target, heap).map(Some)
}

/// The smallest and largest fixed tables (`--fixed-buckets`), as log2 of the buckets: the
/// store's first table, and its largest.
const FIXED_BUCKETS_MIN: u32 = podkv_store::layout::SHIFT_BUCKETS_START as u32;
const FIXED_BUCKETS_MAX: u32 = podkv_store::layout::SHIFT_BUCKETS_MAX as u32;

/// Everything a run needs; sent to worker processes as JSON.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunSpec {
    /// What to run.
    pub job: Job,
    /// Against what.
    pub target: TargetSpec,
    /// Worker processes.
    pub processes: usize,
    /// Threads per process.
    pub threads: usize,
    /// `--duration`.
    pub duration: Option<f64>,
    /// Pin threads to CPUs.
    pub pin: bool,
    /// Closed or open loop (`--target-rate`, `--pace timestamps`).
    #[serde(default)]
    pub pacing: Pacing,
    /// `--hosts-apart`: each worker process gets host id 1 + its index.
    #[serde(default)]
    pub hosts_apart: bool,
    /// `--fixed-buckets`: a store target's table of exactly 2^n buckets (`None`: growing).
    #[serde(default)]
    pub fixed_buckets: Option<u32>,
    /// `--ab-windows`: the A/B switch's window, microseconds.
    #[serde(default)]
    pub ab_windows: Option<u64>,
    /// The same window in ticks, measured once by the launcher so that every worker process
    /// cuts the same windows ([`super::ab`]).
    #[serde(default)]
    pub ab_window_ticks: Option<u64>,
    /// `--ab-target` (or `--ab-heap`): the target that runs every operation beside the run's,
    /// timed while the switch is on.
    #[serde(default)]
    pub ab_target: Option<TargetSpec>,
}

impl RunSpec {
    /// The spec of a command line.
    pub fn new(job: Job, args: &RunArgs, threads: usize) -> anyhow::Result<Self> {
        let mut target = TargetSpec::parse(&args.target, args.heap.clone())?;
        if let TargetSpec::Boost { bytes, .. } = &mut target {
            if let Some(why) = crate::bench::boost::unavailable() {
                anyhow::bail!(why);
            }
            use super::targets::boost;
            *bytes = boost::segment_bytes(job.most_item_bytes(boost::SIZE_ITEM_SLACK)?);
        }
        let spec = Self {
            job,
            target,
            processes: args.processes,
            threads,
            duration: args.duration,
            pin: !args.no_pin,
            hosts_apart: args.hosts_apart,
            fixed_buckets: args.fixed_buckets,
            ab_windows: args.ab_windows,
            ab_window_ticks: args
                .ab_windows
                .filter(|&micros| micros > 0)
                .map(super::ab::window_ticks),
            ab_target: ab_target(args)?,
            pacing: args
                .target_rate
                .map_or(Pacing::Closed, |ops_per_sec| Pacing::Rate { ops_per_sec }),
        };
        spec.validate()?;
        Ok(spec)
    }

    /// Workers in all.
    pub fn workers(&self) -> usize {
        self.processes * self.threads
    }

    /// The configuration a store target creates its store with.
    pub fn store_config(&self) -> podkv_store::StoreConfig {
        podkv_store::StoreConfig {
            table: self
                .fixed_buckets
                .map_or(podkv_store::Table::Growing, podkv_store::Table::Fixed),
            ..podkv_store::StoreConfig::default()
        }
    }

    /// `--ab-target`'s rules: the run's target is the store in a heap, the other one a store
    /// target (or `null`) that can follow the run's processes, and a second heap is another
    /// file.
    fn validate_ab_target(&self, other: &TargetSpec) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.ab_windows.is_some(),
            "--ab-heap and --ab-target compare two targets in the windows of --ab-windows: \
             give both"
        );
        let TargetSpec::Embedded { heap } = &self.target else {
            anyhow::bail!(
                "--ab-heap and --ab-target compare with the podkv store in --heap: they need \
                 --target embedded, not {}",
                self.target.name()
            );
        };
        match other {
            TargetSpec::Embedded { heap: other } => {
                let same = |a: &PathBuf, b: &PathBuf| {
                    a == b
                        || matches!(
                            (std::fs::canonicalize(a), std::fs::canonicalize(b)),
                            (Ok(a), Ok(b)) if a == b
                        )
                };
                anyhow::ensure!(
                    !same(heap, other),
                    "--ab-heap {} is the run's --heap: compare two different heap files",
                    other.display()
                );
            }
            TargetSpec::Dashmap | TargetSpec::Mimalloc | TargetSpec::Null => {}
            _ => anyhow::bail!(
                "--ab-target {}: compare with embedded, mimalloc, dashmap or null",
                other.name()
            ),
        }
        anyhow::ensure!(
            self.processes == 1 || other.spans_processes(),
            "--ab-target {} lives in process-local memory: it cannot run with --processes > 1",
            other.name()
        );
        Ok(())
    }

    pub(crate) fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.processes >= 1 && self.threads >= 1,
            "--processes and --threads must be at least 1"
        );
        anyhow::ensure!(
            self.ab_windows != Some(0),
            "--ab-windows needs a window of at least one microsecond"
        );
        anyhow::ensure!(
            self.ab_windows.is_none() || !self.pacing.is_open(),
            "--ab-windows times a closed loop: it cannot go with --target-rate or --pace \
             timestamps"
        );
        if let Some(other) = &self.ab_target {
            self.validate_ab_target(other)?;
        }
        anyhow::ensure!(
            self.workers() <= COUNT_WORKERS_MAX,
            "at most {COUNT_WORKERS_MAX} workers (processes × threads)"
        );
        anyhow::ensure!(
            !self.hosts_apart
                || (self.processes > 1 && matches!(self.target, TargetSpec::Embedded { .. })),
            "--hosts-apart needs --processes above 1 and --target embedded"
        );
        if let Some(log2) = self.fixed_buckets {
            anyhow::ensure!(
                matches!(
                    self.target,
                    TargetSpec::Embedded { .. } | TargetSpec::Mimalloc | TargetSpec::Boost { .. }
                ),
                "--fixed-buckets sizes the podkv store's table: it needs --target embedded, \
                 mimalloc or boost, not {}",
                self.target.name()
            );
            anyhow::ensure!(
                (FIXED_BUCKETS_MIN..=FIXED_BUCKETS_MAX).contains(&log2),
                "--fixed-buckets {log2}: a table of 2^{FIXED_BUCKETS_MIN} to 2^{FIXED_BUCKETS_MAX} \
                 buckets"
            );
        }
        anyhow::ensure!(
            self.processes == 1 || self.target.spans_processes(),
            "target {} lives in process-local memory: it cannot run with --processes > 1",
            self.target.name()
        );
        if let Job::Bench(b) = &self.job {
            anyhow::ensure!(
                self.processes == 1 || b.allocator.spans_processes(),
                "{} lives in process-local memory: it cannot run with --processes > 1",
                b.allocator.name()
            );
        }
        match self.pacing {
            Pacing::Closed => {}
            Pacing::Rate { ops_per_sec } => anyhow::ensure!(
                ops_per_sec > 0.0 && ops_per_sec.is_finite(),
                "--target-rate must be a positive number of operations per second"
            ),
            Pacing::Timestamps { speed } => {
                anyhow::ensure!(
                    speed > 0.0 && speed.is_finite(),
                    "--speed must be a positive factor"
                );
                anyhow::ensure!(
                    matches!(self.job, Job::Replay { .. }),
                    "--pace timestamps needs a trace: only podkv replay has request times"
                );
            }
        }
        if let Some(d) = self.duration {
            anyhow::ensure!(d > 0.0 && d.is_finite(), "--duration must be positive");
        }
        Ok(())
    }
}
