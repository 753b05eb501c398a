//! A slot's huge descriptors handed from one holder to the next, in another process: a
//! reclaim shows to a checker while its slot is still held, and a next holder's allocation
//! never takes the descriptor of a block the last holder left live.
//!
//! Both sites this aims at, `alloc.huge.reclaim.write_back` and
//! `alloc.huge.allocate.invalidate_descs`, are covered where they run: the reclaim is
//! followed by `release_empty_runs`, whose reads of every descriptor invalidate the line
//! (writing the dirty one back first), and an allocation's `collect_huge` reads every
//! descriptor fresh just before the scan. So this passes with either switched off, and fails
//! with either switched off together with `alloc.huge.read.invalidate` (the checker finds the
//! reclaimed descriptor outside its runs; the allocation takes the live block's descriptor):
//! `PODKV_COHERENCE_SITE_OFF=alloc.huge.read.invalidate,alloc.huge.reclaim.write_back`.

use super::*;

/// Root word through which the descriptor scenario's child says its block is live.
const ROOT_LEFT_LIVE: usize = 6;

/// A slot's holders hand its huge descriptors over. The only slot's first holder (this
/// process) allocates a huge block, frees and reclaims it, and holds on while another process
/// checks the heap: the reclaim must show (no freed block). Then it lets the slot go, its
/// cache keeping every descriptor as `EMPTY`; the next holder (the other process again)
/// allocates a huge block and gives the slot back with it live; this process holds the slot
/// again and allocates. A stale `EMPTY` would hand out the live block's descriptor (the live
/// block loses its name: it no longer resolves, the checker counts one huge block, its bytes
/// may be placed over).
#[test]
fn a_slots_next_holder_reads_the_huge_descriptors_its_last_holder_left() {
    const TEST: &str = "descs::a_slots_next_holder_reads_the_huge_descriptors_its_last_holder_left";
    if let Some(parts) = role(TEST) {
        let heap = Heap::open(&parts[1], &config(1)).unwrap();
        if parts[2] == "check" {
            let report = heap.check();
            assert!(report.is_valid(), "check: {}", report.problems.join("; "));
            assert_eq!(
                (report.huge.live, report.huge.freed),
                (0, 0),
                "the first holder's reclaimed block"
            );
            return;
        }
        let t = heap.thread().unwrap();
        let off = t.allocate(layout(SIZE_HUGE)).unwrap();
        fill(&heap, &t, off, SIZE_HUGE, 0x7A);
        drop(t);
        heap.root(ROOT_LEFT_LIVE).store(off.0, SeqCst);
        return;
    }
    if other_role() {
        return;
    }
    let (_dir, path, heap) = common::modelled_heap(&config(1));
    let path = path.display().to_string();
    {
        let t = heap.thread().unwrap();
        let first = t.allocate(layout(SIZE_HUGE)).unwrap();
        t.free(first);
        // Reclaimed here; nothing of this process reads the descriptors again before the
        // check (a read would write a dirty line back first), and the slot stays held (its
        // release writes them back).
        t.collect_huge();
        finish(spawn(TEST, &format!("{path}|check")), "");
    }
    let mut child = spawn(TEST, &format!("{path}|allocate"));
    wait_for("the other holder's block", Some(&mut child), || {
        heap.root(ROOT_LEFT_LIVE).load(SeqCst) != 0
    });
    finish(child, "");
    let theirs = Offset(heap.root(ROOT_LEFT_LIVE).load(SeqCst));
    let t = heap.thread().unwrap();
    let mine = t.allocate(layout(SIZE_HUGE)).unwrap();
    fill(&heap, &t, mine, SIZE_HUGE, 0x3C);
    assert!(
        heap.huge_allocation(theirs).is_some(),
        "the other holder's block lost its descriptor to this allocation"
    );
    let report = heap.check();
    assert!(report.is_valid(), "check: {}", report.problems.join("; "));
    assert_eq!(report.huge.live, 2, "both huge blocks live");
    assert!(
        holds(&heap, theirs, SIZE_HUGE, 0x7A),
        "the other holder's block torn"
    );
    t.free(mine);
    t.free(theirs);
    t.collect_huge();
    drop(t);
    common::assert_clean(&heap, "");
}
