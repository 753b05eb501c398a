//! What the runner's and the benchmarks' end-to-end tests share: the built `podkv` run as a
//! separate process with a deadline (a hung run fails its test instead of hanging the
//! suite), and the NDJSON records a run appends.

#![allow(dead_code)]

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Longest a single `podkv` invocation may take before the test fails (instead of hanging).
const SECONDS_COMMAND_MAX: u64 = 120;

/// Runs `podkv ARGS` to its end, whatever its status; panics (killing it) if it is still
/// running after [`SECONDS_COMMAND_MAX`].
pub fn run(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_podkv"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("podkv runs");
    let deadline = Instant::now() + Duration::from_secs(SECONDS_COMMAND_MAX);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            // Worker processes die with the launcher (PR_SET_PDEATHSIG).
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "podkv {args:?} did not finish in {SECONDS_COMMAND_MAX} s:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Runs `podkv ARGS`; panics with its output unless it succeeds.
pub fn run_ok(args: &[&str]) -> Output {
    let out = run(args);
    assert!(
        out.status.success(),
        "podkv {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `podkv ARGS` as [`run_ok`] does; returns its standard output.
pub fn stdout_ok(args: &[&str]) -> String {
    String::from_utf8_lossy(&run_ok(args).stdout).into_owned()
}

/// The NDJSON records in `path`, one per line.
pub fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The record of `podkv ycsb ARGS --threads 2 --target dashmap` (ARGS split at spaces).
pub fn on_dashmap(args: &str) -> Value {
    ycsb_record(&format!("{args} --threads 2 --target dashmap"))
}

/// The record of `podkv ycsb ARGS` (ARGS split at spaces), which must succeed.
pub fn ycsb_record(args: &str) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.ndjson");
    let mut all: Vec<&str> = vec!["ycsb"];
    all.extend(args.split(' '));
    all.extend(["--json", s(&json)]);
    run_ok(&all);
    records(&json).swap_remove(0)
}

/// `p` as an argument.
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}
