//! The slab-utilisation census through the public API: sparse slabs fall in the low band,
//! full ones in the high band, and live bytes match the blocks held; sparse slabs an owner
//! gives up are named to drain and go back once their blocks are freed.

use podkv_alloc::census::BAND_NAMES;
use podkv_alloc::{Config, Heap, Kind};
use std::alloc::Layout;

/// The blocks both tests allocate: 128 bytes, 512 to a 64 KiB slab.
const BLOCK: Layout = match Layout::from_size_align(128, 8) {
    Ok(layout) => layout,
    Err(_) => panic!("a valid layout"),
};

/// A fresh heap of 64 MiB slab heaps and four slots, in a directory that lives as long as
/// the returned guard.
fn small_heap() -> (tempfile::TempDir, Heap) {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        small_bytes: 64 << 20,
        large_bytes: 64 << 20,
        slots: 4,
        ..Config::default()
    };
    let heap = Heap::open(dir.path().join("heap"), &config).unwrap();
    (dir, heap)
}

#[test]
fn census_bands_follow_how_full_each_slab_is() {
    let (_dir, heap) = small_heap();
    let t = heap.thread().unwrap();
    // Eight 64 KiB slabs' worth of 128-byte blocks; keep one in twenty (5% of each slab).
    let blocks: Vec<_> = (0..8 * 512).map(|_| t.allocate(BLOCK).unwrap()).collect();
    let (kept, freed): (Vec<_>, Vec<_>) = blocks.iter().enumerate().partition(|(i, _)| i % 20 == 0);
    for (_, &off) in freed {
        t.free(off);
    }
    let census = heap.census();
    let class = census
        .classes
        .iter()
        .find(|c| c.kind == Kind::Small && c.block_bytes == 128)
        .expect("the 128-byte class has slabs");
    assert_eq!(class.live_bytes, 128 * kept.len() as u64);
    assert_eq!(class.slab_bytes, class.slabs * (64 << 10));
    assert!(class.slabs >= 8, "{class:?}");
    assert_eq!(
        class.occupancy.slabs[1..],
        [0, 0],
        "every slab is 5% full: all in {}",
        BAND_NAMES[0]
    );
    // Fill new slabs completely: they land in the top band, the sparse ones stay low.
    let full: Vec<_> = (0..16 * 512).map(|_| t.allocate(BLOCK).unwrap()).collect();
    let census = heap.census();
    assert!(census.occupancy.slabs[2] >= 8, "{:?}", census.occupancy);
    assert_eq!(census.live_bytes, 128 * (kept.len() + full.len()) as u64);
    assert!(census.utilisation() > 0.5 && census.utilisation() <= 1.0);
    for off in full.into_iter().chain(kept.into_iter().map(|(_, &o)| o)) {
        t.free(off);
    }
    assert_eq!(heap.census().live_bytes, 0);
}

/// The owner gives up its sparse slabs (`ThreadHandle::disown_sparse`): they are named to
/// drain (`Heap::sparse_slabs`), never allocated from again, and the last free of their
/// blocks, from another slot, takes each to the global list; dense slabs and the class's
/// list head stay the owner's, and only as many slabs go as the kept ones have room for.
#[test]
fn disowned_sparse_slabs_are_drained_by_anyone_s_frees() {
    let (_dir, heap) = small_heap();
    let t = heap.thread().unwrap();
    let blocks: Vec<_> = (0..8 * 512).map(|_| t.allocate(BLOCK).unwrap()).collect();
    // Three of every five go: every slab is about 40% in use.
    let (kept, freed): (Vec<_>, Vec<_>) = blocks.iter().enumerate().partition(|(i, _)| i % 5 < 2);
    for (_, &off) in freed {
        t.free(off);
    }
    assert!(heap.sparse_slabs(50).is_empty(), "nothing disowned yet");
    assert_eq!(
        t.disown_sparse(30, 0).count,
        0,
        "no slab is 30% in use or less"
    );
    let disowned = t.disown_sparse(50, 0);
    // Eight slabs 40% in use: the blocks of four fit in the other four's 60% free, five's not.
    assert_eq!(disowned.count, 4, "{disowned:?}");
    assert!(
        disowned.to_empty.is_empty(),
        "no memory over a limit: {disowned:?}"
    );
    let sparse = heap.sparse_slabs(50);
    assert_eq!(sparse.len(), disowned.count as usize);
    let in_drained = kept.iter().filter(|(_, off)| sparse.holds(off.0)).count();
    assert!(
        in_drained * 8 >= kept.len() * 3,
        "{in_drained} of {}",
        kept.len()
    );
    assert!(heap.check().is_valid(), "{:#?}", heap.check().problems);
    // The owner allocates no block in a disowned slab.
    let fresh: Vec<_> = (0..2000).map(|_| t.allocate(BLOCK).unwrap()).collect();
    assert!(fresh.iter().all(|off| !sparse.holds(off.0)));
    // Another slot frees the blocks left in the disowned slabs: the slabs go back.
    let other = heap.thread().unwrap();
    for (_, off) in kept.iter().filter(|(_, off)| sparse.holds(off.0)) {
        other.free(**off);
    }
    other.flush_remote_frees();
    assert!(heap.sparse_slabs(50).is_empty());
    let report = heap.check();
    assert!(report.is_valid(), "{:#?}", report.problems);
    assert_eq!(report.heaps[0].slabs_by_state.get("disowned"), None);
}

/// A heap over a memory limit: the owner gives up its sparsest slabs, the class's list head
/// included, until they hold the bytes over (`ThreadHandle::disown_sparse`'s `over`); once
/// their blocks are freed the heap holds that much less (`Heap::held_bytes`).
#[test]
fn slabs_given_up_for_the_bytes_over_a_limit_leave_the_heap() {
    let (_dir, heap) = small_heap();
    let t = heap.thread().unwrap();
    assert_eq!(heap.held_bytes(), 0, "a fresh heap holds no slab");
    let blocks: Vec<_> = (0..4 * 512).map(|_| t.allocate(BLOCK).unwrap()).collect();
    // Slab i keeps 1 + 100 i of its 512 blocks: the first is the sparsest.
    let (kept, freed): (Vec<_>, Vec<_>) =
        (0..blocks.len()).partition(|i| i % 512 <= 100 * (i / 512));
    for i in freed {
        t.free(blocks[i]);
    }
    let held = heap.held_bytes();
    assert!(held >= 4 << 16, "four slabs at least: {held}");
    let given = t.disown_sparse(0, 2 << 16);
    assert_eq!(given.count, 2, "{given:?}");
    assert_eq!(given.to_empty.len(), 2);
    let in_given: Vec<_> = kept
        .iter()
        .map(|&i| blocks[i])
        .filter(|off| given.to_empty.holds(off.0))
        .collect();
    assert_eq!(in_given.len(), 1 + 101, "the two sparsest slabs' blocks");
    let other = heap.thread().unwrap();
    for &off in &in_given {
        other.free(off);
    }
    other.flush_remote_frees();
    assert_eq!(heap.held_bytes(), held - (2 << 16));
    let report = heap.check();
    assert!(report.is_valid(), "{:#?}", report.problems);
}
