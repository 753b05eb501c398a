//! Two-process scenarios under the model of non-coherent caches (`podkv_hw::model`), each
//! aimed at write-back, invalidation and hook-CAS sites the stress workload of
//! `coherence_model.rs` does not reach or cannot see dropped. Each asserts an invariant a
//! second process can observe: the checker's count equals the other process's live blocks,
//! a block reads as its writer wrote it, a huge block another process maps is not reclaimed
//! (and is once it unmapped), a slot has one holder at a time, a renewing owner is never
//! fenced. The reading process always loads the lines first, so a dropped write-back or
//! invalidation leaves it with a stale copy instead of a first touch that would hide it.
//!
//! Every test passes with every site on (the default run, `limited`). The site sweep
//! (`coherence_model.rs`, `dropping_any_site_is_caught`) reruns each with one site off
//! (`PODKV_COHERENCE_SITE_OFF`, inherited by the children) in `limited` or `mcas`
//! (`PODKV_SCENARIO_MODE`).

mod common;

use podkv_alloc::{Config, Heap, Liveness, Offset, ThreadHandle};
use podkv_hw::mcas::McasKind;
use podkv_hw::sync::mapped::{AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use podkv_hw::Coherence;
use std::alloc::Layout;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

const ROLE: &str = "PODKV_SCENARIO_CHILD";

/// The mode the sweep asks for (`PODKV_SCENARIO_MODE=limited|mcas`), `limited` by default.
fn mode() -> Coherence {
    match std::env::var("PODKV_SCENARIO_MODE").as_deref() {
        Ok("mcas") => Coherence::Mcas,
        Ok("hardware") => Coherence::Hardware,
        _ => Coherence::Limited,
    }
}

fn config(slots: u64) -> Config {
    Config {
        small_bytes: 64 << 20,
        large_bytes: 128 << 20,
        slots,
        coherence: mode(),
        mcas: McasKind::FlushCas,
        ..Config::default()
    }
}

/// This test's role in a child (`role|heap path|…`), or `None` in the parent.
fn role(test: &str) -> Option<Vec<String>> {
    let spec = std::env::var(ROLE).ok()?;
    let parts: Vec<String> = spec.split('|').map(str::to_owned).collect();
    (parts[0] == test).then_some(parts)
}

/// Whether this process is a child of another scenario (then this test does nothing).
fn other_role() -> bool {
    std::env::var_os(ROLE).is_some()
}

fn spawn(test: &str, spec: &str) -> Child {
    common::child(test, ROLE, &format!("{test}|{spec}"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits (generously: two cores, load 10) until `done`, failing if `child` ends first.
fn wait_for(what: &str, child: Option<&mut Child>, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    let mut child = child;
    while !done() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "timed out waiting for {what}"
        );
        if let Some(c) = child.as_deref_mut() {
            if let Some(status) = c.try_wait().unwrap() {
                assert!(done(), "the child ended ({status}) before {what}");
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Waits for the child and returns the lines it printed that start with `prefix` (the
/// harness prints `test … ` before the first one).
fn finish(child: Child, prefix: &str) -> Vec<String> {
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the child failed: {}", out.status);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.find(prefix).map(|at| l[at + prefix.len()..].to_owned()))
        .collect()
}

/// Fills block `off` (`len` bytes) with bytes of `tag` and writes it back (the SWcc writer
/// rule).
fn fill(heap: &Heap, t: &ThreadHandle, off: Offset, len: usize, tag: u8) {
    let at = t.resolve(off);
    // SAFETY: the block has `len` bytes and is this thread's.
    unsafe { std::ptr::write_bytes(at, tag, len) };
    heap.geometry().coherence.write_back(at, len);
}

/// Whether block `off` holds `tag` throughout, read fresh (the SWcc reader rule).
fn holds(heap: &Heap, off: Offset, len: usize, tag: u8) -> bool {
    let at = heap.resolve(off);
    heap.geometry().coherence.invalidate(at, len);
    // SAFETY: a live block of `len` bytes.
    let bytes = unsafe { std::slice::from_raw_parts(at, len) };
    bytes.iter().all(|&b| b == tag)
}

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, if size >= 1 << 20 { 4096 } else { 8 }).unwrap()
}

/// The block sizes of [`a_checker_counts_the_blocks_another_process_left_live`]: small
/// classes, large ones, and two huge blocks.
fn sizes() -> Vec<usize> {
    let mut sizes: Vec<usize> = (0..600).map(|i| 8 + (i * 37) % 2000).collect();
    sizes.extend((0..24).map(|i| (20 << 10) + i * (13 << 10)));
    sizes.extend([2 << 20, 3 << 20]);
    sizes
}

/// Allocates a block of every size of [`sizes`], fills each and frees every third.
fn churn(heap: &Heap, t: &ThreadHandle, tag: u8) -> Vec<(Offset, usize)> {
    let mut live = Vec::new();
    for (i, size) in sizes().into_iter().enumerate() {
        let off = t.allocate(layout(size)).unwrap();
        fill(heap, t, off, size.min(4096), tag);
        if i % 3 == 1 {
            t.free(off);
        } else {
            live.push((off, size));
        }
    }
    live
}

/// A process that checked the heap (its caches hold every descriptor, slot and huge log it
/// read) checks it again after another process allocated, freed, and gave its slot back with
/// blocks live: it must count exactly those blocks and find every one whole. Then it frees
/// them (remote frees, last ones taking the disowned slabs) and the heap holds nothing.
#[test]
fn a_checker_counts_the_blocks_another_process_left_live() {
    const TEST: &str = "a_checker_counts_the_blocks_another_process_left_live";
    if let Some(parts) = role(TEST) {
        let heap = Heap::open(&parts[1], &config(4)).unwrap();
        let t = heap.thread().unwrap();
        for (off, size) in churn(&heap, &t, 0xC3) {
            println!("block-live {} {size}", off.0);
        }
        return;
    }
    if other_role() {
        return;
    }
    let (_dir, path, heap) = common::modelled_heap(&config(4));
    {
        let t = heap.thread().unwrap();
        for (off, _) in churn(&heap, &t, 0xA1) {
            t.free(off);
        }
        t.collect_huge();
    }
    heap.collect_huge();
    let before = heap.check();
    assert!(before.is_valid(), "check: {}", before.problems.join("; "));
    assert_eq!(before.live_blocks(), 0);
    let child = spawn(TEST, &path.display().to_string());
    let theirs: Vec<(Offset, usize)> = finish(child, "block-live ")
        .iter()
        .map(|l| {
            let (off, size) = l.trim().split_once(' ').unwrap();
            (Offset(off.parse().unwrap()), size.parse().unwrap())
        })
        .collect();
    assert_eq!(
        theirs.len(),
        (0..sizes().len()).filter(|i| i % 3 != 1).count()
    );
    let report = heap.check();
    assert!(report.is_valid(), "check: {}", report.problems.join("; "));
    assert_eq!(
        report.live_blocks() + report.huge.live,
        theirs.len() as u64,
        "the checker's count of the other process's blocks"
    );
    let t = heap.thread().unwrap();
    for &(off, size) in &theirs {
        let len = size.min(4096);
        assert!(holds(&heap, off, len, 0xC3), "block {} torn", off.0);
        t.free(off);
    }
    t.flush_remote_frees();
    t.collect_huge();
    // Reuse what came back: fresh blocks over the other process's old ones.
    for (off, _) in churn(&heap, &t, 0xB2) {
        t.free(off);
    }
    drop(t);
    heap.collect_huge();
    let report = heap.check();
    assert!(report.is_valid(), "check: {}", report.problems.join("; "));
    assert_eq!(
        report.live_blocks() + report.huge.live,
        0,
        "blocks left live"
    );
}

const SIZE_HUGE: usize = 2 << 20;
/// Huge blocks the other process maps: the last one's hazard cell lies past the first line
/// of its record (which holds `high` and cells 0 to 4).
const COUNT_MAPPED: usize = 6;
/// Root words the hazard scenario signals through (the header: coherent); its blocks' offsets
/// are roots `ROOT_BLOCKS..`.
const ROOT_OPEN: usize = 1;
const ROOT_MAPPED: usize = 2;
const ROOT_FREED: usize = 3;
const ROOT_UNMAPPED: usize = 4;
const ROOT_CHECKED: usize = 5;
const ROOT_BLOCKS: usize = 16;

/// A huge block the owner frees while another process maps it is not reclaimed (rule 3 of
/// `hazard.rs`) until that process unmapped it; then it is. The other process maps six
/// blocks, so the freed one's hazard cell lies outside the line of `high`. The owner read
/// the other process's hazard record (empty) before it published, so a publish left
/// unwritten, or a reader trusting its cache, shows as a reclaim under the mapping; a
/// withdraw left unwritten as a block never reclaimed.
#[test]
fn a_huge_block_another_process_maps_is_reclaimed_only_after_it_unmapped() {
    const TEST: &str = "a_huge_block_another_process_maps_is_reclaimed_only_after_it_unmapped";
    let is_set = |heap: &Heap, root: usize| heap.root(root).load(SeqCst) != 0;
    if let Some(parts) = role(TEST) {
        let heap = Heap::open(&parts[1], &config(4)).unwrap();
        heap.root(ROOT_OPEN).store(1, SeqCst);
        wait_for("the owner's blocks", None, || {
            is_set(&heap, ROOT_BLOCKS + COUNT_MAPPED - 1)
        });
        for i in 0..COUNT_MAPPED {
            let off = Offset(heap.root(ROOT_BLOCKS + i).load(SeqCst));
            heap.resolve_checked(off, SIZE_HUGE as u64).unwrap();
            assert!(
                holds(&heap, off, SIZE_HUGE, 0x50 + i as u8),
                "huge block {i} torn"
            );
        }
        heap.root(ROOT_MAPPED).store(1, SeqCst);
        wait_for("the owner's free", None, || is_set(&heap, ROOT_FREED));
        heap.collect_huge(); // the lazy unmap: withdraws the freed block's hazard
        heap.root(ROOT_UNMAPPED).store(1, SeqCst);
        // Stay (mapping the others) until the owner checked: a process that closes the heap
        // withdraws everything and gives its record back.
        wait_for("the owner's check", None, || is_set(&heap, ROOT_CHECKED));
        return;
    }
    if other_role() {
        return;
    }
    let (_dir, path, heap) = common::modelled_heap(&config(4));
    let mut child = spawn(TEST, &path.display().to_string());
    wait_for("the child's open", Some(&mut child), || {
        is_set(&heap, ROOT_OPEN)
    });
    let t = heap.thread().unwrap();
    // Free a first block: its reclaim reads every live process's record (the child's, empty).
    let first = t.allocate(layout(SIZE_HUGE)).unwrap();
    t.free(first);
    t.collect_huge();
    assert!(
        heap.huge_allocation(first).is_none(),
        "no hazard: reclaimed"
    );
    let blocks: Vec<Offset> = (0..COUNT_MAPPED)
        .map(|i| {
            let off = t.allocate(layout(SIZE_HUGE)).unwrap();
            fill(&heap, &t, off, SIZE_HUGE, 0x50 + i as u8);
            off
        })
        .collect();
    for (i, off) in blocks.iter().enumerate() {
        heap.root(ROOT_BLOCKS + i).store(off.0, SeqCst);
    }
    wait_for("the child's mappings", Some(&mut child), || {
        is_set(&heap, ROOT_MAPPED)
    });
    let last = blocks[COUNT_MAPPED - 1];
    t.free(last);
    t.collect_huge();
    heap.collect_huge();
    assert!(
        heap.huge_allocation(last).is_some(),
        "reclaimed while another process maps it"
    );
    heap.root(ROOT_FREED).store(1, SeqCst);
    wait_for("the child's unmap", Some(&mut child), || {
        is_set(&heap, ROOT_UNMAPPED)
    });
    t.collect_huge();
    heap.collect_huge();
    assert!(
        heap.huge_allocation(last).is_none(),
        "not reclaimed after the other process unmapped it"
    );
    heap.root(ROOT_CHECKED).store(1, SeqCst);
    finish(child, "");
    for &off in &blocks[..COUNT_MAPPED - 1] {
        t.free(off);
    }
    t.collect_huge();
    drop(t);
    heap.collect_huge();
    let report = heap.check();
    assert!(report.is_valid(), "check: {}", report.problems.join("; "));
    assert_eq!(
        report.live_blocks() + report.huge.live,
        0,
        "blocks left live"
    );
}

/// Threads of two processes claim and release the two slots of a heap as fast as they can;
/// each holder counts itself in the slot's root word (the header: coherent), so a claim that
/// is not atomic across processes (two holders) shows at once. Each holder also allocates,
/// writes and frees a block: a slot's two holders would hand out one block twice.
#[test]
fn a_slot_has_one_holder_at_a_time() {
    const TEST: &str = "a_slot_has_one_holder_at_a_time";
    const ROUNDS: u64 = 150;
    fn storm(heap: &Heap, seed: u64) {
        let threads: Vec<_> = (0..3)
            .map(|n| {
                let heap = heap.clone();
                std::thread::spawn(move || {
                    let mut done = 0;
                    let started = Instant::now();
                    while done < ROUNDS {
                        assert!(started.elapsed() < Duration::from_secs(120), "no slot");
                        let Ok(t) = heap.thread() else {
                            std::thread::yield_now();
                            continue;
                        };
                        let holders = heap.root(t.slot_index() as usize).fetch_add(1, SeqCst);
                        assert_eq!(holders, 0, "slot {} has two holders", t.slot_index());
                        let off = t.allocate(layout(64)).unwrap();
                        let word = t.resolve(off) as *const AtomicU64;
                        let mine = seed << 32 | n << 16 | done;
                        // SAFETY: a fresh 64-byte block, ours.
                        unsafe { (*word).store(mine, Relaxed) };
                        std::thread::yield_now();
                        // SAFETY: as above.
                        assert_eq!(unsafe { (*word).load(Relaxed) }, mine, "a block twice");
                        heap.geometry().coherence.write_back(word.cast(), 8);
                        t.free(off);
                        heap.root(t.slot_index() as usize).fetch_sub(1, SeqCst);
                        drop(t);
                        done += 1;
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
    }
    if let Some(parts) = role(TEST) {
        let heap = Heap::open(&parts[1], &config(2)).unwrap();
        storm(&heap, 2);
        return;
    }
    if other_role() {
        return;
    }
    let (_dir, path, heap) = common::modelled_heap(&config(2));
    let child = spawn(TEST, &path.display().to_string());
    storm(&heap, 1);
    finish(child, "");
    let report = heap.check();
    assert!(report.is_valid(), "check: {}", report.problems.join("; "));
    assert_eq!(report.live_blocks(), 0, "blocks left live");
}

const LEASE: Duration = Duration::from_millis(300);
const ROOT_HELD: usize = 6;
const ROOT_DONE: usize = 7;

fn lease_config() -> Config {
    Config {
        liveness: Liveness::Lease,
        lease: LEASE,
        ..config(2)
    }
}

/// An owner on another host (`PODKV_HOST_ID`) holds a slot for many leases while its
/// renewer beats; a watcher that read the slot's beat before must judge it alive throughout
/// (a beat left unwritten, or read from the watcher's cache, gets a live owner fenced). The
/// slot was this process's before (its beat line is in this process's cache).
#[test]
fn an_owner_that_keeps_beating_is_never_fenced() {
    const TEST: &str = "an_owner_that_keeps_beating_is_never_fenced";
    if let Some(parts) = role(TEST) {
        let heap = Heap::open(&parts[1], &lease_config()).unwrap();
        let t = heap.thread().unwrap();
        heap.root(ROOT_HELD)
            .store(u64::from(t.slot_index()) + 1, SeqCst);
        wait_for("the watcher", None, || {
            heap.root(ROOT_DONE).load(SeqCst) != 0
        });
        assert_eq!(heap.slots_lost(), 0);
        return;
    }
    if other_role() {
        return;
    }
    let (_dir, path, heap) = common::modelled_heap(&lease_config());
    for _ in 0..3 {
        let t = heap.thread().unwrap();
        drop(t);
        for i in 0..2 {
            heap.slot_life(i);
        }
    }
    let host = podkv_alloc::process::host_id().wrapping_add(7).max(1);
    let mut child = common::child(TEST, ROLE, &format!("{TEST}|{}", path.display()))
        .env("PODKV_HOST_ID", host.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the child's slot", Some(&mut child), || {
        heap.root(ROOT_HELD).load(SeqCst) != 0
    });
    let slot = heap.root(ROOT_HELD).load(SeqCst) - 1;
    let started = Instant::now();
    while started.elapsed() < LEASE * 8 {
        let life = heap.slot_life(slot);
        assert!(
            matches!(life, podkv_alloc::process::SlotLife::Alive(_)),
            "a beating owner judged {life:?}"
        );
        std::thread::sleep(LEASE / 10);
    }
    heap.root(ROOT_DONE).store(1, SeqCst);
    finish(child, "");
}

const ROOT_GO: usize = 8;
const ROOT_FREED_A: usize = 9;
const ROOT_GO_B: usize = 10;

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
    const TEST: &str = "another_process_frees_the_blocks_of_a_slab_that_morphed_after_it_looked";
    const OLD: usize = 48;
    const NEW: usize = 100;
    let morph_config = || Config {
        morph: true,
        huge_bytes: 0,
        ..config(4)
    };
    if let Some(parts) = role(TEST) {
        let heap = Heap::open(&parts[1], &morph_config()).unwrap();
        // Reads every descriptor (the owner still holds its slot, so what this process sees
        // of its slabs need not check clean yet).
        let _ = heap.check();
        heap.root(ROOT_OPEN).store(1, SeqCst);
        let t = heap.thread().unwrap();
        wait_for("the owner's morph", None, || {
            heap.root(ROOT_GO).load(SeqCst) != 0
        });
        free_listed(&heap, &t, &format!("{}.a", parts[2]));
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
    let all: Vec<Offset> = (0..6000)
        .map(|_| a.allocate(layout(OLD)).unwrap())
        .collect();
    let mut old = Vec::new();
    for (i, off) in all.into_iter().enumerate() {
        if i % 10 == 0 {
            fill(&heap, &a, off, OLD, 0x31);
            old.push(off);
        } else {
            a.free(off);
        }
    }
    let list = dir.path().join("list");
    let mut child = spawn(TEST, &format!("{}|{}", path.display(), list.display()));
    wait_for("the child's look", Some(&mut child), || {
        heap.root(ROOT_OPEN).load(SeqCst) != 0
    });
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

/// Who recovers a crashed holder's slot.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Recoverer {
    /// This process, on the crashed one's host (it judges it dead; the dead process's dirty
    /// lines reach memory as its host's cache would give them).
    Here,
    /// This process, for a crashed host (lease mode, `recover_host` once fenced): the dead
    /// process's cache died with its host, so only what it wrote back counts.
    OtherHost,
    /// A third process of this host, which then exits: what it changed for others must be
    /// written back.
    Third,
}

/// The crash points and recoverers of
/// [`a_crashed_holders_huge_step_is_recovered_by_its_slots_last_holder`].
const RECOVERY_CASES: [(&str, Recoverer); 5] = [
    ("huge_alloc.live", Recoverer::Here),
    ("huge_free.logged", Recoverer::Here),
    ("huge_alloc.live", Recoverer::OtherHost),
    ("huge_free.logged", Recoverer::OtherHost),
    ("huge_free.logged", Recoverer::Third),
];

/// What recovery left in flight, as a line between processes.
fn in_flight_word(in_flight: podkv_alloc::InFlight) -> String {
    match in_flight {
        podkv_alloc::InFlight::Alloc(off) => format!("alloc {}", off.0),
        podkv_alloc::InFlight::Free(off) => format!("free {}", off.0),
        podkv_alloc::InFlight::None => "none 0".to_owned(),
    }
}

/// A process frees another's huge block and allocates one of its own, and is killed in one
/// of those steps. A checker that read the slot before sees the step half made; then the
/// slot is recovered, by the process that held it before (whose cache still holds that
/// slot's huge log, descriptors and words as they were then) or by a third process. The
/// block in flight is settled as the application would (an allocation nobody received is
/// freed; a free is finished by recovery), and then every block comes back and the heap
/// checks clean.
#[test]
fn a_crashed_holders_huge_step_is_recovered_by_its_slots_last_holder() {
    const TEST: &str = "a_crashed_holders_huge_step_is_recovered_by_its_slots_last_holder";
    let recovery_config = |other_host: bool| Config {
        liveness: if other_host {
            Liveness::Lease
        } else {
            Liveness::Process
        },
        lease: LEASE,
        ..config(2)
    };
    if let Some(parts) = role(TEST) {
        let other_host = parts[2] == "other";
        let heap = Heap::open(&parts[1], &recovery_config(other_host)).unwrap();
        if parts[3] == "recover" {
            for recovered in heap.recover_dead() {
                println!("in-flight {}", in_flight_word(recovered.in_flight));
            }
            return;
        }
        let t = heap.thread().unwrap();
        assert_eq!(t.slot_index().to_string(), parts[3], "the free slot");
        t.free(Offset(parts[4].parse().unwrap()));
        let _ = t.allocate(layout(SIZE_HUGE)).unwrap();
        std::process::exit(3); // the armed point was never passed
    }
    if other_role() {
        return;
    }
    for (point, recoverer) in RECOVERY_CASES {
        let other_host = recoverer == Recoverer::OtherHost;
        let case = format!("{point} ({recoverer:?})");
        let (_dir, path, heap) = common::modelled_heap(&recovery_config(other_host));
        let mine = heap.thread().unwrap();
        let theirs = mine.allocate(layout(SIZE_HUGE)).unwrap();
        fill(&heap, &mine, theirs, 4096, 0x77);
        // This process's tenure of the slot the child will hold: its huge log and
        // descriptors come into this process's cache.
        let slot = {
            let t = heap.thread().unwrap();
            let off = t.allocate(layout(SIZE_HUGE)).unwrap();
            t.free(off);
            t.collect_huge();
            t.slot_index()
        };
        assert!(heap.check().is_valid(), "{case}: the heap before");
        let host = podkv_alloc::process::host_id().wrapping_add(7).max(1);
        let host_word = if other_host { "other" } else { "same" };
        let spec = format!("{TEST}|{}|{host_word}|{slot}|{}", path.display(), theirs.0);
        let mut child = common::child(TEST, ROLE, &spec);
        child.env("PODKV_CRASH_POINT", point).stdout(Stdio::null());
        if other_host {
            child.env("PODKV_HOST_ID", host.to_string());
        }
        let status = child.status().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGKILL),
            "{case}: the child was not killed there: {status}"
        );
        let report = heap.check();
        assert!(
            report.problems.iter().any(|p| p.contains("half made")),
            "{case}: the checker missed the crashed step: {:?}",
            report.problems
        );
        let in_flight: Vec<String> = match recoverer {
            Recoverer::Here => heap
                .recover_dead()
                .into_iter()
                .map(|r| in_flight_word(r.in_flight))
                .collect(),
            Recoverer::OtherHost => {
                wait_for("the dead host's fence", None, || {
                    matches!(
                        heap.slot_life(u64::from(slot)),
                        podkv_alloc::process::SlotLife::Fenced(_)
                    )
                });
                heap.recover_host(host)
                    .into_iter()
                    .map(|r| in_flight_word(r.in_flight))
                    .collect()
            }
            Recoverer::Third => {
                let spec = format!("{TEST}|{}|same|recover", path.display());
                let third = common::child(TEST, ROLE, &spec)
                    .stdout(Stdio::piped())
                    .spawn()
                    .unwrap();
                finish(third, "in-flight ")
            }
        };
        assert_eq!(in_flight.len(), 1, "{case}: slots recovered");
        let (what, off) = in_flight[0].trim().split_once(' ').unwrap();
        let off = Offset(off.parse().unwrap());
        match what {
            // Nobody received it: the application frees it.
            "alloc" => mine.free(off),
            "free" => assert_eq!(off, theirs, "{case}: the block in flight"),
            // A free recovery did not report as finished: the application makes it again.
            _ if point == "huge_free.logged" => mine.free(theirs),
            _ => {}
        }
        mine.collect_huge();
        drop(mine);
        heap.collect_huge();
        let report = heap.check();
        assert!(
            report.is_valid(),
            "{case}: check: {}",
            report.problems.join("; ")
        );
        assert_eq!(
            report.live_blocks() + report.huge.live,
            0,
            "{case}: blocks left live"
        );
    }
}
