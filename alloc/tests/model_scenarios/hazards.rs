//! Hazard records read by other processes after a claim or a corruption: a dead process's
//! record claimed by a new process is empty for everyone, and a checker finds a record
//! another process corrupted since it last looked.

use super::*;
use podkv_alloc::hazard::{HazardRecord, COUNT_HAZARD_RECORDS, SIZE_HAZARD_RECORD};

const ROOT_DEAD_MAPPED: usize = 20;
const ROOT_CLAIMED: usize = 21;
const ROOT_DONE: usize = 22;

/// A process maps the owner's huge block and is killed with it mapped; its record then
/// counts for nobody. A new process takes that record (every other one is held: a third
/// process's 62 opens took the free ones first, outside the model, whose private copy of the
/// heap per open would not fit 62 times), which empties it. The owner frees the block: its
/// reclaim reads the record, now of a live process, and must find it empty. A clear left in
/// the claimer's cache leaves the dead process's offset in memory, and the block is never
/// reclaimed while the claimer lives.
#[test]
fn a_dead_processs_record_is_empty_for_all_once_claimed() {
    const TEST: &str = "hazards::a_dead_processs_record_is_empty_for_all_once_claimed";
    if let Some(parts) = role(TEST) {
        let heap = Heap::open(&parts[1], &config(4)).unwrap();
        if parts[2] == "map" {
            let off = Offset(heap.root(ROOT_BLOCKS).load(SeqCst));
            heap.resolve_checked(off, SIZE_HUGE as u64).unwrap();
            assert!(holds(&heap, off, SIZE_HUGE, 0x5D), "the huge block torn");
            heap.root(ROOT_DEAD_MAPPED).store(1, SeqCst);
            std::thread::sleep(Duration::from_secs(600)); // killed here
            return;
        }
        // The owner holds one record and the dead process one: the filler takes the 62
        // free ones, then the claimer's open (`heap`) took the dead one's.
        let opens: Vec<Heap> = match parts[2].as_str() {
            "fill" => (0..COUNT_HAZARD_RECORDS - 3)
                .map(|_| Heap::open(&parts[1], &config(4)).unwrap())
                .collect(),
            _ => Vec::new(),
        };
        heap.root(ROOT_CLAIMED).fetch_add(1, SeqCst);
        wait_for("the owner's reclaim", None, || {
            heap.root(ROOT_DONE).load(SeqCst) != 0
        });
        drop(opens);
        return;
    }
    if other_role() {
        return;
    }
    let (_dir, path, heap) = common::modelled_heap(&config(4));
    let path = path.display().to_string();
    let t = heap.thread().unwrap();
    let off = t.allocate(layout(SIZE_HUGE)).unwrap();
    fill(&heap, &t, off, SIZE_HUGE, 0x5D);
    heap.root(ROOT_BLOCKS).store(off.0, SeqCst);
    let mut mapper = spawn_until(
        TEST,
        &format!("{path}|map"),
        &heap,
        ROOT_DEAD_MAPPED,
        "the mapping",
    );
    mapper.kill().unwrap();
    mapper.wait().unwrap();
    let mut filler = common::child(TEST, ROLE, &format!("{TEST}|{path}|fill"))
        .env_remove("PODKV_COHERENCE_MODEL")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the free records' claims", Some(&mut filler), || {
        heap.root(ROOT_CLAIMED).load(SeqCst) == 1
    });
    let mut claimer = spawn(TEST, &format!("{path}|claim"));
    wait_for("the dead record's claim", Some(&mut claimer), || {
        heap.root(ROOT_CLAIMED).load(SeqCst) == 2
    });
    t.free(off);
    t.collect_huge();
    heap.collect_huge();
    let reclaimed = heap.huge_allocation(off).is_none();
    heap.root(ROOT_DONE).store(1, SeqCst);
    finish(claimer, "");
    finish(filler, "");
    assert!(
        reclaimed,
        "a block only a dead process mapped stayed hazardous once its record was claimed"
    );
    drop(t);
    common::assert_clean(&heap, "");
}

/// A process checks the heap (its cache now holds every hazard record), another sets a cell
/// of an unclaimed record past its high mark (bad bytes, written back), and the first checks
/// again: it must report the record. A checker trusting its cache finds nothing.
#[test]
fn a_checker_finds_a_record_another_process_corrupted() {
    const TEST: &str = "hazards::a_checker_finds_a_record_another_process_corrupted";
    const RECORD: u64 = COUNT_HAZARD_RECORDS - 1;
    let cell = |heap: &Heap, value: u64| {
        let at = heap.geometry().layout().huge_hazard + RECORD * SIZE_HAZARD_RECORD;
        let word = heap.resolve(Offset(
            at + std::mem::offset_of!(HazardRecord, cells) as u64 + 8 * 3,
        ));
        // SAFETY: a word of the last hazard record, in the heap's metadata (mapped while the
        // heap is); nobody claims that record in this scenario.
        unsafe { (*(word as *const AtomicU64)).store(value, SeqCst) };
        heap.geometry().coherence.write_back(word, 8);
    };
    if let Some(parts) = role(TEST) {
        let heap = Heap::open(&parts[1], &config(4)).unwrap();
        cell(&heap, 0xBAD_0000);
        return;
    }
    if other_role() {
        return;
    }
    let (_dir, path, heap) = common::modelled_heap(&config(4));
    let before = heap.check();
    assert!(before.is_valid(), "check: {}", before.problems.join("; "));
    finish(spawn(TEST, &path.display().to_string()), "");
    let report = heap.check();
    let named = format!("hazard record {RECORD} has a cell beyond its high mark");
    assert!(
        report.problems.iter().any(|p| p.contains(&named)),
        "the checker missed the corrupt record: {:?}",
        report.problems
    );
    cell(&heap, 0);
    let after = heap.check();
    assert!(after.is_valid(), "check: {}", after.problems.join("; "));
}

/// A process that opens and closes the heap over and over, mapping a huge block each time,
/// never runs out of hazard records: each close gives its record back (a hook CAS on the
/// record's owner word), so the next open, here or in another process, finds it free. A
/// release left in this process's cache leaves the word naming this live process in memory,
/// and after 63 opens every record is taken.
#[test]
fn opening_and_closing_the_heap_again_and_again_never_runs_out_of_records() {
    const TEST: &str =
        "hazards::opening_and_closing_the_heap_again_and_again_never_runs_out_of_records";
    if let Some(parts) = role(TEST) {
        let off = Offset(parts[2].parse().unwrap());
        for _ in 0..COUNT_HAZARD_RECORDS + 8 {
            let heap = Heap::open(&parts[1], &config(4)).unwrap();
            heap.resolve_checked(off, SIZE_HUGE as u64).unwrap();
            assert!(holds(&heap, off, SIZE_HUGE, 0x6E), "the huge block torn");
        }
        return;
    }
    if other_role() {
        return;
    }
    let (_dir, path, heap) = common::modelled_heap(&config(4));
    let t = heap.thread().unwrap();
    let off = t.allocate(layout(SIZE_HUGE)).unwrap();
    fill(&heap, &t, off, SIZE_HUGE, 0x6E);
    finish(spawn(TEST, &format!("{}|{}", path.display(), off.0)), "");
    let report = heap.check();
    assert!(report.is_valid(), "check: {}", report.problems.join("; "));
    assert_eq!(
        report.huge.processes, 1,
        "records held once the other process closed"
    );
    t.free(off);
    t.collect_huge();
    heap.collect_huge();
    assert!(
        heap.huge_allocation(off).is_none(),
        "the block, unmapped everywhere, reclaimed"
    );
    drop(t);
    common::assert_clean(&heap, "");
}
