//! The runner's subcommands: `podkv ycsb`, `podkv replay`, `podkv suite`, `podkv plot`.

use super::launch;
use super::pacing::Pacing;
use super::spec::{Job, RunArgs, RunSpec, YcsbJob};
use std::path::PathBuf;

/// `podkv ycsb`: generate a YCSB workload and run it (or only generate it, `--dry-run`).
#[derive(clap::Args, Clone, Debug)]
pub struct YcsbCommand {
    /// The workload.
    #[command(flatten)]
    pub ycsb: podkv_ycsb::YcsbArgs,
    /// The runner.
    #[command(flatten)]
    pub run: RunArgs,
}

/// `podkv replay TRACE`: replay a Twitter cache trace against a target.
#[derive(clap::Args, Clone, Debug)]
pub struct ReplayCommand {
    /// The trace (CSV, .zst or .parquet). Requests are split across workers by key hash,
    /// so each key keeps its order; each process reads its workers' requests into memory
    /// before the timed replay.
    pub trace: PathBuf,
    /// Worker threads per process.
    #[arg(long, default_value_t = 1, value_name = "T")]
    pub threads: usize,
    /// `timestamps`: open loop at the trace's own pace. Each request is sent at its recorded
    /// time (divided by `--speed`; the requests of one recorded second spread evenly over
    /// it) and its latency runs from then. `none`: as fast as answers come (or at
    /// `--target-rate`).
    #[arg(long, value_enum, default_value = "none", value_name = "PACE")]
    pub pace: Pace,
    /// With `--pace timestamps`: replay this many times faster than recorded.
    #[arg(long, default_value_t = 1.0, value_name = "X")]
    pub speed: f64,
    /// The runner.
    #[command(flatten)]
    pub run: RunArgs,
}

/// `podkv replay --pace`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pace {
    /// Closed loop (or `--target-rate`).
    None,
    /// Each request at its recorded time.
    Timestamps,
}

/// `podkv suite FILE`: run an experiment suite (a TOML cartesian product).
#[derive(clap::Args, Clone, Debug)]
pub struct SuiteCommand {
    /// The suite file (see scripts/*.toml).
    pub file: PathBuf,
    /// Only list the runs.
    #[arg(long)]
    pub list: bool,
    /// The scale of a suite with `[scale.NAME]` tables (`tiny`, `quick`, `paper`)
    /// [default: quick].
    #[arg(long, value_name = "NAME")]
    pub scale: Option<String>,
    /// Append every record here instead of the suite's own `json`.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// `podkv plot RESULTS.ndjson -o OUT.svg|png`.
#[derive(clap::Args, Clone, Debug)]
pub struct PlotCommand {
    /// NDJSON results (from --json of ycsb, replay, suite or bench).
    pub input: PathBuf,
    /// The image to write; `.svg` or `.png`.
    #[arg(short, long, value_name = "OUT")]
    pub output: PathBuf,
}

/// Runs `podkv ycsb`.
pub fn ycsb(c: &YcsbCommand) -> anyhow::Result<()> {
    if c.ycsb.dry_run {
        let summary = podkv_ycsb::dry_run(&c.ycsb)?;
        eprint!("{summary}");
        return Ok(());
    }
    anyhow::ensure!(
        c.ycsb.dump_ops.is_none(),
        "--dump-ops needs --dry-run (a run does not write its operations)"
    );
    let spec = RunSpec::new(
        Job::Ycsb(YcsbJob::from_args(&c.ycsb)),
        &c.run,
        c.ycsb.threads,
    )?;
    with_temp_heap(&spec, c.run.heap.is_none(), || {
        launch(&spec, c.run.json.as_deref()).map(drop)
    })
}

/// Runs `podkv replay`.
pub fn replay(c: &ReplayCommand) -> anyhow::Result<()> {
    anyhow::ensure!(
        c.trace.is_file(),
        "trace {} does not exist",
        c.trace.display()
    );
    let job = Job::Replay {
        trace: c.trace.clone(),
    };
    let mut spec = RunSpec::new(job, &c.run, c.threads)?;
    if c.pace == Pace::Timestamps {
        anyhow::ensure!(
            c.run.target_rate.is_none(),
            "--pace timestamps and --target-rate both set the send times: choose one"
        );
        spec.pacing = Pacing::Timestamps { speed: c.speed };
        spec.validate()?;
    }
    with_temp_heap(&spec, c.run.heap.is_none(), || {
        launch(&spec, c.run.json.as_deref()).map(drop)
    })
}

/// Runs `f`, then removes the embedded target's heap if the runner made it up, and the boost
/// target's segment (always made up): also when `f` panics, so that a failed run leaves no
/// heap of many GiB in `/dev/shm`.
fn with_temp_heap(
    spec: &RunSpec,
    made_up: bool,
    f: impl FnOnce() -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    use super::targets::TargetSpec;
    struct Removed<'s>(&'s RunSpec, bool);
    impl Drop for Removed<'_> {
        fn drop(&mut self) {
            match &self.0.target {
                TargetSpec::Embedded { heap } if self.1 => {
                    let _ = std::fs::remove_file(heap);
                }
                TargetSpec::Boost { segment, .. } => crate::bench::boost::Segment::remove(segment),
                _ => {}
            }
        }
    }
    let _removed = Removed(spec, made_up);
    f()
}
