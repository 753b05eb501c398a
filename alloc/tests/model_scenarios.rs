//! Two-process scenarios under the model of non-coherent caches (`podkv_hw::model`), each
//! aimed at write-back, invalidation and hook-CAS sites the stress workload of
//! `coherence_model.rs` does not reach or cannot see dropped. Each asserts an invariant
//! another process can observe: the checker counts exactly the blocks another process left
//! live; a block reads as its writer wrote it; a remote free of a block whose slab was
//! re-sized since the freer looked is refused (`frees.rs`); a huge block another process maps is not
//! reclaimed (and is once it unmapped), also when opens claim hazard records at once; a dead
//! process's claimed record is empty for all, a corrupted one shows to a checker, and a
//! process opening the heap again and again gives each record back (`hazards.rs`); slots
//! claiming huge ranges at once never share one; a slot has one holder at a time (also in an
//! `nmp` heap); a beating owner is never fenced, and a fence and the rejoin after it are read
//! by every process (`fence.rs`); a remote freer reads a morph as its owner made it, and a
//! checker its end (`morph.rs`); a crashed holder's huge step is seen by a checker and
//! recovered by another process, here or for a crashed host (`recovery.rs`). The reading
//! process always loads the lines first, so a dropped write-back or invalidation leaves it a
//! stale copy instead of a first touch that would hide it.
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
use std::os::unix::process::CommandExt;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

const ROLE: &str = "PODKV_SCENARIO_CHILD";

#[path = "model_scenarios/descs.rs"]
mod descs;
#[path = "model_scenarios/fence.rs"]
mod fence;
#[path = "model_scenarios/frees.rs"]
mod frees;
#[path = "model_scenarios/hazards.rs"]
mod hazards;
#[path = "model_scenarios/morph.rs"]
mod morph;
#[path = "model_scenarios/recovery.rs"]
mod recovery;

/// The mode the sweep asks for (`PODKV_SCENARIO_MODE=limited|mcas|mcas-nmp`), `limited` by
/// default, and the mCAS implementation (flush-cas unless `mcas-nmp`).
fn mode() -> (Coherence, McasKind) {
    match std::env::var("PODKV_SCENARIO_MODE").as_deref() {
        Ok("mcas") => (Coherence::Mcas, McasKind::FlushCas),
        Ok("mcas-nmp") => (Coherence::Mcas, McasKind::Nmp),
        Ok("hardware") => (Coherence::Hardware, McasKind::FlushCas),
        _ => (Coherence::Limited, McasKind::FlushCas),
    }
}

fn config(slots: u64) -> Config {
    Config {
        small_bytes: 64 << 20,
        large_bytes: 128 << 20,
        slots,
        coherence: mode().0,
        mcas: mode().1,
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

/// Spawns this test's child with `spec` and waits until it set root word `root` of `heap`
/// (`what` it did, for a timeout's message).
fn spawn_until(test: &str, spec: &str, heap: &Heap, root: usize, what: &str) -> Child {
    let mut child = spawn(test, spec);
    wait_for(what, Some(&mut child), || heap.root(root).load(SeqCst) != 0);
    child
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
    heap.geometry().coherence.write_back_new(at, len);
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
    common::assert_clean(&heap, "");
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
    let mut child = spawn_until(
        TEST,
        &path.display().to_string(),
        &heap,
        ROOT_OPEN,
        "the child's open",
    );
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
    common::assert_clean(&heap, "");
}

/// Threads of two processes claim and release the two slots of a heap as fast as they can;
/// each holder counts itself in the slot's root word (the header: coherent), so a claim that
/// is not atomic across processes (two holders) shows at once. Each holder also allocates,
/// writes and frees a block: a slot's two holders would hand out one block twice.
#[test]
fn a_slot_has_one_holder_at_a_time() {
    const TEST: &str = "a_slot_has_one_holder_at_a_time";
    const ROUNDS: u64 = 500;
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
/// [`a_slot_has_one_holder_at_a_time`] in an `nmp` heap, run as a child with a deadline: a
/// slot's release once went on the slot's own request line, so the slot's next holder could
/// overwrite the reply before the releaser read it, and the releaser's resent request then
/// shared the line with the new holder's (both hung).
#[test]
fn a_slot_has_one_holder_at_a_time_in_an_nmp_heap() {
    if other_role() || std::env::var_os("PODKV_SCENARIO_MODE").is_some() {
        return;
    }
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_slot_has_one_holder_at_a_time",
            "--test-threads=1",
        ])
        .env("PODKV_SCENARIO_MODE", "mcas-nmp")
        .env("PODKV_COHERENCE_MODEL", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(150) {
            let group = format!("-{}", child.id());
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &group])
                .status();
            panic!("claims and releases of two slots in an nmp heap hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        status.success(),
        "the scenario failed in an nmp heap: {status}"
    );
}

/// Opens of the heap per process in [`opens_at_once_hold_a_hazard_record_each`].
const OPENS: usize = 4;
const ROOT_OPENS_GO: usize = 11;
const ROOT_OPENS_MAPPED: usize = 12;
const ROOT_OPENS_FREED: usize = 13;

/// One open of [`opens_at_once_hold_a_hazard_record_each`]: waits for the start of `round`,
/// opens the heap (claiming a hazard record), maps huge block `i` and checks it, then holds
/// it mapped until the owner freed and checked every block.
fn open_and_map(path: &std::path::Path, owner: &Heap, round: u64, i: usize) {
    wait_for("the round", None, || {
        owner.root(ROOT_OPENS_GO).load(SeqCst) == round
    });
    let heap = Heap::open(path, &config(4)).unwrap();
    let off = Offset(owner.root(ROOT_BLOCKS + i).load(SeqCst));
    heap.resolve_checked(off, SIZE_HUGE as u64).unwrap();
    assert!(holds(&heap, off, SIZE_HUGE, i as u8), "huge block {i} torn");
    owner.root(ROOT_OPENS_MAPPED).fetch_add(1, SeqCst);
    wait_for("the owner's check", None, || {
        owner.root(ROOT_OPENS_FREED).load(SeqCst) == round
    });
}

/// Threads of two processes open the heap at once, each open claiming a hazard record of its
/// own (a hook CAS on the record's owner word), and each maps one huge block of the owner's;
/// the owner frees them all and none may be reclaimed while mapped. Two opens that claimed
/// one record (a claim that is not atomic) write its cells over each other, and a block loses
/// its hazard. Several rounds, each with fresh opens.
#[test]
fn opens_at_once_hold_a_hazard_record_each() {
    const TEST: &str = "opens_at_once_hold_a_hazard_record_each";
    const ROUNDS: u64 = 4;
    let opens = |path: &std::path::Path, owner: &Heap, first: usize| {
        std::thread::scope(|scope| {
            for round in 1..=ROUNDS {
                let threads: Vec<_> = (first..first + OPENS)
                    .map(|i| scope.spawn(move || open_and_map(path, owner, round, i)))
                    .collect();
                for thread in threads {
                    thread.join().unwrap();
                }
            }
        })
    };
    if let Some(parts) = role(TEST) {
        let owner = Heap::open(&parts[1], &config(4)).unwrap();
        opens(std::path::Path::new(&parts[1]), &owner, OPENS);
        return;
    }
    if other_role() {
        return;
    }
    let (_dir, path, heap) = common::modelled_heap(&config(4));
    let mut child = spawn(TEST, &path.display().to_string());
    let t = heap.thread().unwrap();
    let mut lost = Vec::new();
    std::thread::scope(|scope| {
        let opener = scope.spawn(|| opens(&path, &heap, 0));
        for round in 1..=ROUNDS {
            let blocks: Vec<Offset> = (0..2 * OPENS)
                .map(|i| {
                    let off = t.allocate(layout(SIZE_HUGE)).unwrap();
                    fill(&heap, &t, off, SIZE_HUGE, i as u8);
                    heap.root(ROOT_BLOCKS + i).store(off.0, SeqCst);
                    off
                })
                .collect();
            heap.root(ROOT_OPENS_MAPPED).store(0, SeqCst);
            heap.root(ROOT_OPENS_GO).store(round, SeqCst);
            wait_for("every open's mapping", Some(&mut child), || {
                heap.root(ROOT_OPENS_MAPPED).load(SeqCst) == 2 * OPENS as u64
            });
            for &off in &blocks {
                t.free(off);
            }
            t.collect_huge();
            heap.collect_huge();
            // Noted, not asserted here: the opens wait for this round to end.
            lost.extend(
                (0..blocks.len())
                    .filter(|&i| heap.huge_allocation(blocks[i]).is_none())
                    .map(|i| (round, i)),
            );
            heap.root(ROOT_OPENS_FREED).store(round, SeqCst);
        }
        opener.join().unwrap();
    });
    assert!(
        lost.is_empty(),
        "(round, block) reclaimed while an open mapped it: {lost:?}"
    );
    finish(child, "");
    t.collect_huge();
    drop(t);
    common::assert_clean(&heap, "");
}

/// Threads of two processes take fresh slots and allocate huge blocks over and over, so their
/// slots claim runs of the huge heap's ranges (a hook CAS on each range word) at the same
/// time, and give them back when empty; each writes the start of its block, yields and reads
/// it back fresh. Two slots that claimed one range (a claim that is not atomic) put blocks on
/// the same pages, and one reads the other's bytes.
#[test]
fn slots_claiming_huge_ranges_at_once_never_share_one() {
    const TEST: &str = "slots_claiming_huge_ranges_at_once_never_share_one";
    fn storm(heap: &Heap, seed: u8) {
        std::thread::scope(|scope| {
            for n in 0..3u8 {
                scope.spawn(move || {
                    for round in 0..12u8 {
                        let t = heap.thread().unwrap();
                        let off = t.allocate(layout(SIZE_HUGE)).unwrap();
                        let tag = seed.wrapping_mul(64) ^ n.wrapping_mul(16) ^ round;
                        fill(heap, &t, off, 4096, tag);
                        std::thread::yield_now();
                        assert!(holds(heap, off, 4096, tag), "a huge block shares pages");
                        t.free(off);
                        t.collect_huge();
                    }
                });
            }
        });
    }
    if let Some(parts) = role(TEST) {
        let heap = Heap::open(&parts[1], &config(8)).unwrap();
        storm(&heap, 2);
        return;
    }
    if other_role() {
        return;
    }
    let (_dir, path, heap) = common::modelled_heap(&config(8));
    let child = spawn(TEST, &path.display().to_string());
    storm(&heap, 1);
    finish(child, "");
    common::assert_clean(&heap, "");
}
