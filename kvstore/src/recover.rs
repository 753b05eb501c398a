//! Store recovery of a killed thread: the store's own small log, and the one `match` that
//! settles it after the allocator has finished the thread's allocator step.
//!
//! # What the allocator's log does not cover
//! The allocator (`podkv_alloc::Heap::recover_dead`) finishes a dead slot's allocator step and
//! reports the block an allocation or free concerned (`InFlight`). What that block *means* —
//! an item or bucket block not yet published, a limbo bag not yet on the slot's list, an item
//! or block removed but not yet in limbo — only the store knows. Each such step is written, before it happens, into the
//! slot's record ([`crate::layout::SlotRecord`], tags in `layout`, written by `slot::Slot`),
//! one word per kind of step so that steps that
//! nest (a bucket block made for a write whose new item is already logged) never overwrite
//! each other:
//!
//! | word        | step                         | set before                    | cleared after          |
//! |-------------|------------------------------|-------------------------------|------------------------|
//! | `log`       | `ALLOC_ITEM`                 | allocating an item            | logging `ITEM(x)`      |
//! | `log`       | `ITEM(x)`                    | the bucket CAS publishing it  | the CAS succeeding     |
//! | `log`       | `FREE_ITEM(x)`               | freeing an unpublished item   | the free               |
//! | `block_log` | `ALLOC_BLOCK`                | allocating a bucket block     | logging `BLOCK(x)`     |
//! | `block_log` | `BLOCK(x)`                   | the bucket CAS publishing it  | the CAS succeeding     |
//! | `block_log` | `FREE_BLOCK(x)`              | freeing an unpublished block  | the free               |
//! | `limbo_log` | `ALLOC_BAG`                  | allocating a limbo bag        | linking it             |
//! | `limbo_log` | `FREE_ENTRY(x)` @ entry      | zeroing a limbo entry         | freeing `x`            |
//! | `limbo_log` | `FREE_BAG(b)` @ link         | unlinking an empty bag        | freeing `b`            |
//! | `limbo_log` | `TAKE_ENTRY(x)` @ entry      | zeroing a spare's entry       | logging `ITEM`/`BLOCK(x)` |
//! | `unlink`    | item `x`                     | the bucket CAS removing it    | `x` is in limbo        |
//! | `replacing` | block `x`                    | the bucket CAS removing it    | `x` is in limbo        |
//!
//! # Settling (one bounded `match` per word, no heap scan)
//! Run by a live handle (pinned) before the dead slot's announcement is released, so nothing
//! the dead thread could reach has been freed: its announcement still holds the epoch.
//! - `ALLOC_ITEM` / `ALLOC_BLOCK` / `ALLOC_BAG`: the allocator reports `Alloc(x)` and its
//!   step word differs from the one snapshot (`alloc_step`) before the step was logged (an
//!   unchanged word names an earlier, finished allocation): free `x` unless the structure
//!   holds it (the slot's limbo head is `x`). Nothing is published under `ALLOC_*`.
//! - `ITEM(x)` / `BLOCK(x)`: written, maybe published. Reachable from its bucket (the
//!   bucket's chain of ancestors, comparing the block, not the key: a live process may have
//!   re-inserted the key): published and live, kept. Otherwise it was never published, or a
//!   live thread removed it since (and retires it): recovery claims it for the dead slot
//!   (`item`, # Claims) and retires it if the claim is its own; a remover that claims first
//!   retires it itself.
//! - `FREE_*(x)`: done if the allocator reports `Free(x)`; else, if the entry / link word no
//!   longer names `x` (`FREE_ITEM`: always), free `x`.
//! - `TAKE_ENTRY(x)` (a reclaimable limbo block reused for a new item or bucket block,
//!   `Reclaim::take_spare`): if the entry still names `x`, nothing was taken (the limbo keeps
//!   it); if the `log` word names `ITEM(x)` or `block_log` names `BLOCK(x)`, that arm
//!   decides; else `x` was taken and never written: free it.
//! - `unlink = x` / `replacing = x`: if `x` is still reachable, the dead slot's CAS did not
//!   remove it. If not, a CAS removed it (the dead slot's or a live thread's): the claim word
//!   decides who retires it — every remover CASes it `0 → slot + 1` before retiring, and so
//!   does recovery, for the dead slot. Claimed by the dead slot but not its head bag's last
//!   entry: retire it here.
//!
//! # When settling happens
//! Always while the slot is held, so no new owner's log is taken for the dead one's:
//! - [`crate::Map::recover_dead`]: the allocator adopts each dead slot and, still holding it, hands its
//!   report to a handle of this process, which settles it ([`podkv_alloc::Heap::recover_dead_with`]);
//!   only then is the slot released. (Settling after the release let a handle that claimed the
//!   released slot first settle it with no report — its own slot — and leak the block in
//!   flight: the kill test's rare single-block leak with every log found idle.)
//! - a slot adopted while claiming: the claiming handle settles its own slot with the report
//!   the allocator kept for it ([`crate::arena::Arena::adoption`]). That includes the claim
//!   `create` makes to build a descriptor: it takes the report at once (a report belongs to
//!   one claim), and once the root names a descriptor — its own, or the one that beat it, in
//!   which the dead owner may have been writing — a handle on that claim settles the slot
//!   before it is released ([`crate::Map::settled_at_open`] keeps what it did).
//!
//! A slot whose allocator step is unknown (no report) is settled so: allocations are left
//! alone and frees not redone (a possible leak, never a double free).

use crate::arena::Arena;
use crate::buckets::Table;
use crate::index::{self, Memory};
use crate::item;
use crate::layout::{
    SlotRecord, ALLOC_BAG, ALLOC_BLOCK, ALLOC_ITEM, BLOCK, FREE_BAG, FREE_BLOCK, FREE_ENTRY,
    FREE_ITEM, ITEM, MASK_TAG, TAKE_ENTRY,
};
use crate::reclaim::{limbo, Reclaim};
use crate::slot::Slot;
use podkv_alloc::{InFlight, Offset};
use podkv_hw::sync::mapped::{AtomicU64, Ordering};

/// What store recovery did for one dead slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settled {
    /// The slot.
    pub slot: u32,
    /// Blocks freed because nothing in the store referenced them.
    pub freed: u32,
    /// Unlinked items put in limbo (by the recovering handle).
    pub retired: u32,
    /// The item step the slot's log named (tag | offset; zero: none).
    pub log: u64,
    /// The limbo step it named.
    pub limbo_log: u64,
    /// The item whose removal it logged.
    pub unlink: u64,
    /// The bucket block step it named.
    pub block_log: u64,
    /// The bucket block whose removal it logged.
    pub replacing: u64,
    /// What the allocator reported.
    pub in_flight: Option<InFlight>,
}

/// Settles the store log of slot `dead` (its allocator step already finished; `in_flight`
/// is what the allocator reported, `None` when unknown), then releases its announcement
/// if it still holds the value it had. Only the thread whose CAS takes a log word settles
/// it. The slot's limbo stays in its record: the slot's next owner frees it. Run by a live
/// handle's `reclaim` (it pins, and may retire what the dead slot removed).
pub(crate) fn settle<A: Arena>(
    reclaim: &Reclaim<A>,
    dead: u32,
    in_flight: Option<(InFlight, u64)>,
) -> Settled {
    let slot = reclaim.slot();
    // Our own slot, adopted while claiming it: the allocator kept its report for us.
    let in_flight = match in_flight {
        None if dead == slot.index => A::adoption(&slot.thread),
        known => known,
    };
    let shared = slot.shared();
    slot.fresh_slot(dead);
    let record = shared.slot(dead);
    let announce = shared.announce(dead);
    let announced = shared.load_word(announce);
    let _pin = reclaim.pin();
    // An `Alloc` report names this step's block only if the allocator logged a step
    // since the snapshot (else it is an earlier, finished allocation).
    let snapshot = record.alloc_step.load(Ordering::Relaxed);
    let allocated = match in_flight {
        Some((InFlight::Alloc(o), step)) if step != snapshot => o.0,
        _ => 0,
    };
    let in_flight = in_flight.map(|(f, _)| f);
    let mut done = Settled {
        slot: dead,
        freed: 0,
        retired: 0,
        log: 0,
        limbo_log: 0,
        unlink: 0,
        block_log: 0,
        replacing: 0,
        in_flight,
    };
    // The limbo step first: the removal arms below look at the limbo head.
    settle_limbo_step(slot, record, allocated, &mut done);
    let words = [
        &record.log,
        &record.block_log,
        &record.unlink,
        &record.replacing,
    ];
    if words.iter().any(|w| w.load(Ordering::Relaxed) != 0) {
        grace(slot, dead);
    }
    settle_step(reclaim, dead, record, allocated, &mut done, false);
    settle_step(reclaim, dead, record, allocated, &mut done, true);
    let x = take(slot, &record.unlink);
    done.unlink = x;
    if x != 0 && !reachable(reclaim, x, false) && owes_retire(slot, dead, x, false) {
        retire(reclaim, x, false, &mut done);
    }
    let x = take(slot, &record.replacing);
    done.replacing = x;
    if x != 0 && !reachable(reclaim, x, true) && owes_retire(slot, dead, x, true) {
        retire(reclaim, x, true, &mut done);
    }
    // Our own slot (a handle settling what its slot's previous owner left) pins and
    // unpins it itself.
    if dead != slot.index && announced & crate::reclaim::epoch::PINNED != 0 {
        podkv_hw::cas_site!("store.recover.unpin.cas");
        let _ = shared.cas_word(&slot.thread, announce, announced, 0);
    }
    done
}

/// The `limbo_log` arm of [`settle`]: takes the word and frees the block its step left
/// referenced by nothing (`allocated`: the block an `Alloc` report names for this step).
fn settle_limbo_step<A: Arena>(
    slot: &Slot<A>,
    record: &SlotRecord,
    allocated: u64,
    done: &mut Settled,
) {
    let word = take(slot, &record.limbo_log);
    done.limbo_log = word;
    let (tag, x) = (word & MASK_TAG, word & !MASK_TAG);
    let view = slot.view();
    let from = record.limbo_at.load(Ordering::Relaxed);
    let item_logged = record.log.load(Ordering::Acquire) == x | ITEM
        || record.block_log.load(Ordering::Acquire) == x | BLOCK;
    match tag {
        ALLOC_BAG if allocated != 0 && record.limbo.load(Ordering::Relaxed) != allocated => {
            free(slot, allocated, done)
        }
        FREE_ENTRY | FREE_BAG
            if done.in_flight.is_some()
                && !freed_by_heap(done, x)
                && view.word(from).load(Ordering::Relaxed) != x =>
        {
            free(slot, x, done)
        }
        TAKE_ENTRY if !item_logged && view.word(from).load(Ordering::Relaxed) != x => {
            free(slot, x, done)
        }
        _ => {}
    }
}

// `settle_step` reads both logs with the item tags.
const _: () = assert!(ALLOC_ITEM == ALLOC_BLOCK && ITEM == BLOCK && FREE_ITEM == FREE_BLOCK);

/// The `log` (an item's step) or, with `block`, the `block_log` (a bucket block's step) arm
/// of [`settle`]: takes the word and frees or retires what its step left referenced by
/// nothing. The two logs share their tags (`ALLOC_ITEM == ALLOC_BLOCK`, …).
fn settle_step<A: Arena>(
    reclaim: &Reclaim<A>,
    dead: u32,
    record: &SlotRecord,
    allocated: u64,
    done: &mut Settled,
    block: bool,
) {
    let slot = reclaim.slot();
    let word = take(
        slot,
        if block {
            &record.block_log
        } else {
            &record.log
        },
    );
    *(if block {
        &mut done.block_log
    } else {
        &mut done.log
    }) = word;
    let (tag, x) = (word & MASK_TAG, word & !MASK_TAG);
    match tag {
        ALLOC_ITEM if allocated != 0 => free(slot, allocated, done),
        ITEM if !reachable(reclaim, x, block) && slot.view().claim_retire(x, block, dead) => {
            retire(reclaim, x, block, done)
        }
        FREE_ITEM if done.in_flight.is_some() && !freed_by_heap(done, x) => free(slot, x, done),
        _ => {}
    }
}

/// Retires removed (or never published) item or block `x`, claimed for the dead slot.
fn retire<A: Arena>(reclaim: &Reclaim<A>, x: u64, block: bool, done: &mut Settled) {
    let view = reclaim.slot().view();
    let size = if block {
        item::block_size(view.block_len(x))
    } else {
        view.item_size(x)
    };
    reclaim.push_limbo(x, size);
    done.retired += 1;
}

/// Whether the allocator reported freeing `x` itself (its step was that free).
fn freed_by_heap(done: &Settled, x: u64) -> bool {
    done.in_flight == Some(InFlight::Free(Offset(x)))
}

/// Frees `x`, which recovery found referenced by nothing, and counts it.
fn free<A: Arena>(slot: &Slot<A>, x: u64, done: &mut Settled) {
    slot.free(x);
    done.freed += 1;
}

/// How long recovery waits at most for live removers to finish (see [`grace`]).
const TIME_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Under SWcc, before recovery claims what the dead slot published or removed: waits
/// (yielding, at most [`TIME_GRACE`]) until every other slot pinned now has unpinned or
/// pinned again. A live thread that removed one of those items or blocks did so pinned,
/// and claims it and writes the claim back before it unpins; the claim CAS acts on each
/// host's own copy of the line, so this wait is what orders the two claims. Nothing under
/// `Hardware`, where the CAS itself decides.
fn grace<A: Arena>(slot: &Slot<A>, dead: u32) {
    if !slot.view().is_swcc() {
        return;
    }
    let shared = slot.shared();
    let pinned: Vec<(u32, u64)> = (0..shared.arena.slots())
        .filter(|&i| i != dead && i != slot.index)
        .map(|i| (i, shared.load_word(shared.announce(i))))
        .filter(|&(_, a)| a & crate::reclaim::epoch::PINNED != 0)
        .collect();
    let start = std::time::Instant::now();
    for (i, seen) in pinned {
        while shared.load_word(shared.announce(i)) == seen && start.elapsed() < TIME_GRACE {
            std::thread::yield_now();
        }
    }
}

/// Whether item or block `x` is reachable from its bucket: its bucket's word, or the word of
/// an ancestor that holds the bucket's items, names it (a block) or owns an entry naming it
/// (an item).
fn reachable<A: Arena>(reclaim: &Reclaim<A>, x: u64, block: bool) -> bool {
    let view = reclaim.slot().view();
    let table = Table { reclaim };
    match block {
        true => view.fresh_block(x),
        false => view.fresh_item(x),
    }
    let tag = match block {
        true if view.block_len(x) == 0 => return false,
        true => view.block_entry(x, 0).0,
        false => view.tag(x),
    };
    let holds = |b: u64, w: u64| {
        if block {
            return index::is_block(w) && index::object(w) == x;
        }
        let mut hit = false;
        index::owned(&table, b, w, |_, at| {
            hit = at == x;
            !hit
        });
        hit
    };
    // Live writers split buckets meanwhile, and a split installs the child before it replaces
    // the parent: a walk could look at the child before the install and at the parent after
    // the replace, and miss `x`. So the answer stands only when a second look finds the
    // table's size and every word of the chain as the first did (a split changes the words
    // it touches, the split count included).
    let shared = reclaim.slot().shared();
    loop {
        let log2 = shared.buckets_log2();
        let chain: Vec<u64> = index::chain(index::bucket_of(tag, log2)).collect();
        let words = || -> Vec<u64> {
            chain
                .iter()
                .map(|&b| table.bucket(b, false).map_or(0, |word| table.load(word)))
                .collect()
        };
        let first = words();
        let hit = chain
            .iter()
            .zip(&first)
            .any(|(&b, &w)| w != 0 && holds(b, w));
        if shared.buckets_log2() == log2 && words() == first {
            return hit;
        }
    }
}

/// Removed item or block `x` whose removal slot `dead` logged: whether the dead slot (so
/// recovery) must retire it — nobody claimed it yet (recovery claims it now for the dead
/// slot), or the dead slot claimed it and died before it reached its limbo head bag.
fn owes_retire<A: Arena>(slot: &Slot<A>, dead: u32, x: u64, block: bool) -> bool {
    let view = slot.view();
    if view.claim_retire(x, block, dead) {
        return true;
    }
    if view.retire_claim(x, block) != dead + 1 {
        return false;
    }
    let head = slot.shared().slot(dead).limbo.load(Ordering::Relaxed);
    if head == 0 {
        return true;
    }
    let bag = limbo::bag(slot, head);
    let len = bag.len.load(Ordering::Relaxed) as usize;
    len == 0 || bag.entries[len - 1][0].load(Ordering::Relaxed) != x
}

/// Takes a log word (CAS to zero): zero if it was idle or another thread took it.
/// Under SWcc the word's line is written back at once (it is the dead slot's, read by its
/// next owner); only the recoverer holding the slot takes its words.
fn take<A: Arena>(slot: &Slot<A>, word: &AtomicU64) -> u64 {
    let w = word.load(Ordering::Acquire);
    if w == 0 {
        return 0;
    }
    match word.compare_exchange(w, 0, Ordering::AcqRel, Ordering::Relaxed) {
        Ok(_) => {
            let view = slot.view();
            if view.is_swcc() && podkv_hw::site!("store.recover.take_write_back") {
                view.write_back(view.offset_of(word), 8);
            }
            w
        }
        Err(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use crate::layout::{MASK_TAG, TAKE_ENTRY};
    use crate::{Store, StoreConfig};
    use podkv_alloc::InFlight;
    use podkv_hw::sync::mapped::Ordering;
    use std::process::Command;

    /// A small heap of `slots` thread slots (one: whoever claims after the child dies adopts
    /// the child's slot; recovery needs a second, for the recovering handle).
    fn config(slots: u64) -> StoreConfig {
        StoreConfig {
            heap: podkv_alloc::Config {
                small_bytes: 1 << 30,
                large_bytes: 1 << 30,
                slots,
                ..podkv_alloc::Config::default()
            },
            ..StoreConfig::default()
        }
    }

    /// The child: allocates an item as a write does (`ALLOC_ITEM` logged, the allocator's
    /// step names the block) and dies by SIGKILL before writing it.
    #[test]
    fn adopted_in_create_child_entry() {
        let Ok(path) = std::env::var("PODKV_ADOPT_HEAP") else {
            return;
        };
        let store = Store::open(path, config(1)).unwrap();
        let h = store.handle().unwrap();
        let _ = h.parts().allocate(1016).unwrap();
        // SAFETY: plain libc calls; the process ends here.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        unreachable!("SIGKILL ends the process");
    }

    /// The child: rewrites one key until its handle holds spares (reclaimable items kept in
    /// limbo for reuse), takes one for a new item of the same size (`TAKE_ENTRY` logged, its
    /// entry zeroed) and dies by SIGKILL before writing it.
    #[test]
    fn took_spare_child_entry() {
        let Ok(path) = std::env::var("PODKV_SPARE_HEAP") else {
            return;
        };
        let store = Store::open(path, config(2)).unwrap();
        let h = store.handle().unwrap();
        let value = [b'v'; 100];
        // Two periodic collects: the first advances the epoch past the rewrites, the second
        // finds them reclaimable and keeps them.
        for _ in 0..3 * crate::reclaim::BATCH_COLLECT {
            h.set(b"key", &value, 0, 0).unwrap();
        }
        assert!(!h.reclaim.spares().is_empty(), "rewrites left spares");
        let size = crate::item::SIZE_HEADER + 3 + value.len();
        let taken = h.parts().allocate(size).unwrap();
        assert_eq!(
            h.reclaim.slot().record().limbo_log.load(Ordering::Relaxed) & MASK_TAG,
            TAKE_ENTRY,
            "a spare was taken, not a fresh block"
        );
        let _ = taken;
        // SAFETY: plain libc calls; the process ends here.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        unreachable!("SIGKILL ends the process");
    }

    /// Runs test `entry` of this binary in a child process with `env` naming the heap at
    /// `path`, and requires that the child killed itself mid-write.
    fn run_child_until_killed(entry: &str, env: &str, path: &std::path::Path) {
        let status = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                &format!("recover::tests::{entry}"),
                "--nocapture",
            ])
            .env(env, path)
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGKILL),
            "the child died mid-write: {status:?}"
        );
    }

    /// A spare taken out of limbo and not yet logged as an item is freed by recovery (without
    /// the `TAKE_ENTRY` arm it is referenced by nothing: leaked).
    #[test]
    fn a_spare_taken_by_a_killed_writer_is_freed_by_recovery() {
        let dir = tempfile::tempdir_in("/dev/shm")
            .or_else(|_| tempfile::tempdir())
            .unwrap();
        let path = dir.path().join("heap");
        let store = Store::open(&path, config(2)).unwrap();
        run_child_until_killed("took_spare_child_entry", "PODKV_SPARE_HEAP", &path);
        let settled = store.recover_dead().unwrap();
        assert_eq!(settled.len(), 1, "{settled:?}");
        assert_eq!(settled[0].limbo_log & MASK_TAG, TAKE_ENTRY, "{settled:?}");
        assert_eq!(settled[0].freed, 1, "the taken spare is freed: {settled:?}");
        let h = store.handle().unwrap();
        assert_eq!(h.get(b"key").unwrap().map(|g| g.value().len()), Some(100));
        drop(h);
        let report = store.check();
        assert!(report.is_valid(), "{:?}", report.problems);
    }

    /// A process that read the root as zero builds its own descriptor, and the claim it makes
    /// for that adopts the slot of a process that died writing to the store another process
    /// installed meanwhile. Its root CAS loses; the dead slot's in-flight item block must be
    /// settled with the allocator's report (freed), not leaked: before, the report was
    /// dropped with `create`'s thread and the next claim of the slot settled it with none.
    #[test]
    fn a_slot_adopted_inside_create_is_settled_with_the_allocators_report() {
        let dir = tempfile::tempdir_in("/dev/shm")
            .or_else(|_| tempfile::tempdir())
            .unwrap();
        let path = dir.path().join("heap");
        let store = Store::open(&path, config(1)).unwrap();
        run_child_until_killed("adopted_in_create_child_entry", "PODKV_ADOPT_HEAP", &path);
        let arena = crate::PodArena {
            heap: store.heap().clone(),
            root_index: 0,
        };
        // As if the root still read zero: `create` claims (adopting the dead slot), builds a
        // descriptor and loses the root CAS to the store above.
        let racer = crate::Map::open_seen(arena, &config(1), 0).unwrap();
        assert_eq!(
            racer.inner.desc_at, store.inner.desc_at,
            "the first store won"
        );
        let settled = racer
            .settled_at_open()
            .expect("the claim adopted the dead slot and settled it");
        assert!(
            matches!(settled.in_flight, Some(InFlight::Alloc(_))),
            "{settled:?}"
        );
        assert_eq!(
            settled.freed, 1,
            "the unwritten item block is freed: {settled:?}"
        );
        assert!(
            store.recover_dead().unwrap().is_empty(),
            "nothing left dead"
        );
        let report = store.check();
        assert!(report.is_valid(), "{:?}", report.problems);
    }
}
