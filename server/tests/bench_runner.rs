//! `podkv bench threadtest|xmalloc` on the shared runner, end to end: worker processes
//! started by the runner's launcher, exact operation counts in one NDJSON record per run,
//! the record's fields, a heap left empty, and process-local allocators refused across
//! processes.

mod run_support;

use run_support::{records, run, s, stdout_ok};

#[test]
fn threadtest_in_two_processes_counts_every_operation_once() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("b.ndjson");
    let (processes, threads, per_worker) = (2u64, 2u64, 5_000u64);
    let ops = (processes * threads * per_worker).to_string();
    let stdout = stdout_ok(&[
        "bench",
        "threadtest",
        "--allocator",
        "podkv",
        "--processes",
        "2",
        "--threads",
        "2",
        "--ops",
        &ops,
        "--batch",
        "500",
        "--repeat",
        "1",
        "--json",
        s(&json),
    ]);
    assert!(stdout.contains("threadtest size=64"), "{stdout}");
    let records = records(&json);
    assert_eq!(records.len(), 1, "{records:?}");
    let r = &records[0];
    assert_eq!(r["ops"].as_u64(), Some(processes * threads * per_worker));
    assert_eq!(r["processes"].as_u64(), Some(processes));
    assert_eq!(r["threads"].as_u64(), Some(threads));
    assert_eq!(r["kind"], "threadtest");
    assert_eq!(r["allocator"], "podkv");
    assert_eq!(r["coherence"], "hardware");
    assert!(r["ops_per_sec"].as_f64().unwrap() > 0.0);
    assert!(r["seconds"].as_f64().unwrap() > 0.0);
    assert!(
        r["pss_bytes"].as_u64().unwrap() > 0,
        "PSS summed over processes"
    );
    assert!(r["hwcc_bytes"].as_u64().unwrap() > 0);
    for field in ["size", "page_faults", "repeat", "git_commit"] {
        assert!(r.get(field).is_some(), "{field} missing: {r}");
    }
}

#[test]
fn xmalloc_across_processes_leaves_the_shared_heap_empty() {
    let dir = tempfile::tempdir().unwrap();
    let heap = dir.path().join("heap");
    let heap = heap.to_str().unwrap();
    let json = dir.path().join("x.ndjson");
    stdout_ok(&["heap", "create", heap]);
    stdout_ok(&[
        "bench",
        "xmalloc",
        "--allocator",
        "podkv",
        "--processes",
        "2",
        "--threads",
        "1",
        "--ops",
        "20000",
        "--repeat",
        "2",
        "--heap",
        heap,
        "--json",
        s(&json),
    ]);
    let records = records(&json);
    assert_eq!(records.len(), 2);
    assert!(records.iter().all(|r| r["ops"].as_u64() == Some(20_000)));
    stdout_ok(&["heap", "check", heap, "--expect-empty"]);
}

#[test]
fn baselines_run_in_one_process_and_refuse_more() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("m.ndjson");
    let stdout = stdout_ok(&[
        "bench",
        "xmalloc",
        "--allocator",
        "podkv,mimalloc,system",
        "--ops",
        "20000",
        "--repeat",
        "1",
        "--json",
        s(&json),
    ]);
    assert!(stdout.contains("vs mimalloc"), "{stdout}");
    let names: Vec<String> = records(&json)
        .iter()
        .map(|r| r["allocator"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["podkv", "mimalloc", "system"]);
    let out = run(&[
        "bench",
        "threadtest",
        "--allocator",
        "mimalloc",
        "--processes",
        "2",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("can run with --processes > 1") && err.contains("process-local"),
        "{err}"
    );
}

/// `--duration` ends a run through the runner's stop word: the record says so, and an
/// xmalloc stopped mid-way across processes still frees every block it made.
#[test]
fn duration_stops_runs_and_every_block_is_freed() {
    let dir = tempfile::tempdir().unwrap();
    let heap = dir.path().join("heap");
    let heap = heap.to_str().unwrap();
    let json = dir.path().join("d.ndjson");
    let budget = "100000000000";
    stdout_ok(&["heap", "create", heap]);
    for (kind, allocator, processes) in [
        ("threadtest", "system", "1"),
        ("xmalloc", "podkv", "2"),
        ("xmalloc", "mimalloc", "1"),
    ] {
        stdout_ok(&[
            "bench",
            kind,
            "--allocator",
            allocator,
            "--processes",
            processes,
            "--ops",
            budget,
            "--duration",
            "0.3",
            "--repeat",
            "1",
            "--heap",
            heap,
            "--json",
            s(&json),
        ]);
    }
    let records = records(&json);
    assert_eq!(records.len(), 3);
    for r in &records {
        assert_eq!(r["timed_out"], true, "{r}");
        let ops = r["ops"].as_u64().unwrap();
        assert!(ops > 0 && ops < 100_000_000_000, "{r}");
        assert!(r["seconds"].as_f64().unwrap() < 30.0, "{r}");
    }
    stdout_ok(&["heap", "check", heap, "--expect-empty"]);
}

/// boost.interprocess spans processes: with the `baselines` feature (and boost's headers at
/// build time) xmalloc hands blocks between two processes through one segment; without it
/// the run is refused with the reason.
#[test]
fn boost_spans_processes_or_says_why_not() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("b.ndjson");
    let args = [
        "bench",
        "xmalloc",
        "--allocator",
        "boost",
        "--processes",
        "2",
        "--threads",
        "1",
        "--ops",
        "20000",
        "--repeat",
        "1",
        "--json",
        s(&json),
    ];
    let out = run(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        assert!(
            stderr.contains("boost.interprocess is not in this binary"),
            "{stderr}"
        );
        return;
    }
    let r = &records(&json)[0];
    assert_eq!(r["allocator"], "boost");
    assert_eq!(r["processes"], 2);
    assert_eq!(r["ops"], 20000, "{r}");
}
