//! `podkv ycsb`: the command-line arguments ([`YcsbArgs`], mounted by the server crate)
//! and the dry run ([`dry_run`]) that generates a workload without a store.
//!
//! Properties are layered in this order, later winning: `--workload NAME`, each `-P FILE`,
//! each `-p KEY=VALUE`, then `--records`, `--ops`, `--seed` (see [`crate::properties`]).

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;

use serde::Serialize;

use crate::dump::dump_phase;
use crate::error::YcsbError;
use crate::op::OpCounts;
use crate::properties::Properties;
use crate::stream::{OpStream, Phase};
use crate::workload::Workload;

/// Which phases to generate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PhaseArg {
    /// Only the load phase (YCSB's `-load`).
    Load,
    /// Only the run phase (YCSB's `-t`).
    Run,
    /// The load phase, then the run phase.
    Both,
}

impl PhaseArg {
    /// The phases, in order.
    pub fn phases(&self) -> &'static [Phase] {
        match self {
            PhaseArg::Load => &[Phase::Load],
            PhaseArg::Run => &[Phase::Run],
            PhaseArg::Both => &[Phase::Load, Phase::Run],
        }
    }
}

/// Arguments of `podkv ycsb`: which YCSB CoreWorkload to generate, and how.
#[derive(Clone, Debug, clap::Args)]
pub struct YcsbArgs {
    /// Shipped workload: YCSB's `a`-`f`, or CXLALLOC's `load`, `cxlalloc-a` (50% read, 25%
    /// insert, 25% delete, zipfian) and `cxlalloc-d` (95% read, 5% insert, latest).
    /// Without it, CoreWorkload's defaults apply.
    #[arg(long, value_name = "NAME")]
    pub workload: Option<String>,

    /// Property file, as YCSB's `-P` (`key=value` lines, `#` comments). Repeatable;
    /// later files override earlier ones and the shipped workload.
    #[arg(short = 'P', long = "property-file", value_name = "FILE")]
    pub property_files: Vec<PathBuf>,

    /// One property, as YCSB's `-p` (e.g. `-p requestdistribution=uniform`). Repeatable;
    /// overrides every file. podkv adds `deleteproportion`, `podkv.keybytes=8` (the
    /// paper's 8-byte keys, 1 field of 960 bytes) and `podkv.seed`.
    #[arg(short = 'p', long = "property", value_name = "KEY=VALUE")]
    pub properties: Vec<String>,

    /// Records to load (`recordcount`); overrides every property source.
    #[arg(long, value_name = "N")]
    pub records: Option<u64>,

    /// Run-phase operations (`operationcount`); overrides every property source.
    #[arg(long, value_name = "N")]
    pub ops: Option<u64>,

    /// Seed of every worker's RNG (`podkv.seed`, default 0): the same seed and thread
    /// count give the same operations.
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,

    /// Phases to generate.
    #[arg(long, value_enum, default_value_t = PhaseArg::Both)]
    pub phase: PhaseArg,

    /// Worker threads (YCSB's `-threads`); each gets its share of the operations and
    /// its own RNG stream.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub threads: usize,

    /// Generate the operations without running them against a store.
    #[arg(long)]
    pub dry_run: bool,

    /// Write every generated operation to FILE (`-` for standard output), one per line:
    /// `read K`, `update K`, `insert K`, `delete K`, `scan K N`, a read-modify-write as
    /// `read K rmw` + `update K rmw`, and `# phase load` / `# phase run` markers.
    #[arg(long, value_name = "FILE")]
    pub dump_ops: Option<String>,
}

/// What a dry run generated.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DryRunSummary {
    /// The workload name (`--workload`), or `core` for CoreWorkload's defaults.
    pub workload: String,
    /// The seed used.
    pub seed: u64,
    /// Worker threads.
    pub threads: usize,
    /// Load-phase counts, if the load phase was generated.
    pub load: Option<OpCounts>,
    /// Run-phase counts, if the run phase was generated.
    pub run: Option<OpCounts>,
    /// Properties set but not read by CoreWorkload (likely typos or client settings).
    pub ignored_keys: Vec<String>,
}

impl YcsbArgs {
    /// The properties, layered in precedence order.
    pub fn properties(&self) -> Result<Properties, YcsbError> {
        let mut props = match &self.workload {
            Some(name) => Properties::named(name)?,
            None => Properties::new(),
        };
        for path in &self.property_files {
            props.merge_file(path)?;
        }
        for arg in &self.properties {
            props.merge_arg(arg)?;
        }
        self.apply_shorthands(&mut props);
        Ok(props)
    }

    /// The resolved workload.
    pub fn workload(&self) -> Result<Workload, YcsbError> {
        Workload::from_properties(&self.properties()?)
    }

    fn apply_shorthands(&self, props: &mut Properties) {
        if let Some(n) = self.records {
            props.records(n);
        }
        if let Some(n) = self.ops {
            props.ops(n);
        }
        if let Some(seed) = self.seed {
            props.seed(seed);
        }
    }
}

/// Generates the selected phases without a store, writing the dump if `--dump-ops` is
/// given, and returns the counts per operation kind.
pub fn dry_run(args: &YcsbArgs) -> Result<DryRunSummary, YcsbError> {
    let workload = args.workload()?;
    let target = args.dump_ops.as_deref();
    let mut out = open_dump(target)?;
    let mut summary = DryRunSummary {
        workload: args.workload.clone().unwrap_or_else(|| "core".into()),
        seed: workload.seed,
        threads: args.threads,
        load: None,
        run: None,
        ignored_keys: workload.ignored_keys.clone(),
    };
    let name = target.unwrap_or("(none)");
    for &phase in args.phase.phases() {
        let streams = OpStream::streams(&workload, phase, args.threads)?;
        let counts = dump_phase(&mut out, phase, streams, name)?;
        match phase {
            Phase::Load => summary.load = Some(counts),
            Phase::Run => summary.run = Some(counts),
        }
    }
    out.flush().map_err(|source| dump_error(name, source))?;
    Ok(summary)
}

fn open_dump(target: Option<&str>) -> Result<Box<dyn Write>, YcsbError> {
    Ok(match target {
        None => Box::new(io::sink()),
        Some("-") => Box::new(BufWriter::new(io::stdout().lock())),
        Some(path) => {
            let file = File::create(path).map_err(|source| dump_error(path, source))?;
            Box::new(BufWriter::new(file))
        }
    })
}

fn dump_error(target: &str, source: io::Error) -> YcsbError {
    YcsbError::Dump {
        target: target.into(),
        source,
    }
}

impl std::fmt::Display for DryRunSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "workload {} seed {} threads {}",
            self.workload, self.seed, self.threads
        )?;
        if let Some(load) = &self.load {
            writeln!(f, "load: {load}")?;
        }
        if let Some(run) = &self.run {
            writeln!(f, "run: {run}")?;
        }
        if !self.ignored_keys.is_empty() {
            writeln!(f, "ignored properties: {}", self.ignored_keys.join(", "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        ycsb: YcsbArgs,
    }

    fn parse(args: &[&str]) -> YcsbArgs {
        Cli::try_parse_from(std::iter::once("podkv-ycsb").chain(args.iter().copied()))
            .unwrap()
            .ycsb
    }

    #[test]
    fn flags_parse() {
        let a = parse(&[
            "--workload",
            "a",
            "-P",
            "x",
            "-P",
            "y",
            "-p",
            "k=v",
            "--records",
            "5",
            "--ops",
            "6",
            "--seed",
            "7",
            "--phase",
            "run",
            "--threads",
            "3",
            "--dry-run",
            "--dump-ops",
            "-",
        ]);
        assert_eq!(a.workload.as_deref(), Some("a"));
        assert_eq!(a.property_files, [PathBuf::from("x"), PathBuf::from("y")]);
        assert_eq!(a.properties, ["k=v"]);
        assert_eq!((a.records, a.ops, a.seed), (Some(5), Some(6), Some(7)));
        assert_eq!(a.phase, PhaseArg::Run);
        assert_eq!(a.threads, 3);
        assert!(a.dry_run);
        assert_eq!(a.dump_ops.as_deref(), Some("-"));
        let d = parse(&[]);
        assert_eq!((d.phase, d.threads, d.dry_run), (PhaseArg::Both, 1, false));
    }

    #[test]
    fn shorthands_override_properties() {
        let a = parse(&[
            "--workload",
            "b",
            "-p",
            "recordcount=9",
            "--records",
            "12",
            "--ops",
            "3",
        ]);
        let w = a.workload().unwrap();
        assert_eq!((w.record_count, w.operation_count), (12, 3));
    }

    #[test]
    fn dry_run_counts_phases() {
        let a = parse(&[
            "--workload",
            "a",
            "--records",
            "100",
            "--ops",
            "200",
            "--threads",
            "2",
        ]);
        let s = dry_run(&a).unwrap();
        assert_eq!(s.load.unwrap().insert, 100);
        let run = s.run.unwrap();
        assert_eq!(run.total(), 200);
        assert_eq!(run.read + run.update, 200);
        assert!(s.to_string().contains("run: total=200"));
    }
}
