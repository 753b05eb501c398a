//! `podkv bench huge` end to end, small: huge blocks (64 MiB here) through threadtest and
//! xmalloc in one and two processes, a baseline beside podkv, NDJSON records and the summary.

mod run_support;

use run_support::{records, s, stdout_ok};

#[test]
fn bench_huge_sweeps_processes_and_writes_ndjson() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("huge.ndjson");
    let stdout = stdout_ok(&[
        "bench",
        "huge",
        "--size",
        "64MiB",
        "--ops",
        "32",
        "--repeat",
        "1",
        "--allocator",
        "podkv,system",
        "--threads",
        "1",
        "--processes",
        "1,2",
        "--json",
        s(&json),
    ]);
    assert!(stdout.contains("bench huge: size=64.0 MiB"), "{stdout}");
    let records = records(&json);
    // threadtest: podkv ×1 process, system, podkv ×2 processes; xmalloc (2 workers): podkv ×2.
    let seen: Vec<(String, String, u64)> = records
        .iter()
        .map(|r| {
            (
                r["kind"].as_str().unwrap().to_owned(),
                r["allocator"].as_str().unwrap().to_owned(),
                r["processes"].as_u64().unwrap(),
            )
        })
        .collect();
    let want = [
        ("threadtest", "podkv", 1),
        ("threadtest", "system", 1),
        ("threadtest", "podkv", 2),
        ("xmalloc", "podkv", 2),
    ];
    assert_eq!(seen.len(), want.len(), "{seen:?}");
    for (w, s) in want.iter().zip(&seen) {
        assert_eq!((w.0, w.1, w.2), (s.0.as_str(), s.1.as_str(), s.2));
    }
    assert!(records.iter().all(|r| r["size"] == 64 << 20));
    assert!(records
        .iter()
        .all(|r| r["ops_per_sec"].as_f64().unwrap() > 0.0));
}

/// Through the runner, 2 processes × 2 threads share one heap: each pattern's one record
/// counts every worker's allocations exactly once, and every huge block is freed.
#[test]
fn bench_huge_in_two_processes_counts_every_operation_and_empties_the_heap() {
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let heap = shm.path().join("heap");
    let json = shm.path().join("huge.ndjson");
    let (processes, threads, per_worker) = (2u64, 2u64, 8u64);
    let ops = (processes * threads * per_worker).to_string();
    let args = [
        "bench",
        "huge",
        "--size",
        "64MiB",
        "--ops",
        &ops,
        "--batch",
        "4",
        "--repeat",
        "1",
        "--allocator",
        "podkv",
        "--threads",
        "2",
        "--processes",
        "2",
        "--heap",
        s(&heap),
        "--json",
        s(&json),
    ];
    stdout_ok(&args);
    let records = records(&json);
    let kinds: Vec<&str> = records
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["threadtest", "xmalloc"]);
    for r in &records {
        assert_eq!(
            r["ops"].as_u64(),
            Some(processes * threads * per_worker),
            "{r}"
        );
        assert_eq!(r["processes"].as_u64(), Some(processes));
        assert_eq!(r["threads"].as_u64(), Some(threads));
        assert_eq!(r["timed_out"], false);
        assert!(r["pss_bytes"].as_u64().unwrap() > 0, "{r}");
        assert!(r["hwcc_bytes"].as_u64().unwrap() > 0, "{r}");
    }
    stdout_ok(&["heap", "check", s(&heap), "--expect-empty"]);
}

/// A baseline still running at `--timeout` is stopped by the runner and reported so.
#[test]
fn bench_huge_stops_a_baseline_at_its_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("t.ndjson");
    let stdout = stdout_ok(&[
        "bench",
        "huge",
        "--pattern",
        "threadtest",
        "--size",
        "1MiB",
        "--ops",
        "100000000000",
        "--repeat",
        "1",
        "--allocator",
        "system",
        "--threads",
        "1",
        "--processes",
        "1",
        "--timeout",
        "1",
        "--json",
        s(&json),
    ]);
    assert!(stdout.contains("timed out"), "{stdout}");
    let records = records(&json);
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["timed_out"], true);
    let ops = records[0]["ops"].as_u64().unwrap();
    assert!(ops > 0 && ops < 100_000_000_000, "{ops}");
}
