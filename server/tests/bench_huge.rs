//! `podkv bench huge` end to end, small: huge blocks (64 MiB here) through threadtest and
//! xmalloc in one and two processes, a baseline beside podkv, NDJSON records and the summary.

use std::process::Command;

#[test]
fn bench_huge_sweeps_processes_and_writes_ndjson() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("huge.ndjson");
    let out = Command::new(env!("CARGO_BIN_EXE_podkv"))
        .args([
            "bench", "huge", "--size", "64MiB", "--ops", "32", "--repeat", "1",
        ])
        .args([
            "--allocator",
            "podkv,system",
            "--threads",
            "1",
            "--processes",
            "1,2",
        ])
        .arg("--json")
        .arg(&json)
        .output()
        .expect("podkv runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("bench huge: size=64.0 MiB"), "{stdout}");
    let records: Vec<serde_json::Value> = std::fs::read_to_string(&json)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
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
