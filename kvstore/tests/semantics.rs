//! memcached 1.6 semantics, command by command, with a fake clock.

mod common;

use podkv_store::{Mode, Outcome, StoreError};
use std::sync::atomic::Ordering;

const T0: u64 = 1_700_000_000;

fn value(h: &podkv_store::StoreHandle, key: &[u8]) -> Option<Vec<u8>> {
    h.get(key).unwrap().map(|g| g.value().to_vec())
}

#[test]
fn set_get_delete() {
    let (_d, store, _t) = common::fake_store(T0);
    let h = store.handle().unwrap();
    assert_eq!(value(&h, b"a"), None);
    h.set(b"a", b"one", 7, 0).unwrap();
    let g = h.get(b"a").unwrap().unwrap();
    assert_eq!((g.value(), g.flags()), (&b"one"[..], 7));
    drop(g);
    h.set(b"a", b"two", 0, 0).unwrap();
    assert_eq!(value(&h, b"a").as_deref(), Some(&b"two"[..]));
    assert_eq!(h.delete(b"a").unwrap(), Outcome::Deleted);
    assert_eq!(h.delete(b"a").unwrap(), Outcome::NotFound);
    assert_eq!(value(&h, b"a"), None);
}

#[test]
fn add_replace_append_prepend_cas() {
    let (_d, store, _t) = common::fake_store(T0);
    let h = store.handle().unwrap();
    assert_eq!(
        h.store(Mode::Replace, b"k", b"x", 0, 0).unwrap(),
        Outcome::NotStored
    );
    assert_eq!(
        h.store(Mode::Append, b"k", b"x", 0, 0).unwrap(),
        Outcome::NotStored
    );
    assert_eq!(
        h.store(Mode::Add, b"k", b"mid", 3, 0).unwrap(),
        Outcome::Stored
    );
    assert_eq!(
        h.store(Mode::Add, b"k", b"no", 0, 0).unwrap(),
        Outcome::NotStored
    );
    h.store(Mode::Append, b"k", b">", 9, 0).unwrap();
    h.store(Mode::Prepend, b"k", b"<", 9, 0).unwrap();
    let g = h.get(b"k").unwrap().unwrap();
    assert_eq!(
        (g.value(), g.flags()),
        (&b"<mid>"[..], 3),
        "append/prepend keep flags"
    );
    let token = g.cas();
    drop(g);
    assert_eq!(
        h.store(Mode::Cas(token + 100), b"k", b"v", 0, 0).unwrap(),
        Outcome::Exists
    );
    assert_eq!(
        h.store(Mode::Cas(token), b"k", b"v", 0, 0).unwrap(),
        Outcome::Stored
    );
    assert_eq!(
        h.store(Mode::Cas(token), b"k", b"w", 0, 0).unwrap(),
        Outcome::Exists
    );
    assert_eq!(
        h.store(Mode::Cas(1), b"nope", b"w", 0, 0).unwrap(),
        Outcome::NotFound
    );
    assert_ne!(h.get(b"k").unwrap().unwrap().cas(), token);
}

#[test]
fn incr_decr_edges() {
    let (_d, store, _t) = common::fake_store(T0);
    let h = store.handle().unwrap();
    assert_eq!(h.incr(b"n", 1).unwrap(), None);
    h.set(b"n", b"18446744073709551615", 0, 0).unwrap();
    assert_eq!(h.incr(b"n", 2).unwrap(), Some(1), "incr wraps at 2^64");
    assert_eq!(
        value(&h, b"n").unwrap(),
        b"1                   ",
        "padded like memcached"
    );
    assert_eq!(h.decr(b"n", 5).unwrap(), Some(0), "decr stops at 0");
    assert_eq!(h.incr(b"n", 10).unwrap(), Some(10));
    h.set(b"n", b"100", 0, 0).unwrap();
    assert_eq!(h.decr(b"n", 1).unwrap(), Some(99));
    assert_eq!(value(&h, b"n").unwrap(), b"99 ");
    assert_eq!(h.incr(b"n", 1).unwrap(), Some(100));
    assert_eq!(value(&h, b"n").unwrap(), b"100");
    h.set(b"n", b"99", 0, 0).unwrap();
    assert_eq!(h.incr(b"n", 1).unwrap(), Some(100));
    assert_eq!(
        value(&h, b"n").unwrap(),
        b"100",
        "a longer result is a new item"
    );
    for bad in [&b"abc"[..], b"", b"12a", b"-1", b"18446744073709551616"] {
        h.set(b"n", bad, 0, 0).unwrap();
        assert!(
            matches!(h.incr(b"n", 1), Err(StoreError::NonNumeric)),
            "{bad:?}"
        );
    }
}

#[test]
fn expiry_rules() {
    let (_d, store, time) = common::fake_store(T0);
    let h = store.handle().unwrap();
    h.set(b"rel", b"v", 0, 10).unwrap();
    h.set(b"abs", b"v", 0, (T0 + 20) as i64).unwrap();
    h.set(b"past", b"v", 0, (T0 - 1) as i64).unwrap();
    h.set(b"neg", b"v", 0, -1).unwrap();
    h.set(b"never", b"v", 0, 0).unwrap();
    h.set(b"month", b"v", 0, 60 * 60 * 24 * 30).unwrap();
    assert!(value(&h, b"rel").is_some() && value(&h, b"abs").is_some());
    assert!(value(&h, b"past").is_none() && value(&h, b"neg").is_none());
    time.store(T0 + 10, Ordering::Relaxed);
    assert!(value(&h, b"rel").is_none(), "expired at exactly now + 10");
    assert!(value(&h, b"abs").is_some());
    time.store(T0 + 20, Ordering::Relaxed);
    assert!(value(&h, b"abs").is_none());
    time.store(T0 + 60 * 60 * 24 * 30 - 1, Ordering::Relaxed);
    assert!(value(&h, b"month").is_some(), "30 days is still relative");
    assert!(value(&h, b"never").is_some());
    assert_eq!(
        h.store(Mode::Add, b"rel", b"new", 0, 0).unwrap(),
        Outcome::Stored
    );
    assert_eq!(h.touch(b"past", 100).unwrap(), Outcome::NotFound);
}

#[test]
fn touch_and_gat_keep_cas() {
    let (_d, store, time) = common::fake_store(T0);
    let h = store.handle().unwrap();
    h.set(b"k", b"v", 5, 10).unwrap();
    let token = h.get(b"k").unwrap().unwrap().cas();
    assert_eq!(h.touch(b"k", 100).unwrap(), Outcome::Touched);
    time.store(T0 + 50, Ordering::Relaxed);
    let g = h.gat(b"k", 0).unwrap().unwrap();
    assert_eq!(
        (g.value(), g.flags(), g.cas(), g.expiry()),
        (&b"v"[..], 5, token, 0)
    );
}

#[test]
fn flush_all_now_and_delayed() {
    let (_d, store, time) = common::fake_store(T0);
    let h = store.handle().unwrap();
    h.set(b"a", b"1", 0, 0).unwrap();
    h.flush_all(0);
    assert!(value(&h, b"a").is_none());
    h.set(b"b", b"2", 0, 0).unwrap();
    assert!(
        value(&h, b"b").is_some(),
        "items stored after the flush survive"
    );
    h.flush_all(10);
    assert!(value(&h, b"b").is_some());
    time.store(T0 + 5, Ordering::Relaxed);
    h.set(b"c", b"3", 0, 0).unwrap();
    time.store(T0 + 10, Ordering::Relaxed);
    assert!(value(&h, b"b").is_none() && value(&h, b"c").is_none());
    h.set(b"d", b"4", 0, 0).unwrap();
    assert!(value(&h, b"d").is_some());
}

#[test]
fn key_and_value_limits() {
    let (_d, store, _t) = common::fake_store(T0);
    let h = store.handle().unwrap();
    assert!(matches!(
        h.set(b"", b"v", 0, 0),
        Err(StoreError::KeyLength { .. })
    ));
    assert!(matches!(
        h.set(&[b'k'; 251], b"v", 0, 0),
        Err(StoreError::KeyLength { .. })
    ));
    h.set(&[b'k'; 250], b"v", 0, 0).unwrap();
    let big = vec![7u8; 400 * 1024];
    h.set(b"big", &big, 0, 0).unwrap();
    assert_eq!(value(&h, b"big").unwrap(), big);
    // Past 512 KiB the huge heap serves the block: 1 MiB (the default limit) is stored.
    let huge = vec![9u8; 1 << 20];
    h.set(b"huge", &huge, 0, 0).unwrap();
    assert_eq!(value(&h, b"huge").unwrap(), huge);
    assert!(matches!(
        h.set(b"huger", &vec![7u8; (1 << 20) + 1], 0, 0),
        Err(StoreError::TooLarge { .. })
    ));
    assert!(store.check().is_valid(), "{:?}", store.check().problems);
}

/// The value limit is configurable up to what the huge heap serves: 4 MiB values work.
#[test]
fn four_mib_values_when_configured() {
    let (_d, path) = common::heap_path("heap");
    let config = podkv_store::StoreConfig {
        value_max: 4 << 20,
        ..common::config()
    };
    let store = podkv_store::Store::open(&path, config).unwrap();
    assert_eq!(store.value_max(), 4 << 20);
    let h = store.handle().unwrap();
    let v: Vec<u8> = (0..4u32 << 20).map(|i| (i % 251) as u8).collect();
    h.set(b"four", &v, 0, 0).unwrap();
    assert_eq!(value(&h, b"four").unwrap(), v);
    h.set(b"four", b"small again", 0, 0).unwrap();
    h.delete(b"four").unwrap();
    drop(h);
    let report = store.check();
    assert!(report.is_valid(), "{:?}", report.problems);
}

#[test]
fn crawler_reclaims_expired_and_check_is_clean() {
    let (_d, store, time) = common::fake_store(T0);
    let h = store.handle().unwrap();
    for i in 0..5000u32 {
        h.set(
            format!("k{i}").as_bytes(),
            b"value",
            0,
            if i % 2 == 0 { 5 } else { 0 },
        )
        .unwrap();
    }
    time.store(T0 + 6, Ordering::Relaxed);
    let crawl = h.crawl();
    assert_eq!(crawl.reclaimed, 2500);
    drop(h);
    let report = common::settled_check(&store);
    assert_eq!(report.store.items, 2500);
    assert!(report.store.buckets_log2 > 10, "the table grew");
}

#[test]
fn check_path_reports_a_clean_store_and_refuses_an_empty_heap() {
    let (_d, path) = common::heap_path("heap");
    {
        let store = podkv_store::Store::open(&path, common::config()).unwrap();
        let h = store.handle().unwrap();
        for i in 0..100u32 {
            h.set(format!("k{i}").as_bytes(), b"v", 0, 0).unwrap();
        }
        h.delete(b"k0").unwrap();
    }
    let report = podkv_store::check_path(&path).unwrap();
    assert!(report.is_valid(), "{:#?}", report.problems);
    assert_eq!(report.store.items, 99);
    assert!(report.store.limbo_entries <= 1);
    let (_d2, empty) = common::heap_path("empty");
    podkv_alloc::Heap::open(&empty, &common::heap_config()).unwrap();
    assert!(podkv_store::check_path(&empty).is_err());
}

#[test]
fn fixed_table_never_grows() {
    let (_d, path) = common::heap_path("heap");
    let config = podkv_store::StoreConfig {
        table: podkv_store::Table::Fixed(4),
        ..common::config()
    };
    let store = podkv_store::Store::open(&path, config).unwrap();
    let h = store.handle().unwrap();
    for i in 0..1000u32 {
        h.set(format!("k{i}").as_bytes(), &i.to_le_bytes(), 0, 0)
            .unwrap();
    }
    h.flush_counters();
    assert_eq!(store.buckets_log2(), 4);
    for i in 0..1000u32 {
        assert_eq!(
            value(&h, format!("k{i}").as_bytes()).unwrap(),
            i.to_le_bytes()
        );
    }
    // Blocks of about 60 entries: a write copies more than a block maker keeps at hand, and
    // reads them twice (a swap, a drop).
    for i in (0..1000u32).step_by(3) {
        h.set(format!("k{i}").as_bytes(), &(i + 7).to_le_bytes(), 0, 0)
            .unwrap();
    }
    for i in (0..1000u32).step_by(5) {
        h.delete(format!("k{i}").as_bytes()).unwrap();
    }
    for i in 0..1000u32 {
        let expected = match (i % 5, i % 3) {
            (0, _) => None,
            (_, 0) => Some((i + 7).to_le_bytes()),
            _ => Some(i.to_le_bytes()),
        };
        assert_eq!(
            value(&h, format!("k{i}").as_bytes()),
            expected.map(|v| v.to_vec()),
            "k{i}"
        );
    }
    drop(h);
    assert!(store.check().is_valid());
}

/// Inserts keys until the table has `2^log2` buckets: the doubling comes with the last
/// insert, so most of its splits are owed to inserts that never come.
fn doubled_by_the_last_insert(h: &podkv_store::StoreHandle, log2: u32) -> u32 {
    let mut n = 0u32;
    while h.map().buckets_log2() < log2 {
        h.set(format!("k{n}").as_bytes(), &n.to_le_bytes(), 0, 0)
            .unwrap();
        n += 1;
    }
    n
}

/// Every key `doubled_by_the_last_insert` wrote holds its value.
fn assert_every_key(h: &podkv_store::StoreHandle, n: u32) {
    for i in 0..n {
        assert_eq!(
            value(h, format!("k{i}").as_bytes()).unwrap(),
            i.to_le_bytes()
        );
    }
}

/// A table that doubled with the last inserts is left half made; `make_whole` makes it
/// whole, every item stays, and a whole table has nothing left to make.
#[test]
fn make_whole_finishes_a_table_that_doubled_with_the_last_inserts() {
    let (_d, path) = common::heap_path("heap");
    let store = podkv_store::Store::open(&path, common::config()).unwrap();
    let h = store.handle().unwrap();
    let n = doubled_by_the_last_insert(&h, 12);
    let before = store.check().store.buckets;
    assert!(
        before < 3 << 10,
        "most of the newer half is unmade: {before} buckets"
    );
    assert_eq!(h.make_whole(), ((1 << 12) - before, Some(12)));
    drop(h);
    let after = store.check();
    assert!(after.is_valid(), "{:#?}", after.problems);
    assert_eq!(after.store.buckets, 1 << 12);
    let h = store.handle().unwrap();
    assert_every_key(&h, n);
    assert_eq!(
        h.make_whole(),
        (0, Some(12)),
        "a whole table has nothing to make"
    );
}

/// Two handles making the same half-made table whole at once (as the maintenance threads of
/// two processes do) leave it whole and sound, every item in place.
#[test]
fn two_handles_make_whole_the_same_table_at_once() {
    let (_d, path) = common::heap_path("heap");
    let store = podkv_store::Store::open(&path, common::config()).unwrap();
    let h = store.handle().unwrap();
    let n = doubled_by_the_last_insert(&h, 14);
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                let mine = store.handle().unwrap();
                assert_eq!(mine.make_whole().1, Some(14));
            });
        }
    });
    let check = store.check();
    assert!(check.is_valid(), "{:#?}", check.problems);
    assert_eq!(check.store.buckets, 1 << 14);
    assert_every_key(&h, n);
}

/// The maintenance thread makes a half-made table whole by itself, within a few of its
/// looks at the size, with no expiry crawl asked for.
#[test]
fn the_maintenance_thread_makes_a_grown_table_whole() {
    let (_d, path) = common::heap_path("heap");
    let store = podkv_store::Store::open(&path, common::config()).unwrap();
    let maintainer = store.spawn_maintainer(None);
    let h = store.handle().unwrap();
    doubled_by_the_last_insert(&h, 13);
    let start = std::time::Instant::now();
    while store.check().store.buckets < 1 << 13 {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "still half made: {} buckets",
            store.check().store.buckets
        );
        std::thread::sleep(podkv_store::GROWTH_POLL);
    }
    let report = maintainer.stop();
    assert!(report.buckets_made > 0, "{report:?}");
    assert_eq!(
        (report.visited, report.reclaimed),
        (0, 0),
        "no expiry pass: {report:?}"
    );
    drop(h);
    assert!(store.check().is_valid());
}
