//! The store's index on boost.interprocess: CXLALLOC Fig. 8's "the same index on
//! boost.interprocess" row. The podkv index ([`podkv_store::Map`]) runs over a
//! [`BoostArena`], whose blocks come from a `managed_shared_memory` segment (the C++ shim of
//! [`crate::bench::boost`]) instead of the pod heap.
//!
//! Every process of a run opens the segment by name (the first one creates it) and finds the
//! index's root word and slot claims in one named block of it, so the index spans processes as
//! the embedded store does. Offsets are boost's handles (offsets from the segment's base),
//! which every process resolves against its own mapping. Unlike the pod heap, nothing recovers
//! a slot whose owner died, and every allocation and free takes the segment's one mutex.

use crate::bench::boost::Segment;
use podkv_alloc::{AllocError, HeapError};
use podkv_hw::sync::mapped::{AtomicU64, Ordering};
use podkv_store::{Arena, StoreError};
use std::sync::Arc;

/// Slots of a boost arena (threads of all processes at once).
const COUNT_BOOST_SLOTS: usize = 256;

/// The named block that holds the root word and the slot claims.
const NAME_HEADER: &str = "podkv-index-header";

/// Segment bytes per item beyond its key and value: the item header, the index's share of
/// buckets, boost's block header, and room for items replaced while readers may hold them.
pub const SIZE_ITEM_SLACK: u64 = 512;

/// Segment bytes for the index itself and boost's own structures.
const SIZE_SEGMENT_FLOOR: u64 = 64 << 20;

/// The root word and slot claims, in the segment (every process maps them).
#[repr(C)]
struct Header {
    /// The store descriptor's offset (zero: no store yet); written once by the store's root
    /// CAS, read by every process that opens it.
    root: AtomicU64,
    /// Slot `i` is claimed while `claimed[i]` is non-zero: set by the claiming thread's CAS,
    /// cleared by it when its handle drops.
    claimed: [AtomicU64; COUNT_BOOST_SLOTS],
}

/// A process's mapping of the segment and its header.
struct BoostShared {
    segment: Segment,
    header: *const Header,
}

// SAFETY: `header` points into `segment`'s mapping, which lives as long as this; its words
// are atomics, shared with every thread of every process by design.
unsafe impl Send for BoostShared {}
// SAFETY: as for Send.
unsafe impl Sync for BoostShared {}

impl BoostShared {
    fn header(&self) -> &Header {
        // SAFETY: `header` is a live, zero-initialised block of the segment's size of
        // `Header` (made in `BoostArena::open`), aligned to 8, valid while the mapping is.
        unsafe { &*self.header }
    }
}

/// Index memory from a boost.interprocess segment.
#[derive(Clone)]
pub struct BoostArena {
    shared: Arc<BoostShared>,
    base: *mut u8,
    /// Largest block the segment could ever serve.
    block_max: usize,
}

// SAFETY: `base` is the address of the mapping `shared` keeps alive; boost serialises
// allocation on its mutex, and the store's own protocol governs the words in its blocks.
unsafe impl Send for BoostArena {}
// SAFETY: as for Send.
unsafe impl Sync for BoostArena {}

impl std::fmt::Debug for BoostArena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoostArena")
            .field("base", &self.base)
            .finish()
    }
}

impl BoostArena {
    /// Opens the segment `name`, creating it with `bytes` if no process has yet.
    pub fn open(name: &str, bytes: u64) -> anyhow::Result<Self> {
        let segment = Segment::open_or_create(name, bytes)?;
        let words = std::mem::size_of::<Header>() as u64 / 8;
        let at = segment.named_words(NAME_HEADER, words)?;
        let base = segment.base();
        let header = base.wrapping_add(at as usize) as *const Header;
        Ok(Self {
            shared: Arc::new(BoostShared { segment, header }),
            base,
            block_max: usize::try_from(bytes / 2).unwrap_or(usize::MAX),
        })
    }
}

/// A thread's claim on a [`BoostArena`] slot, released on drop.
pub struct BoostThread {
    shared: Arc<BoostShared>,
    slot: u32,
}

impl Drop for BoostThread {
    fn drop(&mut self) {
        self.shared.header().claimed[self.slot as usize].store(0, Ordering::Release);
    }
}

impl Arena for BoostArena {
    type Thread = BoostThread;
    const NAME: &'static str = "boost-interprocess";

    fn thread(&self) -> Result<BoostThread, StoreError> {
        let free = self.shared.header().claimed.iter().position(|c| {
            c.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        });
        let slot = free.ok_or(StoreError::Heap(HeapError::NoSlot {
            count: COUNT_BOOST_SLOTS as u64,
        }))?;
        Ok(BoostThread {
            shared: self.shared.clone(),
            slot: slot as u32,
        })
    }

    #[inline]
    fn slot_index(thread: &BoostThread) -> u32 {
        thread.slot
    }

    fn slots(&self) -> u32 {
        COUNT_BOOST_SLOTS as u32
    }

    #[inline]
    fn base(&self) -> *mut u8 {
        self.base
    }

    #[inline]
    fn allocate(thread: &BoostThread, size: usize) -> Result<u64, AllocError> {
        thread
            .shared
            .segment
            .try_alloc(size, 8)
            .ok_or(AllocError::OutOfMemory)
    }

    #[inline]
    fn allocate_aligned(
        thread: &BoostThread,
        size: usize,
        align: usize,
    ) -> Result<u64, AllocError> {
        thread
            .shared
            .segment
            .try_alloc(size, align.max(8))
            .ok_or(AllocError::OutOfMemory)
    }

    #[inline]
    fn free(thread: &BoostThread, at: u64) {
        thread.shared.segment.free(at);
    }

    fn root(&self) -> &AtomicU64 {
        &self.shared.header().root
    }

    fn block_max(&self) -> usize {
        self.block_max
    }
}

/// Segment bytes for a run whose items could take `items_bytes` at once (with
/// [`SIZE_ITEM_SLACK`] each): half as much again, for boost's fragmentation, and a floor. Only
/// touched pages cost memory: the segment is a sparse file in /dev/shm.
pub fn segment_bytes(items_bytes: u64) -> u64 {
    items_bytes + items_bytes / 2 + SIZE_SEGMENT_FLOOR
}

/// A fresh segment name for a run launched by this process.
pub fn fresh_segment_name() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("podkv-boost-index-{}-{nanos}", std::process::id())
}
