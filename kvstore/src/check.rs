//! `podkv store check` and `stats`: walk the index and every limbo list on a quiescent heap and
//! prove the accounting equation
//!
//! ```text
//! live blocks of the heap == 1 descriptor + 1 slot array + items + bucket blocks
//!                            + limbo bags + limbo entries
//! ```
//! with every block counted once (a block reached twice — an item both in a bucket and in
//! limbo, or in two buckets, or in two limbo lists — is a *double reference*; a live block
//! reached never is a *leak*). Each item must sit in a bucket that holds its hash's items
//! (its bucket or an ancestor); segments of bucket words are HWcc memory, not heap blocks.

use crate::arena::Arena;
use crate::buckets;
use crate::index;
use crate::item::{self, View};
use crate::layout::*;
use crate::shared::Shared;
use podkv_hw::sync::mapped::Ordering;
use std::collections::HashSet;

/// What a walk of the store found.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct StoreReport {
    /// Items in the index (visible or not).
    pub items: u64,
    /// Buckets made.
    pub buckets: u64,
    /// Bucket blocks (buckets of two items or more).
    pub blocks_bucket: u64,
    /// Buckets frozen for a split nobody finished (a splitter stopped; the next write to
    /// the bucket finishes it).
    pub frozen: u64,
    /// Segments of bucket words made (HWcc memory).
    pub segments: u64,
    /// log2 of the bucket count.
    pub buckets_log2: u32,
    /// Limbo bags.
    pub bags: u64,
    /// Retired nodes waiting in limbo.
    pub limbo_entries: u64,
    /// Bytes of items (header + key + value).
    pub item_bytes: u64,
    /// Bytes of keys + values of items.
    pub payload_bytes: u64,
    /// Blocks the store references (all kinds above, plus descriptor and slot array).
    pub blocks: u64,
    /// The global epoch.
    pub epoch: u64,
    /// The descriptor's approximate item count (batched by handles).
    pub count_approx: u64,
    /// The descriptor's approximate item bytes.
    pub used_approx: u64,
    /// Capacity in bytes (0: unlimited).
    pub capacity: u64,
    /// Bytes of HWcc memory the store's shared words take (`layout::HwccWords` and one
    /// announcement line per slot; in the heap's user HWcc area, also counted in the heap's
    /// `hwcc_bytes`).
    pub hwcc_bytes: u64,
    /// Violations found; empty when the store is sound.
    pub problems: Vec<String>,
}

impl StoreReport {
    /// Whether no violation was found.
    pub fn is_valid(&self) -> bool {
        self.problems.is_empty()
    }
}

/// The result of [`crate::Store::check`]: the store walk and the allocator's count, which
/// must account for each other.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CheckReport {
    /// What the store walk found.
    pub store: StoreReport,
    /// Live blocks according to the allocator.
    pub heap_live_blocks: u64,
    /// Live bytes according to the allocator (block sizes).
    pub heap_live_bytes: u64,
    /// HWcc bytes of the whole heap in use (`podkv_alloc::Heap::hwcc_bytes`: the
    /// allocator's words and the backed part of the user HWcc area, the store's words in it).
    pub heap_hwcc_bytes: u64,
    /// Store and heap problems, and the leak equation if it fails.
    pub problems: Vec<String>,
}

impl CheckReport {
    /// Whether the store and heap are sound and account for each other.
    pub fn is_valid(&self) -> bool {
        self.problems.is_empty()
    }

    /// Heap bytes per item (all live blocks, metadata included).
    pub fn heap_bytes_per_item(&self) -> f64 {
        self.heap_live_bytes as f64 / self.store.items.max(1) as f64
    }

    /// The heap's HWcc bytes per item.
    pub fn hwcc_bytes_per_item(&self) -> f64 {
        self.heap_hwcc_bytes as f64 / self.store.items.max(1) as f64
    }
}

/// Compares a store walk with the heap's check: every live block is one the store
/// references. The caller runs both on a quiescent heap.
pub(crate) fn reconcile(store: StoreReport, heap: &podkv_alloc::HeapReport) -> CheckReport {
    let mut problems: Vec<String> = store.problems.clone();
    problems.extend(heap.problems.iter().map(|p| format!("heap: {p}")));
    // Huge allocations (values past the large heap's blocks) are blocks too.
    let live = heap.live_blocks() + heap.huge.live;
    if live != store.blocks {
        problems.push(format!(
            "heap has {live} live blocks but the store references {}: {} leaked",
            store.blocks,
            live as i64 - store.blocks as i64
        ));
    }
    CheckReport {
        heap_live_blocks: live,
        heap_live_bytes: heap.live_bytes() + heap.huge.live_bytes,
        heap_hwcc_bytes: heap.hwcc_bytes,
        store,
        problems,
    }
}

/// Walks the index and limbo lists. Run it on a quiescent store (no writer running):
/// concurrent writes make it report transient states as problems.
pub(crate) fn walk<A: Arena>(shared: &Shared<A>) -> StoreReport {
    let mut w = Walk {
        map: shared,
        view: shared.view(),
        seen: HashSet::new(),
        report: StoreReport::default(),
    };
    w.header();
    w.buckets();
    w.limbo();
    w.report.blocks = w.seen.len() as u64;
    w.report
}

struct Walk<'m, A: Arena> {
    map: &'m Shared<A>,
    view: View,
    seen: HashSet<u64>,
    report: StoreReport,
}

impl<A: Arena> Walk<'_, A> {
    fn block(&mut self, at: u64, what: &str) -> bool {
        if at == 0 || at % 8 != 0 || !self.seen.insert(at) {
            self.report.problems.push(format!(
                "{what} at {at:#x} is null, misaligned or reached twice"
            ));
            return false;
        }
        true
    }

    fn header(&mut self) {
        let (d, hw) = (self.map.desc(), self.map.hw());
        self.block(self.map.desc_at, "descriptor");
        self.block(d.slots_at, "slot array");
        self.report.epoch = self.map.load_word(&hw.epoch.word);
        self.report.count_approx = self.map.load_word(&hw.count.word);
        self.report.used_approx = self.map.load_word(&hw.used.word);
        self.report.capacity = d.capacity;
        self.report.hwcc_bytes = self.map.hwcc_bytes();
        let arena = &self.map.arena;
        if !arena.is_hwcc(self.map.hwcc_at, size_hwcc_block(d.slots) as u64) {
            self.report.problems.push(format!(
                "the store's shared words at {:#x} are not in the heap's HWcc area",
                self.map.hwcc_at
            ));
        }
        self.report.buckets_log2 = self.map.buckets_log2();
        for (i, seg) in self.map.segments() {
            self.report.segments += 1;
            if !arena.is_hwcc(seg, SIZE_SEGMENT as u64) {
                self.report.problems.push(format!(
                    "segment {i} of bucket words at {seg:#x} is not in the heap's HWcc area"
                ));
            }
        }
    }

    /// Every made bucket: its word, its block, and the items it owns.
    fn buckets(&mut self) {
        let log2 = self.map.buckets_log2();
        for b in 0..1u64 << log2 {
            let Some(word) = buckets::bucket_word(self.map, b) else {
                continue;
            };
            let w = self.map.load_word(word);
            if w == 0 {
                if b == 0 {
                    self.report.problems.push("bucket 0 is not made".into());
                }
                continue;
            }
            self.bucket(b, w);
        }
    }

    fn bucket(&mut self, b: u64, w: u64) {
        self.report.buckets += 1;
        self.report.frozen += u64::from(index::is_frozen(w));
        if index::is_block(w) {
            let at = index::object(w);
            if !self.block(at, &format!("bucket {b}'s block")) {
                return;
            }
            self.report.blocks_bucket += 1;
            // The claim's read makes the block's first line fresh (SWcc), which holds `len`
            // too: read it first.
            let claimed = self.view.retire_claim(at, true) != 0;
            let len = self.view.block_len(at);
            if len < 2 || claimed {
                self.report.problems.push(format!(
                    "bucket {b}'s block {at:#x}: {len} entries, or claimed while in use"
                ));
            }
        }
        let mut items = Vec::new();
        let skip = index::split_of(b, w).filter(|&(c, _)| {
            buckets::bucket_word(self.map, c).is_some_and(|cw| self.map.load_word(cw) != 0)
        });
        buckets::entries(self.view, w, |tag, item| {
            if skip.is_none_or(|(c, mask)| tag & mask != c) {
                items.push((tag, item));
            }
            true
        });
        // Bucket `b` holds the items of every hash whose low bits up to b's top bit are b's.
        let mask = if b == 0 {
            0
        } else {
            (2u64 << (63 - b.leading_zeros())) - 1
        };
        for (tag, at) in items {
            if !self.block(at, &format!("bucket {b}'s item")) {
                continue;
            }
            self.view.fresh_item(at);
            self.item(b, tag & mask == b, tag, at);
        }
    }

    fn item(&mut self, b: u64, home: bool, tag: u64, at: u64) {
        self.report.items += 1;
        let size = self.view.item_size(at) as u64;
        self.report.item_bytes += size;
        self.report.payload_bytes += size - item::SIZE_HEADER as u64;
        let key_tag = index::tag(item::hash(self.view.key(at)));
        if !home || key_tag != tag || self.view.tag(at) != tag {
            self.report.problems.push(format!(
                "bucket {b}'s item {at:#x}: its tag, order or key's hash do not match the bucket"
            ));
        }
        if self.view.retire_claim(at, false) != 0 {
            self.report
                .problems
                .push(format!("bucket {b}'s item {at:#x} is claimed while in use"));
        }
    }

    fn limbo(&mut self) {
        let d = self.map.desc();
        let view = self.view;
        for slot in 0..d.slots as u32 {
            if view.is_swcc() && podkv_hw::site!("store.check.invalidate_slot") {
                view.invalidate(self.map.slot_at(slot), SIZE_SLOT_RECORD);
            }
            let mut bag = self.map.slot(slot).limbo.load(Ordering::Relaxed);
            while bag != 0 {
                if !self.block(bag, "limbo bag") {
                    break;
                }
                if view.is_swcc() && podkv_hw::site!("store.check.invalidate_bag") {
                    view.invalidate(bag, SIZE_BAG);
                }
                self.report.bags += 1;
                self.bag(bag, slot);
                bag = self.view.word(bag).load(Ordering::Relaxed);
            }
        }
    }

    fn bag(&mut self, bag: u64, slot: u32) {
        let len = self.view.word(bag + 8).load(Ordering::Relaxed);
        if len > COUNT_BAG as u64 {
            self.report.problems.push(format!(
                "slot {slot}: limbo bag {bag:#x} holds {len} entries"
            ));
            return;
        }
        for i in 0..len {
            let node = self.view.word(bag + 16 + i * 16).load(Ordering::Relaxed);
            // Zero: an entry freed already (`reclaim::limbo` never moves entries).
            if node != 0 && self.block(node, &format!("slot {slot} limbo entry")) {
                self.report.limbo_entries += 1;
            }
        }
    }
}
