//! `podkv store check|stats PATH`: prove a store's heap accounts for every block, and show its
//! statistics. The logic lives in `podkv_store::check_path`; this file only prints.

use std::path::PathBuf;

/// The `podkv store` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum StoreCommand {
    /// Walk the index and every limbo list; fail naming each leak, double reference or
    /// broken invariant (run on a quiescent heap).
    Check {
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
        StoreCommand::Check { path } => {
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
        StoreCommand::Stats { path, json } => {
            let report = podkv_store::check_path(path)?;
            if *json {
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
                "buckets         2^{} ({} sentinels, {} segments)",
                s.buckets_log2, s.sentinels, s.segments
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
            println!("valid           {}", report.is_valid());
            Ok(())
        }
    }
}
