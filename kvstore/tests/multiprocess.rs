//! Real processes sharing one store: the test binary re-executes itself with `PODKV_ROLE`
//! naming the child's role (`hammer` or `grow`); the parent checks the outcome.
//!
//! - `hammer_four_processes`: 4 processes, overlapping keys, get/set/delete/cas/incr, each
//!   logging acknowledged operations; every key's final value must be explainable by some order
//!   of its acknowledged operations, and the store check must be clean (no leak, no double
//!   reference).
//! - `growth_under_concurrent_load`: 3 processes insert disjoint keys into a table that starts
//!   at 1024 buckets; it must double many times and keep every key.

mod common;

use podkv_store::{Mode, Outcome, Store};
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::process::Command;

const KEYS_STRING: u64 = 8;
const KEYS_COUNTER: u64 = 4;

fn ops() -> usize {
    std::env::var("PODKV_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000)
}

/// Spawns `n` children running this binary's `child_entry` with `role`.
fn spawn_children(role: &str, n: usize, heap: &Path, logs: &Path) {
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..n)
        .map(|i| {
            Command::new(&exe)
                .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
                .env("PODKV_ROLE", role)
                .env("PODKV_HEAP", heap)
                .env("PODKV_WORKER", i.to_string())
                .env("PODKV_LOG", logs.join(format!("log-{i}")))
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success(), "a {role} child failed");
    }
}

/// The child side: does nothing unless started by a parent test.
#[test]
fn child_entry() {
    let Ok(role) = std::env::var("PODKV_ROLE") else {
        return;
    };
    let heap = std::env::var("PODKV_HEAP").unwrap();
    let worker: u64 = std::env::var("PODKV_WORKER").unwrap().parse().unwrap();
    let log = std::env::var("PODKV_LOG").unwrap();
    let store = Store::open(&heap, common::config()).unwrap();
    match role.as_str() {
        "hammer" => hammer(&store, worker, Path::new(&log)),
        "grow" => grow(&store, worker),
        other => panic!("unknown role {other}"),
    }
}

fn string_key(k: u64) -> Vec<u8> {
    format!("s{k}").into_bytes()
}

fn counter_key(k: u64) -> Vec<u8> {
    format!("n{k}").into_bytes()
}

/// One hammering process: logs `op key value/result` for every acknowledged operation.
fn hammer(store: &Store, worker: u64, log: &Path) {
    let h = store.handle().unwrap();
    let mut out = std::io::BufWriter::new(std::fs::File::create(log).unwrap());
    let mut rng = rand::rngs::StdRng::seed_from_u64(worker * 7919 + 1);
    for seq in 0..ops() {
        let k = rng.gen_range(0..KEYS_STRING);
        let key = string_key(k);
        let value = hammer_value(worker, seq as u64);
        match rng.gen_range(0..10) {
            0..=2 => {
                if let Some(v) = h.get(&key).unwrap().map(|g| g.value().to_vec()) {
                    assert_whole(&v);
                }
            }
            3..=4 => {
                h.set(&key, value.as_bytes(), 0, 0).unwrap();
                writeln!(out, "set {k} {value}").unwrap();
            }
            5 => {
                let outcome = h.delete(&key).unwrap();
                writeln!(out, "del {k} {}", outcome == Outcome::Deleted).unwrap();
            }
            6..=7 => {
                let token = h.get(&key).unwrap().map(|g| g.cas());
                if let Some(t) = token {
                    if h.store(Mode::Cas(t), &key, value.as_bytes(), 0, 0).unwrap()
                        == Outcome::Stored
                    {
                        writeln!(out, "set {k} {value}").unwrap();
                    }
                }
            }
            _ => {
                let c = rng.gen_range(0..KEYS_COUNTER);
                let delta = worker + 1;
                let got = h
                    .incr(&counter_key(c), delta)
                    .unwrap()
                    .expect("counters exist");
                writeln!(out, "incr {c} {delta} {got}").unwrap();
            }
        }
    }
    out.flush().unwrap();
}

/// A hammer value: its name `w{worker}-{seq}` repeated to about 100 bytes, so it spans
/// lines past the item's header line and a line read stale (another value's) shows.
fn hammer_value(worker: u64, seq: u64) -> String {
    let name = format!("w{worker}-{seq}.");
    name.repeat(100 / name.len() + 1)
}

/// Panics unless `v` is one hammer value whole (every repetition of one name).
fn assert_whole(v: &[u8]) {
    let text = std::str::from_utf8(v).expect("a hammer value is text");
    let name = &text[..=text.find('.').expect("a hammer value")];
    assert_eq!(text, name.repeat(text.len() / name.len()), "a torn value");
}

/// One growing process: inserts its own 30 000 keys.
fn grow(store: &Store, worker: u64) {
    let h = store.handle().unwrap();
    for i in 0..count_grow() {
        h.set(format!("g{worker}-{i}").as_bytes(), &i.to_le_bytes(), 0, 0)
            .unwrap();
    }
}

fn count_grow() -> u64 {
    std::env::var("PODKV_GROW")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30_000)
}

#[derive(Default)]
struct History {
    /// Per key: the last mutation of each process (`Some(value)` set, `None` deleted).
    last: HashMap<u64, Vec<Option<String>>>,
    /// Every value ever acknowledged per key.
    values: HashMap<u64, Vec<String>>,
    /// Counter deltas acknowledged and results seen.
    incr_sum: HashMap<u64, u64>,
    incr_results: HashMap<u64, Vec<u64>>,
}

fn read_logs(dir: &Path, n: usize) -> History {
    let mut hist = History::default();
    for i in 0..n {
        let mut last: HashMap<u64, Option<String>> = HashMap::new();
        for line in std::fs::read_to_string(dir.join(format!("log-{i}")))
            .unwrap()
            .lines()
        {
            let f: Vec<&str> = line.split(' ').collect();
            let k: u64 = f[1].parse().unwrap();
            match f[0] {
                "set" => {
                    last.insert(k, Some(f[2].to_string()));
                    hist.values.entry(k).or_default().push(f[2].to_string());
                }
                "del" if f[2] == "true" => {
                    last.insert(k, None);
                }
                "incr" => {
                    let sum = hist.incr_sum.entry(k).or_default();
                    *sum = sum.wrapping_add(f[2].parse().unwrap());
                    hist.incr_results
                        .entry(k)
                        .or_default()
                        .push(f[3].parse().unwrap());
                }
                _ => {}
            }
        }
        for (k, v) in last {
            hist.last.entry(k).or_default().push(v);
        }
    }
    hist
}

#[test]
fn hammer_four_processes() {
    let (dir, heap) = common::heap_path("heap");
    let store = Store::open(&heap, common::config()).unwrap();
    {
        let h = store.handle().unwrap();
        for c in 0..KEYS_COUNTER {
            h.set(&counter_key(c), b"0", 0, 0).unwrap();
        }
    }
    spawn_children("hammer", 4, &heap, dir.path());
    let hist = read_logs(dir.path(), 4);
    let h = store.handle().unwrap();
    for k in 0..KEYS_STRING {
        let now = h
            .get(&string_key(k))
            .unwrap()
            .map(|g| String::from_utf8(g.value().to_vec()).unwrap());
        let lasts = hist.last.get(&k).cloned().unwrap_or_default();
        // The final state must be some process's last acknowledged mutation of the key: a
        // value written and then overwritten by its own process cannot be last, and a
        // deleted key must have a process whose last word on it was a delete.
        assert!(
            lasts.contains(&now),
            "key s{k}: final {now:?} is no process's last write {lasts:?}"
        );
    }
    for c in 0..KEYS_COUNTER {
        let now = h
            .get(&counter_key(c))
            .unwrap()
            .map(|g| g.value().to_vec())
            .unwrap();
        let value = podkv_store::parse_counter(&now).unwrap();
        assert_eq!(
            value,
            hist.incr_sum.get(&c).copied().unwrap_or(0),
            "counter n{c} lost an increment"
        );
        let mut results = hist.incr_results.get(&c).cloned().unwrap_or_default();
        let len = results.len();
        results.sort();
        results.dedup();
        assert_eq!(
            results.len(),
            len,
            "two increments of n{c} saw the same value"
        );
    }
    h.collect();
    drop(h);
    drop(store);
    // A fresh opener checks (under the model of non-coherent caches, this process's copies
    // of what the children changed are stale; a new mapping reads memory).
    let report = podkv_store::check_path(&heap).unwrap();
    assert!(report.is_valid(), "{:#?}", report.problems);
}

#[test]
fn growth_under_concurrent_load() {
    let (dir, heap) = common::heap_path("heap");
    let store = Store::open(&heap, common::config()).unwrap();
    assert_eq!(store.buckets_log2(), 10);
    spawn_children("grow", 3, &heap, dir.path());
    let h = store.handle().unwrap();
    for w in 0..3u64 {
        for i in 0..count_grow() {
            let g = h.get(format!("g{w}-{i}").as_bytes()).unwrap();
            assert_eq!(g.expect("key kept").value(), &i.to_le_bytes());
        }
    }
    drop(h);
    let log2 = store.buckets_log2();
    drop(store);
    let report = podkv_store::check_path(&heap).unwrap();
    assert!(report.is_valid(), "{:#?}", report.problems);
    assert_eq!(report.store.items, 3 * count_grow());
    let want = (3 * count_grow() / 2).ilog2();
    assert!(log2 >= want, "table has 2^{log2} buckets");
}
