//! `podkv store check` and `stats`: walk the index and every limbo list on a quiescent heap and
//! prove the accounting equation
//!
//! ```text
//! live blocks of the heap == 1 descriptor + 1 slot array + segments
//!                            + items + limbo bags + limbo entries
//! ```
//! with every block counted once (a block reached twice — an item both linked and in limbo, or
//! in two limbo lists — is a *double reference*; a live block reached never is a *leak*).
//! Sentinels live inside segments: each linked one must be on the list exactly once, at its
//! bucket's slot, and each one on the list must be marked linked or claimed.

use crate::arena::Arena;
use crate::item::{self, View};
use crate::layout::*;
use crate::list::MARK;
use crate::shared::Shared;
use podkv_hw::sync::mapped::Ordering;
use std::collections::HashSet;

/// What a walk of the store found.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct StoreReport {
    /// Items linked in the index (visible or not).
    pub items: u64,
    /// Linked items marked deleted but not yet snipped (a thread stopped mid-unlink).
    pub marked: u64,
    /// Bucket sentinels on the list.
    pub sentinels: u64,
    /// Sentinels claimed but never marked linked (a claimer stopped mid-link).
    pub sentinels_claimed: u64,
    /// Bucket segments made.
    pub segments: u64,
    /// log2 of the bucket count.
    pub buckets_log2: u32,
    /// Limbo bags.
    pub bags: u64,
    /// Retired nodes waiting in limbo.
    pub limbo_entries: u64,
    /// Bytes of linked items (header + key + value).
    pub item_bytes: u64,
    /// Bytes of keys + values of linked items.
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

    /// Heap bytes per linked item (all live blocks, metadata included).
    pub fn heap_bytes_per_item(&self) -> f64 {
        self.heap_live_bytes as f64 / self.store.items.max(1) as f64
    }

    /// The heap's HWcc bytes per linked item.
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
        sentinels: HashSet::new(),
        report: StoreReport::default(),
    };
    w.header();
    w.list();
    w.buckets();
    w.limbo();
    w.report.blocks = w.seen.len() as u64;
    w.report
}

struct Walk<'m, A: Arena> {
    map: &'m Shared<A>,
    view: View,
    seen: HashSet<u64>,
    sentinels: HashSet<u64>,
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
        self.report.epoch = hw.epoch.word.load(Ordering::Relaxed);
        self.report.count_approx = hw.count.word.load(Ordering::Relaxed);
        self.report.used_approx = hw.used.word.load(Ordering::Relaxed);
        self.report.capacity = d.capacity;
        self.report.hwcc_bytes = self.map.hwcc_bytes();
        if !self
            .map
            .arena
            .is_hwcc(self.map.hwcc_at, self.report.hwcc_bytes)
        {
            self.report.problems.push(format!(
                "the store's shared words at {:#x} ({} bytes) are not in the heap's HWcc area",
                self.map.hwcc_at, self.report.hwcc_bytes
            ));
        }
        self.report.buckets_log2 = self.map.buckets_log2();
        for (i, seg) in hw.directory.iter().enumerate() {
            let seg = seg.load(Ordering::Relaxed);
            if seg != 0 && self.block(seg, &format!("segment {i}")) {
                self.report.segments += 1;
            }
        }
    }

    /// The one list from bucket 0's sentinel: strictly increasing (order, key).
    fn list(&mut self) {
        let head = self.map.hw().directory[0].load(Ordering::Relaxed);
        self.sentinels.insert(head);
        let mut at = self.view.word(head).load(Ordering::Relaxed);
        let mut last: Option<(u64, Vec<u8>)> = None;
        while at != 0 {
            let fresh = if self.view.is_item(at) {
                self.block(at, "item")
            } else {
                self.sentinel(at)
            };
            if !fresh {
                return;
            }
            let next = self.view.word(at).load(Ordering::Relaxed);
            self.node(at, next & MARK != 0, &mut last);
            at = next & !MARK;
        }
    }

    /// A sentinel met on the list: at its bucket's slot, claimed or linked, met once.
    fn sentinel(&mut self, at: u64) -> bool {
        let bucket = self.view.order(at).reverse_bits();
        let seg =
            self.map.hw().directory[(bucket / COUNT_SEGMENT) as usize].load(Ordering::Relaxed);
        let home = seg + (bucket % COUNT_SEGMENT) * item::SIZE_SENTINEL as u64;
        if seg == 0 || home != at || !self.sentinels.insert(at) {
            self.report.problems.push(format!(
                "sentinel of bucket {bucket} at {at:#x}: not its slot, or met twice"
            ));
            return false;
        }
        true
    }

    fn node(&mut self, at: u64, marked: bool, last: &mut Option<(u64, Vec<u8>)>) {
        let order = self.view.order(at);
        let key = if self.view.is_item(at) {
            self.view.key(at).to_vec()
        } else {
            Vec::new()
        };
        if self.view.is_item(at) {
            self.report.items += 1;
            self.report.marked += u64::from(marked);
            let size = self.view.item_size(at) as u64;
            self.report.item_bytes += size;
            self.report.payload_bytes += size - item::SIZE_HEADER as u64;
            if item::item_order(item::hash(&key)) != order {
                self.report
                    .problems
                    .push(format!("item {at:#x}: order is not its key's hash"));
            }
        } else {
            self.report.sentinels += 1;
        }
        let this = (order, key);
        if !marked {
            if let Some(prev) = last.as_ref() {
                if *prev >= this {
                    self.report
                        .problems
                        .push(format!("node {at:#x} out of order"));
                }
            }
            *last = Some(this);
        }
    }

    /// Every sentinel marked linked is on the list; claimed-only ones are counted.
    fn buckets(&mut self) {
        let hw = self.map.hw();
        for (s, seg) in hw.directory.iter().enumerate() {
            let seg = seg.load(Ordering::Relaxed);
            if seg == 0 {
                continue;
            }
            for i in 0..COUNT_SEGMENT {
                let at = seg + i * item::SIZE_SENTINEL as u64;
                let state = self.view.sentinel_state(at).load(Ordering::Relaxed);
                let bucket = s as u64 * COUNT_SEGMENT + i;
                if state & item::SENTINEL_LINKED != 0 && !self.sentinels.contains(&at) {
                    self.report
                        .problems
                        .push(format!("bucket {bucket}: linked sentinel not on the list"));
                }
                if state != 0 && state & item::SENTINEL_LINKED == 0 {
                    self.report.sentinels_claimed += 1;
                }
            }
        }
    }

    fn limbo(&mut self) {
        let d = self.map.desc();
        for slot in 0..d.slots as u32 {
            let mut bag = self.map.slot(slot).limbo.load(Ordering::Relaxed);
            while bag != 0 {
                if !self.block(bag, "limbo bag") {
                    break;
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
