//! `podkv heap` end to end: the binary creates a heap, four of its processes stress it at
//! once, and `podkv heap check` proves it clean; bad files get one clear line and exit 1.

use std::process::{Command, Output};

fn podkv(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_podkv"))
        .args(args)
        .output()
        .expect("podkv runs")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn create_stress_from_four_processes_then_check_clean() {
    let dir = tempfile::tempdir().unwrap();
    let heap = dir.path().join("heap");
    let heap = heap.to_str().unwrap();
    let out = podkv(&[
        "heap",
        "create",
        heap,
        "--small-bytes",
        "1GiB",
        "--large-bytes",
        "4GiB",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("coherence   hardware"));
    let out = podkv(&[
        "heap",
        "stress",
        heap,
        "--processes",
        "4",
        "--threads",
        "2",
        "--ops",
        "10000",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("ok:"), "{}", text(&out));
    let out = podkv(&["heap", "check", heap, "--expect-empty"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = podkv(&["heap", "info", heap, "--json"]);
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).expect("info --json is JSON");
    assert_eq!(info["live_blocks"], 0);
    assert!(info["hwcc_bytes"].as_u64().unwrap() > 0);
}

#[test]
fn a_foreign_file_is_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, "shopping list\n".repeat(500)).unwrap();
    let out = podkv(&["heap", "check", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("podkv: ") && err.contains("not a podkv heap"),
        "{err}"
    );
}

#[test]
fn a_missing_heap_is_not_created_by_check() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent");
    let out = podkv(&["heap", "info", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!path.exists());
}
