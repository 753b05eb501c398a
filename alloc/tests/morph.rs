//! Slab morphing (`podkv_alloc::morph`): a slot whose slabs of one class went sparse serves a
//! new class from them instead of growing the heap, its old blocks keep their bytes and are
//! freed locally, by another thread and by another process, and the heap checks clean with
//! no live block afterwards (also under the model of non-coherent caches); with
//! `Config::morph` off the same workload grows the heap.

use podkv_alloc::{Config, Heap, Offset, ThreadHandle};
use podkv_hw::mcas::McasKind;
use podkv_hw::Coherence;
use std::alloc::Layout;
use std::path::Path;
use std::process::Command;

const ENV_CHILD: &str = "PODKV_MORPH_TEST_CHILD";
const OLD: usize = 48;
const NEW: usize = 100;
/// Old blocks allocated: several 64 KiB slabs of 48 B blocks.
const COUNT_OLD: usize = 6000;

fn config(coherence: Coherence, morph: bool) -> Config {
    Config {
        small_bytes: 64 << 20,
        large_bytes: 64 << 20,
        slots: 16,
        huge_bytes: 0,
        coherence,
        mcas: McasKind::FlushCas,
        morph,
        ..Config::default()
    }
}

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, 8).unwrap()
}

fn fill(t: &ThreadHandle, off: Offset, size: usize, tag: u64) {
    // SAFETY: `off` is a live block of `size` bytes this test allocated.
    let bytes = unsafe { std::slice::from_raw_parts_mut(t.resolve(off), size) };
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = (tag as usize + i) as u8;
    }
}

fn intact(t: &ThreadHandle, off: Offset, size: usize, tag: u64) -> bool {
    // SAFETY: as in `fill`.
    let bytes = unsafe { std::slice::from_raw_parts(t.resolve(off), size) };
    bytes
        .iter()
        .enumerate()
        .all(|(i, &b)| b == (tag as usize + i) as u8)
}

/// Old blocks kept: every tenth of the `COUNT_OLD` allocated (the slabs are 10% in use), and
/// the new blocks then allocated, half as many bytes as the old ones freed (the last slab of
/// the old class, its list's head, does not morph).
struct Shift {
    old: Vec<Offset>,
    new: Vec<Offset>,
    grown: u32,
}

/// Runs the size shift on thread `a`: returns the blocks it holds and the slabs the small
/// heap grew by during the new class's allocations.
fn shift(heap: &Heap, a: &ThreadHandle) -> Shift {
    let all: Vec<Offset> = (0..COUNT_OLD)
        .map(|i| {
            let off = a.allocate(layout(OLD)).unwrap();
            fill(a, off, OLD, i as u64);
            off
        })
        .collect();
    let mut old = Vec::new();
    for (i, off) in all.into_iter().enumerate() {
        if i % 10 == 0 {
            old.push(off);
        } else {
            a.free(off);
        }
    }
    let small = *heap.slab_heap(podkv_alloc::Kind::Small);
    let before = heap.len(&small);
    let new: Vec<Offset> = (0..COUNT_OLD * 9 / 10 * OLD / NEW / 2)
        .map(|i| {
            let off = a.allocate(layout(NEW)).unwrap();
            fill(a, off, NEW, 1000 + i as u64);
            off
        })
        .collect();
    Shift {
        old,
        new,
        grown: heap.len(&small) - before,
    }
}

#[test]
fn sparse_slabs_serve_a_new_class_and_their_old_blocks_stay_valid_until_freed() {
    if std::env::var_os(ENV_CHILD).is_some() {
        return;
    }
    for coherence in [Coherence::Hardware, Coherence::Limited, Coherence::Mcas] {
        let dir = tempfile::tempdir().unwrap();
        let heap = Heap::open(dir.path().join("heap"), &config(coherence, true)).unwrap();
        let a = heap.thread().unwrap();
        let s = shift(&heap, &a);
        let report = heap.check();
        assert!(report.is_valid(), "{coherence:?}: {:?}", report.problems);
        let morphing = report.heaps[0].morphing;
        assert!(morphing >= 2, "{coherence:?}: {morphing} slabs morphing");
        assert_eq!(
            s.grown, 0,
            "{coherence:?}: the new class fits the sparse slabs"
        );
        for (i, &off) in s.old.iter().enumerate() {
            assert!(
                intact(&a, off, OLD, (i * 10) as u64),
                "{coherence:?}: old block {i}"
            );
        }
        for (i, &off) in s.new.iter().enumerate() {
            assert!(
                intact(&a, off, NEW, 1000 + i as u64),
                "{coherence:?}: new block {i}"
            );
        }
        // Old blocks: half freed by their owner, half by another thread; new ones by the owner.
        let b = heap.thread().unwrap();
        for (i, &off) in s.old.iter().enumerate() {
            if i % 2 == 0 {
                a.free(off);
            } else {
                b.free(off);
            }
        }
        b.flush_remote_frees();
        a.flush_remote_frees();
        for &off in &s.new {
            a.free(off);
        }
        drop(b);
        drop(a);
        let report = heap.check();
        assert!(report.is_valid(), "{coherence:?}: {:?}", report.problems);
        assert_eq!(report.live_blocks(), 0, "{coherence:?}");
        assert_eq!(report.heaps[0].morphing, 0, "{coherence:?}: all given back");
    }
}

/// NVAlloc gives the space under an old block back as soon as the block goes: once the owner
/// has freed every old block, each morphed slab holds nearly a whole slab of new blocks before
/// the heap grows (blocked until then; without this they stay blocked until the slab drains),
/// no slab is morphing any more, and the heap checks clean at every step.
#[test]
fn an_old_blocks_space_is_reused_before_its_slab_drains() {
    if std::env::var_os(ENV_CHILD).is_some() {
        return;
    }
    for coherence in [Coherence::Hardware, Coherence::Limited, Coherence::Mcas] {
        let dir = tempfile::tempdir().unwrap();
        let heap = Heap::open(dir.path().join("heap"), &config(coherence, true)).unwrap();
        let a = heap.thread().unwrap();
        let mut s = shift(&heap, &a);
        let morphed = heap.check().heaps[0].morphing;
        assert!(morphed >= 2, "{coherence:?}: {morphed} slabs morphing");
        for &off in &s.old {
            a.free(off);
        }
        let report = heap.check();
        assert!(report.is_valid(), "{coherence:?}: {:?}", report.problems);
        assert_eq!(
            report.heaps[0].morphing, 0,
            "{coherence:?}: no old block left"
        );
        let small = *heap.slab_heap(podkv_alloc::Kind::Small);
        let class = podkv_alloc::class::SMALL.class_for(NEW, 8).unwrap();
        let per_slab = podkv_alloc::class::SMALL.count[class] as usize;
        let before = heap.len(&small);
        while heap.len(&small) == before {
            let off = a.allocate(layout(NEW)).unwrap();
            fill(&a, off, NEW, 0);
            s.new.push(off);
        }
        // The last block went to the fresh slab; a morphed slab may have a tail block over
        // its old class's last block short of a whole new one.
        let fitted = s.new.len() - 1;
        assert!(
            fitted >= morphed as usize * (per_slab - 1),
            "{coherence:?}: {fitted} new blocks before growing, {morphed} slabs of {per_slab}"
        );
        for &off in &s.new {
            a.free(off);
        }
        drop(a);
        let report = heap.check();
        assert!(report.is_valid(), "{coherence:?}: {:?}", report.problems);
        assert_eq!(report.live_blocks(), 0, "{coherence:?}");
    }
}

/// With sparse slabs of two classes to choose from, a morph takes one whose blocks tile the
/// new class's (144 B under 288 B: one new block locked per old block in use) before one whose
/// blocks straddle them (104 B under 288 B), though the smaller class comes first.
#[test]
fn a_morph_takes_an_old_class_whose_blocks_tile_the_new_ones_first() {
    if std::env::var_os(ENV_CHILD).is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let heap = Heap::open(dir.path().join("heap"), &config(Coherence::Hardware, true)).unwrap();
    let a = heap.thread().unwrap();
    let classes = &podkv_alloc::class::SMALL;
    let mut all = Vec::new();
    for size in [104, 144] {
        let per_slab = classes.count[classes.class_for(size, 8).unwrap()] as usize;
        all.extend((0..3 * per_slab).map(|_| a.allocate(layout(size)).unwrap()));
    }
    let mut kept = Vec::new();
    for (i, off) in all.into_iter().enumerate() {
        if i % 20 == 0 {
            kept.push(off);
        } else {
            a.free(off);
        }
    }
    // An empty slab kept on the slot's unsized list would serve the new class first.
    while a.slot().lists[0]
        .unsized_list
        .load(std::sync::atomic::Ordering::Relaxed) as u32
        != 0
    {
        let spacer = 600 + 100 * (kept.len() % 4);
        kept.push(a.allocate(layout(spacer)).unwrap());
    }
    kept.push(a.allocate(layout(288)).unwrap());
    let small = *heap.slab_heap(podkv_alloc::Kind::Small);
    let olds: Vec<usize> = (0..heap.len(&small))
        .map(|slab| heap.desc(&small, slab).meta().old)
        .filter(|&old| old != 0)
        .map(|old| usize::from(old) - 1)
        .collect();
    assert_eq!(
        olds,
        [classes.class_for(144, 8).unwrap()],
        "old classes of morphing slabs"
    );
    for off in kept {
        a.free(off);
    }
    drop(a);
    let report = heap.check();
    assert!(report.is_valid(), "{:?}", report.problems);
}

#[test]
fn with_morphing_off_the_same_shift_grows_the_heap() {
    if std::env::var_os(ENV_CHILD).is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let heap = Heap::open(dir.path().join("heap"), &config(Coherence::Hardware, false)).unwrap();
    let a = heap.thread().unwrap();
    let s = shift(&heap, &a);
    assert_eq!(heap.check().heaps[0].morphing, 0);
    assert!(s.grown >= 2, "grew by {}", s.grown);
    for off in s.old.into_iter().chain(s.new) {
        a.free(off);
    }
}

/// Another process frees the old blocks (their offsets in the environment) while their
/// owner still holds its morphing slabs.
#[test]
fn another_process_frees_old_blocks_of_a_morphing_slab() {
    if let Ok(spec) = std::env::var(ENV_CHILD) {
        return child(&spec);
    }
    for coherence in [Coherence::Hardware, Coherence::Limited, Coherence::Mcas] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("heap");
        let heap = Heap::open(&path, &config(coherence, true)).unwrap();
        let a = heap.thread().unwrap();
        let s = shift(&heap, &a);
        assert!(heap.check().heaps[0].morphing > 0);
        let offsets: Vec<String> = s.old.iter().map(|o| o.0.to_string()).collect();
        let mode = format!("{coherence:?}");
        let spec = format!("{}|{mode}|{}", path.display(), offsets.join(","));
        let status = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "another_process_frees_old_blocks_of_a_morphing_slab",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ENV_CHILD, spec)
            .status()
            .unwrap();
        assert!(status.success(), "{mode}: child failed: {status}");
        for &off in &s.new {
            a.free(off);
        }
        drop(a);
        let report = heap.check();
        assert!(report.is_valid(), "{mode}: {:?}", report.problems);
        assert_eq!(report.live_blocks(), 0, "{mode}");
    }
}

fn child(spec: &str) {
    let mut parts = spec.split('|');
    let path = Path::new(parts.next().unwrap());
    let coherence = match parts.next().unwrap() {
        "Hardware" => Coherence::Hardware,
        "Limited" => Coherence::Limited,
        _ => Coherence::Mcas,
    };
    let heap = Heap::open(
        path,
        &Config {
            create: false,
            ..config(coherence, true)
        },
    )
    .unwrap();
    let t = heap.thread().unwrap();
    for off in parts.next().unwrap().split(',') {
        t.free(Offset(off.parse().unwrap()));
    }
}

/// [`another_process_frees_old_blocks_of_a_morphing_slab`] again with both processes under
/// the model of non-coherent caches (`podkv_hw::model`; the `limited` and `mcas` heaps are
/// modelled): the freeing process reads the owner's old set only after the owner wrote it
/// back. (The owner's check before the child starts writes its dirty lines back, as an
/// invalidation does: the morph sites are proven by `model_scenarios.rs` instead.)
#[test]
fn old_blocks_are_freed_across_processes_under_the_coherence_model() {
    if std::env::var_os(ENV_CHILD).is_some() || std::env::var_os("PODKV_COHERENCE_MODEL").is_some()
    {
        return;
    }
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "another_process_frees_old_blocks_of_a_morphing_slab",
            "--test-threads=1",
        ])
        .env("PODKV_COHERENCE_MODEL", "1")
        .status()
        .unwrap();
    assert!(status.success(), "under the model: {status}");
}
