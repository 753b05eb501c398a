//! The `podkv` command line.

use crate::bench::{self, BenchArgs};
use crate::heap_cmd::{self, HeapCommand};
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
    /// Create, inspect and verify pod heap files.
    #[command(subcommand)]
    Heap(HeapCommand),
    /// Allocator microbenchmarks: podkv against mimalloc and the system allocator.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// One process of a multi-process benchmark (started by `podkv bench`).
    #[command(hide = true)]
    BenchWorker {
        /// Heap file.
        #[arg(long)]
        heap: PathBuf,
        /// Offset of the control block.
        #[arg(long)]
        control: u64,
        /// This process's index.
        #[arg(long)]
        process: usize,
    },
}

/// `podkv bench` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// Thread-local batches: allocate `--batch` objects, write each, free them all; repeat.
    Threadtest(BenchArgs),
    /// Producer/consumer: each worker hands every block to the next, which frees it (remote).
    Xmalloc(BenchArgs),
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Heap(command) => heap_cmd::run(&command),
        Command::Bench(BenchCommand::Threadtest(args)) => {
            bench::run(bench::Kind::Threadtest, &args).map(drop)
        }
        Command::Bench(BenchCommand::Xmalloc(args)) => {
            bench::run(bench::Kind::Xmalloc, &args).map(drop)
        }
        Command::BenchWorker {
            heap,
            control,
            process,
        } => bench::worker_process(&heap, control, process),
    }
}
