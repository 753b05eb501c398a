//! The user's HWcc area (`HwccUser`) in every coherence mode: backed on demand and counted in
//! `hwcc_bytes`, its words changed through the heap's one hook (mCAS in an `mcas` heap),
//! seen by a second opener, and absent from a heap created without one.

use podkv_alloc::{Config, Heap};
use podkv_hw::mcas::McasKind;
use podkv_hw::sync::Ordering;
use podkv_hw::Coherence;

const MODES: [(Coherence, McasKind); 4] = [
    (Coherence::Hardware, McasKind::FlushCas),
    (Coherence::Limited, McasKind::FlushCas),
    (Coherence::Mcas, McasKind::FlushCas),
    (Coherence::Mcas, McasKind::Nmp),
];

fn config(coherence: Coherence, mcas: McasKind, hwcc_user_bytes: u64) -> Config {
    Config {
        small_bytes: 4 << 20,
        large_bytes: 4 << 20,
        slots: 8,
        huge_bytes: 0,
        coherence,
        mcas,
        hwcc_user_bytes,
        ..Config::default()
    }
}

#[test]
fn the_area_is_backed_on_demand_counted_and_changed_through_the_hook_in_every_mode() {
    for (coherence, mcas) in MODES {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("heap");
        let heap = Heap::open(&path, &config(coherence, mcas, 1 << 20)).unwrap();
        let area = heap.hwcc_user();
        assert_eq!(area.len(), 1 << 20, "{coherence}");
        let layout = heap.layout();
        assert_eq!(area.range(), layout.hwcc_user..layout.hwcc_end);
        assert_eq!(area.backed(), 0, "nothing backed before its user asks");
        let before = heap.hwcc_bytes();

        area.back(100).unwrap();
        assert_eq!(area.backed(), 4096, "a page");
        assert_eq!(heap.hwcc_bytes(), before + 4096, "{coherence}: counted");
        area.back(10).unwrap();
        assert_eq!(area.backed(), 4096, "backing is idempotent");

        let t = heap.thread().unwrap();
        let ops = heap.mcas_ops();
        let word = area.word(8);
        assert_eq!(area.load(word), 0, "zero until written");
        assert_eq!(area.cas(&t, word, 0, 7), Ok(0));
        assert_eq!(
            area.cas(&t, word, 0, 9),
            Err(7),
            "a CAS that loses sees the word"
        );
        area.store(&t, area.word(4088), 5);
        assert_eq!(area.load(word), 7);
        let sent = heap.mcas_ops() - ops;
        match coherence {
            Coherence::Mcas => assert_eq!(sent, 3, "{mcas}: each change is an mCAS request"),
            Coherence::Hardware | Coherence::Limited => assert_eq!(sent, 0),
        }

        // Another opener (a process, as far as the heap can tell) sees the words and the mark.
        let again = Heap::open(&path, &config(coherence, mcas, 1 << 20)).unwrap();
        let other = again.hwcc_user();
        assert_eq!(other.backed(), 4096);
        assert_eq!(other.load(other.word(8)), 7);
        assert_eq!(other.word(4088).load(Ordering::Acquire), 5);
        drop(t);
        assert!(heap.check().is_valid(), "{:?}", heap.check().problems);
    }
}

#[test]
#[should_panic(expected = "not backed")]
fn a_word_past_the_backed_prefix_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let heap = Heap::open(
        dir.path().join("heap"),
        &config(Coherence::Hardware, McasKind::FlushCas, 1 << 20),
    )
    .unwrap();
    let area = heap.hwcc_user();
    area.back(4096).unwrap();
    area.word(4096);
}

#[test]
fn a_heap_without_an_area_has_an_empty_one_and_backs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let heap = Heap::open(
        dir.path().join("heap"),
        &config(Coherence::Limited, McasKind::FlushCas, 0),
    )
    .unwrap();
    let area = heap.hwcc_user();
    assert!(area.is_empty());
    area.back(4096).unwrap();
    assert_eq!(area.backed(), 0, "nothing to back");
    assert_eq!(heap.geometry().hwcc_user_log2, 0);
}
