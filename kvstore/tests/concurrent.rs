//! Threads of one process racing the crawler and eviction: replaces of live keys always win
//! over removal of the item they replace, and the store stays sound.

mod common;

use podkv_store::{Clock, Store, StoreConfig};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const T0: u64 = 1_700_000_000;

#[test]
fn writers_race_crawler_and_eviction() {
    let (_d, path) = common::heap_path("heap");
    let (clock, time) = Clock::fake(T0);
    let config = StoreConfig {
        clock,
        capacity: Some(4 << 20),
        ..common::config()
    };
    let store = Store::open(&path, config).unwrap();
    let crawler = store.spawn_crawler(Duration::from_millis(1));
    let stop = Arc::new(AtomicBool::new(false));
    let ticker = {
        let (time, stop) = (time.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                time.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let writers: Vec<_> = (0..2u32)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                let h = store.handle().unwrap();
                for i in 0..20_000u32 {
                    // short-lived churn, plus one pinned key per writer that must survive
                    h.set(format!("t{t}-{}", i % 3000).as_bytes(), &[1u8; 300], 0, 2)
                        .unwrap();
                    h.set(format!("keep{t}").as_bytes(), &i.to_le_bytes(), 0, 0)
                        .unwrap();
                    let g = h.get(format!("keep{t}").as_bytes()).unwrap();
                    assert!(
                        g.is_some_and(|g| g.value() == i.to_le_bytes()),
                        "own write lost"
                    );
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    ticker.join().unwrap();
    // Every churn item has now expired: wait for two more full passes.
    time.fetch_add(10, Ordering::Relaxed);
    let seen = crawler.passes();
    while crawler.passes() < seen + 2 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let crawled = crawler.stop();
    assert!(
        crawled.reclaimed > 0,
        "the crawler reclaimed expired items: {crawled:?}"
    );
    let report = common::settled_check(&store);
    assert!(report.store.item_bytes <= (4 << 20) + 64 * 1024);
    assert_eq!(
        report.store.items, 2,
        "only the two kept keys remain after the crawl"
    );
}
