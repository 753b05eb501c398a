//! Compaction: items move out of sparse slabs unchanged, the slabs empty, and what was
//! neither sparse nor worth draining stays where it is.

mod common;

use podkv_store::compact::PERCENT_DRAIN;
use podkv_store::{Store, StoreHandle};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Bytes of the slabs holding class `block` (its block size).
fn class_slab_bytes(store: &Store, block: u32) -> u64 {
    let census = store.heap().census();
    census
        .classes
        .iter()
        .filter(|c| c.block_bytes == block)
        .map(|c| c.slab_bytes)
        .sum()
}

/// The block size of the class holding the most live bytes: the 300-byte values' class.
fn busiest_class(store: &Store) -> u32 {
    let census = store.heap().census();
    census
        .classes
        .iter()
        .max_by_key(|c| c.live_bytes)
        .unwrap()
        .block_bytes
}

fn fill(h: &StoreHandle, count: u32) {
    for i in 0..count {
        let value = vec![(i % 251) as u8; 300];
        h.set(format!("key{i:06}").as_bytes(), &value, i, 0)
            .unwrap();
    }
}

/// Fills 20,000 keys, then deletes three of every five (every slab of the values' class is
/// left about 40% full) and collects what they freed; the keys kept.
fn thinned(h: &StoreHandle) -> impl Iterator<Item = u32> {
    fill(h, 20_000);
    for i in (0..20_000u32).filter(|i| i % 5 >= 2) {
        h.delete(format!("key{i:06}").as_bytes()).unwrap();
    }
    h.collect();
    h.collect();
    (0..20_000u32).filter(|i| i % 5 < 2)
}

#[test]
fn sparse_slabs_empty_and_every_item_stays_the_same() {
    let (_d, path) = common::heap_path("heap");
    let store = Store::open(&path, common::config()).unwrap();
    let h = store.handle().unwrap();
    let kept = thinned(&h);
    let block = busiest_class(&store);
    let kept: Vec<(u32, u64)> = kept
        .map(|i| {
            (
                i,
                h.get(format!("key{i:06}").as_bytes())
                    .unwrap()
                    .unwrap()
                    .cas(),
            )
        })
        .collect();
    let before = class_slab_bytes(&store, block);

    // The writer gives its sparse slabs up; another handle moves their items.
    assert!(h.disown_sparse(PERCENT_DRAIN) > 10);
    let mover = store.handle().unwrap();
    let report = mover.compact(PERCENT_DRAIN, 0);
    assert!(
        report.slabs > 10,
        "the class's slabs are sparse: {report:?}"
    );
    assert!(
        report.moved as usize > kept.len() / 2,
        "most kept items lay in sparse slabs: {report:?} of {}",
        kept.len()
    );
    mover.collect();
    mover.collect();
    let after = class_slab_bytes(&store, block);
    assert!(
        after * 10 <= before * 7,
        "the class's slabs shrank from {before} to {after} bytes"
    );
    for (i, cas) in kept {
        let item = h.get(format!("key{i:06}").as_bytes()).unwrap().unwrap();
        assert_eq!(
            item.value(),
            &vec![(i % 251) as u8; 300][..],
            "key{i:06}'s value"
        );
        assert_eq!(
            (item.flags(), item.cas()),
            (i, cas),
            "key{i:06}'s flags and CAS token"
        );
    }
    // A second pass finds the class dense: nothing left to move.
    let again = mover.compact(PERCENT_DRAIN, 0);
    assert!(
        again.moved * 20 <= report.moved,
        "{again:?} after {report:?}"
    );
    drop((h, mover));
    let check = store.check();
    assert!(check.is_valid(), "{:#?}", check.problems);
    assert_eq!(check.store.items, 8_000);
}

/// A pass walked in slices, with writes of the same keys between slices (as a server's
/// worker answers its clients between them): it moves the items as a whole pass does, each
/// key ends with its last write, and the store checks clean.
#[test]
fn a_pass_in_slices_moves_items_while_writes_go_on_between_slices() {
    let (_d, path) = common::heap_path("heap");
    let store = Store::open(&path, common::config()).unwrap();
    let h = store.handle().unwrap();
    let mut last: std::collections::HashMap<u32, u8> =
        thinned(&h).map(|i| (i, (i % 251) as u8)).collect();

    assert!(h.disown_sparse(PERCENT_DRAIN) > 10);
    let mover = store.handle().unwrap();
    let mut pass = mover.compact_begin(PERCENT_DRAIN, 0);
    assert!(
        pass.report().slabs > 10 && !pass.is_done(),
        "{:?}",
        pass.report()
    );
    let mut slices = 0u32;
    while !mover.compact_slice(&mut pass, 256) {
        slices += 1;
        // A kept key rewritten between two slices, with a new byte.
        let i = (slices * 37 % 8_000) / 2 * 5;
        let byte = (slices % 200) as u8 + 1;
        h.set(format!("key{i:06}").as_bytes(), &vec![byte; 300], i, 0)
            .unwrap();
        last.insert(i, byte);
    }
    let report = pass.report();
    assert!(slices > 10, "a pass of many slices: {slices}");
    assert!(
        report.moved as usize > last.len() / 2,
        "most kept items lay in sparse slabs: {report:?}"
    );
    for (i, byte) in &last {
        let item = h.get(format!("key{i:06}").as_bytes()).unwrap().unwrap();
        assert_eq!(
            item.value(),
            &vec![*byte; 300][..],
            "key{i:06}'s last write"
        );
    }
    drop((h, mover));
    let check = store.check();
    assert!(check.is_valid(), "{:#?}", check.problems);
    assert_eq!(check.store.items, 8_000);
}

/// Over a memory limit a pass gives up the sparsest slabs, whatever their class, and evicts
/// their items (nothing moved at `percent` 0): the heap holds about the bytes over less,
/// every item not evicted is still there, and the store checks clean.
#[test]
fn a_pass_over_the_limit_evicts_the_items_of_the_sparsest_slabs() {
    let (_d, path) = common::heap_path("heap");
    let store = Store::open(&path, common::config()).unwrap();
    let h = store.handle().unwrap();
    let thin: Vec<u32> = thinned(&h).collect();
    // A second, dense class.
    for i in 0..2_000u32 {
        h.set(format!("big{i:05}").as_bytes(), &[7; 600], 0, 0)
            .unwrap();
    }
    let held = store.held_bytes().expect("a pod heap counts its slabs");
    // Sixteen slabs over: more than the few empty slabs the index's classes hold.
    let over = 16 << 16;
    let report = h.compact(0, over);
    assert!(report.emptied >= 16 && report.moved == 0, "{report:?}");
    assert!(report.evicted > 0, "{report:?}");
    let evicted = report.evicted;
    h.collect();
    h.collect();
    // The pass moves the index's blocks out of the slabs it gives up, and its own new blocks
    // take new slabs of their classes: a server's next pass gives up more.
    let now = store.held_bytes().unwrap();
    assert!(held - now >= over * 3 / 4, "held {held} bytes, now {now}");
    let present = |key: String| h.get(key.as_bytes()).unwrap().is_some();
    let left = thin
        .iter()
        .filter(|i| present(format!("key{i:06}")))
        .count()
        + (0..2_000u32)
            .filter(|i| present(format!("big{i:05}")))
            .count();
    assert_eq!(left as u64, 10_000 - evicted, "only the evicted items went");
    assert_eq!(store.evictions(), evicted);
    drop(h);
    let check = store.check();
    assert!(check.is_valid(), "{:#?}", check.problems);
    assert_eq!(check.store.items, left as u64);
}

/// Bytes of the slabs of the index's blocks (a bucket's entries when it holds more than one
/// item), and their live bytes: the classes smaller than any item here.
fn block_slab_bytes(store: &Store) -> (u64, u64) {
    let census = store.heap().census();
    census
        .classes
        .iter()
        .filter(|c| c.block_bytes < 100)
        .fold((0, 0), |(slab, live), c| {
            (slab + c.slab_bytes, live + c.live_bytes)
        })
}

/// The index's blocks leave a drained slab as its items do: a slab of them empties by a
/// pass, not only once a write rewrites each of their buckets (they never expire, so a
/// server left idle over its memory limit would hold such slabs for good).
#[test]
fn a_pass_moves_the_index_blocks_out_of_sparse_slabs() {
    let (_d, path) = common::heap_path("heap");
    let store = Store::open(&path, common::config()).unwrap();
    let h = store.handle().unwrap();
    let kept: Vec<u32> = thinned(&h).collect();
    let (before, live) = block_slab_bytes(&store);
    assert!(
        live > 0 && before > live * 2,
        "sparse block slabs: {before} bytes for {live}"
    );
    // The owner gives its sparse slabs up and moves what they hold, as a server's worker does:
    // at 30% live at most, those of the blocks (the items' slabs are 40% full).
    let report = h.compact(30, 0);
    assert!(report.blocks > 0, "{report:?}");
    h.collect();
    h.collect();
    let (after, _) = block_slab_bytes(&store);
    assert!(
        after + (2 << 16) <= before,
        "the blocks' slabs shrank by two slabs at least: from {before} to {after} bytes \
         ({report:?})"
    );
    for i in kept {
        let item = h.get(format!("key{i:06}").as_bytes()).unwrap().unwrap();
        assert_eq!(item.value(), &vec![(i % 251) as u8; 300][..]);
    }
    drop(h);
    let check = store.check();
    assert!(check.is_valid(), "{:#?}", check.problems);
    assert_eq!(check.store.items, 8_000);
}

#[test]
fn dense_slabs_are_left_alone() {
    let (_d, path) = common::heap_path("heap");
    let store = Store::open(&path, common::config()).unwrap();
    let h = store.handle().unwrap();
    fill(&h, 5_000);
    // One of every five keys goes: the slabs stay 80% full, above any drain threshold.
    for i in (0..5_000u32).filter(|i| i % 5 == 0) {
        h.delete(format!("key{i:06}").as_bytes()).unwrap();
    }
    h.collect();
    h.collect();
    let report = h.compact(PERCENT_DRAIN, 0);
    assert_eq!(report.moved, 0, "{report:?}");
}

/// Writers shift sizes while another handle compacts without pause: moves race writes of
/// the same keys, and every key ends with its last write, every move with the old item
/// freed (the store checks clean).
#[test]
fn moves_racing_writers_lose_no_write() {
    let (_d, path) = common::heap_path("heap");
    let store = Store::open(&path, common::config()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mover = {
        let (store, stop) = (store.clone(), stop.clone());
        std::thread::spawn(move || {
            let h = store.handle().unwrap();
            let mut moved = 0;
            // Passes until the writers are done, then one more for the last cycle's slabs.
            while !stop.load(Ordering::Relaxed) {
                moved += h.compact(PERCENT_DRAIN, 0).moved;
            }
            moved + h.compact(PERCENT_DRAIN, 0).moved
        })
    };
    let writers: Vec<_> = (0..2u64)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                let h = store.handle().unwrap();
                let mut last = vec![0u64; 1000];
                for cycle in 0..24u64 {
                    let len = 100 + (cycle % 4) as usize * 150;
                    // Three of every five keys, a different three each cycle, take the
                    // cycle's size: the last cycle's slabs are left 40% full.
                    for i in (0..1000u64).filter(|i| cycle == 0 || (i + cycle) % 5 >= 2) {
                        let mut value = vec![cycle as u8; len];
                        value[..8].copy_from_slice(&cycle.to_le_bytes());
                        h.set(format!("w{t}-{i}").as_bytes(), &value, 0, 0).unwrap();
                        last[i as usize] = cycle;
                    }
                    h.disown_sparse(PERCENT_DRAIN);
                    for (i, &cycle) in last.iter().enumerate() {
                        let got = h.get(format!("w{t}-{i}").as_bytes()).unwrap().unwrap();
                        assert_eq!(got.value()[..8], cycle.to_le_bytes(), "w{t}-{i}");
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let moved = mover.join().unwrap();
    assert!(moved > 0, "the mover moved items");
    let report = common::settled_check(&store);
    assert_eq!(report.store.items, 2000);
}
