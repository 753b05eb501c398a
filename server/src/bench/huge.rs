//! `podkv bench huge`: threadtest and xmalloc with huge blocks (1 GiB by default), as
//! CXLALLOC §5.3 runs them, swept over processes × threads, podkv against mimalloc and the
//! system allocator in the same binary.
//!
//! # What a run touches
//! The loops write one byte of each block (its first page), so memory stays bounded by
//! metadata and one page per live block: podkv backs huge blocks `sparse`ly here by default
//! (only touched pages; `--huge-backing reserve` backs all of them), and the baselines' `mmap`s
//! are lazy too. Every live podkv huge block holds one of its slot's 127 descriptors, so
//! xmalloc runs with a window of `--batch` blocks per producer instead of a 4096-slot ring.
//!
//! Each podkv configuration runs in this process (its own workers spawned as usual); each
//! baseline runs as a child `podkv bench threadtest|xmalloc` with a deadline (`--timeout`), and
//! is reported as timed out if it does not finish. Records are the same NDJSON as the other
//! `podkv bench` commands.

use super::{AllocatorName, Backing, BenchArgs, Kind};
use crate::heap_cmd::parse_bytes;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Flags of `podkv bench huge`.
#[derive(clap::Args, Clone, Debug)]
pub struct HugeArgs {
    /// Patterns to run, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "threadtest,xmalloc")]
    pub pattern: Vec<Kind>,
    /// Allocators, comma separated (mimalloc and system run with one process only).
    #[arg(long, value_delimiter = ',', default_value = "podkv,mimalloc,system")]
    pub allocator: Vec<AllocatorName>,
    /// Bytes per allocation.
    #[arg(long, default_value = "1GiB", value_parser = parse_bytes)]
    pub size: u64,
    /// Allocations per run, split evenly across workers.
    #[arg(long, default_value_t = 4000)]
    pub ops: u64,
    /// Threads per process to sweep, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub threads: Vec<usize>,
    /// Processes to sweep, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub processes: Vec<usize>,
    /// threadtest: blocks live per round; xmalloc: hand-over batch and window per producer.
    #[arg(long, default_value_t = 4)]
    pub batch: usize,
    /// Runs per configuration; tables show the median.
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Append one NDJSON record per run to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// How podkv backs huge blocks.
    #[arg(long, value_enum, default_value = "sparse")]
    pub huge_backing: Backing,
    /// Seconds a baseline configuration may run before it is abandoned.
    #[arg(long, default_value_t = 120)]
    pub timeout: u64,
    /// Heap file for podkv [default: a fresh file under /dev/shm per run, removed afterwards].
    #[arg(long)]
    pub heap: Option<PathBuf>,
}

/// One line of the summary.
struct Row {
    kind: Kind,
    processes: usize,
    threads: usize,
    allocator: AllocatorName,
    /// Median ops/s, or `None` when the run timed out.
    ops_per_sec: Option<f64>,
    pss_bytes: u64,
}

/// Runs the sweep and prints one summary table.
pub fn run(args: &HugeArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.batch >= 1 && args.batch <= 32,
        "--batch must be 1 to 32"
    );
    anyhow::ensure!(
        args.size > 512 << 10,
        "--size must be over 512 KiB (a huge block)"
    );
    let mut rows = Vec::new();
    for &kind in &args.pattern {
        for &processes in &args.processes {
            for &threads in &args.threads {
                if kind == Kind::Xmalloc && processes * threads < 2 {
                    continue; // xmalloc hands blocks between at least two workers
                }
                for &allocator in &args.allocator {
                    if allocator != AllocatorName::Podkv && processes > 1 {
                        continue;
                    }
                    let row = run_one(args, kind, processes, threads, allocator)?;
                    rows.push(row);
                }
            }
        }
    }
    print_summary(args, &rows);
    Ok(())
}

fn bench_args(
    args: &HugeArgs,
    allocator: AllocatorName,
    processes: usize,
    threads: usize,
) -> BenchArgs {
    BenchArgs {
        allocator: vec![allocator],
        size: args.size as usize,
        ops: args.ops,
        threads: Some(threads),
        processes,
        batch: args.batch,
        heap: args.heap.clone(),
        heap_bytes: 1 << 30,
        repeat: args.repeat,
        json: args.json.clone(),
        window: Some(args.batch),
        huge_backing: args.huge_backing,
        coherence: podkv_hw::Coherence::Hardware,
        mcas_impl: podkv_hw::mcas::McasKind::FlushCas,
        huge_bytes: 1 << 40,
    }
}

fn run_one(
    args: &HugeArgs,
    kind: Kind,
    processes: usize,
    threads: usize,
    allocator: AllocatorName,
) -> anyhow::Result<Row> {
    let bench = bench_args(args, allocator, processes, threads);
    let (ops, pss) = if allocator == AllocatorName::Podkv {
        let records = super::run(kind, &bench)?;
        let mut ops: Vec<f64> = records.iter().map(|r| r.ops_per_sec).collect();
        let pss = records.iter().map(|r| r.pss_bytes).max().unwrap_or(0);
        (Some(super::metrics::median(&mut ops)), pss)
    } else {
        run_child(args, kind, &bench)?
    };
    Ok(Row {
        kind,
        processes,
        threads,
        allocator,
        ops_per_sec: ops,
        pss_bytes: pss,
    })
}

/// A baseline as a child `podkv bench <kind>` with a deadline; its NDJSON is appended to ours.
fn run_child(args: &HugeArgs, kind: Kind, bench: &BenchArgs) -> anyhow::Result<(Option<f64>, u64)> {
    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let out = ChildJson(std::env::temp_dir().join(format!(
        "podkv-bench-huge-{}-{run}.ndjson",
        std::process::id()
    )));
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .args([
            "bench",
            kind.name(),
            "--allocator",
            bench.allocator[0].name(),
        ])
        .args([
            "--size",
            &bench.size.to_string(),
            "--ops",
            &bench.ops.to_string(),
        ])
        .args(["--threads", &bench.threads.unwrap_or(1).to_string()])
        .args([
            "--batch",
            &bench.batch.to_string(),
            "--window",
            &bench.batch.to_string(),
        ])
        .args(["--repeat", &bench.repeat.to_string()])
        .arg("--json")
        .arg(&out.0)
        .stdout(std::process::Stdio::null())
        .spawn()?;
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if Instant::now() > deadline {
            child.kill()?;
            child.wait()?;
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let Some(status) = status else {
        eprintln!(
            "{} {}: timed out after {} s",
            kind.name(),
            bench.allocator[0].name(),
            args.timeout
        );
        return Ok((None, 0));
    };
    anyhow::ensure!(status.success(), "baseline run failed: {status}");
    let text = std::fs::read_to_string(&out.0)?;
    if let Some(path) = &args.json {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        file.write_all(text.as_bytes())?;
    }
    let records: Vec<serde_json::Value> = text
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let mut ops: Vec<f64> = records
        .iter()
        .filter_map(|r| r["ops_per_sec"].as_f64())
        .collect();
    let pss = records
        .iter()
        .filter_map(|r| r["pss_bytes"].as_u64())
        .max()
        .unwrap_or(0);
    Ok((Some(super::metrics::median(&mut ops)), pss))
}

/// A child's NDJSON file, removed when done with.
struct ChildJson(PathBuf);

impl Drop for ChildJson {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn print_summary(args: &HugeArgs, rows: &[Row]) {
    println!(
        "\nbench huge: size={} ops={} batch={} repeats={} backing={:?} (median ops/s; podkv/mimalloc ratio)",
        super::human_bytes(args.size),
        args.ops,
        args.batch,
        args.repeat,
        args.huge_backing
    );
    println!(
        "{:<11} {:>9} {:>7} {:<9} {:>12} {:>8} {:>11}",
        "pattern", "processes", "threads", "allocator", "ops/s", "ratio", "pss"
    );
    for row in rows {
        let mimalloc = rows
            .iter()
            .find(|r| {
                r.kind == row.kind
                    && r.threads == row.threads
                    && r.processes == 1
                    && r.allocator == AllocatorName::Mimalloc
            })
            .and_then(|r| r.ops_per_sec);
        let ratio = match (row.allocator, row.ops_per_sec, mimalloc) {
            (AllocatorName::Podkv, Some(ops), Some(base)) if base > 0.0 => {
                format!("{:.2}x", ops / base)
            }
            _ => "-".into(),
        };
        println!(
            "{:<11} {:>9} {:>7} {:<9} {:>12} {:>8} {:>11}",
            row.kind.name(),
            row.processes,
            row.threads,
            row.allocator.name(),
            row.ops_per_sec
                .map_or("timed out".into(), |ops| format!("{ops:.0}")),
            ratio,
            super::human_bytes(row.pss_bytes)
        );
    }
}
