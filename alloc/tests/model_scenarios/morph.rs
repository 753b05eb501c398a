//! Morphing seen by another process: its remote frees of old and new blocks of a slab that
//! morphed after it last read the slab's descriptor.

use super::*;

const ROOT_GO: usize = 8;
const ROOT_FREED_A: usize = 9;
const ROOT_GO_B: usize = 10;

/// The block sizes of the morph scenarios: sparse slabs of the old class morph to the new.
const OLD: usize = 48;
const NEW: usize = 100;

fn morph_config() -> Config {
    Config {
        morph: true,
        huge_bytes: 0,
        ..config(4)
    }
}

/// Allocates `count` old-class blocks and frees all but every tenth, filled with `tag`: sparse
/// slabs, ready to morph. Returns the blocks kept.
fn sparse_old(heap: &Heap, t: &ThreadHandle, count: usize, tag: u8) -> Vec<Offset> {
    let all: Vec<Offset> = (0..count)
        .map(|_| t.allocate(layout(OLD)).unwrap())
        .collect();
    let mut old = Vec::new();
    for (i, off) in all.into_iter().enumerate() {
        if i % 10 == 0 {
            fill(heap, t, off, OLD, tag);
            old.push(off);
        } else {
            t.free(off);
        }
    }
    old
}

/// The other process's start in a morph scenario (`parts`: its role): opens the heap, reads
/// every descriptor (a check; the owner still holds its slot, so what this process sees of
/// its slabs need not check clean yet), says so, takes a slot, waits for `ROOT_GO` and frees
/// the blocks listed in `<list>.a`.
fn look_then_free_listed(parts: &[String]) -> (Heap, ThreadHandle) {
    let heap = Heap::open(&parts[1], &morph_config()).unwrap();
    let _ = heap.check();
    heap.root(ROOT_OPEN).store(1, SeqCst);
    let t = heap.thread().unwrap();
    wait_for("the owner's go", None, || {
        heap.root(ROOT_GO).load(SeqCst) != 0
    });
    free_listed(&heap, &t, &format!("{}.a", parts[2]));
    (heap, t)
}

/// Writes `blocks` (offset, length, tag) to `path`, one a line, for the other process.
fn write_list(path: &std::path::Path, blocks: &[(Offset, usize, u8)]) {
    let list: String = blocks
        .iter()
        .map(|(off, len, tag)| format!("{} {len} {tag}\n", off.0))
        .collect();
    std::fs::write(path, list).unwrap();
}

/// Frees every block listed in `path` after checking its bytes.
fn free_listed(heap: &Heap, t: &ThreadHandle, path: &str) {
    for line in std::fs::read_to_string(path).unwrap().lines() {
        let mut words = line.split(' ');
        let off = Offset(words.next().unwrap().parse().unwrap());
        let len: usize = words.next().unwrap().parse().unwrap();
        let tag: u8 = words.next().unwrap().parse().unwrap();
        assert!(holds(heap, off, len, tag), "block {} torn", off.0);
        t.free(off);
    }
    t.flush_remote_frees();
}

/// An owner's slabs of one class went sparse and morph to serve a new class while another
/// process, which read their descriptors before (a check), waits. That process then frees
/// half the old blocks and half the new ones remotely: it must read each slab's morph (class,
/// old set) as the owner wrote it, or it takes a new block for no block. Then the owner frees
/// the other old blocks itself (the space under them comes back, morphs end) and allocates
/// over them; the other process frees every block left: now it must read the old set afresh
/// (its copy still names the blocks the owner freed), or a new block over one of them is no
/// block. Every block comes back and the heap checks clean.
#[test]
fn another_process_frees_the_blocks_of_a_slab_that_morphed_after_it_looked() {
    const TEST: &str =
        "morph::another_process_frees_the_blocks_of_a_slab_that_morphed_after_it_looked";
    if let Some(parts) = role(TEST) {
        let (heap, t) = look_then_free_listed(&parts);
        heap.root(ROOT_FREED_A).store(1, SeqCst);
        wait_for("the owner's own frees", None, || {
            heap.root(ROOT_GO_B).load(SeqCst) != 0
        });
        free_listed(&heap, &t, &format!("{}.b", parts[2]));
        return;
    }
    if other_role() {
        return;
    }
    let (dir, path, heap) = common::modelled_heap(&morph_config());
    let a = heap.thread().unwrap();
    let old = sparse_old(&heap, &a, 6000, 0x31);
    let list = dir.path().join("list");
    let spec = format!("{}|{}", path.display(), list.display());
    let mut child = spawn_until(TEST, &spec, &heap, ROOT_OPEN, "the child's look");
    let small = *heap.slab_heap(podkv_alloc::Kind::Small);
    let before = heap.len(&small);
    let mut new: Vec<Offset> = (0..1200)
        .map(|_| a.allocate(layout(NEW)).unwrap())
        .collect();
    assert_eq!(
        heap.len(&small),
        before,
        "the new class took morphing slabs"
    );
    for &off in &new {
        fill(&heap, &a, off, NEW, 0x32);
    }
    // Phase A: the other process frees every other old block and new block.
    let (mut theirs, mut own_old) = (Vec::new(), Vec::new());
    for (i, off) in old.into_iter().enumerate() {
        if i % 2 == 0 {
            theirs.push((off, OLD, 0x31));
        } else {
            own_old.push(off);
        }
    }
    let kept_new = new.split_off(new.len() / 2);
    theirs.extend(new.iter().map(|&off| (off, NEW, 0x32)));
    write_list(&list.with_extension("a"), &theirs);
    heap.root(ROOT_GO).store(1, SeqCst);
    wait_for("the child's first frees", Some(&mut child), || {
        heap.root(ROOT_FREED_A).load(SeqCst) != 0
    });
    // Phase B: the owner frees its old blocks (the space under them comes back, morphs
    // end) and allocates there; the other process frees every new block.
    for off in own_old {
        a.free(off);
    }
    let mut theirs: Vec<(Offset, usize, u8)> =
        kept_new.iter().map(|&off| (off, NEW, 0x32)).collect();
    for _ in 0..600 {
        let off = a.allocate(layout(NEW)).unwrap();
        fill(&heap, &a, off, NEW, 0x33);
        theirs.push((off, NEW, 0x33));
    }
    write_list(&list.with_extension("b"), &theirs);
    heap.root(ROOT_GO_B).store(1, SeqCst);
    finish(child, "");
    drop(a);
    let report = heap.check();
    assert!(report.is_valid(), "check: {}", report.problems.join("; "));
    assert_eq!(report.live_blocks(), 0, "blocks left live");
}

const ROOT_ENDED: usize = 12;
const ROOT_FREED_NEW: usize = 13;

/// The owner's own frees of a morphed slab's old blocks, seen by another process. The owner
/// morphs one slab (a few new blocks, so the slab stays sized: a detach would write the
/// whole descriptor back), frees its lowest old blocks and allocates new blocks over the
/// space they leave, which the other process frees. Then the owner frees every other old
/// block (the morph ends; nothing in this process reads the descriptor again, which would
/// write its dirty line back) and the other process counts the morphing slabs: none, or it
/// read a stale mark (`alloc.morph.end.write_back`).
///
/// The old set the owner's frees change (`alloc.morph.unblock.write_back`) is read by no
/// other process here: a remote free of a new block is an exact block of the class the
/// slab's head names and skips the old set, and a slab that changes hands is written back
/// whole first. The write-back keeps memory whole for a host that dies later.
#[test]
fn the_old_blocks_an_owner_frees_and_its_ended_morph_show_to_another_process() {
    const TEST: &str =
        "morph::the_old_blocks_an_owner_frees_and_its_ended_morph_show_to_another_process";
    if let Some(parts) = role(TEST) {
        let (heap, _t) = look_then_free_listed(&parts);
        heap.root(ROOT_FREED_NEW).store(1, SeqCst);
        wait_for("the owner's end of the morph", None, || {
            heap.root(ROOT_ENDED).load(SeqCst) != 0
        });
        assert_eq!(
            heap.check().heaps[0].morphing,
            0,
            "slabs morphing, as this process reads their descriptors"
        );
        return;
    }
    if other_role() {
        return;
    }
    let (dir, path, heap) = common::modelled_heap(&morph_config());
    let a = heap.thread().unwrap();
    let small = *heap.slab_heap(podkv_alloc::Kind::Small);
    let slab_of = |off: Offset| small.slab_of(off.0).unwrap().0;
    let old = sparse_old(&heap, &a, 3000, 0x41);
    let list = dir.path().join("list");
    let spec = format!("{}|{}", path.display(), list.display());
    let mut child = spawn_until(TEST, &spec, &heap, ROOT_OPEN, "the child's look");
    // New blocks fill the slot's empty slab first; then a sparse old slab morphs.
    let mut filler = Vec::new();
    let slab = loop {
        let off = a.allocate(layout(NEW)).unwrap();
        filler.push(off);
        if old.iter().any(|&o| slab_of(o) == slab_of(off)) {
            break slab_of(off);
        }
        assert!(filler.len() < 5000, "no slab morphed");
    };
    let mut first = vec![filler.pop().unwrap()];
    first.extend((1..40).map(|_| a.allocate(layout(NEW)).unwrap()));
    assert!(
        first.iter().all(|&off| slab_of(off) == slab),
        "the first new blocks fill one morphed slab"
    );
    assert_eq!(heap.check().heaps[0].morphing, 1, "slabs morphing");
    for &off in &first {
        fill(&heap, &a, off, NEW, 0x42);
    }
    let (mut here, elsewhere): (Vec<Offset>, Vec<Offset>) =
        old.into_iter().partition(|&off| slab_of(off) == slab);
    here.sort();
    // The lowest old blocks go; new blocks are taken over the space they leave.
    let gone: Vec<Offset> = here.drain(..here.len() / 3).collect();
    for &off in &gone {
        a.free(off);
    }
    let over_gone = |off: Offset| {
        gone.iter()
            .any(|g| off.0 < g.0 + OLD as u64 && g.0 < off.0 + NEW as u64)
    };
    let mut theirs: Vec<(Offset, usize, u8)> = first.iter().map(|&off| (off, NEW, 0x42)).collect();
    let mut over = 0;
    for _ in 0..200 {
        let off = a.allocate(layout(NEW)).unwrap();
        assert_eq!(slab_of(off), slab, "a new block outside the morphed slab");
        fill(&heap, &a, off, NEW, 0x43);
        theirs.push((off, NEW, 0x43));
        over += usize::from(over_gone(off));
        if over == 8 {
            break;
        }
    }
    assert_eq!(over, 8, "new blocks over the freed old ones");
    write_list(&list.with_extension("a"), &theirs);
    heap.root(ROOT_GO).store(1, SeqCst);
    wait_for("the child's frees", Some(&mut child), || {
        heap.root(ROOT_FREED_NEW).load(SeqCst) != 0
    });
    for off in here {
        a.free(off);
    }
    heap.root(ROOT_ENDED).store(1, SeqCst);
    finish(child, "");
    for off in elsewhere.into_iter().chain(filler) {
        a.free(off);
    }
    drop(a);
    let report = heap.check();
    assert!(report.is_valid(), "check: {}", report.problems.join("; "));
    assert_eq!(report.live_blocks(), 0, "blocks left live");
}
