//! The SWcc protocol at each transition (CXLALLOC §3.2.2), measured by `podkv_hw::swcc`'s
//! per-thread counters: in a `limited` heap every ownership move writes the slab's descriptor
//! back and every read of another thread's descriptor invalidates it first; the fast paths do
//! neither; in a `hardware` heap nothing is written back at all.
//!
//! A `limited` heap that processes of one host only have opened reads descriptors from its
//! cache (`domains.rs` in the crate): so the tests of the reader rule open their heaps from a
//! second host first (a child process with another `PODKV_HOST_ID`), and the last tests show
//! what one host skips and that a second host's arrival turns the rule back on.

use podkv_alloc::{Config, Heap, Offset, ThreadHandle};
use podkv_hw::swcc::{self, Counts};
use podkv_hw::Coherence;
use std::alloc::Layout;
use std::path::Path;
use std::process::Command;

/// Set in a child: the heap it opens, as a process of another host, before it exits.
const ENV_JOIN: &str = "PODKV_COHERENCE_TEST_JOIN";

fn config(coherence: Coherence) -> Config {
    Config {
        small_bytes: 64 << 20,
        large_bytes: 64 << 20,
        slots: 16,
        coherence,
        ..Config::default()
    }
}

/// A heap of `coherence`; a `limited` one opened from a second host as well.
fn heap(dir: &tempfile::TempDir, coherence: Coherence) -> Heap {
    let heap = one_host_heap(dir, coherence);
    if coherence == Coherence::Limited {
        open_from_another_host(&dir.path().join("heap"));
    }
    heap
}

/// A heap of `coherence` only this process has opened.
fn one_host_heap(dir: &tempfile::TempDir, coherence: Coherence) -> Heap {
    Heap::open(dir.path().join("heap"), &config(coherence)).unwrap()
}

/// Opens the heap at `path` in a child process of another host id, which then exits.
fn open_from_another_host(path: &Path) {
    let other = podkv_alloc::process::host_id() % u16::MAX + 1;
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "another_host_opens_the_heap", "--nocapture"])
        .env(ENV_JOIN, path)
        .env("PODKV_HOST_ID", other.to_string())
        .status()
        .unwrap();
    assert!(status.success(), "the other host's process: {status}");
}

/// The child's part of [`open_from_another_host`] (nothing in the test run itself).
#[test]
fn another_host_opens_the_heap() {
    if let Some(path) = std::env::var_os(ENV_JOIN) {
        let heap = Heap::open(&path, &config(Coherence::Limited)).unwrap();
        assert_ne!(
            podkv_alloc::process::host_id(),
            0,
            "the child has a host id of its own"
        );
        drop(heap);
    }
}

fn during(f: impl FnOnce()) -> Counts {
    let before = swcc::counts();
    f();
    swcc::counts().since(before)
}

/// Coherence operations of 1000 allocate-and-free pairs of a 64 B block on `t`'s fast paths,
/// with one block held (so the slab is sized before the count starts and stays sized).
fn fast_path_counts(t: &ThreadHandle) -> Counts {
    let warm = t.allocate(layout(64)).unwrap();
    let c = during(|| {
        for _ in 0..1000 {
            let off = t.allocate(layout(64)).unwrap();
            t.free(off);
        }
    });
    t.free(warm);
    c
}

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, 8).unwrap()
}

/// Large slabs in the detached state.
fn detached(heap: &Heap) -> u64 {
    let report = heap.check();
    report.heaps[1]
        .slabs_by_state
        .get("detached")
        .copied()
        .unwrap_or(0)
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
    let c = fast_path_counts(&t);
    assert_eq!(
        c,
        Counts::default(),
        "allocation and local free are plain stores"
    );
}

#[test]
fn detaching_a_full_slab_writes_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let heap = heap(&dir, Coherence::Limited);
    let t = heap.thread().unwrap();
    // The first slab fills and, as its class's only one, stays attached behind a second.
    let blocks: Vec<Offset> = (0..4).map(|_| t.allocate(layout(BIG)).unwrap()).collect();
    // The second is full too, with the first behind it: sized_to_detached; then the first is
    // kept again in front of a newly sized third.
    let c = during(|| {
        t.allocate(layout(BIG)).unwrap();
    });
    assert!(
        c.lines_written_back >= 2,
        "detach and sizing each write back: {c:?}"
    );
    let _ = blocks;
}

/// A sized or detached slab not morphing carries the descriptor lines its class uses between
/// hosts, not the whole 1 KiB bitset: 200 KiB blocks use one bitset word, so the head line
/// and one more. And its owner's free into it while it is sized reads nothing fresh (only it
/// writes a sized slab's head). A heap one host only has opened reads none of them fresh.
#[test]
fn a_large_slab_moves_only_the_descriptor_lines_its_class_uses() {
    for two_hosts in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let heap = if two_hosts {
            heap(&dir, Coherence::Limited)
        } else {
            one_host_heap(&dir, Coherence::Limited)
        };
        let t = heap.thread().unwrap();
        let blocks: Vec<Offset> = (0..4).map(|_| t.allocate(layout(BIG)).unwrap()).collect();
        // The owner's free of a block of its sized head slab, then the block taken again.
        let c = during(|| t.free(blocks[3]));
        assert_eq!(
            c.lines_invalidated, 0,
            "owner's free into its sized slab: {c:?}"
        );
        let again = t.allocate(layout(BIG)).unwrap();
        // Detach the full head (2 lines) and size a fresh slab (its head line: nothing to
        // clear).
        let c = during(|| {
            t.allocate(layout(BIG)).unwrap();
        });
        assert_eq!(c.lines_written_back, 3, "detach and sizing: {c:?}");
        assert!(detached(&heap) >= 1, "{c:?}");
        // The owner's free into the detached slab: its head, then the lines its class uses;
        // from the cache when one host only has opened the heap.
        let c = during(|| t.free(again));
        let expect = if two_hosts { 3 } else { 0 };
        assert_eq!(
            c.lines_invalidated, expect,
            "free into a detached slab, two hosts {two_hosts}: {c:?}"
        );
        let report = heap.check();
        assert!(report.is_valid(), "{report:?}");
    }
}

#[test]
fn a_full_slab_kept_attached_is_not_written_back_but_one_freed_into_remotely_is_detached() {
    let dir = tempfile::tempdir().unwrap();
    let heap = heap(&dir, Coherence::Limited);
    let t = heap.thread().unwrap();
    let (a, b) = (
        t.allocate(layout(BIG)).unwrap(),
        t.allocate(layout(BIG)).unwrap(),
    );
    // Full and alone, nobody else freed into it: only the new slab's sizing is written back.
    let sizing = during(|| {
        t.allocate(layout(BIG)).unwrap();
    });
    assert!(sizing.lines_written_back > 0, "sizing: {sizing:?}");
    assert_eq!(detached(&heap), 0, "the full slab stays attached");
    let d = t.allocate(layout(BIG)).unwrap();
    // A second owner-full slab, and another thread frees one block of the first remotely.
    let other = heap.thread().unwrap();
    other.free(a);
    other.flush_remote_frees();
    // Head full with the first behind: detach it; the first, freed into, is detached too.
    let detaching = during(|| {
        t.allocate(layout(BIG)).unwrap();
    });
    assert!(
        detaching.lines_written_back > sizing.lines_written_back,
        "detaches and a sizing: {detaching:?} vs one sizing {sizing:?}"
    );
    assert_eq!(detached(&heap), 2, "both full slabs detached");
    // The last remote free of the detached first slab takes it for the freer.
    other.free(b);
    drop(other);
    t.free(d);
    let report = heap.check();
    assert!(report.is_valid(), "{report:?}");
}

/// Lines made fresh by another thread's free of an owner's small block, then of its large one.
fn remote_free_invalidations(heap: &Heap) -> Vec<u64> {
    let owner = heap.thread().unwrap();
    let other = heap.thread().unwrap();
    let blocks = [
        owner.allocate(layout(64)).unwrap(),
        owner.allocate(layout(BIG)).unwrap(),
    ];
    let lines = blocks
        .iter()
        .map(|&off| during(|| other.free(off)).lines_invalidated)
        .collect();
    other.flush_remote_frees();
    lines
}

#[test]
fn a_remote_free_reads_the_owners_descriptor_fresh() {
    let dir = tempfile::tempdir().unwrap();
    let lines = remote_free_invalidations(&heap(&dir, Coherence::Limited));
    assert!(lines.iter().all(|&n| n > 0), "small, large: {lines:?}");
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
    let c = fast_path_counts(&t);
    assert_eq!(c, Counts::default(), "fast paths: {c:?}");
}

/// Thread-test's steady state in `limited` (a batch over two slabs, allocated and freed by one
/// thread): the filled slab stays attached, so no detach writes a whole descriptor back; only
/// the re-sizing of the slab that emptied writes its descriptor's head line back. (64 B
/// blocks: 1024 to a 64 KiB slab, so 2000 span two; thread-test's own 1000 fit in one slab,
/// which then never leaves its class and writes nothing back.)
#[test]
fn a_thread_that_frees_its_own_blocks_writes_back_one_line_per_round() {
    let dir = tempfile::tempdir().unwrap();
    let heap = heap(&dir, Coherence::Limited);
    let t = heap.thread().unwrap();
    let mut blocks = vec![Offset(0); 2000];
    for round in 0..10 {
        let c = during(|| {
            for block in blocks.iter_mut() {
                *block = t.allocate(layout(64)).unwrap();
            }
            for &block in &blocks {
                t.free(block);
            }
        });
        if round > 0 {
            let expect = Counts {
                lines_written_back: 1,
                lines_invalidated: 0,
                fences: 1,
            };
            assert_eq!(c, expect, "round {round}");
        }
    }
}

/// Lines of one thread slot.
const SLOT_LINES: u64 = std::mem::size_of::<podkv_alloc::slot::Slot>().div_ceil(64) as u64;

/// A slot's ownership moves with its owner word: the releasing owner writes the slot back and
/// the next owner invalidates it after its claim, only without coherence (`limited`, `mcas`).
#[test]
fn a_slot_is_written_back_at_release_and_invalidated_at_claim() {
    for (coherence, swcc) in [
        (Coherence::Hardware, false),
        (Coherence::Limited, true),
        (Coherence::Mcas, true),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            small_bytes: 64 << 20,
            large_bytes: 64 << 20,
            slots: 16,
            coherence,
            huge_bytes: 0,
            ..Config::default()
        };
        let heap = Heap::open(dir.path().join("heap"), &config).unwrap();
        let mut t = None;
        let claim = during(|| t = Some(heap.thread().unwrap()));
        let t = t.unwrap();
        let expect = if swcc { SLOT_LINES } else { 0 };
        assert_eq!(
            claim.lines_invalidated, expect,
            "{coherence:?} claim: {claim:?}"
        );
        assert!(
            claim.lines_written_back <= u64::from(swcc),
            "{coherence:?} claim writes back the lease line at most: {claim:?}"
        );
        let release = during(|| drop(t));
        assert_eq!(
            release.lines_written_back, expect,
            "{coherence:?} release: {release:?}"
        );
    }
}

/// One host only: a remote free reads the owner's descriptor from the cache (the owner's free
/// into its detached slab: `a_large_slab_moves_only_the_descriptor_lines_its_class_uses`);
/// the reader rule is for lines another host wrote.
#[test]
fn one_host_reads_descriptors_from_its_cache() {
    let dir = tempfile::tempdir().unwrap();
    let heap = one_host_heap(&dir, Coherence::Limited);
    let lines = remote_free_invalidations(&heap);
    assert_eq!(lines, [0, 0], "small, large");
    let report = heap.check();
    assert!(report.is_valid(), "{report:?}");
}

/// A process already running reads descriptors fresh again from the moment a process of
/// another host opens the heap: each free asks, nothing is decided once at open.
#[test]
fn a_second_host_turns_the_reader_rule_back_on() {
    let dir = tempfile::tempdir().unwrap();
    let heap = one_host_heap(&dir, Coherence::Limited);
    let owner = heap.thread().unwrap();
    let other = heap.thread().unwrap();
    let blocks: Vec<Offset> = (0..2)
        .map(|_| owner.allocate(layout(64)).unwrap())
        .collect();
    let c = during(|| other.free(blocks[0]));
    assert_eq!(c.lines_invalidated, 0, "one host: {c:?}");
    other.flush_remote_frees();
    open_from_another_host(&dir.path().join("heap"));
    let c = during(|| other.free(blocks[1]));
    assert!(c.lines_invalidated > 0, "two hosts: {c:?}");
}
