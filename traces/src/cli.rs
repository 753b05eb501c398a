//! `podkv trace …`: clap argument structs and the functions that run them.
//!
//! The `podkv` binary mounts [`TraceCommand`] (or the three `Args` structs) under `trace`:
//!
//! ```text
//! podkv trace convert IN OUT
//! podkv trace stats FILE [--json] [--compare N]
//! podkv trace generate --cluster N --ops M [--seed S] [--value-drift FROM:TO] OUT
//! ```

use std::io::Write;
use std::path::PathBuf;

use serde::Serialize;

use crate::cluster::{cluster, Deviation};
use crate::progress::Progress;
use crate::run::{convert_with, generate_with, stats_with, BadLines, Drained};
use crate::stats::{Stats, StatsOptions};
use crate::TraceError;

/// Trace tools: convert between formats, summarise, generate synthetic traces.
///
/// The variants' doc comments are the subcommands' `--help` text (clap takes the variant's
/// comment over the struct's).
#[derive(Clone, Debug, clap::Subcommand)]
pub enum TraceCommand {
    /// Rewrite a trace in another format (CSV, .zst, Parquet), chosen by extension.
    ///
    /// `.parquet` is Parquet (zstd, 1M-row groups); `.zst` is zstd-compressed CSV (the form
    /// Twitter publishes, e.g. `cluster12.000.zst`); anything else is plain CSV
    /// `timestamp,key,key size,value size,client id,operation,TTL`. Both sides stream, so files
    /// of any size convert in constant memory. A malformed line stops the conversion with its
    /// line number unless --skip-bad-lines is given.
    Convert(ConvertArgs),
    /// Print a trace's statistics in the terms of the published Twitter table.
    ///
    /// Request count, operation mix, mean key and value size (over requests), mean frequency,
    /// one-hit-wonder ratio (share of distinct keys requested exactly once, over the whole
    /// trace unless --window is given), compulsory miss ratio, Zipf alpha (least-squares slope
    /// of log request count against log rank, over every rank unless --rank-first/--rank-last
    /// narrow it) and common TTLs. Memory grows with the number of distinct keys (about 32
    /// bytes each).
    Stats(StatsArgs),
    /// Write a synthetic trace shaped like one of the published Twitter clusters.
    ///
    /// The trace follows the cluster's row of the published statistics table: operation mix,
    /// mean key and value sizes, distinct keys and one-hit wonders, Zipf alpha, common TTLs and
    /// request rate. The write-heavy clusters used by the CXLALLOC paper are 12, 15, 31 and 37.
    /// The same seed always gives the same trace. Memory is about 4 bytes per request.
    Generate(GenerateArgs),
}

impl TraceCommand {
    /// Runs the command, printing its result.
    pub fn run(self) -> Result<(), TraceError> {
        match self {
            TraceCommand::Convert(a) => run_convert(a).map(drop),
            TraceCommand::Stats(a) => run_stats(a).map(drop),
            TraceCommand::Generate(a) => run_generate(a).map(drop),
        }
    }
}

/// Arguments of `podkv trace convert IN OUT` (see [`TraceCommand::Convert`]).
#[derive(Clone, Debug, clap::Args)]
pub struct ConvertArgs {
    /// Trace to read (`.csv`, `.zst`, `.parquet`).
    pub input: PathBuf,
    /// Trace to write; its extension picks the format (`.parquet`, `.csv.zst`, `.csv`).
    pub output: PathBuf,
    /// Skip malformed lines (the first ten are shown on stderr) instead of stopping at the
    /// first one.
    #[arg(long)]
    pub skip_bad_lines: bool,
}

/// Arguments of `podkv trace stats FILE` (see [`TraceCommand::Stats`]; definitions in
/// [`crate::stats`]).
#[derive(Clone, Debug, clap::Args)]
pub struct StatsArgs {
    /// Trace to read (`.csv`, `.zst`, `.parquet`).
    pub file: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also compare with the published row of this cluster (e.g. 12).
    #[arg(long, value_name = "CLUSTER")]
    pub compare: Option<u32>,
    /// Compute the one-hit-wonder ratio per window of this many requests and average it,
    /// instead of over the whole trace.
    #[arg(long, value_name = "REQUESTS", value_parser = clap::value_parser!(u64).range(1..))]
    pub window: Option<u64>,
    /// First rank of the Zipf fit.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub rank_first: u64,
    /// Last rank of the Zipf fit [default: the number of distinct keys].
    #[arg(long)]
    pub rank_last: Option<u64>,
    /// Skip malformed lines instead of stopping at the first one.
    #[arg(long)]
    pub skip_bad_lines: bool,
}

/// Arguments of `podkv trace generate --cluster N --ops M [--seed S] OUT` (see
/// [`TraceCommand::Generate`]; the model is in [`crate::generate`]).
#[derive(Clone, Debug, clap::Args)]
pub struct GenerateArgs {
    /// Cluster number from the published table (1–54, except 5).
    #[arg(long)]
    pub cluster: u32,
    /// Number of requests to generate.
    #[arg(long)]
    pub ops: u64,
    /// Seed for the deterministic generator.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Value sizes drift linearly over the trace from about FROM to about TO bytes (each key
    /// ±1/8 around the mean), instead of the cluster's per-key sizes: a size shift on a
    /// fixed key set, e.g. `--value-drift 100:1024`.
    #[arg(long, value_name = "FROM:TO")]
    pub value_drift: Option<crate::generate::Drift>,
    /// Trace to write; its extension picks the format (`.parquet`, `.csv.zst`, `.csv`).
    pub output: PathBuf,
}

/// What `stats` found, as printed by `--json`.
#[derive(Clone, Debug, Serialize)]
pub struct StatsReport {
    /// The file read.
    pub file: PathBuf,
    /// Malformed lines skipped.
    pub skipped_lines: u64,
    /// The statistics.
    #[serde(flatten)]
    pub stats: Stats,
    /// Published figures beside measured ones, with `--compare`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub published: Option<Vec<Deviation>>,
}

fn policy(skip: bool) -> BadLines {
    if skip {
        BadLines::Skip
    } else {
        BadLines::Fail
    }
}

fn report_skipped(done: Drained) {
    if done.skipped > 0 {
        eprintln!("skipped {} malformed lines", done.skipped);
    }
}

/// Runs `podkv trace convert`; returns the requests written and lines skipped.
pub fn run_convert(args: ConvertArgs) -> Result<Drained, TraceError> {
    let done = convert_with(
        &args.input,
        &args.output,
        policy(args.skip_bad_lines),
        |r| Progress::reading(r.position()),
    )?;
    report_skipped(done);
    eprintln!(
        "wrote {} requests to {}",
        done.records,
        args.output.display()
    );
    Ok(done)
}

/// Runs `podkv trace stats`: prints the table (or JSON) on stdout and returns the report.
pub fn run_stats(args: StatsArgs) -> Result<StatsReport, TraceError> {
    let published = args.compare.map(cluster).transpose()?;
    let options = StatsOptions {
        window: args.window,
        rank_first: args.rank_first,
        rank_last: args.rank_last,
        ..StatsOptions::default()
    };
    let (stats, done) = stats_with(&args.file, options, policy(args.skip_bad_lines), |r| {
        Progress::reading(r.position())
    })?;
    report_skipped(done);
    let report = StatsReport {
        file: args.file,
        skipped_lines: done.skipped,
        published: published.map(|c| c.compare(&stats)),
        stats,
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", report.stats)?;
        if let (Some(rows), Some(n)) = (&report.published, args.compare) {
            writeln!(
                out,
                "\n{:<27} {:>12} {:>12}",
                "metric",
                format!("cluster{n}"),
                "measured"
            )?;
            for d in rows {
                writeln!(
                    out,
                    "{:<27} {:>12.4} {:>12.4}",
                    d.metric, d.published, d.measured
                )?;
            }
        }
    }
    Ok(report)
}

/// What `generate` wrote.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct GenerateReport {
    /// The cluster imitated.
    pub cluster: u32,
    /// Requests written.
    pub requests: u64,
}

/// Runs `podkv trace generate`; returns what it wrote.
pub fn run_generate(args: GenerateArgs) -> Result<GenerateReport, TraceError> {
    let progress = Progress::counting(args.ops);
    let requests = generate_with(
        args.cluster,
        args.ops,
        args.seed,
        &args.output,
        args.value_drift,
        &progress,
    )?;
    eprintln!(
        "wrote {requests} requests shaped like cluster{} to {}",
        args.cluster,
        args.output.display()
    );
    Ok(GenerateReport {
        cluster: args.cluster,
        requests,
    })
}
