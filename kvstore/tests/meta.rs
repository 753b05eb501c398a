//! The meta commands' item state: exactly one recache-token winner under races (touches
//! included), stale items, explicit CAS, conditions decided inside the write loop, and plain
//! reads that write nothing.

mod common;

use podkv_store::{Count, Counted, Delete, Mode, Outcome, Rank, Read, StoreExtra};
use std::sync::{Arc, Barrier};

const T0: u64 = 1_700_000_000;

fn recache(threshold: i64) -> Read {
    Read {
        recache: Some((threshold, Rank(0))),
        ..Read::default()
    }
}

/// Racing readers under the `R` threshold: one `W` per token, and a touch racing them never
/// drops a token that was sent (the next reader sees `Z`, not a second `W`).
#[test]
fn one_winner_per_token_even_with_touches() {
    let (_d, store, _t) = common::fake_store(T0);
    const READERS: usize = 4;
    for round in 0..40 {
        let h = store.handle().unwrap();
        h.set(b"hot", format!("v{round}").as_bytes(), 0, 100)
            .unwrap();
        drop(h);
        let start = Arc::new(Barrier::new(READERS + 1));
        let readers: Vec<_> = (0..READERS)
            .map(|_| {
                let (store, start) = (store.clone(), start.clone());
                std::thread::spawn(move || {
                    let h = store.handle().unwrap();
                    start.wait();
                    let read = h.meta_get(b"hot", recache(200)).unwrap().unwrap();
                    read.lease.won
                })
            })
            .collect();
        let toucher = {
            let (store, start) = (store.clone(), start.clone());
            std::thread::spawn(move || {
                let h = store.handle().unwrap();
                start.wait();
                for _ in 0..20 {
                    h.touch(b"hot", 100).unwrap();
                }
            })
        };
        let wins = readers
            .into_iter()
            .map(|r| r.join().unwrap())
            .filter(|&won| won)
            .count();
        toucher.join().unwrap();
        assert_eq!(wins, 1, "round {round}");
        let h = store.handle().unwrap();
        let after = h.meta_get(b"hot", recache(200)).unwrap().unwrap();
        assert!(after.lease.token_sent && !after.lease.won, "round {round}");
    }
}

/// `md C` decided inside the write loop: clients passing a baton by "delete the value I read
/// (if it is still that one), then add the next" never delete the same value twice.
#[test]
fn conditional_delete_is_exact() {
    let (_d, store, _t) = common::fake_store(T0);
    store.handle().unwrap().set(b"baton", b"0", 0, 0).unwrap();
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let store = store.clone();
            std::thread::spawn(move || {
                let h = store.handle().unwrap();
                let mut taken = Vec::new();
                while taken.len() < 200 {
                    let Some((n, cas)) = h.get(b"baton").unwrap().map(|g| {
                        let n: u64 = std::str::from_utf8(g.value()).unwrap().parse().unwrap();
                        (n, g.cas())
                    }) else {
                        continue;
                    };
                    let delete = Delete {
                        compare: Some(cas),
                        ..Delete::default()
                    };
                    if h.meta_delete(b"baton", delete).unwrap() == Outcome::Deleted {
                        let next = (n + 1).to_string();
                        let added = h.store(Mode::Add, b"baton", next.as_bytes(), 0, 0);
                        assert_eq!(added.unwrap(), Outcome::Stored, "the baton was ours");
                        taken.push(n);
                    }
                }
                taken
            })
        })
        .collect();
    let mut all: Vec<u64> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    all.sort_unstable();
    assert_eq!(all, (0..800).collect::<Vec<_>>(), "each value taken once");
}

/// A read that changes nothing allocates nothing: no item is replaced.
#[test]
fn plain_meta_reads_write_nothing() {
    let (_d, store, _t) = common::fake_store(T0);
    let h = store.handle().unwrap();
    h.set(b"k", b"v", 0, 100).unwrap();
    let blocks = || store.check().heap_live_blocks;
    let before = blocks();
    let read = h.meta_get(b"k", Read::default()).unwrap().unwrap();
    assert_eq!(read.guard.value(), b"v");
    drop(read);
    let read = h.meta_get(b"k", recache(50)).unwrap().unwrap();
    assert!(!read.lease.won, "TTL 100 is not under 50");
    drop(read);
    assert!(h.get(b"k").unwrap().unwrap().lease() == Default::default());
    assert_eq!(blocks(), before, "nothing was copied");
    let read = h.meta_get(b"k", recache(200)).unwrap().unwrap();
    assert!(read.lease.won);
    drop(read);
    assert!(blocks() > before, "a win replaces the item");
}

/// `md I`, then `ms I` with an older token, with explicit CAS values.
#[test]
fn stale_items_and_explicit_cas() {
    let (_d, store, _t) = common::fake_store(T0);
    let h = store.handle().unwrap();
    let extra = |cas| StoreExtra {
        cas: Some(cas),
        ..StoreExtra::default()
    };
    let stored = h.store_with(Mode::Set, b"k", b"a", 0, 100, extra(500));
    assert_eq!(stored.unwrap(), (Outcome::Stored, 500));
    let invalidate = Delete {
        invalidate: Some(Some(30)),
        cas: Some(600),
        ..Delete::default()
    };
    assert_eq!(h.meta_delete(b"k", invalidate).unwrap(), Outcome::Deleted);
    let g = h.get(b"k").unwrap().unwrap();
    assert_eq!(
        (g.cas(), g.expiry(), g.value()),
        (600, T0 as u32 + 30, &b"a"[..])
    );
    assert!(g.lease().stale && !g.lease().token_sent);
    drop(g);
    let read = h.meta_get(b"k", Read::default()).unwrap().unwrap();
    assert!(
        read.lease.won && read.lease.stale,
        "a stale item's first reader wins"
    );
    drop(read);
    let older = StoreExtra {
        invalidate: true,
        ..StoreExtra::default()
    };
    let (outcome, cas) = h
        .store_with(Mode::Cas(550), b"k", b"b", 0, 5, older)
        .unwrap();
    assert_eq!(outcome, Outcome::Stored);
    let g = h.get(b"k").unwrap().unwrap();
    assert_eq!(
        (g.cas(), g.value(), g.expiry()),
        (cas, &b"b"[..], T0 as u32 + 30)
    );
    assert!(
        g.lease().stale && g.lease().token_sent,
        "TTL and sent token kept"
    );
    drop(g);
    let newer = h.store_with(Mode::Cas(cas + 1), b"k", b"c", 0, 0, older);
    assert_eq!(newer.unwrap().0, Outcome::Exists);
    let counted = h.meta_counter(
        b"n",
        Count {
            vivify: Some((0, Rank(0))),
            touch: Some((90, Rank(1))),
            initial: 7,
            cas: Some(900),
            ..Count::default()
        },
    );
    let expiry = T0 as u32 + 90;
    assert_eq!(
        counted.unwrap(),
        Counted::Value {
            value: 7,
            cas: 900,
            expiry,
            shown_expiry: expiry,
            created: true
        }
    );
}

/// Two handles draw tokens from different blocks; each key's tokens still increase.
#[test]
fn each_keys_tokens_increase_across_handles() {
    let (_d, store, _t) = common::fake_store(T0);
    let (a, b) = (store.handle().unwrap(), store.handle().unwrap());
    let mut last = 0;
    for i in 0..200 {
        let h = if i % 3 == 0 { &a } else { &b };
        let (_, cas) = h
            .store_with(Mode::Set, b"k", b"v", 0, 0, StoreExtra::default())
            .unwrap();
        assert!(cas > last, "write {i}: {cas} after {last}");
        last = cas;
    }
}
