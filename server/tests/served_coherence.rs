//! Every front door to the store serves a heap of every coherence mode the store serves
//! (`podkv_store::SERVED_COHERENCE`: hardware, limited and mcas of both implementations):
//! `podkv serve` (two processes on one heap, each reading the other's writes), `podkv ycsb`
//! / `podkv replay` with `--target embedded`, and `podkv pod up --coherence mcas`, whose
//! status names the mode. The refusal of a mode the store does not serve is the store's own
//! check (`Map::open_in`), which no door skips; no mode is unserved today.

mod conv;
mod pod_support;

use conv::{heap_dir, podkv, Server};
use pod_support::{client, free_ports, get, set, text, Pod};
use podkv_harness::runner::memcached::Reply;
use std::process::Output;

/// The `limited` and `mcas` modes, as `podkv heap create` flags.
const MODES: [(&str, &[&str]); 3] = [
    ("limited", &["--coherence", "limited"]),
    ("mcas", &["--coherence", "mcas", "--mcas-impl", "flush-cas"]),
    ("mcas", &["--coherence", "mcas", "--mcas-impl", "nmp"]),
];

fn run(args: &[&str]) -> Output {
    std::process::Command::new(podkv())
        .args(args)
        .output()
        .expect("podkv runs")
}

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
    let out = run(&args);
    assert!(out.status.success(), "{flags:?}: {}", text(&out));
}

#[test]
fn serve_ycsb_and_replay_serve_every_mode() {
    let dir = heap_dir();
    let trace = dir.path().join("trace.csv");
    std::fs::write(&trace, "0,k1,2,10,1,set,0\n1,k1,2,10,1,get,0\n").unwrap();
    let trace = trace.to_str().unwrap();
    for (i, (mode, flags)) in MODES.iter().enumerate() {
        let heap = dir.path().join(format!("heap-{i}"));
        create(heap.to_str().unwrap(), flags);

        let (a, b) = (Server::start(&heap, &[]), Server::start(&heap, &[]));
        let (mut ca, mut cb) = (a.client(), b.client());
        ca.expect(b"set k 0 0 3\r\none\r\n", b"STORED\r\n");
        cb.expect(b"get k\r\n", b"VALUE k 0 3\r\none\r\nEND\r\n");
        cb.expect(b"set k 0 0 3\r\ntwo\r\n", b"STORED\r\n");
        ca.expect(b"get k\r\n", b"VALUE k 0 3\r\ntwo\r\nEND\r\n");
        ca.expect(b"delete k\r\n", b"DELETED\r\n");
        cb.expect(b"get k\r\n", b"END\r\n");
        drop((ca, cb));
        assert!(a.stop().success() && b.stop().success(), "{flags:?}");

        let heap = heap.to_str().unwrap();
        let ycsb = run(&[
            "ycsb",
            "--workload",
            "a",
            "--records",
            "100",
            "--ops",
            "200",
            "--target",
            "embedded",
            "--heap",
            heap,
        ]);
        assert!(ycsb.status.success(), "ycsb on {mode}: {}", text(&ycsb));
        let replay = run(&["replay", trace, "--target", "embedded", "--heap", heap]);
        assert!(
            replay.status.success(),
            "replay on {mode}: {}",
            text(&replay)
        );
        let check = run(&["store", "check", heap]);
        assert!(check.status.success(), "check on {mode}: {}", text(&check));
    }
}

#[test]
fn pod_up_serves_an_mcas_heap_and_says_so() {
    let pod = Pod::new();
    let base = free_ports(2);
    pod.up(&[
        "--hosts",
        "2",
        "--net",
        "loopback",
        "--base-port",
        &base.to_string(),
        "--coherence",
        "mcas",
        "--mcas-impl",
        "nmp",
    ]);
    let status = pod.status();
    assert_eq!(status["coherence"], "mcas", "{status}");
    assert_eq!(status["mcas_impl"], "nmp", "{status}");
    let addrs = pod.addrs();
    let (mut m0, mut m1) = (client(&addrs[0]), client(&addrs[1]));
    assert_eq!(set(&mut m0, b"shared", b"one heap").unwrap(), Reply::Stored);
    assert_eq!(
        get(&mut m1, b"shared").unwrap().as_deref(),
        Some(&b"one heap"[..])
    );
    drop((m0, m1));
    let out = pod.pod("down", &["--purge"]);
    assert!(out.status.success(), "{}", text(&out));
}
