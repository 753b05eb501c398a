//! A slot's limbo list in the heap: bags of retired nodes, each entry stamped with its retire
//! epoch and the item's size ([`Stamp`]). Pushed by `Reclaim::retire`, walked by
//! `Reclaim::collect`; only the slot's owner touches it (and `check`, on a quiescent heap).
//!
//! # The walk
//! Newest bag to oldest. Each reclaimable entry is kept in place as a spare (if `Room` is
//! left) or zeroed, then freed, under a `FREE_ENTRY` log, so a crash frees it once; entries
//! are never moved (a move is two stores: a crash between them would leave the node twice).
//! An emptied bag other than the head is unlinked and freed under `FREE_BAG`.

use super::epoch;
use super::spare::{Room, Spare, Spares};
use crate::arena::Arena;
use crate::layout::{Bag, Stamp, ALLOC_BAG, COUNT_BAG, FREE_BAG, FREE_ENTRY, SIZE_BAG};
use crate::slot::Slot;
use podkv_hw::sync::mapped::Ordering;

/// The bag at `at`, in `slot`'s limbo.
#[inline]
pub(crate) fn bag<A: Arena>(slot: &Slot<A>, at: u64) -> &Bag {
    // SAFETY: bags are blocks of this slot's limbo list, touched only by this slot's owner
    // (this thread); their words are atomics.
    unsafe { &*(slot.view().ptr(at) as *const Bag) }
}

/// Whether `slot`'s limbo holds nothing.
pub(crate) fn is_empty<A: Arena>(slot: &Slot<A>) -> bool {
    let head = slot.record().limbo.load(Ordering::Relaxed);
    head == 0
        || (bag(slot, head).len.load(Ordering::Relaxed) == 0
            && bag(slot, head).next.load(Ordering::Relaxed) == 0)
}

/// Puts a removed, claimed node of `size` bytes on `slot`'s limbo list, stamped with the epoch now; false
/// when there was no room for a new bag (the node leaks, counted by `check` as unreachable:
/// bags are 512 B and items are freed first, so this needs a heap with no free slab).
pub(crate) fn push<A: Arena>(slot: &Slot<A>, node: u64, size: usize) -> bool {
    let record = slot.record();
    let mut head = record.limbo.load(Ordering::Relaxed);
    if head == 0 || bag(slot, head).len.load(Ordering::Relaxed) == COUNT_BAG as u64 {
        slot.before_alloc();
        slot.limbo_log(ALLOC_BAG, 0, 0);
        let Ok(made) = slot.alloc_zeroed(SIZE_BAG) else {
            slot.limbo_log(0, 0, 0);
            return false;
        };
        slot.put(&bag(slot, made).next, head);
        // The bag was zeroed by this thread: out with it before the head names it.
        slot.put(&bag(slot, made).len, 0);
        slot.put(&record.limbo, made);
        slot.limbo_log(0, 0, 0);
        head = made;
    }
    let bag = bag(slot, head);
    let len = bag.len.load(Ordering::Relaxed) as usize;
    let epoch = epoch::retire_epoch_with(slot, &slot.shared().hw().epoch.word);
    let stamp = Stamp::new(epoch, size);
    slot.put(&bag.entries[len][0], node);
    slot.put(&bag.entries[len][1], stamp.0);
    slot.put(&bag.len, len as u64 + 1);
    true
}

/// The epochs a limbo walk decides by: entries reclaimable at `global` are freed or kept as
/// spares, except those already reclaimable at `decided` (the last walk's), which that walk
/// decided.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Epochs {
    pub(crate) global: u64,
    pub(crate) decided: u64,
}

/// Walks `slot`'s limbo (see the module doc). Unless `full`, stops at the first bag the last
/// walk decided entirely (stamps only grow towards the head).
pub(crate) fn walk<A: Arena>(
    slot: &Slot<A>,
    epochs: Epochs,
    full: bool,
    spares: &mut Spares,
    room: &mut Room,
) {
    let view = slot.view();
    let head_at = view.offset_of(&slot.record().limbo);
    let mut link_at = head_at;
    loop {
        let at = view.word(link_at).load(Ordering::Relaxed);
        if at == 0 {
            break;
        }
        let bag = bag(slot, at);
        if !full && bag_is_decided(bag, epochs.decided) {
            break;
        }
        free_reclaimable(slot, at, bag, epochs, spares, room);
        if bag.len.load(Ordering::Relaxed) == 0 && link_at != head_at {
            slot.limbo_log(FREE_BAG, at, link_at);
            slot.put(view.word(link_at), bag.next.load(Ordering::Relaxed));
            slot.free(at);
            slot.limbo_log(0, 0, 0);
            continue;
        }
        link_at = at; // `next` is the bag's first word
    }
}

/// Whether every entry of `bag` was decided by the walk at epoch `decided`: its newest entry
/// was reclaimable then (entries are pushed in epoch order).
fn bag_is_decided(bag: &Bag, decided: u64) -> bool {
    let len = bag.len.load(Ordering::Relaxed) as usize;
    len > 0 && {
        let newest = Stamp(bag.entries[len - 1][1].load(Ordering::Relaxed));
        epoch::is_reclaimable(newest.epoch(), decided)
    }
}

/// Frees the entries of `bag` (at `bag_at`) old enough for `global` and not decided by
/// the last walk, but keeps those that fit in `room` in place as spares, newest first
/// (entries are pushed in retire order, so this goes from the end: when room runs out, the
/// older ones are freed). The bag empties (`len = 0`) once no entry is left.
fn free_reclaimable<A: Arena>(
    slot: &Slot<A>,
    bag_at: u64,
    bag: &Bag,
    epochs: Epochs,
    spares: &mut Spares,
    room: &mut Room,
) {
    let len = bag.len.load(Ordering::Relaxed) as usize;
    let mut kept = 0;
    for (i, entry) in bag.entries[..len].iter().enumerate().rev() {
        let node = entry[0].load(Ordering::Relaxed);
        if node == 0 {
            continue;
        }
        let stamp = Stamp(entry[1].load(Ordering::Relaxed));
        if epoch::is_reclaimable(stamp.epoch(), epochs.decided) {
            // A spare noted by an earlier walk.
            kept += 1;
        } else if epoch::is_reclaimable(stamp.epoch(), epochs.global) {
            let entry_at = bag_at + 16 + 16 * i as u64;
            if let Some(size) = stamp.size().and_then(|size| room.take(size)) {
                spares.push(Spare {
                    entry_at,
                    node,
                    size,
                });
                kept += 1;
                continue;
            }
            slot.limbo_log(FREE_ENTRY, node, entry_at);
            slot.put(&entry[0], 0);
            slot.free(node);
            slot.limbo_log(0, 0, 0);
        } else {
            kept += 1;
        }
    }
    if kept == 0 {
        slot.put(&bag.len, 0);
    }
}
