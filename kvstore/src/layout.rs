//! The store's heap structures: the descriptor (reachable from a heap root), its block of
//! multi-writer words, slot records, limbo bags and bucket segments.
//!
//! ```text
//! root[0] ─► Descriptor ─ hwcc_at ─► HwccWords (size, epoch, counters, flush marks,
//!                       │            directory[i] ─► Segment i: COUNT_SEGMENT bucket words)
//!                       │            then one announcement line per slot
//!                       └ slots_at ─► [SlotRecord; slots] ─ limbo ─► Bag ─► Bag ─► …
//! ```
//! Bucket `b`'s word is word `b % COUNT_SEGMENT` of segment `b / COUNT_SEGMENT`, a block of the
//! heap's user HWcc area like the `HwccWords`; it is zero until the bucket is made (see
//! `index`).

use podkv_hw::sync::mapped::AtomicU64;

/// "podkvST1": the descriptor's magic.
pub const MAGIC: u64 = 0x3154_5356_4b44_4f50;
/// Layout version of the descriptor (2: items carry a `lease` byte; slots count evictions;
/// 3: a limbo entry's stamp carries the item's size, see [`Stamp`]; 4: the multi-writer words
/// and the announcements live in a [`HwccWords`] block, in the heap's user HWcc area; 5: the
/// index is copy-on-write buckets, HWcc bucket words naming bucket blocks, see `index`;
/// 6: an item's first word names the cache domain that wrote it, see `item`, and the two
/// `flush_all` marks share one line, [`FlushMarks`]; 7: words and block entries naming an
/// object carry the hint of the domain that wrote it, an index into the [`DomainTable`]).
pub const VERSION: u64 = 7;
/// Buckets per segment (a 32 KiB block of bucket words in the HWcc area).
pub const COUNT_SEGMENT: u64 = 4096;
/// Segments in the directory: at most `COUNT_SEGMENT * COUNT_SEGMENTS` = 2^26 buckets.
pub const COUNT_SEGMENTS: usize = 16384;
/// log2 of the most buckets.
pub const SHIFT_BUCKETS_MAX: u64 = 26;
/// Bytes of a segment of bucket words.
pub const SIZE_SEGMENT: usize = COUNT_SEGMENT as usize * 8;
/// Buckets of a new growing table (log2).
pub const SHIFT_BUCKETS_START: u64 = 10;
/// Entries in a limbo bag (a 512-byte block).
pub const COUNT_BAG: usize = 31;

/// A word padded to a cache line (the hot shared counters). Padded, not `align(64)`: arena
/// blocks are only 8-aligned, and heap blocks of 64 B multiples keep lines apart.
#[repr(C)]
#[derive(Debug)]
pub struct Line {
    /// The word.
    pub word: AtomicU64,
    _pad: [u64; 7],
}

/// The store's root structure (one small block of facts fixed at creation).
///
/// # Fields (who may touch them)
/// Every word is written once by the creator before the root CAS publishes the descriptor,
/// and read by anyone after.
#[repr(C)]
#[derive(Debug)]
pub struct Descriptor {
    /// [`MAGIC`]. Written once before publication.
    pub magic: u64,
    /// [`VERSION`]. Written once before publication.
    pub version: u64,
    /// Longest key. Written once before publication.
    pub key_max: u64,
    /// Longest value. Written once before publication.
    pub value_max: u64,
    /// Bytes of items allowed (0: unlimited). Written once before publication.
    pub capacity: u64,
    /// 1: evict when full; 0: fail with out-of-memory. Written once before publication.
    pub evict: u64,
    /// Offset of the `[SlotRecord; slots]` array. Written once before publication.
    pub slots_at: u64,
    /// Number of slot records. Written once before publication.
    pub slots: u64,
    /// Offset of the store's [`HwccWords`] block (then the announcements). Written once
    /// before publication.
    pub hwcc_at: u64,
}

/// The store's multi-writer words: every word of the store that any thread of any process
/// CASes or stores, but the bucket words (in their segments) and the claim words of removed
/// items and blocks (see README, Coherence). In the
/// pod heap the block lies in the heap's user HWcc area (`podkv_alloc::HwccUser`: HWcc memory
/// in a `limited` heap, mCAS targets in an `mcas` one); one line per slot's announcement
/// follows it ([`size_hwcc_block`]). Carved and initialised by the descriptor's creator
/// before the root CAS publishes the descriptor that names it.
///
/// # Fields (who may touch them)
#[repr(C)]
#[derive(Debug)]
pub struct HwccWords {
    /// log2 of the bucket count; only grows, by CAS from any writer; a fixed table stores its
    /// size with bit 63 set and never changes it.
    pub size: Line,
    /// Global epoch: CAS +1 by any thread (`epoch::try_advance`); read by every pin.
    pub epoch: Line,
    /// Last CAS token handed out: `fetch_add` by every write.
    pub cas: Line,
    /// Items linked (approximate: per-handle deltas flushed in batches). `fetch_add` by writers.
    pub count: Line,
    /// Bytes of linked items (header + key + value; approximate like `count`).
    pub used: Line,
    /// `flush_all`'s marks, both on one line: every read loads them (`Shared::flush_marks`),
    /// and in an `mcas` heap one eviction of the line then serves both.
    pub flush: FlushMarks,
    /// The cache domains whose writes carry a hint (`index`, # Bucket words).
    pub domains: DomainTable,
    /// Offsets of segments of bucket words (0: not yet made), each installed once by CAS
    /// 0 → offset by the writer that first needs a bucket in it.
    pub directory: [AtomicU64; COUNT_SEGMENTS],
}

/// `flush_all`'s two marks on one cache line (padded like [`Line`]).
///
/// # Fields (who may touch them)
#[repr(C)]
#[derive(Debug)]
pub struct FlushMarks {
    /// Oldest live Unix second (0: none). Stored by `flush_all` (through the hook, after
    /// `oldest_cas`); read by every read.
    pub oldest_live: AtomicU64,
    /// Items with a smaller CAS token are flushed (0: none). Stored by an immediate
    /// `flush_all` (through the hook); read by every read and every new token block.
    pub oldest_cas: AtomicU64,
    _pad: [u64; 6],
}

/// The cache domains that wrote objects of the store, by index: a word's or entry's hint `h`
/// (`index`, # Bucket words) names `names[h - 1]`, a domain name as `item` (# Writer domain)
/// gives it (a host id; under the model of non-coherent caches, a heap mapping's).
///
/// # Fields (who may touch them)
#[repr(C)]
#[derive(Debug)]
pub struct DomainTable {
    /// Zero until a process of the domain takes the entry by one hook CAS 0 → name (the
    /// first free entry, at its first handle: `Shared::domain_hint`); never changed after.
    /// Read (hook loads) by processes looking for their domain's entry. A process that finds
    /// no entry (all taken: a pod has a handful of hosts, but under the model every mapping
    /// is a domain) writes without a hint, which every reader treats as another domain's.
    pub names: [AtomicU64; COUNT_DOMAINS],
    _pad: u64,
}

/// Entries of the [`DomainTable`]: every hint from 1 to `index::HINT_MAX`.
pub const COUNT_DOMAINS: usize = 63;
const _: () = assert!(COUNT_DOMAINS as u64 == crate::index::HINT_MAX);
const _: () = assert!(std::mem::size_of::<DomainTable>() == 512);

/// Bytes of a [`HwccWords`].
pub const SIZE_HWCC_WORDS: usize = std::mem::size_of::<HwccWords>();

/// Bytes of a store's HWcc block: its [`HwccWords`], then one [`Line`] per slot, whose word
/// is the slot's epoch announcement (`epoch::pin`: written by the slot's owner, and once by
/// the recovery of a dead owner; read by every advancer).
pub const fn size_hwcc_block(slots: u64) -> usize {
    SIZE_HWCC_WORDS + slots as usize * std::mem::size_of::<Line>()
}

/// Bit 63 of `size`: the table is fixed-size.
pub const FIXED: u64 = 1 << 63;

/// One thread slot's own words: its limbo head, its log words (see `recover`) and its
/// eviction count (two cache lines, padded: blocks are only 8-aligned).
///
/// # Fields (who may touch them)
#[repr(C)]
#[derive(Debug)]
pub struct SlotRecord {
    /// The old word the owner's next bucket CAS replaces (its block is retired by the CAS
    /// winner, see `index::Memory::replacing`); zero: none. Written by the owner before the
    /// CAS, cleared once the block is in limbo; settled by recovery.
    pub replacing: AtomicU64,
    /// Offset of the first limbo bag (0: none). Written and read only by the slot's owner
    /// (and by `check`, on a quiescent heap).
    pub limbo: AtomicU64,
    /// The owner's item step (a `log` tag below: allocating an item, an item written but
    /// maybe not published, freeing an unpublished item). Written by the owner before the
    /// step; settled (CAS to idle) by recovery. See `recover`.
    pub log: AtomicU64,
    /// The owner's limbo step (allocating a bag, freeing a limbo entry or bag).
    pub limbo_log: AtomicU64,
    /// Where the limbo step's block was referenced from (the entry or link word's offset).
    pub limbo_at: AtomicU64,
    /// The item the owner's next bucket CAS removes (replaced or deleted; 0: none): written
    /// before the CAS, cleared once the item is in limbo.
    pub unlink: AtomicU64,
    /// The allocator's step word when the owner logged its last `ALLOC_*` step: unchanged at
    /// recovery means that allocation never started.
    pub alloc_step: AtomicU64,
    /// Items the slot's owners evicted to make room (not expiries): `load + store` by the
    /// owner only, summed by `Map::evictions` from any process. Never reset: it lives in the
    /// heap, so a dead process's evictions still count, and the slot's next owner adds on.
    pub evictions: AtomicU64,
    /// The owner's bucket block step (a `block_log` tag below), as `log` is for items.
    pub block_log: AtomicU64,
    _pad: [u64; 7],
}

/// Bytes of a [`SlotRecord`].
pub const SIZE_SLOT_RECORD: usize = std::mem::size_of::<SlotRecord>();

/// Tag bits of a [`SlotRecord`] log word (offsets are 8-aligned); the steps are listed in
/// `recover`'s table.
pub const MASK_TAG: u64 = 7;
/// `log`: allocating an item.
pub const ALLOC_ITEM: u64 = 1;
/// `log`: item `x` written, maybe published.
pub const ITEM: u64 = 2;
/// `log`: freeing unpublished item `x`.
pub const FREE_ITEM: u64 = 3;
/// `block_log`: allocating a bucket block.
pub const ALLOC_BLOCK: u64 = 1;
/// `block_log`: bucket block `x` written, maybe published.
pub const BLOCK: u64 = 2;
/// `block_log`: freeing unpublished bucket block `x`.
pub const FREE_BLOCK: u64 = 3;
/// `limbo_log`: allocating a bag.
pub const ALLOC_BAG: u64 = 1;
/// `limbo_log`: freeing limbo entry `x` (its entry word at `limbo_at`).
pub const FREE_ENTRY: u64 = 2;
/// `limbo_log`: freeing bag `b` (the link that named it at `limbo_at`).
pub const FREE_BAG: u64 = 3;
/// `limbo_log`: taking limbo entry `x` (its entry word at `limbo_at`) for a new item.
pub const TAKE_ENTRY: u64 = 4;

/// A block of retired nodes: `next` bag, `len` entries of `(offset, epoch)`.
///
/// # Fields (who may touch them)
/// Only the owning slot's thread, and `check` on a quiescent heap.
#[repr(C)]
#[derive(Debug)]
pub struct Bag {
    /// Next bag of the same slot (0: none).
    pub next: AtomicU64,
    /// Entries in use.
    pub len: AtomicU64,
    /// `(node offset, Stamp)`.
    pub entries: [[AtomicU64; 2]; COUNT_BAG],
}

/// A limbo entry's second word: the epoch the node was retired in (low 48 bits) and the
/// item's size in bytes (high 16 bits; zero for 64 KiB and more). The size is read when the
/// node is retired, while its header is in cache, so a `collect` choosing spares reads no
/// item (it read every reclaimable item's header before: half of a set's read misses).
/// 2^48 epochs last 57 years at 156 000 advances a second (one per 64 writes at 10^7/s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp(pub u64);

impl Stamp {
    const SHIFT_SIZE: u32 = 48;

    /// The stamp of an item of `size` bytes retired in `epoch`.
    #[inline]
    pub fn new(epoch: u64, size: usize) -> Stamp {
        let size = if size < 1 << 16 { size as u64 } else { 0 };
        Stamp((epoch & ((1 << Self::SHIFT_SIZE) - 1)) | (size << Self::SHIFT_SIZE))
    }

    /// The retire epoch.
    #[inline]
    pub fn epoch(self) -> u64 {
        self.0 & ((1 << Self::SHIFT_SIZE) - 1)
    }

    /// The item's size, if under 64 KiB.
    #[inline]
    pub fn size(self) -> Option<usize> {
        Some((self.0 >> Self::SHIFT_SIZE) as usize).filter(|&s| s != 0)
    }
}

/// Bytes of a [`Bag`].
pub const SIZE_BAG: usize = std::mem::size_of::<Bag>();

const _: () = assert!(SIZE_SLOT_RECORD == 128 && std::mem::size_of::<Line>() == 64);
const _: () = assert!(std::mem::align_of::<Descriptor>() == 8 && std::mem::align_of::<Bag>() == 8);
const _: () = assert!(SIZE_HWCC_WORDS % 64 == 0);
