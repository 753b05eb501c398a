//! The `podkv` command line.

use crate::heap_cmd::{self, HeapCommand};
use crate::mcas_cmd;
use crate::pod::{self, PodCommand};
use crate::store_cmd::{self, StoreCommand};
use podkv_harness::bench::{self, BenchArgs};
use podkv_harness::runner::{self, cli as run_cli};
use std::path::PathBuf;

/// podkv: a key-value store for a CXL pod — several hosts (or processes) sharing one memory.
#[derive(clap::Parser, Debug)]
#[command(name = "podkv", version, about, long_about = None, arg_required_else_help = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Serve the store in a pod heap over the memcached text and meta protocol.
    ///
    /// Example: `podkv serve --heap /dev/shm/podkv-main --listen 127.0.0.1:11211`. Several
    /// processes may serve one heap (on one address with --reuseport). Stops on SIGTERM/SIGINT.
    Serve(crate::serve::ServeArgs),
    /// Create, inspect and verify pod heap files.
    #[command(subcommand)]
    Heap(HeapCommand),
    /// Verify a store (no leak, no double reference), show its statistics, recover dead
    /// slots, and dump or load its items (across format changes).
    #[command(subcommand)]
    Store(StoreCommand),
    /// Run a pod on this machine: N member servers on one heap, watched and restarted.
    #[command(subcommand)]
    Pod(PodCommand),
    /// Allocator microbenchmarks: podkv against mimalloc and the system allocator.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Run a YCSB workload against a target (or only generate it, with --dry-run).
    ///
    /// Examples: `podkv ycsb --workload a --records 100000 --ops 1000000 --threads 4
    /// --target dashmap`; `podkv ycsb --workload cxlalloc-a --dry-run --dump-ops ops.txt`.
    /// The load phase is untimed unless it is the only phase (--phase load, or a workload with
    /// no run-phase operations such as `load`).
    Ycsb(run_cli::YcsbCommand),
    /// Twitter cache traces: convert, summarise, generate.
    #[command(subcommand)]
    Trace(podkv_traces::TraceCommand),
    /// Replay a Twitter cache trace (CSV, .zst or Parquet) against a target.
    Replay(run_cli::ReplayCommand),
    /// Run an experiment suite: a TOML file whose lists are run as a cartesian product.
    Suite(run_cli::SuiteCommand),
    /// Plot NDJSON results: throughput and memory against workers, a panel per workload.
    Plot(run_cli::PlotCommand),
    /// The CXLALLOC paper's evaluation from NDJSON records: a Markdown page per figure
    /// (Figs. 8-12, tables), a PNG per panel, manifest.json. Example: `podkv report
    /// results/*.ndjson -o docs/results/` (scripts/evaluate runs every suite, then this).
    Report(podkv_harness::evaluation::ReportCommand),
    /// Run the software near-memory processor that performs mCAS for a region (CXLALLOC §4).
    ///
    /// Claims the region (taking it over from a processor whose heartbeat stopped), then
    /// serves every client's requests until SIGTERM/SIGINT, when it answers what is pending
    /// and releases the claim. Exits non-zero if a live processor already serves the region.
    /// Example: `podkv mcas-nmp --heap /dev/shm/podkv-mcas --create`.
    McasNmp(mcas_cmd::NmpArgs),
    /// One process of a multi-process run (started by `podkv ycsb`, `podkv replay` and
    /// `podkv bench`).
    #[command(hide = true)]
    RunWorker {
        /// The control file.
        #[arg(long)]
        control: PathBuf,
        /// This process's index.
        #[arg(long)]
        process: usize,
        /// The run, as JSON.
        #[arg(long)]
        spec: String,
    },
}

impl Command {
    /// Whether the command only reads files and prints a report (no socket, no child, no
    /// long-running service), so a closed stdout may simply end it.
    pub fn only_reads_and_prints(&self) -> bool {
        match self {
            Command::Heap(c) => matches!(
                c,
                HeapCommand::Create { .. }
                    | HeapCommand::Info { .. }
                    | HeapCommand::Recover { .. }
                    | HeapCommand::Check { .. }
            ),
            Command::Store(_) | Command::Trace(_) => true,
            _ => false,
        }
    }
}

/// `podkv bench` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// Thread-local batches: allocate `--batch` objects, write each, free them all; repeat.
    Threadtest(BenchArgs),
    /// Producer/consumer: each worker hands every block to the next, which frees it (remote).
    Xmalloc(BenchArgs),
    /// Nanoseconds per CAS: plain CPU CAS against the mCAS kinds (flush-cas, nmp), alone and
    /// with two threads on one word. Example: `podkv bench mcas --repeat 5`.
    Mcas(bench::mcas::BenchMcasArgs),
    /// Huge blocks (1 GiB by default): threadtest and xmalloc over processes × threads, podkv
    /// mapping one file region per block, against mimalloc and the system allocator.
    Huge(bench::huge::HugeArgs),
    /// NVAlloc's Fragbench: allocate, delete a share at random, allocate other sizes; PSS
    /// and slab occupancy after each phase. Example: `podkv bench frag --workload w1,w3`.
    Frag(bench::frag::FragArgs),
    /// Recovery time: open the store and settle a writer's slots after its `kill -9`
    /// (the writer's threads each hold a slot and are writing when it is killed).
    Recovery(bench::recovery::RecoveryArgs),
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => crate::serve::run(&args),
        Command::Heap(command) => heap_cmd::run(&command),
        Command::Store(command) => store_cmd::run(&command),
        Command::Pod(command) => pod::run(&command),
        Command::Bench(BenchCommand::Threadtest(args)) => {
            bench::run(bench::Kind::Threadtest, &args).map(drop)
        }
        Command::Bench(BenchCommand::Xmalloc(args)) => {
            bench::run(bench::Kind::Xmalloc, &args).map(drop)
        }
        Command::Bench(BenchCommand::Mcas(args)) => bench::mcas::run(&args),
        Command::McasNmp(args) => mcas_cmd::run_nmp(&args),
        Command::Bench(BenchCommand::Huge(args)) => bench::huge::run(&args),
        Command::Bench(BenchCommand::Frag(args)) => bench::frag::run(&args),
        Command::Bench(BenchCommand::Recovery(args)) => bench::recovery::run(&args),
        Command::Ycsb(c) => run_cli::ycsb(&c),
        Command::Trace(c) => c.run().map_err(Into::into),
        Command::Replay(c) => run_cli::replay(&c),
        Command::Suite(c) => runner::suite::run(&c),
        Command::Plot(c) => runner::plot::plot(&c.input, &c.output),
        Command::Report(c) => podkv_harness::evaluation::run(&c),
        Command::RunWorker {
            control,
            process,
            spec,
        } => runner::worker_main(&control, process, &spec),
    }
}
