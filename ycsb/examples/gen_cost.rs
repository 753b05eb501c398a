//! Measures the cost of generating operations (not a test, not a benchmark harness):
//! one worker, release build, `std::time::Instant` around a loop that folds every
//! operation (lent by `OpStream::next_ref`, as the runner takes them) into a checksum so
//! nothing is optimized away; the best of three runs, since other processes share the
//! machine. Stream set-up (zeta) is outside the timed loop.
//!
//! ```text
//! cargo run --release -p podkv-ycsb --example gen_cost [OPS [WORKLOAD...]]
//! ```
//!
//! Naming workloads runs only those (handy under `valgrind --tool=callgrind`).

use std::hint::black_box;
use std::time::Instant;

use podkv_ycsb::{Op, OpStream, Phase, Properties, Workload};

/// Runs per workload; the fastest is reported (the machine is shared).
const REPEAT: usize = 3;

fn main() -> Result<(), podkv_ycsb::YcsbError> {
    let ops: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5_000_000);
    let only: Vec<String> = std::env::args().skip(2).collect();
    let cases = [
        ("load", "load", Phase::Load),
        ("a", "a", Phase::Run),
        ("b", "b", Phase::Run),
        ("d", "d", Phase::Run),
        ("e", "e", Phase::Run),
        ("f", "f", Phase::Run),
        ("cxlalloc-a", "cxlalloc-a", Phase::Run),
        ("cxlalloc-d", "cxlalloc-d", Phase::Run),
    ];
    println!(
        "{:<12} {:>5} {:>12} {:>10} {:>10}",
        "workload", "phase", "ops", "wall ns/op", "cpu ns/op"
    );
    for (label, name, phase) in cases {
        if !only.is_empty() && !only.iter().any(|o| o == label) {
            continue;
        }
        let mut props = Properties::named(name)?;
        props.records(1_000_000).ops(ops);
        let workload = Workload::from_properties(&props)?;
        let mut best = f64::INFINITY;
        let mut best_cpu = f64::INFINITY;
        let mut count = 0;
        for _ in 0..REPEAT {
            let mut stream = OpStream::streams(&workload, phase, 1)?.remove(0);
            count = stream.remaining();
            let (start, cpu_start) = (Instant::now(), thread_cpu_ns());
            // The runner's path: each operation lent by the stream, not copied out.
            let mut checksum = 0u64;
            while let Some(op) = stream.next_ref()? {
                checksum ^= fold(op);
            }
            let (elapsed, cpu) = (start.elapsed(), thread_cpu_ns() - cpu_start);
            black_box(checksum);
            best = best.min(elapsed.as_nanos() as f64 / count as f64);
            best_cpu = best_cpu.min(cpu as f64 / count as f64);
        }
        println!("{label:<12} {phase:>5} {count:>12} {best:>10.1} {best_cpu:>10.1}");
    }
    Ok(())
}

/// Nanoseconds this thread has spent on a CPU (first field of
/// `/proc/thread-self/schedstat`), so time lost to other processes is not counted; 0
/// where the file does not exist.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn fold(op: &Op) -> u64 {
    let key = op.key().as_bytes();
    let last = u64::from(key[key.len() - 1]);
    last ^ key.len() as u64 ^ op.key().num()
}
