//! Hand-overs between processes that the hammering tests (`multiprocess`, `kill`) leave to
//! chance, made on purpose so that a dropped write-back or invalidation fails here: each
//! process keeps what it cached and no line is evicted at random (`PODKV_COHERENCE_EVICT=0`),
//! so nothing but the store's own SWcc calls moves a line. Meaningful in a `limited` or `mcas`
//! heap under the model of non-coherent caches (`PODKV_TEST_COHERENCE`,
//! `PODKV_COHERENCE_MODEL=1`, feature `coherence-model`), as `scripts/test` runs it; on
//! coherent memory they pass by construction.
//!
//! - `a_store_made_in_one_process_reads_whole_in_another_while_its_maker_keeps_it_open`:
//!   the maker creates the store, writes, deletes and overwrites, then waits with the store
//!   open; a reader in another process finds every value and a clean check.
//! - `a_process_that_read_the_store_earlier_checks_it_fresh_after_another_changed_it`: a
//!   process reads every key (its cache now holds items, blocks and slot lines), another
//!   process rewrites, deletes and churns, then the first checks the store and reads every key
//!   again: no stale problem, every new value.
//! - `cas_tokens_are_unique_across_processes_writing_at_once`: two processes reserve blocks of
//!   CAS tokens from the one shared counter at once; no two keys get one token, and the shared
//!   item and byte counters they both added to agree with the index.
//! - `a_dead_pin_recovered_elsewhere_leaves_the_next_owners_pin_alone`: a reader dies pinned;
//!   another process recovers its slot (unpinning its announcement); a third takes that very
//!   slot and pins; the recoverer then deletes what the third reads, churns and lets its slot go:
//!   the deleted item must wait in limbo (`store.recover.unpin.cas`: a CPU CAS leaves the
//!   unpin in the recoverer's copy of the announcement line, and writing that line back later
//!   wipes the new owner's pin).

mod common;

use common::children::{role, say, wait_go, Child};
use podkv_store::{Store, StoreConfig};
const KEYS: u64 = 300;

fn config() -> StoreConfig {
    let mut config = common::config();
    config.heap.slots = 8;
    config
}

/// Value of key `k` in generation `gen`: sizes across classes, large ones included.
fn value(k: u64, gen: u64) -> Vec<u8> {
    let len = [10, 100, 700, 3000, 20_000][(k % 5) as usize];
    let mut v = format!("{gen}:{k}:").into_bytes();
    v.resize(len, b'a' + (k % 26) as u8);
    v
}

fn key(k: u64) -> Vec<u8> {
    format!("key{k}").into_bytes()
}

/// Writes generation `gen` of every key, then deletes every third one (`gen` 1: none).
fn write_generation(store: &Store, gen: u64) {
    let h = store.handle().unwrap();
    for k in 0..KEYS {
        h.set(&key(k), &value(k, gen), 0, 0).unwrap();
    }
    // Churn: retired items fill limbo bags, some freed, some still waiting.
    for round in 0..3 {
        for k in 0..KEYS / 3 {
            let churn = format!("churn{k}").into_bytes();
            h.set(&churn, &value(k + round, gen), 0, 0).unwrap();
            h.delete(&churn).unwrap();
        }
    }
    if gen > 1 {
        for k in (0..KEYS).step_by(3) {
            h.delete(&key(k)).unwrap();
        }
    }
}

/// Checks that every key holds generation `gen` (deleted where [`write_generation`] deletes).
fn expect_generation(store: &Store, gen: u64) {
    let h = store.handle().unwrap();
    for k in 0..KEYS {
        let got = h.get(&key(k)).unwrap().map(|item| item.value().to_vec());
        let want = (gen == 1 || k % 3 != 0).then(|| value(k, gen));
        assert_eq!(
            got.as_deref().map(String::from_utf8_lossy),
            want.as_deref().map(String::from_utf8_lossy),
            "key {k} in generation {gen}"
        );
    }
    let report = store.check();
    assert!(report.is_valid(), "check: {}", report.problems.join("; "));
}

#[test]
fn a_store_made_in_one_process_reads_whole_in_another_while_its_maker_keeps_it_open() {
    const TEST: &str =
        "a_store_made_in_one_process_reads_whole_in_another_while_its_maker_keeps_it_open";
    if let Some((role, heap)) = role() {
        let store = Store::open(&heap, config()).unwrap();
        match role.as_str() {
            "maker" => {
                write_generation(&store, 1);
                write_generation(&store, 2);
                say("made", "");
                wait_go();
            }
            "reader" => expect_generation(&store, 2),
            _ => {}
        }
        return;
    }
    let (_dir, heap) = common::heap_path("heap");
    let mut maker = Child::spawn(TEST, "maker", &heap);
    maker.wait_for("made");
    Child::spawn(TEST, "reader", &heap).succeed("the reader");
    maker.succeed("the maker");
}

#[test]
fn a_process_that_read_the_store_earlier_checks_it_fresh_after_another_changed_it() {
    const TEST: &str =
        "a_process_that_read_the_store_earlier_checks_it_fresh_after_another_changed_it";
    if let Some((role, heap)) = role() {
        let store = Store::open(&heap, config()).unwrap();
        match role.as_str() {
            "early" => {
                write_generation(&store, 1);
                expect_generation(&store, 1);
                say("cached", "");
                wait_go();
                expect_generation(&store, 2);
            }
            "changer" => write_generation(&store, 2),
            _ => {}
        }
        return;
    }
    let (_dir, heap) = common::heap_path("heap");
    let mut early = Child::spawn(TEST, "early", &heap);
    early.wait_for("cached");
    Child::spawn(TEST, "changer", &heap).succeed("the changer");
    early.go();
    early.succeed("the early reader's second look");
}

const TOKEN_KEYS: u64 = 6_000;

#[test]
fn cas_tokens_are_unique_across_processes_writing_at_once() {
    const TEST: &str = "cas_tokens_are_unique_across_processes_writing_at_once";
    if let Some((role, heap)) = role() {
        let store = Store::open(&heap, config()).unwrap();
        if let Some(writer) = role.strip_prefix("writer") {
            let h = store.handle().unwrap();
            say("ready", "");
            wait_go();
            for k in 0..TOKEN_KEYS {
                h.set(format!("t{writer}-{k}").as_bytes(), b"v", 0, 0)
                    .unwrap();
            }
        }
        return;
    }
    let (_dir, heap) = common::heap_path("heap");
    // Both writers open first, then start together on one word: their token reservations
    // (one shared add per 64 writes) race from the first write on.
    let mut writers: Vec<Child> = (0..2)
        .map(|w| Child::spawn(TEST, &format!("writer{w}"), &heap))
        .collect();
    for w in &mut writers {
        w.wait_for("ready");
    }
    for w in &mut writers {
        w.go();
    }
    for w in writers {
        w.succeed("a writer");
    }
    let store = Store::open(&heap, config()).unwrap();
    // The shared item and byte counters, which both writers added to at once, agree with
    // what is in the index (each handle published its deltas when it dropped).
    let report = store.check();
    let (count, used) = store.usage();
    assert_eq!(count, report.store.items, "the item counter");
    assert_eq!(count, 2 * TOKEN_KEYS);
    assert_eq!(used, report.store.item_bytes, "the byte counter");
    let h = store.handle().unwrap();
    let mut tokens = std::collections::HashMap::new();
    for w in 0..2 {
        for k in 0..TOKEN_KEYS {
            let key = format!("t{w}-{k}");
            let token = h.get(key.as_bytes()).unwrap().expect("a written key").cas();
            if let Some(other) = tokens.insert(token, key.clone()) {
                panic!("keys {other} and {key} hold one CAS token, {token}");
            }
        }
    }
}

const CHURN: u32 = 200;

#[test]
fn a_dead_pin_recovered_elsewhere_leaves_the_next_owners_pin_alone() {
    const TEST: &str = "a_dead_pin_recovered_elsewhere_leaves_the_next_owners_pin_alone";
    let two_slots = || {
        let mut config = config();
        config.heap.slots = 2;
        config
    };
    if let Some((role, heap)) = role() {
        let store = Store::open(&heap, two_slots()).unwrap();
        match role.as_str() {
            "doomed" => {
                let h = store.handle().unwrap();
                h.set(b"doomed", b"v", 0, 0).unwrap();
                let _pin = h.get(b"doomed").unwrap();
                say("pinned", &h.slot_index().to_string());
                wait_go(); // killed here
                unreachable!("the doomed reader was to be killed");
            }
            "recoverer" => {
                let settled = store.recover_dead().unwrap();
                assert_eq!(settled.len(), 1, "one dead slot");
                say("recovered", "");
                wait_go();
                // The new owner is pinned now: what this deletes must wait for it.
                let h = store.handle().unwrap();
                h.delete(b"read").unwrap();
                for i in 0..CHURN {
                    let key = format!("churn{i}").into_bytes();
                    h.set(&key, &[3u8; 200], 0, 0).unwrap();
                    h.delete(&key).unwrap();
                }
                drop(h);
                // Only the limbo count: the owner's slot is its own until it lets it go (its
                // allocator state is not written back yet), so the check is not clean now.
                let report = store.check();
                assert!(
                    report.store.limbo_entries >= 1,
                    "an item deleted while another process is pinned left limbo"
                );
                say("checked", "");
                wait_go();
            }
            "owner" => {
                // The dead reader's slot, which the recoverer unpinned: holding the other
                // slot meanwhile if the first claim lands there.
                let dead: u32 = wait_go().parse().unwrap();
                let mut h = store.handle().unwrap();
                if h.slot_index() != dead {
                    let other = h;
                    h = store.handle().unwrap();
                    drop(other);
                }
                assert_eq!(h.slot_index(), dead);
                h.set(b"read", &[9u8; 300], 0, 0).unwrap();
                let item = h.get(b"read").unwrap().unwrap();
                say("pinned", "");
                wait_go();
                assert_eq!(item.value(), &[9u8; 300][..]);
                drop(item);
            }
            _ => unreachable!(),
        }
        return;
    }
    let (_dir, heap) = common::heap_path("heap");
    drop(Store::open(&heap, two_slots()).unwrap());
    let mut doomed = Child::spawn(TEST, "doomed", &heap);
    let dead = doomed.wait_for("pinned");
    doomed.kill();
    let mut recoverer = Child::spawn(TEST, "recoverer", &heap);
    recoverer.wait_for("recovered");
    let mut owner = Child::spawn(TEST, "owner", &heap);
    owner.tell(&dead);
    owner.wait_for("pinned");
    recoverer.go();
    recoverer.wait_for("checked");
    owner.go();
    owner.succeed("the owner");
    recoverer.go();
    recoverer.succeed("the recoverer");
}
