//! The runner's comparisons within one run: `--ab-windows` (two sides of a switch, timed in
//! windows) and `--ab-heap` (two heaps, every operation on both, the window's side timed).

mod run_support;

use run_support::{on_dashmap, records, run, run_ok as podkv, s, stdout_ok, ycsb_record};
use serde_json::Value;
use std::path::Path;
use std::sync::Mutex;

/// Held by each test while it runs: the tests compare times inside a run, and the others'
/// processes on the same cores would land in one side's windows more than the other's.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Checks that record `r` of a run of `ops` operations split them between the A/B switch's
/// sides, each with more than a tenth.
fn assert_both_sides_ran(r: &Value, ops: u64) {
    assert_both_sides_ran_share(r, ops, 10);
}

/// As [`assert_both_sides_ran`], each side with more than `1 / part` of the operations. Two
/// targets of unlike speed split them unevenly: the slower one's windows begin by catching up
/// on what the faster one ran, untimed.
fn assert_both_sides_ran_share(r: &Value, ops: u64, part: u64) {
    let sides: Vec<u64> = r["ab_ops"]
        .as_array()
        .unwrap_or_else(|| panic!("no ab_ops: {r}"))
        .iter()
        .map(|n| n.as_u64().unwrap())
        .collect();
    assert_eq!(sides.iter().sum::<u64>(), ops, "{r}");
    assert!(
        sides.iter().all(|&n| n > ops / part),
        "both sides ran: {sides:?}"
    );
}

/// The p50 latency of each side of the switch (off, on) in record `r`, in microseconds.
fn p50s(r: &Value) -> [f64; 2] {
    let sides = r["ab_latency_us"]
        .as_array()
        .unwrap_or_else(|| panic!("no ab_latency_us: {r}"));
    std::array::from_fn(|side| sides[side][0].as_f64().unwrap())
}

/// `--ab-windows` splits the timed phase's operations between the two sides of the A/B switch
/// (`podkv_hw::ab`) and compares their time per operation. This build's code never reads the
/// switch, so both sides run the same code: the ratio is the method's noise, near 1.
#[test]
fn ab_windows_split_the_timed_phase_between_the_two_sides() {
    let _serial = serial();
    let r = &on_dashmap("--workload c --records 2000 --ops 300000 --ab-windows 100");
    assert_both_sides_ran(r, 300_000);
    let ratio = r["ab_on_over_off"].as_f64().unwrap();
    assert!(
        (0.5..2.0).contains(&ratio),
        "the same code on both sides: {ratio}"
    );
    // Two worker processes cut the same windows (the launcher measures their length once)
    // and add up their sides.
    let two = ycsb_record(
        "--workload c --records 2000 --ops 200000 --processes 2 --target embedded \
         --ab-windows 100",
    );
    assert_both_sides_ran(&two, 200_000);
    let plain = &on_dashmap("--workload c --records 2000 --ops 1000");
    assert!(
        plain.get("ab_ops").is_none() && plain.get("ab_latency_us").is_none(),
        "no windows unless asked: {plain}"
    );
    refused(&["--ab-windows", "0"], "--ab-windows needs a window");
    refused(
        &[
            "--target",
            "dashmap",
            "--ab-windows",
            "1000",
            "--target-rate",
            "1000",
        ],
        "cannot go with --target-rate",
    );
}

/// Checks that `podkv ycsb --workload c --records 10 EXTRA` is refused in one line saying
/// `why`.
fn refused(extra: &[&str], why: &str) {
    let mut args = vec!["ycsb", "--workload", "c", "--records", "10"];
    args.extend_from_slice(extra);
    let out = run(&args);
    assert!(!out.status.success(), "{extra:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(why), "{extra:?}: {err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}

/// `podkv store stats HEAP`'s item count.
fn items(heap: &Path) -> u64 {
    let text = stdout_ok(&["store", "stats", s(heap)]);
    let line = text.lines().find(|l| l.starts_with("items")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// The flags of a run of CXLALLOC's `cxlalloc-a` (inserts and deletes) with `processes` ×
/// `threads` workers.
fn workload<'a>(processes: &'a str, threads: &'a str) -> Vec<&'a str> {
    vec![
        "ycsb",
        "--workload",
        "cxlalloc-a",
        "--records",
        "3000",
        "--ops",
        "60000",
        "--seed",
        "5",
        "--threads",
        threads,
        "--processes",
        processes,
    ]
}

/// A `--ab-heap` run of [`workload`] from `heap` against `other`: its record.
fn paired(heap: &Path, other: &Path, processes: &str, threads: &str, json: &Path) -> Value {
    let mut args = workload(processes, threads);
    args.extend([
        "--heap",
        s(heap),
        "--ab-heap",
        s(other),
        "--ab-windows",
        "200",
        "--json",
        s(json),
    ]);
    podkv(&args);
    records(json).pop().unwrap()
}

/// `--ab-heap`: every operation runs on both stores (with one worker, whose operations come
/// in one order, both end with the items a run on one store leaves), and each side's time is
/// its own heap's: a heap whose every shared word goes through emulated memory-side CAS
/// (flush-cas, several times slower) reads slower on whichever side it is put, with one
/// process or two.
#[test]
fn ab_heap_runs_every_operation_on_both_heaps_and_times_each_side_on_its_own() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let (fast, slow) = (dir.path().join("hardware"), dir.path().join("flush-cas"));
    let single = dir.path().join("single");
    for (heap, mode) in [(&fast, "hardware"), (&slow, "mcas"), (&single, "hardware")] {
        podkv(&["heap", "create", s(heap), "--coherence", mode]);
    }
    let json = dir.path().join("r.ndjson");
    let r = paired(&fast, &slow, "1", "1", &json);
    assert_both_sides_ran_share(&r, 60_000, 50);
    let ratio = r["ab_on_over_off"].as_f64().unwrap();
    assert!(ratio > 1.5, "flush-cas on, hardware off: {ratio} ({r})");
    let [off, on] = p50s(&r);
    assert!(
        on > 1.5 * off,
        "each side's own latency: p50 {on} µs on, {off} off"
    );
    assert_eq!(r["ab_heap"].as_str(), Some(s(&slow)), "{r}");
    // What the same operations leave in one store, run alone.
    let mut args = workload("1", "1");
    args.extend(["--heap", s(&single)]);
    podkv(&args);
    let alone = items(&single);
    assert!(alone > 0);
    assert_eq!((items(&fast), items(&slow)), (alone, alone));

    // The other way round, and two processes: each opens both heaps (whose items now
    // depend on how the processes' inserts and deletes interleave on each).
    let (fast, slow) = (
        dir.path().join("hardware-2"),
        dir.path().join("flush-cas-2"),
    );
    for (heap, mode) in [(&fast, "hardware"), (&slow, "mcas")] {
        podkv(&["heap", "create", s(heap), "--coherence", mode]);
    }
    let r = paired(&slow, &fast, "2", "1", &json);
    assert_both_sides_ran_share(&r, 60_000, 50);
    let ratio = r["ab_on_over_off"].as_f64().unwrap();
    assert!(
        ratio < 1.0 / 1.5,
        "hardware on, flush-cas off: {ratio} ({r})"
    );
    let [off, on] = p50s(&r);
    assert!(
        off > 1.5 * on,
        "each side's own latency: p50 {on} µs on, {off} off"
    );
    let (a, b) = (items(&fast), items(&slow));
    assert!(a.abs_diff(b) * 100 < a, "alike: {a} and {b} items");
    let text = stdout_ok(&["ycsb", "--workload", "c", "--records", "10", "--ops", "100"]);
    assert!(
        !text.contains("ab on"),
        "no comparison unless asked: {text}"
    );
}

/// `--ab-target`: the store against another target in one run. Loaded records are found on
/// both sides (the load ran on both), and a target that does nothing (`null`) takes a small
/// part of the store's time per operation.
#[test]
fn ab_target_compares_the_store_with_another_target() {
    let _serial = serial();
    for other in ["dashmap", "mimalloc", "null"] {
        let r = ycsb_record(&format!(
            "--workload c --records 2000 --ops 100000 --threads 2 --ab-target {other} \
             --ab-windows 200"
        ));
        // `null` does nothing, so the store's windows begin by catching up, untimed, on
        // nearly everything `null` ran: its side times few operations.
        let part = if other == "null" { 50 } else { 10 };
        assert_both_sides_ran_share(&r, 100_000, part);
        assert_eq!(r["ab_target"].as_str(), Some(other), "{r}");
        assert!(r.get("ab_heap").is_none(), "{r}");
        let ratio = r["ab_on_over_off"].as_f64().unwrap();
        if other == "null" {
            assert!(ratio < 0.5, "null against the store: {ratio}");
            continue;
        }
        assert_eq!(
            r["misses"], 0,
            "every loaded record found on both sides: {r}"
        );
        assert!((0.1..10.0).contains(&ratio), "{other}: {ratio}");
    }
}

/// `--ab-heap` and `--ab-target` are refused, in one line each, without windows, with a run
/// target that is not the store in a heap, with the run's own heap, with a heap for a target
/// that has none, with a target that cannot be compared, and with a process-local target
/// across processes.
#[test]
fn ab_heap_is_refused_where_it_cannot_compare() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let heap = dir.path().join("h");
    refused(&["--ab-heap", s(&heap)], "give both");
    refused(
        &[
            "--target",
            "dashmap",
            "--ab-windows",
            "100",
            "--ab-heap",
            s(&heap),
        ],
        "need --target embedded",
    );
    refused(
        &[
            "--heap",
            s(&heap),
            "--ab-windows",
            "100",
            "--ab-heap",
            s(&heap),
        ],
        "is the run's --heap",
    );
    let windows = ["--ab-windows", "100", "--ab-target"];
    let with = |rest: &[&'static str]| [&windows[..], rest].concat();
    refused(&with(&["embedded"]), "needs --ab-heap");
    refused(&with(&["dashmap", "--ab-heap", "h"]), "dashmap has none");
    refused(
        &with(&["memcached://127.0.0.1:1"]),
        "compare with embedded, mimalloc, dashmap or null",
    );
    refused(&with(&["mimalloc", "--processes", "2"]), "process-local");
}
