//! `podkv store check|stats|recover PATH`: prove a store's heap accounts for every block, show
//! its statistics, recover the thread slots of killed processes. The logic lives in
//! `podkv_store` (`check_path`, `Store::recover_dead`); this file only prints. `dump` and `load`
//! are `transfer_cmd`'s.

use crate::transfer_cmd::{self, DumpArgs, LoadArgs};
use std::path::{Path, PathBuf};

/// The `podkv store` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum StoreCommand {
    /// Write every live item (key, flags, expiry, CAS token, meta state, value) to standard
    /// output as a versioned stream, to load into a heap of another format or geometry.
    /// Safe while servers use the heap.
    Dump(DumpArgs),
    /// Store the items of a dump read from standard input; a truncated or foreign stream is
    /// refused before anything is written.
    Load(LoadArgs),
    /// Walk the index and every limbo list; fail naming each leak, double reference or
    /// broken invariant (run on a quiescent heap).
    Check {
        /// Heap file holding the store.
        path: PathBuf,
    },
    /// Recover the thread slots of processes that died (e.g. SIGKILL): finish each one's
    /// allocator step, free what it allocated and never linked, retire what it unlinked, and
    /// release its epoch announcement. Safe while other processes use the store.
    Recover {
        /// Heap file holding the store.
        path: PathBuf,
    },
    /// Items, bytes, buckets, epoch and heap bytes per item.
    Stats {
        /// Heap file holding the store.
        path: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a `podkv store` subcommand.
pub fn run(command: &StoreCommand) -> anyhow::Result<()> {
    match command {
        StoreCommand::Dump(args) => transfer_cmd::dump(args),
        StoreCommand::Load(args) => transfer_cmd::load(args),
        StoreCommand::Check { path } => check(path),
        StoreCommand::Recover { path } => recover(path),
        StoreCommand::Stats { path, json } => stats(path, *json),
    }
}

/// `podkv store check`: the store's walker over the heap; an error if it found problems.
fn check(path: &Path) -> anyhow::Result<()> {
    let report = podkv_store::check_path(path)?;
    for problem in &report.problems {
        eprintln!("problem: {problem}");
    }
    anyhow::ensure!(
        report.is_valid(),
        "{}: {} problems",
        path.display(),
        report.problems.len()
    );
    println!(
        "{}: ok — {} items, {} limbo entries, {} heap blocks all accounted for",
        path.display(),
        report.store.items,
        report.store.limbo_entries,
        report.heap_live_blocks
    );
    Ok(())
}

/// `podkv store recover`: settles every dead slot of the store on the heap.
fn recover(path: &Path) -> anyhow::Result<()> {
    let store =
        podkv_store::open_existing(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let start = std::time::Instant::now();
    let settled = store.recover_dead()?;
    let took = start.elapsed();
    for s in &settled {
        println!(
            "slot {}: {} blocks freed, {} items retired, allocator: {:?}",
            s.slot, s.freed, s.retired, s.in_flight
        );
    }
    println!(
        "{}: {} dead slots recovered in {took:?}",
        path.display(),
        settled.len()
    );
    Ok(())
}

/// `podkv store stats`: the store's statistics, as a table or JSON.
fn stats(path: &Path, json: bool) -> anyhow::Result<()> {
    let report = podkv_store::check_path(path)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    let s = &report.store;
    println!("items           {}", s.items);
    println!(
        "item bytes      {} (payload {})",
        s.item_bytes, s.payload_bytes
    );
    println!(
        "buckets         2^{} ({} made, {} blocks, {} segments)",
        s.buckets_log2, s.buckets, s.blocks_bucket, s.segments
    );
    println!(
        "limbo           {} entries in {} bags",
        s.limbo_entries, s.bags
    );
    println!("epoch           {}", s.epoch);
    println!(
        "capacity        {}",
        if s.capacity == 0 {
            "unlimited".into()
        } else {
            s.capacity.to_string()
        }
    );
    println!(
        "heap live       {} bytes in {} blocks",
        report.heap_live_bytes, report.heap_live_blocks
    );
    println!("heap bytes/item {:.1}", report.heap_bytes_per_item());
    println!(
        "hwcc            {} bytes ({} of them the store's words), {:.2} bytes/item, {:.4}% of heap live",
        report.heap_hwcc_bytes,
        s.hwcc_bytes,
        report.hwcc_bytes_per_item(),
        100.0 * report.heap_hwcc_bytes as f64 / report.heap_live_bytes.max(1) as f64
    );
    println!("valid           {}", report.is_valid());
    Ok(())
}
