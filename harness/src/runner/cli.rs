//! The runner's subcommands: `podkv ycsb`, `podkv replay`, `podkv suite`, `podkv plot`.

use super::launch;
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
    /// The runner.
    #[command(flatten)]
    pub run: RunArgs,
}

/// `podkv suite FILE`: run an experiment suite (a TOML cartesian product).
#[derive(clap::Args, Clone, Debug)]
pub struct SuiteCommand {
    /// The suite file (see scripts/*.toml).
    pub file: PathBuf,
    /// Only list the runs.
    #[arg(long)]
    pub list: bool,
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
    let spec = RunSpec::new(job, &c.run, c.threads)?;
    with_temp_heap(&spec, c.run.heap.is_none(), || {
        launch(&spec, c.run.json.as_deref()).map(drop)
    })
}

/// Runs `f`, then removes the embedded target's heap if the runner made it up.
fn with_temp_heap(
    spec: &RunSpec,
    made_up: bool,
    f: impl FnOnce() -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let temp = match &spec.target {
        super::targets::TargetSpec::Embedded { heap } if made_up => Some(heap.clone()),
        _ => None,
    };
    let result = f();
    if let Some(heap) = temp {
        let _ = std::fs::remove_file(heap);
    }
    result
}
