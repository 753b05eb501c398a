//! The SWcc protocol at each transition (CXLALLOC §3.2.2), measured by `podkv_hw::swcc`'s
//! per-thread counters: in a `limited` heap every ownership move writes the slab's descriptor
//! back and every read of another thread's descriptor invalidates it first; the fast paths do
//! neither; in a `hardware` heap nothing is written back at all.

use podkv_alloc::{Config, Heap, Offset};
use podkv_hw::swcc::{self, Counts};
use podkv_hw::Coherence;
use std::alloc::Layout;

fn heap(dir: &tempfile::TempDir, coherence: Coherence) -> Heap {
    let config = Config {
        small_bytes: 64 << 20,
        large_bytes: 64 << 20,
        slots: 16,
        coherence,
        ..Config::default()
    };
    Heap::open(dir.path().join("heap"), &config).unwrap()
}

fn during(f: impl FnOnce()) -> Counts {
    let before = swcc::counts();
    f();
    swcc::counts().since(before)
}

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, 8).unwrap()
}

/// 200 KiB blocks: two per 512 KiB large slab, so slabs fill, empty and move quickly.
const BIG: usize = 200 << 10;

#[test]
fn sizing_a_slab_writes_its_descriptor_back() {
    for (coherence, expect) in [(Coherence::Limited, true), (Coherence::Hardware, false)] {
        let dir = tempfile::tempdir().unwrap();
        let heap = heap(&dir, coherence);
        let t = heap.thread().unwrap();
        let c = during(|| {
            t.allocate(layout(BIG)).unwrap();
        });
        assert_eq!(c.lines_written_back > 0, expect, "{coherence:?}: {c:?}");
    }
}

#[test]
fn the_fast_paths_never_flush() {
    let dir = tempfile::tempdir().unwrap();
    let heap = heap(&dir, Coherence::Limited);
    let t = heap.thread().unwrap();
    let warm = t.allocate(layout(64)).unwrap();
    let c = during(|| {
        for _ in 0..1000 {
            let off = t.allocate(layout(64)).unwrap();
            t.free(off);
        }
    });
    assert_eq!(
        c,
        Counts::default(),
        "allocation and local free are plain stores"
    );
    t.free(warm);
}

#[test]
fn detaching_a_full_slab_writes_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let heap = heap(&dir, Coherence::Limited);
    let t = heap.thread().unwrap();
    let a = t.allocate(layout(BIG)).unwrap();
    let b = t.allocate(layout(BIG)).unwrap();
    // The next allocation finds the slab full: sized_to_detached, then a new slab is sized.
    let c = during(|| {
        t.allocate(layout(BIG)).unwrap();
    });
    assert!(
        c.lines_written_back >= 2,
        "detach and sizing each write back: {c:?}"
    );
    let _ = (a, b);
}

#[test]
fn a_remote_free_reads_the_owners_descriptor_fresh() {
    let dir = tempfile::tempdir().unwrap();
    let heap = heap(&dir, Coherence::Limited);
    let owner = heap.thread().unwrap();
    let other = heap.thread().unwrap();
    let small = owner.allocate(layout(64)).unwrap();
    let large = owner.allocate(layout(BIG)).unwrap();
    for off in [small, large] {
        let c = during(|| other.free(off));
        assert!(c.lines_invalidated > 0, "{off}: {c:?}");
    }
}

#[test]
fn giving_slabs_back_writes_them_back_and_taking_one_invalidates_it() {
    let dir = tempfile::tempdir().unwrap();
    let heap = heap(&dir, Coherence::Limited);
    let t = heap.thread().unwrap();
    let keep: Offset = t.allocate(layout(BIG)).unwrap();
    let emptied = t.allocate(layout(3000)).unwrap();
    t.free(emptied);
    // Dropping the handle disowns the slab with a live block and pushes the empty one global.
    let c = during(|| drop(t));
    assert!(c.lines_written_back > 0, "disown / push global: {c:?}");
    // A new thread's first large allocation pops a slab off the global list: reader rule.
    let t = heap.thread().unwrap();
    let c = during(|| {
        t.allocate(layout(100 << 10)).unwrap();
    });
    assert!(c.lines_invalidated > 0, "pop global: {c:?}");
    t.free(keep);
}

#[test]
fn mcas_heaps_follow_the_swcc_protocol_too() {
    // No coherence at all: descriptors move by the same write-backs as in `limited`, and the
    // fast paths still flush nothing (the multi-writer words go through mCAS: tests/mcas.rs).
    let dir = tempfile::tempdir().unwrap();
    let heap = heap(&dir, Coherence::Mcas);
    let t = heap.thread().unwrap();
    let c = during(|| {
        t.allocate(layout(BIG)).unwrap();
    });
    assert!(c.lines_written_back > 0, "sizing: {c:?}");
    let warm = t.allocate(layout(64)).unwrap();
    let c = during(|| {
        for _ in 0..1000 {
            let off = t.allocate(layout(64)).unwrap();
            t.free(off);
        }
    });
    assert_eq!(c, Counts::default(), "fast paths: {c:?}");
    t.free(warm);
}
