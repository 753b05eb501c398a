//! A remote free checked against the slab as it is now, not as the freer's cache last saw it.

use super::*;

const ROOT_LOOKED: usize = 24;
const ROOT_RESIZED: usize = 25;

/// Another process checks the heap while the owner's slab serves 48-byte blocks (its cache
/// now holds the slab's head). The owner frees them all, lets its slot go, and takes the
/// slab again for 64-byte blocks. The other process then frees an old 48-byte block's
/// offset, which is no block of the slab any more: the free must be refused. A freer that
/// trusts the class its cache holds counts it on the slab's remote word, for a block that
/// does not exist.
#[test]
fn a_remote_free_of_a_block_whose_slab_was_resized_since_is_refused() {
    const TEST: &str = "frees::a_remote_free_of_a_block_whose_slab_was_resized_since_is_refused";
    if let Some(parts) = role(TEST) {
        let heap = Heap::open(&parts[1], &config(4)).unwrap();
        // A slot of its own first: one the owner's slab never named.
        let t = heap.thread().unwrap();
        let _ = heap.check();
        heap.root(ROOT_LOOKED).store(1, SeqCst);
        wait_for("the owner's new class", None, || {
            heap.root(ROOT_RESIZED).load(SeqCst) != 0
        });
        let off = Offset(parts[2].parse().unwrap());
        std::panic::set_hook(Box::new(|info| println!("refused with: {info}")));
        let freed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| t.free(off)));
        println!(
            "outcome: {}",
            if freed.is_ok() { "accepted" } else { "refused" }
        );
        std::mem::forget(t); // its state after the refused free is not to be released
        return;
    }
    if other_role() {
        return;
    }
    let (_dir, path, heap) = common::modelled_heap(&config(4));
    let t = heap.thread().unwrap();
    let small = *heap.slab_heap(podkv_alloc::Kind::Small);
    let old: Vec<Offset> = (0..200).map(|_| t.allocate(layout(48)).unwrap()).collect();
    let slab = small.slab_of(old[0].0).unwrap().0;
    // An offset of a 48-byte block that no 64-byte block starts at.
    let bad = *old
        .iter()
        .find(|off| {
            let (s, in_slab) = small.slab_of(off.0).unwrap();
            s == slab && in_slab % 64 != 0
        })
        .unwrap();
    let spec = format!("{}|{}", path.display(), bad.0);
    let child = spawn_until(TEST, &spec, &heap, ROOT_LOOKED, "the other process's look");
    for &off in &old {
        t.free(off);
    }
    // The slot goes (its empty slabs to the global lists) and comes back for 64-byte blocks,
    // until one comes from the slab.
    drop(t);
    let t = heap.thread().unwrap();
    let mut new = Vec::new();
    while new
        .last()
        .is_none_or(|off: &Offset| small.slab_of(off.0).unwrap().0 != slab)
    {
        assert!(new.len() < 20_000, "the slab never served 64-byte blocks");
        new.push(t.allocate(layout(64)).unwrap());
    }
    heap.root(ROOT_RESIZED).store(1, SeqCst);
    let said = finish(child, "outcome: ");
    assert_eq!(said, ["refused"], "a free of a block that is no more");
    for off in new {
        t.free(off);
    }
    drop(t);
    let report = heap.check();
    assert!(report.is_valid(), "check: {}", report.problems.join("; "));
}
