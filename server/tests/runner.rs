//! The runner end to end, through the built `podkv` binary: exact counts across processes,
//! trace replay, NDJSON records, suites and plots.

mod run_support;

use run_support::{on_dashmap, records, run, run_ok as podkv, s};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn per_op(record: &Value, kind: &str) -> u64 {
    record["per_op"][kind]["ops"].as_u64().unwrap_or(0)
}

/// Counts of each run-phase line kind in a dump: (read, update, rmw).
fn dump_counts(dump: &Path) -> (u64, u64, u64) {
    let text = std::fs::read_to_string(dump).unwrap();
    let run = text.split("# phase run\n").nth(1).unwrap();
    let (mut read, mut update, mut rmw) = (0, 0, 0);
    for line in run.lines() {
        if line.ends_with(" rmw") {
            rmw += u64::from(line.starts_with("read "));
        } else if line.starts_with("read ") {
            read += 1;
        } else if line.starts_with("update ") {
            update += 1;
        }
    }
    (read, update, rmw)
}

const MIX: [&str; 12] = [
    "--workload",
    "a",
    "-p",
    "readproportion=0.5",
    "-p",
    "updateproportion=0.2",
    "-p",
    "readmodifywriteproportion=0.3",
    "--records",
    "3000",
    "--seed",
    "11",
];

#[test]
fn two_processes_add_up_to_the_dry_run() {
    let dir = tempfile::tempdir().unwrap();
    let (json, dump) = (dir.path().join("r.ndjson"), dir.path().join("ops.txt"));
    let mut dry: Vec<&str> = vec!["ycsb"];
    dry.extend(MIX);
    dry.extend([
        "--ops",
        "30001",
        "--threads",
        "4",
        "--dry-run",
        "--dump-ops",
        s(&dump),
    ]);
    podkv(&dry);
    let mut run: Vec<&str> = vec!["ycsb"];
    run.extend(MIX);
    run.extend(["--ops", "30001", "--threads", "2", "--processes", "2"]);
    run.extend(["--target", "null", "--json", s(&json)]);
    let out = podkv(&run);
    assert!(String::from_utf8_lossy(&out.stdout).contains("ops/s"));
    let r = &records(&json)[0];
    assert_eq!(r["ops"], 30001);
    assert_eq!(
        (r["processes"].as_u64(), r["threads"].as_u64()),
        (Some(2), Some(2))
    );
    let (read, update, rmw) = dump_counts(&dump);
    assert_eq!(read + update + rmw, 30001);
    assert_eq!(per_op(r, "read"), read);
    assert_eq!(per_op(r, "update"), update);
    assert_eq!(per_op(r, "rmw"), rmw);
    assert_eq!(r["hits"], 30001, "the null target hits every time");
    for field in [
        "kind",
        "workload",
        "target",
        "processes",
        "threads",
        "ops",
        "seconds",
        "ops_per_sec",
        "p50_us",
        "p99_us",
        "p999_us",
        "max_us",
        "pss_bytes",
        "page_faults",
        "git_commit",
        "hits",
        "misses",
    ] {
        assert!(r.get(field).is_some(), "NDJSON record lacks {field}: {r}");
    }
    assert_eq!(
        (r["kind"].as_str(), r["target"].as_str()),
        (Some("ycsb"), Some("null"))
    );
    assert!(r["pss_bytes"].as_u64().unwrap() > 0);
    assert!(r["ops_per_sec"].as_f64().unwrap() > 0.0);
}

#[test]
fn loaded_records_are_all_found_by_reads() {
    let r = &on_dashmap("--workload c --records 2000 --ops 10000");
    assert_eq!(per_op(r, "read"), 10000);
    assert_eq!(r["per_op"]["read"]["hits"], 10000, "{r}");
    assert_eq!(r["misses"], 0);
}

/// CXLALLOC's `load` has no run phase: `podkv ycsb --workload load` times its load phase,
/// as `--phase load` does, instead of reporting a run of nothing.
#[test]
fn the_load_workload_times_its_load_phase() {
    let r = &on_dashmap("--workload load --records 3000");
    assert_eq!(per_op(r, "insert"), 3000, "{r}");
    assert!(r["ops_per_sec"].as_f64().unwrap() > 0.0, "{r}");
}

/// A timed phase of no operations says so instead of printing rates of nothing.
#[test]
fn a_run_of_no_operations_prints_no_rates() {
    let out = run(&[
        "ycsb",
        "--workload",
        "a",
        "--records",
        "100",
        "--ops",
        "0",
        "--phase",
        "run",
        "--target",
        "dashmap",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("no operations timed"), "{text}");
    assert!(!text.contains("ops/s"), "{text}");
}

#[test]
fn process_local_targets_refuse_several_processes() {
    let out = run(&[
        "ycsb",
        "--workload",
        "a",
        "--target",
        "dashmap",
        "--processes",
        "2",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("process-local"));
}

#[test]
fn hosts_apart_needs_several_embedded_processes() {
    for target in [&["--processes", "1"][..], &["--target", "dashmap"][..]] {
        let mut args = vec!["ycsb", "--workload", "a", "--hosts-apart"];
        args.extend_from_slice(target);
        let out = run(&args);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--hosts-apart needs"), "{err}");
    }
}

/// Two processes of one host share its caches and trust each other's items (the store's
/// README, Coherence, rule 2b); as hosts apart, each makes the other's items fresh.
#[test]
fn processes_as_hosts_apart_read_each_others_items_fresh() {
    let dir = tempfile::tempdir().unwrap();
    let mut invalidated = Vec::new();
    for apart in [false, true] {
        let (json, heap) = (
            dir.path().join(format!("{apart}.ndjson")),
            dir.path().join(format!("{apart}.heap")),
        );
        podkv(&[
            "heap",
            "create",
            s(&heap),
            "--small-bytes",
            "64MiB",
            "--coherence",
            "limited",
        ]);
        let mut args = vec![
            "ycsb",
            "--workload",
            "c",
            "--records",
            "2000",
            "--ops",
            "4000",
            "--target",
            "embedded",
            "--heap",
            s(&heap),
            "--processes",
            "2",
            "--json",
            s(&json),
        ];
        if apart {
            args.push("--hosts-apart");
        }
        let out = podkv(&args);
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(text.contains("(hosts apart)"), apart, "{text}");
        let r = &records(&json)[0];
        assert_eq!(r["hosts_apart"].as_bool().unwrap_or(false), apart, "{r}");
        invalidated.push(r["invalidations_per_op"].as_f64().unwrap());
    }
    // Workload c reads only: half the items are the other process's, each at least one line.
    assert!(
        invalidated[1] >= invalidated[0] + 0.4,
        "together {} vs apart {}",
        invalidated[0],
        invalidated[1]
    );
}

/// Writes `podkv trace generate --cluster 12 --ops N` into `dir`.
fn generated_trace(dir: &Path, ops: u64) -> PathBuf {
    let trace = dir.join("mc12.csv");
    podkv(&[
        "trace",
        "generate",
        "--cluster",
        "12",
        "--ops",
        &ops.to_string(),
        s(&trace),
    ]);
    trace
}

/// Requests per operation name, counted from the CSV.
fn trace_mix(trace: &Path) -> std::collections::BTreeMap<String, u64> {
    let mut mix = std::collections::BTreeMap::new();
    for line in std::fs::read_to_string(trace).unwrap().lines() {
        let op = line.rsplit(',').nth(1).unwrap().to_owned();
        *mix.entry(op).or_insert(0) += 1;
    }
    mix
}

#[test]
fn replay_of_a_generated_trace_against_dashmap() {
    let dir = tempfile::tempdir().unwrap();
    let trace = generated_trace(dir.path(), 20_000);
    let json = dir.path().join("r.ndjson");
    podkv(&[
        "replay",
        s(&trace),
        "--threads",
        "2",
        "--target",
        "dashmap",
        "--json",
        s(&json),
    ]);
    let r = &records(&json)[0];
    assert_eq!(r["kind"], "replay");
    assert_eq!(r["ops"], 20_000);
    for (op, n) in trace_mix(&trace) {
        assert_eq!(per_op(r, &op), n, "{op}");
    }
    let get = &r["per_op"]["get"];
    assert!(
        get["hits"].as_u64().unwrap() > 0,
        "gets after sets must hit: {r}"
    );
}

#[test]
fn replay_of_a_generated_trace_against_the_store_index_in_local_memory() {
    let dir = tempfile::tempdir().unwrap();
    let trace = generated_trace(dir.path(), 20_000);
    let json = dir.path().join("r.ndjson");
    podkv(&[
        "replay",
        s(&trace),
        "--threads",
        "2",
        "--target",
        "mimalloc",
        "--json",
        s(&json),
    ]);
    let r = &records(&json)[0];
    assert_eq!(r["ops"], 20_000);
    for (op, n) in trace_mix(&trace) {
        assert_eq!(per_op(r, &op), n, "{op}");
    }
    assert!(r["per_op"]["get"]["hits"].as_u64().unwrap() > 0, "{r}");
}

/// Both processes open one heap file; each replays its workers' keys. (With the store as
/// of kvstore commit d9cb01d this hung in `list::find`; fixed by later store commits.)
#[test]
fn replay_of_a_generated_trace_against_the_embedded_store_from_two_processes() {
    let dir = tempfile::tempdir().unwrap();
    let trace = generated_trace(dir.path(), 20_000);
    let (json, heap) = (dir.path().join("r.ndjson"), dir.path().join("pod.heap"));
    podkv(&[
        "replay",
        s(&trace),
        "--processes",
        "2",
        "--threads",
        "1",
        "--target",
        "embedded",
        "--heap",
        s(&heap),
        "--json",
        s(&json),
    ]);
    let r = &records(&json)[0];
    assert_eq!(
        (r["ops"].as_u64(), r["processes"].as_u64()),
        (Some(20_000), Some(2))
    );
    for (op, n) in trace_mix(&trace) {
        assert_eq!(per_op(r, &op), n, "{op}");
    }
    assert!(r["per_op"]["get"]["hits"].as_u64().unwrap() > 0, "{r}");
    assert!(
        r["hwcc_bytes"].as_u64().unwrap() > 0,
        "heap targets report HWcc bytes"
    );
    assert!(heap.exists(), "a heap named by --heap is kept");
}

/// An embedded run records what it cost to keep the heap coherent, per operation: cache
/// lines written back and invalidated by the SWcc rules, and mCAS requests. A `hardware`
/// heap needs none; a `limited` one writes back and invalidates, with no mCAS; an `mcas`
/// one also sends mCAS requests. The text summary says the same.
#[test]
fn an_embedded_run_records_its_coherence_work_per_operation() {
    let dir = tempfile::tempdir().unwrap();
    let modes: [(&str, &[&str]); 3] = [
        ("hardware", &["--coherence", "hardware"]),
        ("limited", &["--coherence", "limited"]),
        ("mcas", &["--coherence", "mcas"]),
    ];
    for (mode, flags) in modes {
        let (json, heap) = (
            dir.path().join(format!("{mode}.ndjson")),
            dir.path().join(format!("{mode}.heap")),
        );
        let mut create = vec!["heap", "create", s(&heap), "--small-bytes", "8MiB"];
        create.extend_from_slice(flags);
        podkv(&create);
        let out = podkv(&[
            "ycsb",
            "--workload",
            "a",
            "--records",
            "500",
            "--ops",
            "2000",
            "--target",
            "embedded",
            "--heap",
            s(&heap),
            "--json",
            s(&json),
        ]);
        let r = &records(&json)[0];
        let per_op = |field: &str| r[field].as_f64().unwrap_or_else(|| panic!("{field}: {r}"));
        let (wb, inv, mcas) = (
            per_op("writebacks_per_op"),
            per_op("invalidations_per_op"),
            per_op("mcas_per_op"),
        );
        match mode {
            "hardware" => assert_eq!((wb, inv, mcas), (0.0, 0.0, 0.0), "{r}"),
            // One process reads only items its own host wrote: nothing to make fresh (the
            // store's README, rule 2b; a read of another host's would make a line fresh at
            // least, and half the operations read), but the allocator's moves of its slabs
            // may (`processes_as_hosts_apart_read_each_others_items_fresh` counts them).
            "limited" => assert!(wb > 0.0 && inv < 0.5 && mcas == 0.0, "{r}"),
            _ => assert!(wb > 0.0 && inv > 0.0 && mcas > 0.0, "{r}"),
        }
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("coherence per op:"), "{text}");
    }
}

#[test]
fn duration_ends_the_timed_phase_early() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.ndjson");
    let started = Instant::now();
    podkv(&[
        "ycsb",
        "--workload",
        "a",
        "--records",
        "1000",
        "--ops",
        "1000000000",
        "--phase",
        "run",
        "--target",
        "null",
        "--duration",
        "0.3",
        "--json",
        s(&json),
    ]);
    assert!(started.elapsed() < Duration::from_secs(30));
    let r = &records(&json)[0];
    let ops = r["ops"].as_u64().unwrap();
    assert!(ops > 0 && ops < 1_000_000_000, "{r}");
    let seconds = r["seconds"].as_f64().unwrap();
    assert!((0.25..5.0).contains(&seconds), "{r}");
}

/// `--target-rate`: the timed phase never runs ahead of its schedule, and the record says
/// its latencies start at the intended send times.
#[test]
fn an_open_loop_run_keeps_to_its_target_rate() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.ndjson");
    podkv(&[
        "ycsb",
        "--workload",
        "a",
        "--records",
        "1000",
        "--ops",
        "3000",
        "--threads",
        "2",
        "--target",
        "dashmap",
        "--target-rate",
        "6000",
        "--json",
        s(&json),
    ]);
    let r = &records(&json)[0];
    assert_eq!(r["ops"], 3000);
    assert_eq!(r["latency_from"], "intended", "{r}");
    assert_eq!(r["target_rate"], 6000.0, "{r}");
    // The last operation of each worker is due 1499 / 3000 s after the start.
    let seconds = r["seconds"].as_f64().unwrap();
    assert!(seconds >= 0.49, "ran ahead of the schedule: {r}");
    assert!(r["ops_per_sec"].as_f64().unwrap() <= 6000.0 * 1.03, "{r}");
}

/// An offered load far beyond what the target can answer: the operations queue, and their
/// latency from the intended send time shows it (closed-loop latency would not).
#[test]
fn an_overloaded_open_loop_measures_the_queueing() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.ndjson");
    let run = |rate: Option<&str>| {
        let mut args = vec![
            "ycsb",
            "--workload",
            "a",
            "--records",
            "1000",
            "--ops",
            "100000",
            "--target",
            "dashmap",
            "--json",
            s(&json),
        ];
        if let Some(rate) = rate {
            args.extend(["--target-rate", rate]);
        }
        podkv(&args);
    };
    run(None);
    run(Some("1000000000"));
    let (closed, open) = (&records(&json)[0], &records(&json)[1]);
    assert_eq!(closed["latency_from"], "send");
    let seconds = open["seconds"].as_f64().unwrap();
    let p99 = open["p99_us"].as_f64().unwrap();
    assert!(
        p99 >= 0.5 * seconds * 1e6,
        "all due at once, the late ones waited about the whole run: {open}"
    );
    assert!(
        p99 > 10.0 * closed["p99_us"].as_f64().unwrap(),
        "{closed}\n{open}"
    );
}

/// `replay --pace timestamps`: each request at its recorded time divided by `--speed`, so
/// the replay lasts at least the trace's span over the speed.
#[test]
fn a_replay_paced_by_timestamps_lasts_the_traces_span() {
    let dir = tempfile::tempdir().unwrap();
    let trace = generated_trace(dir.path(), 5_000);
    let stamps: Vec<u64> = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .map(|l| l.split(',').next().unwrap().parse().unwrap())
        .collect();
    let span = (stamps.last().unwrap() - stamps[0]) as f64;
    assert!(span >= 1.0, "the generated trace spans {span} s");
    // Fast enough to finish in about half a second.
    let speed = (span / 0.5).to_string();
    let json = dir.path().join("r.ndjson");
    podkv(&[
        "replay",
        s(&trace),
        "--threads",
        "2",
        "--target",
        "dashmap",
        "--pace",
        "timestamps",
        "--speed",
        &speed,
        "--json",
        s(&json),
    ]);
    let r = &records(&json)[0];
    assert_eq!(r["ops"], 5_000);
    assert_eq!(r["latency_from"], "intended", "{r}");
    assert!(r["seconds"].as_f64().unwrap() >= 0.45, "{r}");

    let out = run(&[
        "replay",
        s(&trace),
        "--target",
        "dashmap",
        "--pace",
        "timestamps",
        "--target-rate",
        "100",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("choose one"), "{err}");
}

/// What `podkv store stats` prints of the store in `heap`.
fn store_stats(heap: &Path) -> String {
    let stats = podkv(&["store", "stats", s(heap)]);
    String::from_utf8_lossy(&stats.stdout).into_owned()
}

/// A load whose last inserts double the table leaves most of the newer half to be made (its
/// splits are owed to inserts that never come); the runner settles the store before the
/// timed phase, as its maintenance thread would between YCSB's load and run, so the run
/// meets a whole table: after its own load, and on a heap a `--phase load` left. 16 500
/// records double 2^13 buckets to 2^14 with 116 inserts left: they make 7 424 of the 8 192
/// new buckets at most.
#[test]
fn the_run_phase_meets_a_whole_table() {
    let dir = tempfile::tempdir().unwrap();
    let ycsb = |heap: &std::path::Path, phase: &str| {
        podkv(&[
            "ycsb",
            "--workload",
            "c",
            "--records",
            "16500",
            "--ops",
            "100",
            "--threads",
            "2",
            "--phase",
            phase,
            "--target",
            "embedded",
            "--heap",
            s(heap),
        ]);
    };
    let both = dir.path().join("both");
    ycsb(&both, "both");
    let text = store_stats(&both);
    assert!(text.contains("2^14 (16384 made"), "{text}");

    let apart = dir.path().join("apart");
    ycsb(&apart, "load");
    let text = store_stats(&apart);
    assert!(
        text.contains("2^14 (") && !text.contains("(16384 made"),
        "a timed load leaves the table as it is: {text}"
    );
    ycsb(&apart, "run");
    let text = store_stats(&apart);
    assert!(text.contains("2^14 (16384 made"), "{text}");
}

/// `--fixed-buckets` gives a store the runner creates a table of exactly that size, which no
/// load grows; it is refused for a target without the store's table, and outside 2^10..2^26.
#[test]
fn fixed_buckets_sizes_the_stores_table() {
    let dir = tempfile::tempdir().unwrap();
    let heap = dir.path().join("heap");
    let args = [
        "ycsb",
        "--workload",
        "a",
        "--records",
        "20000",
        "--ops",
        "2000",
        "--target",
        "embedded",
        "--heap",
        s(&heap),
        "--fixed-buckets",
        "11",
    ];
    podkv(&args);
    let text = store_stats(&heap);
    // 20 000 items would have doubled a growing table to 2^14.
    assert!(text.contains("2^11 ("), "{text}");
    for (flags, said) in [
        (
            &["--target", "dashmap", "--fixed-buckets", "12"][..],
            "needs --target embedded",
        ),
        (&["--fixed-buckets", "27"][..], "2^10 to 2^26"),
    ] {
        let mut args = vec![
            "ycsb",
            "--workload",
            "a",
            "--records",
            "100",
            "--ops",
            "100",
        ];
        args.extend_from_slice(flags);
        let out = run(&args);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(said) && err.lines().count() == 1, "{err}");
    }
}
