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
    let report = common::settled_check(&store);
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

/// Bytes of the large region in the full-region tests: 32 slabs of 512 KiB, as in issue 25.
const LARGE_BYTES: u64 = 16 << 20;

/// A store with no capacity set whose large region holds [`LARGE_BYTES`] (the small one is
/// roomy): a full large region is what stops a large write.
fn region_store() -> (tempfile::TempDir, Store) {
    let (dir, path) = common::heap_path("heap");
    let config = StoreConfig {
        heap: podkv_alloc::Config {
            large_bytes: LARGE_BYTES,
            ..common::heap_config()
        },
        ..common::config()
    };
    (dir, Store::open(&path, config).unwrap())
}

/// The issue-25 scenario in one process: a full large region evicts large items and stores,
/// never answering out-of-memory, keeps it mostly full, and leaves the small items alone.
#[test]
fn a_full_region_evicts_where_the_item_needs_room() {
    let (_d, store) = region_store();
    let h = store.handle().unwrap();
    for i in 0..1000u32 {
        h.set(format!("small-{i}").as_bytes(), &[3u8; 100], 0, 0)
            .unwrap();
    }
    let value = [4u8; 4096];
    let count = 4 * LARGE_BYTES / 4096;
    for i in 0..count {
        h.set(format!("large-{i:026}").as_bytes(), &value, 0, 0)
            .unwrap_or_else(|e| panic!("set {i} of {count}: {e}"));
    }
    for i in 0..1000u32 {
        assert!(
            h.get(format!("small-{i}").as_bytes()).unwrap().is_some(),
            "small-{i}"
        );
    }
    drop(h);
    let report = store.check();
    assert!(report.is_valid(), "{:#?}", report.problems);
    let evicted = store.evictions();
    let small: u64 = (0..1000)
        .map(|i| 48 + format!("small-{i}").len() as u64 + 100)
        .sum();
    let (items, large) = (report.store.items - 1000, report.store.item_bytes - small);
    assert_eq!(
        items + evicted,
        count,
        "{items} current + {evicted} evicted"
    );
    // What the region really holds for them: their blocks (the 4176-byte items take the
    // large heap's 4632-byte class). The rest is the region's other tenants (bucket
    // segments, store metadata: four slabs of 32) and spares or limbo.
    let classes = store.heap().slab_heap(podkv_alloc::Kind::Large).classes;
    let block = classes.size[classes.class_for(48 + 32 + 4096, 8).unwrap()];
    let held = items * u64::from(block);
    assert!(
        held as f64 >= 0.8 * LARGE_BYTES as f64,
        "{items} large items hold {held} bytes of blocks ({large} of items) of {LARGE_BYTES}"
    );
    assert!(
        large as f64 >= 0.7 * LARGE_BYTES as f64,
        "{items} large items hold {large} of {LARGE_BYTES} bytes"
    );
}

/// Two threads filling one full region: both keep storing.
#[test]
fn a_full_region_serves_two_writers() {
    let (_d, store) = region_store();
    let threads: Vec<_> = (0..2)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                let h = store.handle().unwrap();
                for i in 0..2 * LARGE_BYTES / 4096 {
                    h.set(format!("{t}-{i:030}").as_bytes(), &[5u8; 4096], 0, 0)
                        .unwrap_or_else(|e| panic!("thread {t}, set {i}: {e}"));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(store.evictions() > 0);
    let report = store.check();
    assert!(report.is_valid(), "{:#?}", report.problems);
}

/// A full large region must not fail small writes: the bucket table's new segments live in
/// the large region, so once it is full a write whose bucket has no segment yet starts from
/// the nearest linked ancestor's sentinel (as a reader does) instead of answering
/// out-of-memory.
#[test]
fn a_full_large_region_does_not_stop_the_table_from_serving_new_buckets() {
    let (_d, store) = region_store();
    let h = store.handle().unwrap();
    let value = [6u8; 4096];
    for i in 0..2 * LARGE_BYTES / 4096 {
        h.set(format!("large-{i:026}").as_bytes(), &value, 0, 0)
            .unwrap_or_else(|e| panic!("large set {i}: {e}"));
    }
    assert!(store.evictions() > 0, "the large region is full");
    // Enough small items to double the table past the segments made while there was room.
    let count = 40_000u32;
    for i in 0..count {
        h.set(format!("small-{i}").as_bytes(), &[7u8; 64], 0, 0)
            .unwrap_or_else(|e| panic!("small set {i} of {count}: {e}"));
    }
    for i in (0..count).step_by(97) {
        assert!(
            h.get(format!("small-{i}").as_bytes()).unwrap().is_some(),
            "small-{i}"
        );
    }
    drop(h);
    let report = store.check();
    assert!(report.is_valid(), "{:#?}", report.problems);
}
