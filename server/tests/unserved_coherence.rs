//! Every front door to the store refuses a heap whose coherence mode the store does not serve
//! (`mcas`): `podkv serve`, `podkv ycsb` / `podkv replay` with `--target
//! embedded`, and `podkv pod up` (asked to create such a heap, or given one). One clear line,
//! a non-zero exit, and the heap holds no store afterwards (`pod up` makes no heap at all).

use std::process::{Command, Output};

fn podkv(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_podkv"))
        .args(args)
        .output()
        .expect("podkv runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The unserved modes, as `podkv heap create` flags.
const UNSERVED: [(&str, &[&str]); 2] = [
    ("mcas", &["--coherence", "mcas", "--mcas-impl", "flush-cas"]),
    ("mcas", &["--coherence", "mcas", "--mcas-impl", "nmp"]),
];

fn create(heap: &str, flags: &[&str]) {
    let mut args = vec![
        "heap",
        "create",
        heap,
        "--small-bytes",
        "4MiB",
        "--large-bytes",
        "4MiB",
    ];
    args.extend_from_slice(flags);
    let out = podkv(&args);
    assert!(out.status.success(), "{flags:?}: {}", stderr(&out));
}

/// The refusal: exit 1, and stderr's one line names the mode and the way out.
fn assert_refused(out: &Output, mode: &str, what: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(1), "{what} on a {mode} heap: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{what}: one line: {err}");
    assert!(
        err.contains(&format!("coherence mode is {mode}")) && err.contains("--coherence hardware"),
        "{what}: {err}"
    );
}

#[test]
fn serve_ycsb_and_replay_refuse_a_heap_the_store_does_not_serve() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.csv");
    std::fs::write(&trace, "0,k1,2,10,1,set,0\n1,k1,2,10,1,get,0\n").unwrap();
    let trace = trace.to_str().unwrap();
    for (i, (mode, flags)) in UNSERVED.iter().enumerate() {
        let heap = dir.path().join(format!("heap-{i}"));
        let heap = heap.to_str().unwrap();
        create(heap, flags);

        let serve = podkv(&["serve", "--heap", heap, "--listen", "127.0.0.1:0"]);
        assert_refused(&serve, mode, "serve");
        let ycsb = podkv(&[
            "ycsb",
            "--workload",
            "a",
            "--records",
            "100",
            "--ops",
            "100",
            "--target",
            "embedded",
            "--heap",
            heap,
        ]);
        assert_refused(&ycsb, mode, "ycsb");
        let replay = podkv(&["replay", trace, "--target", "embedded", "--heap", heap]);
        assert_refused(&replay, mode, "replay");

        // Nothing was written: the heap still holds no store.
        let check = podkv(&["store", "check", heap]);
        assert!(!check.status.success(), "{}", stderr(&check));
    }
}

#[test]
fn pod_up_refuses_a_mode_the_store_does_not_serve_before_making_anything() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let state = state.to_str().unwrap();
    for (i, (mode, flags)) in UNSERVED.iter().enumerate() {
        let heap = dir.path().join(format!("pod-heap-{i}"));
        let heap = heap.to_str().unwrap();
        let name = format!("u{i}");
        let up = |extra: &[&str]| {
            let mut args = vec![
                "pod",
                "up",
                "--name",
                &name,
                "--state-dir",
                state,
                "--heap",
                heap,
                "--net",
                "loopback",
                "--detach",
            ];
            args.extend_from_slice(extra);
            podkv(&args)
        };
        // Asked to create a heap in the mode: refused before the heap or any state exists.
        assert_refused(&up(flags), mode, "pod up --coherence");
        assert!(
            !std::path::Path::new(heap).exists(),
            "{flags:?}: no heap made"
        );
        assert!(!dir
            .path()
            .join("state")
            .join(&name)
            .join("pod.json")
            .exists());

        // Given an existing heap in the mode: refused too, and nothing started.
        create(heap, flags);
        let out = up(&[]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{flags:?}: {err}");
        let last = err.trim_end().lines().last().unwrap_or_default();
        assert!(
            last.contains(&format!("coherence mode is {mode}")),
            "{flags:?}: {err}"
        );
        assert!(!dir
            .path()
            .join("state")
            .join(&name)
            .join("pod.json")
            .exists());
    }
}
