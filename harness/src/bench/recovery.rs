//! `podkv bench recovery`: how long a restarting process takes to recover the store after a
//! writer was killed with `kill -9` while its threads were writing.
//!
//! Each repeat makes a fresh store in a heap file under `/dev/shm`, starts a writer process
//! (this binary, `--victim`) whose `--slots` threads each hold a store handle (one heap
//! slot) and write `--items` items, then keep writing and deleting until the process is
//! killed (`SIGKILL`, so the kill lands mid-operation). Recovery time is then measured in
//! this process as what a restart does: open the heap and the store
//! (`podkv_store::open_existing`) and settle every dead slot (`Map::recover_dead`): the
//! allocator finishes each slot's logged step and gives its slabs back, the store settles
//! the slot's log and limbo. The record has both parts and their sum, `recovery_ms`.

use crate::helpers::{append_ndjson, median};
use crate::process_stats;
use anyhow::Context as _;
use serde::Serialize;
use std::io::{BufRead, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// `podkv bench recovery` flags.
#[derive(clap::Args, Clone, Debug)]
pub struct RecoveryArgs {
    /// Live slots of the killed writer: its threads, each holding a store handle.
    #[arg(long, default_value_t = 4)]
    pub slots: usize,
    /// Items each writer thread stores before the kill may come.
    #[arg(long, default_value_t = 2000)]
    pub items: u64,
    /// Bytes per value.
    #[arg(long, default_value_t = 960)]
    pub value_size: usize,
    /// Kills and recoveries; the table shows the median.
    #[arg(long, default_value_t = 5)]
    pub repeat: usize,
    /// Append one NDJSON record per repeat to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Be the writer to kill, on this heap file (internal: the benchmark starts it).
    #[arg(long, hide = true)]
    pub victim: Option<PathBuf>,
}

/// One repeat's record.
#[derive(Debug, Serialize)]
struct Record {
    kind: &'static str,
    bench: &'static str,
    slots: usize,
    items: u64,
    value_size: usize,
    repeat: usize,
    /// Opening the heap and the store, ms.
    open_ms: f64,
    /// Settling the dead slots, ms.
    recover_ms: f64,
    /// Both: the recovery time.
    recovery_ms: f64,
    slots_recovered: usize,
    blocks_freed: u64,
    items_retired: u64,
    git_commit: String,
    command: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    suite: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    figure: Option<String>,
    oversubscribed: bool,
}

/// Runs `podkv bench recovery` (or, with `--victim`, is the writer it kills).
pub fn run(args: &RecoveryArgs) -> anyhow::Result<()> {
    if let Some(heap) = &args.victim {
        return victim(args, heap);
    }
    anyhow::ensure!(args.slots >= 1, "--slots must be at least 1");
    let mut totals = Vec::new();
    println!(
        "recovery after kill -9 of a writer with {} live slots ({} items of {} B each)",
        args.slots, args.items, args.value_size
    );
    for repeat in 0..args.repeat.max(1) {
        let record = once(args, repeat)?;
        println!(
            "  repeat {repeat}: {:.2} ms ({:.2} ms open, {:.2} ms settling {} slots: {} blocks freed, {} items retired)",
            record.recovery_ms,
            record.open_ms,
            record.recover_ms,
            record.slots_recovered,
            record.blocks_freed,
            record.items_retired
        );
        totals.push(record.recovery_ms);
        if let Some(json) = &args.json {
            append_ndjson(json, &record)?;
        }
    }
    println!("  median {:.2} ms", median(&mut totals));
    Ok(())
}

/// A heap file removed when dropped.
struct TempHeap(PathBuf);

impl Drop for TempHeap {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn once(args: &RecoveryArgs, repeat: usize) -> anyhow::Result<Record> {
    let heap = TempHeap(PathBuf::from(format!(
        "/dev/shm/podkv-recovery-{}-{repeat}",
        std::process::id()
    )));
    let _ = std::fs::remove_file(&heap.0);
    let mut child = Command::new(std::env::current_exe()?)
        .args(["bench", "recovery", "--victim"])
        .arg(&heap.0)
        .args(["--slots", &args.slots.to_string()])
        .args(["--items", &args.items.to_string()])
        .args(["--value-size", &args.value_size.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .context("cannot start the writer process")?;
    let mut line = String::new();
    let stdout = child.stdout.take().context("the writer has no stdout")?;
    std::io::BufReader::new(stdout).read_line(&mut line)?;
    if line.trim() != "ready" {
        let _ = child.kill();
        let status = child.wait()?;
        anyhow::bail!("the writer did not get ready ({status})");
    }
    // Let every writer get back into its write loop, so the kill lands mid-operation.
    std::thread::sleep(Duration::from_millis(20));
    child.kill()?;
    child.wait()?;
    let start = Instant::now();
    let store = podkv_store::open_existing(&heap.0)
        .map_err(|e| anyhow::anyhow!("cannot open the killed writer's store: {e}"))?;
    let opened = start.elapsed();
    let settled = store.recover_dead()?;
    let total = start.elapsed();
    let context = process_stats::context();
    Ok(Record {
        kind: "recovery",
        bench: "recovery",
        slots: args.slots,
        items: args.items,
        value_size: args.value_size,
        repeat,
        open_ms: opened.as_secs_f64() * 1e3,
        recover_ms: (total - opened).as_secs_f64() * 1e3,
        recovery_ms: total.as_secs_f64() * 1e3,
        slots_recovered: settled.len(),
        blocks_freed: settled.iter().map(|s| u64::from(s.freed)).sum(),
        items_retired: settled.iter().map(|s| u64::from(s.retired)).sum(),
        git_commit: process_stats::git_commit().into(),
        command: context.command,
        suite: context.suite,
        figure: context.figure,
        oversubscribed: process_stats::oversubscribed(args.slots),
    })
}

/// The writer: `--slots` threads store their items, then `ready` is printed, then they
/// overwrite and delete until the process is killed.
fn victim(args: &RecoveryArgs, heap: &Path) -> anyhow::Result<()> {
    // SAFETY: prctl(PR_SET_PDEATHSIG) only sets a signal for this process: the writer must
    // not outlive the benchmark that kills it.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    let store = podkv_store::Store::open(heap, podkv_store::StoreConfig::default())
        .map_err(|e| anyhow::anyhow!("cannot make the store in {}: {e}", heap.display()))?;
    let loaded = AtomicUsize::new(0);
    let value = vec![b'v'; args.value_size];
    std::thread::scope(|s| -> anyhow::Result<()> {
        let mut threads = Vec::new();
        for t in 0..args.slots {
            let (store, loaded, value) = (&store, &loaded, &value);
            threads.push(s.spawn(move || -> anyhow::Result<()> {
                let h = store.handle()?;
                let key = |i: u64| format!("w{t}:{i}");
                for i in 0..args.items {
                    h.set(key(i).as_bytes(), value, 0, 0)?;
                }
                loaded.fetch_add(1, Ordering::AcqRel);
                for i in (0..args.items.max(1)).cycle() {
                    h.set(key(i).as_bytes(), value, 0, 0)?;
                    h.delete(key(i / 2).as_bytes())?;
                }
                Ok(())
            }));
        }
        while loaded.load(Ordering::Acquire) < args.slots {
            if threads.iter().any(|t| t.is_finished()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        println!("ready");
        std::io::stdout().flush()?;
        for t in threads {
            t.join().unwrap_or_else(|p| std::panic::resume_unwind(p))?;
        }
        Ok(())
    })
}
