//! The memory limit: with eviction, writes succeed and linked bytes stay under the capacity
//! (plus the per-handle batching slack); without, writes fail with out-of-memory.

mod common;

use podkv_store::{Eviction, Store, StoreConfig, StoreError};

const CAPACITY: u64 = 2 << 20;

fn store(eviction: Eviction) -> (tempfile::TempDir, Store) {
    let (dir, path) = common::heap_path("heap");
    let config = StoreConfig {
        capacity: Some(CAPACITY),
        eviction,
        ..common::config()
    };
    (dir, Store::open(&path, config).unwrap())
}

#[test]
fn eviction_keeps_usage_under_the_limit() {
    let (_d, store) = store(Eviction::SampledOldest);
    let threads: Vec<_> = (0..2)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                let h = store.handle().unwrap();
                for i in 0..10_000u32 {
                    h.set(format!("{t}-{i}").as_bytes(), &[7u8; 500], 0, 0)
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let h = store.handle().unwrap();
    h.collect();
    h.collect();
    drop(h);
    let report = store.check();
    assert!(report.is_valid(), "{:#?}", report.problems);
    let slack = 2 * 16 * 1024;
    assert!(
        report.store.item_bytes <= CAPACITY + slack,
        "{} bytes linked",
        report.store.item_bytes
    );
    assert!(
        report.store.item_bytes >= CAPACITY / 2,
        "eviction is not overeager: {}",
        report.store.item_bytes
    );
    assert!(
        report.heap_live_bytes <= 2 * CAPACITY + (1 << 20),
        "heap holds {} bytes",
        report.heap_live_bytes
    );
}

#[test]
fn no_eviction_fails_with_out_of_memory() {
    let (_d, store) = store(Eviction::Off);
    let h = store.handle().unwrap();
    let mut stored = 0u64;
    let err = loop {
        match h.set(format!("k{stored}").as_bytes(), &[1u8; 1000], 0, 0) {
            Ok(()) => stored += 1,
            Err(e) => break e,
        }
        assert!(stored < 10_000, "capacity never reached");
    };
    assert!(matches!(err, StoreError::OutOfMemory), "{err}");
    assert!(
        stored * 1000 <= CAPACITY && stored * 1048 + 16 * 1024 >= CAPACITY - 2048,
        "{stored}"
    );
    assert!(h.get(b"k0").unwrap().is_some(), "nothing was evicted");
}
