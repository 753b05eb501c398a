//! The human table of `podkv bench frag`: per workload and allocator, the medians over repeats
//! of PSS at each phase's end, the live data, throughput, and podkv's occupancy bands.

use super::{FragArgs, Record};
use crate::helpers::{human_bytes, median};

/// The median of `value` over the records of one workload, allocator and phase.
fn median_of(
    records: &[Record],
    workload: &str,
    allocator: &str,
    phase: &str,
    value: impl Fn(&Record) -> f64,
) -> f64 {
    let mut values: Vec<f64> = records
        .iter()
        .filter(|r| r.workload == workload && r.allocator == allocator && r.result.phase == phase)
        .map(value)
        .collect();
    median(&mut values)
}

/// Operations per second over a run's allocating phases (Before and After), median over runs.
fn throughput(records: &[Record], workload: &str, allocator: &str) -> f64 {
    let mut runs: Vec<f64> = Vec::new();
    let mine = |r: &&Record| r.workload == workload && r.allocator == allocator;
    for repeat in records.iter().filter(mine).map(|r| r.repeat) {
        if runs.len() > repeat {
            continue;
        }
        let (ops, secs) = records
            .iter()
            .filter(mine)
            .filter(|r| r.repeat == repeat && r.result.phase != "delete")
            .fold((0.0, 0.0), |(o, s), r| {
                (o + r.result.ops as f64, s + r.result.seconds)
            });
        runs.push(ops / f64::max(secs, 1e-9));
    }
    median(&mut runs)
}

/// Prints one table per workload.
pub fn print(args: &FragArgs, records: &[Record]) {
    println!(
        "Fragbench: {} allocated per phase, at most {} live; medians of {} run(s); PSS at each phase's end",
        human_bytes(args.total_bytes),
        human_bytes(args.live_bytes),
        args.repeat
    );
    for &workload in &args.workload {
        let w = workload.name();
        println!(
            "\n{w}  {:<13} {:>10} {:>10} {:>10} {:>9} {:>10} {:>12} {:>18}",
            "allocator",
            "before",
            "delete",
            "after",
            "vs mi",
            "live",
            "ops/s",
            "podkv 0-30/30-70/70-100%"
        );
        let mi_after = median_of(records, w, "mimalloc", "after", |r| {
            r.result.pss_bytes as f64
        });
        for &allocator in &args.allocator {
            let a = allocator.name();
            let pss = |phase| median_of(records, w, a, phase, |r| r.result.pss_bytes as f64) as u64;
            let live = median_of(records, w, a, "after", |r| r.result.live_bytes as f64) as u64;
            let ratio = if mi_after > 0.0 {
                format!("{:.2}x", pss("after") as f64 / mi_after)
            } else {
                "-".into()
            };
            let bands = records
                .iter()
                .rev()
                .find(|r| r.workload == w && r.allocator == a && r.result.phase == "after")
                .and_then(|r| r.result.occupancy)
                .map_or("-".into(), |[l, m, h]| format!("{l}/{m}/{h}"));
            println!(
                "    {a:<13} {:>10} {:>10} {:>10} {ratio:>9} {:>10} {:>12.0} {bands:>18}",
                human_bytes(pss("before")),
                human_bytes(pss("delete")),
                human_bytes(pss("after")),
                human_bytes(live),
                throughput(records, w, a),
            );
        }
    }
}
