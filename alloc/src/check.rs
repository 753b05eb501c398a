//! The heap checker and statistics: one walk over every slab's metadata.
//!
//! # Invariants (exact on a quiescent heap; a live heap may show a move half made)
//! - every slab below `len` is on exactly one list or is detached/disowned, with the state that
//!   place implies (`slab.rs`); nothing is on two lists and no list has a cycle;
//! - a sized slab: `free = popcount(bits) <= capacity`, no bit beyond the capacity,
//!   `remote >= free`, so `free + live + remote_freed == capacity` with
//!   `live = remote - free`;
//! - a detached slab: no free bit, `DETACHED` set, `remote >= 1` (= live blocks);
//! - a disowned slab: no owner, `DETACHED` set, `remote >= 1`;
//! - remote frees pending in slots' batches (`crate::pending`) count as freed: `remote`
//!   above is the slab's remote word less them, and only sized, detached or disowned slabs
//!   have any; a released slot has none;
//! - a morphing slab (`crate::morph`): both classes valid and its sets fit; no free bit on a
//!   blocked block, nothing between the sets, no old-set bit past the old class; its remote
//!   count may exceed the capacity by at most its old set;
//! - a released slot holds no list;
//! - the huge heap's invariants (`huge/check.rs`).
//!
//! The report doubles as the heap's statistics: bytes in use, slabs per state, per class, and
//! each class's slabs by occupancy (read by `census.rs`).

use crate::class::Kind;
use crate::global::List;
use crate::morph::Morph;
use crate::shared::Shared;
use crate::slabs::SlabHeap;
use crate::pending::Pending;
use crate::process::SlotLife;
use crate::recovery::Rec;
use crate::remote;
use crate::slab::{Meta, State};
use crate::slot::owner_pid;
use podkv_hw::sync::Ordering::{Acquire, Relaxed};
use std::collections::BTreeMap;

/// Statistics of one size class.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClassStats {
    /// Block size.
    pub block_bytes: u32,
    /// Slabs of this class (sized, detached, disowned).
    pub slabs: u64,
    /// Live blocks.
    pub live_blocks: u64,
    /// Blocks free for their owner to allocate.
    pub free_blocks: u64,
    /// The class's slabs by occupancy band (`census.rs`).
    pub occupancy: crate::occupancy::Occupancy,
}

/// Statistics of one slab heap.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlabHeapStats {
    /// Slabs grown into.
    pub len: u64,
    /// Most slabs.
    pub max: u64,
    /// Slabs per state name.
    pub slabs_by_state: BTreeMap<&'static str, u64>,
    /// Per class (only classes with slabs).
    pub classes: BTreeMap<usize, ClassStats>,
    /// Bytes of live blocks (block sizes).
    pub live_bytes: u64,
    /// Live blocks.
    pub live_blocks: u64,
    /// Blocks freed remotely whose count waits in a slot's pending batch (`crate::pending`):
    /// free, not yet on their slab's remote word.
    pub pending_blocks: u64,
    /// Slabs morphing (`crate::morph`), also counted by their state: their live blocks are
    /// counted at their new class's size, old ones too.
    pub morphing: u64,
}

/// One thread slot as the checker saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotStats {
    /// Slot index.
    pub index: u64,
    /// Claiming process.
    pub pid: u32,
    /// Whether its owner still lives (by the heap's liveness mode).
    pub alive: bool,
    /// The step its recovery word names.
    pub step: String,
}

/// What [`crate::Heap::check`] found.
#[derive(Clone, Debug, Default)]
pub struct HeapReport {
    /// Small (`[0]`) and large (`[1]`) heap statistics.
    pub heaps: [SlabHeapStats; 2],
    /// Claimed slots.
    pub claimed_slots: Vec<SlotStats>,
    /// Bytes of HWcc metadata in use.
    pub hwcc_bytes: u64,
    /// Bytes of storage the file holds.
    pub file_bytes: u64,
    /// The huge heap (`huge/check.rs`).
    pub huge: crate::huge::HugeReport,
    /// Every invariant violation, one line each. Empty: the heap is consistent.
    pub problems: Vec<String>,
}

impl HeapReport {
    /// Live bytes in both heaps.
    pub fn live_bytes(&self) -> u64 {
        self.heaps.iter().map(|h| h.live_bytes).sum()
    }

    /// Live blocks in both heaps.
    pub fn live_blocks(&self) -> u64 {
        self.heaps.iter().map(|h| h.live_blocks).sum()
    }

    /// Whether no invariant is violated.
    pub fn is_valid(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Where the walk found a slab.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Place {
    Global,
    Unsized(u64),
    Sized(u64, usize),
}

struct Walk<'h> {
    shared: &'h Shared,
    report: HeapReport,
    /// Per slab heap: remote frees pending per slab, over all slots.
    pending: [BTreeMap<u32, u32>; 2],
}

impl HeapReport {
    /// Walks all of `shared`'s slab metadata into `report` (whose heap-wide numbers the caller
    /// fills: `Heap::check`), checking every invariant and gathering statistics.
    pub(crate) fn walk(shared: &Shared, report: HeapReport) -> HeapReport {
        fresh(shared);
        let mut walk = Walk {
            shared,
            report,
            pending: [BTreeMap::new(), BTreeMap::new()],
        };
        let places = walk.lists();
        for kind in Kind::ALL {
            walk.slabs(kind, &places[kind as usize]);
        }
        walk.report
    }
}

/// SWcc reader rule for the checker, which owns nothing it reads: this process may have run
/// on the heap for a while, so its cache may hold any slot or descriptor as it was long ago;
/// every one is read fresh before the walk (dirty lines of this process's own go back first,
/// as `clflush` does).
fn fresh(shared: &Shared) {
    let coherence = shared.geometry.coherence;
    if !coherence.is_swcc() || !podkv_hw::site!("alloc.check.invalidate") {
        return;
    }
    for kind in Kind::ALL {
        let heap = *shared.slabs.get(kind);
        if heap.len() > 0 {
            let first = (heap.desc(0) as *const crate::slab::SlabDesc).cast::<u8>();
            coherence.invalidate(first, heap.len() as usize * crate::slab::SIZE_DESC);
        }
    }
    for i in 0..shared.geometry.slots() {
        let (bytes, len) = shared.slots.slot(i).bytes();
        coherence.invalidate(bytes, len);
    }
}

impl Walk<'_> {
    fn problem(&mut self, line: String) {
        self.report.problems.push(line);
    }

    /// Every list of every slot and the global lists, by slab.
    fn lists(&mut self) -> [BTreeMap<u32, Place>; 2] {
        let mut places = [BTreeMap::new(), BTreeMap::new()];
        for kind in Kind::ALL {
            let heap = *self.shared.slabs.get(kind);
            let len = heap.len();
            let lists = &self.shared.lists;
            for head in List::ORDER.map(|list| lists.head(&heap, list)) {
                let next_of = |s: u32| {
                    if s < len {
                        heap.desc(s).next()
                    } else {
                        0
                    }
                };
                for slab in crate::free_list::walk(head, len as usize, next_of) {
                    self.place(&mut places[kind as usize], &heap, slab, Place::Global);
                }
            }
        }
        for i in 0..self.shared.geometry.slots() {
            let slot = self.shared.slots.slot(i);
            let owner = self.shared.slots.owner_word(i).load(Acquire);
            let pid = owner_pid(owner);
            if pid != 0 {
                let alive = !matches!(self.shared.slots.peek(i), SlotLife::Dead(_));
                self.report.claimed_slots.push(SlotStats {
                    index: i,
                    pid,
                    alive,
                    step: Rec(slot.recovery.load(Relaxed)).to_string(),
                });
            }
            for kind in Kind::ALL {
                self.slot_lists(&mut places[kind as usize], kind, i, pid != 0);
            }
            self.slot_pending(i, pid != 0);
        }
        places
    }

    /// A slot's pending remote frees; a released slot has none (its release flushed them).
    fn slot_pending(&mut self, i: u64, claimed: bool) {
        let Some(batch) = Pending::unpack(self.shared.slots.slot(i).pending.load(Acquire)) else {
            return;
        };
        if !claimed {
            return self.problem(format!(
                "released slot {i} still holds {} pending remote frees of {} slab {}",
                batch.count,
                batch.kind.name(),
                batch.slab
            ));
        }
        *self.pending[batch.kind as usize]
            .entry(batch.slab)
            .or_default() += batch.count;
    }

    fn slot_lists(&mut self, places: &mut BTreeMap<u32, Place>, kind: Kind, i: u64, claimed: bool) {
        let heap = *self.shared.slabs.get(kind);
        let lists = &self.shared.slots.slot(i).lists[kind as usize];
        let unsized_word = lists.unsized_list.load(Relaxed);
        let (mut link, count) = (unsized_word as u32, (unsized_word >> 32) as u32);
        let mut seen = 0;
        while link != 0 && seen <= count {
            if !self.place(places, &heap, link - 1, Place::Unsized(i)) {
                break;
            }
            seen += 1;
            link = heap.desc(link - 1).next();
        }
        if seen != count || link != 0 {
            self.problem(format!(
                "slot {i} {} unsized list holds {seen} slabs, says {count}",
                kind.name()
            ));
        }
        for class in 0..heap.classes.len {
            let word = lists.sized[class].load(Relaxed);
            let (head, tail) = (word as u32, (word >> 32) as u32);
            let (mut link, mut prev) = (head, 0);
            while link != 0 {
                if !self.place(places, &heap, link - 1, Place::Sized(i, class)) {
                    break;
                }
                let desc = heap.desc(link - 1);
                if desc.prev() != prev {
                    self.problem(format!(
                        "{} slab {} has prev link {} but follows {prev}",
                        kind.name(),
                        link - 1,
                        desc.prev()
                    ));
                }
                prev = link;
                link = desc.next();
            }
            if prev != tail {
                self.problem(format!(
                    "slot {i} {} class {class} list ends at {prev}, tail says {tail}",
                    kind.name()
                ));
            }
        }
        if !claimed && (unsized_word != 0 || lists.sized.iter().any(|w| w.load(Relaxed) != 0)) {
            self.problem(format!(
                "released slot {i} still holds {} lists",
                kind.name()
            ));
        }
    }

    /// Records where `slab` was found; false (and a problem) if it was out of range or already
    /// placed, which also ends a cyclic list.
    fn place(
        &mut self,
        places: &mut BTreeMap<u32, Place>,
        heap: &SlabHeap,
        slab: u32,
        at: Place,
    ) -> bool {
        let len = heap.len();
        if slab >= len {
            self.problem(format!(
                "{} slab {slab} on a list is beyond the heap's {len} slabs",
                heap.kind.name()
            ));
            return false;
        }
        if let Some(before) = places.insert(slab, at) {
            self.problem(format!(
                "{} slab {slab} is on two lists: {before:?} and {at:?}",
                heap.kind.name()
            ));
            return false;
        }
        true
    }

    fn slabs(&mut self, kind: Kind, places: &BTreeMap<u32, Place>) {
        let heap = *self.shared.slabs.get(kind);
        let len = heap.len();
        let stats = &mut self.report.heaps[kind as usize];
        stats.len = u64::from(len);
        stats.max = heap.max;
        for slab in 0..len {
            self.slab(&heap, slab, places.get(&slab).copied());
        }
    }

    fn slab(&mut self, heap: &SlabHeap, slab: u32, place: Option<Place>) {
        let desc = heap.desc(slab);
        let meta = desc.meta();
        let remote_word = heap.remote(slab).load(Acquire);
        let count = remote::count(remote_word);
        let detached = remote::is_detached(remote_word);
        let bits = desc.count_bits();
        let class = usize::from(meta.class);
        let name = heap.kind.name();
        let morph = match meta.old {
            0 => None,
            old => match Morph::of(heap.classes, class, usize::from(old) - 1) {
                Some(morph) => Some(morph),
                None => return self.problem(format!("{name} slab {slab} cannot morph: {meta:?}")),
            },
        };
        let free = match morph {
            Some(morph) => desc.count_free(morph.count_new),
            None if class < heap.classes.len => {
                bits.saturating_sub(crate::slab::phantom_bits(heap.classes.count[class]))
            }
            None => bits,
        };
        if let Some(problem) = morph.and_then(|m| m.problem(desc)) {
            return self.problem(format!("{name} slab {slab} morphing: {problem}"));
        }
        let pending = self.pending[heap.kind as usize]
            .get(&slab)
            .copied()
            .unwrap_or(0);
        let Some(state) = meta.state else {
            return self.problem(format!(
                "{name} slab {slab} has an unknown state in {meta:?}"
            ));
        };
        let expect_owner = |slot: u64| meta.owner == slot as u32 + 1;
        let ok = match (place, state) {
            (Some(Place::Global), State::Free) => meta.owner == 0,
            (Some(Place::Unsized(i)), State::Unsized) => expect_owner(i),
            (Some(Place::Sized(i, class)), State::Sized) => {
                expect_owner(i)
                    && usize::from(meta.class) == class
                    && self.sized_ok(heap, slab, (meta, morph), free, count - pending.min(count), detached)
                    && count >= pending
            }
            (None, State::Detached) => {
                meta.owner != 0
                    && free == 0
                    && detached
                    && count >= 1
                    && count >= pending
                    && self.class_ok(heap, slab, meta)
            }
            (None, State::Disowned) => {
                meta.owner == 0
                    && detached
                    && count >= 1
                    && count >= pending
                    && self.class_ok(heap, slab, meta)
            }
            _ => false,
        } && (pending == 0
            || matches!(state, State::Sized | State::Detached | State::Disowned));
        if !ok {
            return self.problem(format!(
                "{name} slab {slab}: state {state:?} owner {} class {} at {place:?}, free {free} (bits {bits}), remote {count}, pending {pending}{}",
                meta.owner,
                meta.class,
                if detached { " detached" } else { "" }
            ));
        }
        self.report.heaps[heap.kind as usize].pending_blocks += u64::from(pending);
        self.count_slab(heap, state, meta, free, count - pending);
    }

    #[allow(clippy::too_many_arguments)]
    fn sized_ok(
        &mut self,
        heap: &SlabHeap,
        slab: u32,
        (meta, morph): (Meta, Option<Morph>),
        free: u32,
        count: u32,
        detached: bool,
    ) -> bool {
        if !self.class_ok(heap, slab, meta) {
            return false;
        }
        let capacity = heap.classes.count[usize::from(meta.class)];
        let desc = heap.desc(slab);
        // A morphing slab's old blocks are counted too, and its old set lies past the
        // capacity (checked by `Morph::problem`).
        let (old, stray) = match morph {
            Some(morph) => (morph.count_old_set(desc), false),
            None => (0, desc_bits_beyond(desc, capacity)),
        };
        free <= capacity && count >= free && count <= capacity + old && !detached && !stray
    }

    fn class_ok(&mut self, heap: &SlabHeap, slab: u32, meta: Meta) -> bool {
        let ok = usize::from(meta.class) < heap.classes.len;
        if !ok {
            self.problem(format!(
                "{} slab {slab} has class {} of {}",
                heap.kind.name(),
                meta.class,
                heap.classes.len
            ));
        }
        ok
    }

    fn count_slab(&mut self, heap: &SlabHeap, state: State, meta: Meta, free: u32, count: u32) {
        let stats = &mut self.report.heaps[heap.kind as usize];
        *stats.slabs_by_state.entry(state_name(state)).or_default() += 1;
        stats.morphing += u64::from(meta.old != 0);
        let live = match state {
            State::Sized => count - free,
            State::Detached | State::Disowned => count,
            State::Free | State::Unsized => return,
        };
        let class = usize::from(meta.class);
        let block = heap.classes.size[class];
        let entry = stats.classes.entry(class).or_insert_with(|| ClassStats {
            block_bytes: block,
            ..Default::default()
        });
        entry.slabs += 1;
        entry.live_blocks += u64::from(live);
        entry.free_blocks += u64::from(if state == State::Sized { free } else { 0 });
        entry.occupancy.add(live, heap.classes.count[class]);
        stats.live_blocks += u64::from(live);
        stats.live_bytes += u64::from(live) * u64::from(block);
    }
}

/// Whether the bitset breaks the phantom rule: the last word's bits past the capacity all set,
/// every later word zero.
fn desc_bits_beyond(desc: &crate::slab::SlabDesc, capacity: u32) -> bool {
    desc.bits.iter().enumerate().any(|(i, w)| {
        let w = w.load(Relaxed);
        let first = i as u32 * 64;
        if first >= capacity {
            w != 0
        } else if first + 64 > capacity {
            w | ((1u64 << (capacity - first)) - 1) != u64::MAX
        } else {
            false
        }
    })
}

/// A state's name as reports print it.
pub fn state_name(state: State) -> &'static str {
    match state {
        State::Free => "free",
        State::Unsized => "unsized",
        State::Sized => "sized",
        State::Detached => "detached",
        State::Disowned => "disowned",
    }
}
