//! The `evictions` count: items removed to make room (not expiries), counted per thread slot
//! in the heap, so the sum is exact and a process that is killed keeps its share.

mod common;

use podkv_store::{Eviction, Store, StoreConfig};
use std::process::Command;

const CAPACITY: u64 = 1 << 20;

/// A store of [`CAPACITY`] bytes that evicts the sampled oldest item to make room.
fn config() -> StoreConfig {
    StoreConfig {
        capacity: Some(CAPACITY),
        eviction: Eviction::SampledOldest,
        ..common::config()
    }
}

/// Sets `count` distinct keys of 500 bytes; returns how many it stored.
fn fill(store: &Store, prefix: &str, count: u32) -> u64 {
    let h = store.handle().unwrap();
    for i in 0..count {
        h.set(format!("{prefix}{i}").as_bytes(), &[7u8; 500], 0, 0)
            .unwrap();
    }
    h.flush_counters();
    u64::from(count)
}

#[test]
fn every_item_is_linked_or_evicted() {
    let (_d, path) = common::heap_path("heap");
    let store = Store::open(&path, config()).unwrap();
    let stored = fill(&store, "k", 10_000);
    let (items, _) = store.usage();
    let evicted = store.evictions();
    assert!(evicted > 0, "10000 × 548 B is well past 1 MiB");
    assert_eq!(
        items + evicted,
        stored,
        "{items} linked + {evicted} evicted"
    );
}

#[test]
fn no_eviction_without_pressure() {
    let (_d, path) = common::heap_path("heap");
    let store = Store::open(&path, config()).unwrap();
    for _ in 0..3 {
        fill(&store, "k", 1000); // 548 KB, rewritten: never past the capacity
    }
    assert_eq!(store.evictions(), 0);
    assert_eq!(store.usage().0, 1000);
}

#[test]
fn expired_items_are_reclaimed_not_evicted() {
    let (_d, path) = common::heap_path("heap");
    let store = Store::open(&path, config()).unwrap();
    let h = store.handle().unwrap();
    for i in 0..1500u32 {
        h.set(format!("x{i}").as_bytes(), &[7u8; 500], 0, -1)
            .unwrap();
    }
    h.flush_counters();
    assert_eq!(
        store.evictions(),
        0,
        "an already-expired item is no eviction"
    );
}

/// A child process evicts, then is killed with SIGKILL: its count stays in the heap.
#[test]
fn a_killed_process_keeps_its_evictions() {
    let (_d, path) = common::heap_path("heap");
    drop(Store::open(&path, config()).unwrap());
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env("PODKV_HEAP", &path)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::BufRead;
    let reported: u64 = std::io::BufReader::new(child.stdout.take().unwrap())
        .lines()
        .find_map(|line| line.ok()?.split("evictions=").nth(1)?.trim().parse().ok())
        .expect("the child reports its count");
    child.kill().unwrap();
    child.wait().unwrap();
    let store = Store::open(&path, config()).unwrap();
    assert!(reported > 0);
    assert_eq!(store.evictions(), reported);
    fill(&store, "p", 3000);
    assert!(store.evictions() > reported, "the parent adds its own");
}

/// The child side: fills, prints its evictions, then waits to be killed.
#[test]
fn child_entry() {
    let Ok(heap) = std::env::var("PODKV_HEAP") else {
        return;
    };
    let store = Store::open(&heap, config()).unwrap();
    let h = store.handle().unwrap();
    for i in 0..5000u32 {
        h.set(format!("c{i}").as_bytes(), &[7u8; 500], 0, 0)
            .unwrap();
    }
    println!("evictions={}", store.evictions());
    loop {
        std::thread::park();
    }
}
