//! Items and bucket sentinels: the two kinds of list node.
//!
//! # Item layout (one block: [`SIZE_HEADER`] = 48 bytes of header, then key, then value)
//! ```text
//!  0 next    u64  link | MARK       CAS by any writer (list protocol); read by anyone
//!  8 order   u64  reverse(hash)|1   written once before publication; read by anyone
//! 16 cas     u64  CAS token         written once before publication
//! 24 expiry  u32  unix s, 0 = never written once before publication
//! 28 time    u32  unix s of write   written once before publication (flush_all)
//! 32 flags   u32  client flags      written once before publication
//! 36 vlen    u32  value bytes       written once before publication
//! 40 klen    u16  key bytes         written once before publication
//! 42 kind    u8   KIND_ITEM         written once before publication
//! 43 lease   u8   LEASE_* bits      written once before publication (meta protocol state)
//! 44 claim   u32  retirer slot + 1  CAS 0 → slot + 1 by the one snipper (or recoverer) retiring it
//! 48 key, then value
//! ```
//! Everything but `next` and `claim` is immutable once the item is linked: a change is a new
//! item that replaces the old one by one CAS (see `list`), so readers need no locks and no
//! copies. That includes `lease`, memcached's per-item meta state (`ITEM_TOKEN_SENT`,
//! `ITEM_STALE`): winning a recache token or marking an item stale replaces the item, so the
//! replace CAS decides the one winner, and a concurrent touch or replace can never lose a bit
//! (see `meta`). Per-item overhead: **48 bytes** (memcached's header is 48–56 B), plus the
//! allocator's rounding to its size class.
//!
//! # Sentinels
//! A bucket's sentinel (split-ordered lists, Shalev–Shavit) is a 16-byte node *inside its
//! bucket segment* (no allocation): `next`, then a state word `reverse(bucket) | flags`. Bit 0
//! is clear (it sorts before every item of its bucket); bits 1–2 are free in a reversed bucket
//! number (buckets < 2^26) and hold [`SENTINEL_CLAIMED`] and [`SENTINEL_LINKED`]. The state
//! word goes `0 → order|CLAIMED` (one CAS: the one thread that may link it) `→ order|LINKED`
//! (after the insert CAS). A sentinel that is not linked is simply not used: searches start
//! from the nearest linked ancestor, which is always correct in a split-ordered list, so a
//! claimer that dies only slows its bucket down (slot recovery may finish the link).

use crate::list::{Nodes, Probe};
use podkv_hw::sync::mapped::{AtomicU32, AtomicU64, Ordering};
use std::cmp::Ordering as Order;

/// Bytes of item header before the key.
pub const SIZE_HEADER: usize = 48;
/// Bytes of a bucket sentinel (in its segment).
pub const SIZE_SENTINEL: usize = 16;
/// Sentinel state bit: a thread claimed the sentinel to link it.
pub const SENTINEL_CLAIMED: u64 = 2;
/// Sentinel state bit: the sentinel is linked; searches may start from it.
pub const SENTINEL_LINKED: u64 = 4;
/// `kind` of an item ('I').
pub const KIND_ITEM: u8 = 0x49;
/// `lease` bit: a client was sent the recache token (`W`); later readers see `Z`.
pub const LEASE_TOKEN_SENT: u8 = 1;
/// `lease` bit: the item is stale (`md I`, `ms I`); readers see `X`.
pub const LEASE_STALE: u8 = 2;

/// An item's header fields (everything but `next`), as written before publication.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    /// The item's split order: `reverse(hash) | 1`.
    pub order: u64,
    /// CAS token.
    pub cas: u64,
    /// Expiry in Unix seconds; zero: never.
    pub expiry: u32,
    /// Unix second of the write (for delayed `flush_all`).
    pub time: u32,
    /// Client flags.
    pub flags: u32,
    /// Meta protocol state: [`LEASE_TOKEN_SENT`] | [`LEASE_STALE`].
    pub lease: u8,
}

/// The split order of a key's hash: bit-reversed, low bit set (items sort after sentinels).
#[inline]
pub fn item_order(hash: u64) -> u64 {
    hash.reverse_bits() | 1
}

/// The split order of bucket `b`'s sentinel.
#[inline]
pub fn sentinel_order(bucket: u64) -> u64 {
    bucket.reverse_bits()
}

/// Hashes a key (64-bit multiply–xorshift over 8-byte words; good low and high bits).
#[inline]
pub fn hash(key: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h = (key.len() as u64).wrapping_mul(K);
    let mut chunks = key.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
        h = (h ^ w).wrapping_mul(K).rotate_left(29);
    }
    // The tail as a little-endian word padded with zeros, assembled in a register: copying
    // it into a zeroed array called `memcpy` even for an empty tail (an 8-byte key).
    let tail = chunks
        .remainder()
        .iter()
        .rev()
        .fold(0u64, |w, &b| (w << 8) | u64::from(b));
    h = (h ^ tail).wrapping_mul(K);
    h ^= h >> 32;
    h = h.wrapping_mul(0xD6E8_FEB8_6659_FD93);
    h ^ (h >> 32)
}

/// A view of nodes at `base + offset` in this process (a heap mapping or, for the local arena,
/// address zero).
#[derive(Clone, Copy, Debug)]
pub struct View {
    base: *mut u8,
}

// SAFETY: a view is a base address; the memory it names is shared deliberately and accessed
// only through atomics (links) or fields immutable after publication (see the layout above).
unsafe impl Send for View {}
// SAFETY: as above.
unsafe impl Sync for View {}

impl View {
    /// A view over memory starting at `base`.
    pub fn new(base: *mut u8) -> View {
        View { base }
    }

    /// This process's address of `at`. A null base is the local arena, whose offsets are
    /// addresses with exposed provenance (see `LocalArena::allocate`).
    #[inline]
    pub fn ptr(self, at: u64) -> *mut u8 {
        if self.base.is_null() {
            std::ptr::with_exposed_provenance_mut(at as usize)
        } else {
            self.base.wrapping_add(at as usize)
        }
    }

    /// The offset of a store word (in the heap, or an address for the local arena).
    #[inline]
    pub fn offset_of(self, word: &AtomicU64) -> u64 {
        word as *const AtomicU64 as u64 - self.ptr(0) as u64
    }

    /// The word at `at`.
    #[inline]
    pub fn word<'a>(self, at: u64) -> &'a AtomicU64 {
        // SAFETY: callers pass offsets of live nodes (or store words), 8-aligned, protected by
        // the caller's epoch pin (INVARIANT: reachable ⇒ not freed before the pin ends); the
        // caller bounds 'a by that pin (or by the map, for store words that are never freed).
        unsafe { &*(self.ptr(at) as *const AtomicU64) }
    }

    #[inline]
    fn u64_at(self, at: u64) -> u64 {
        // SAFETY: header fields of a pinned node, immutable after publication.
        unsafe { (self.ptr(at) as *const u64).read() }
    }

    #[inline]
    fn u32_at(self, at: u64) -> u32 {
        // SAFETY: as `u64_at`.
        unsafe { (self.ptr(at) as *const u32).read() }
    }

    #[inline]
    fn u8_at(self, at: u64) -> u8 {
        // SAFETY: as `u64_at`.
        unsafe { self.ptr(at).read() }
    }

    /// The node's split order (a sentinel's state flags masked off).
    #[inline]
    pub fn order(self, at: u64) -> u64 {
        let raw = self.word(at + 8).load(Ordering::Relaxed);
        if raw & 1 == 0 {
            raw & !(SENTINEL_CLAIMED | SENTINEL_LINKED)
        } else {
            raw
        }
    }

    /// A sentinel's state word (`order | flags`; zero: never claimed).
    #[inline]
    pub fn sentinel_state<'a>(self, at: u64) -> &'a AtomicU64 {
        self.word(at + 8)
    }

    /// Whether the node is an item (not a sentinel).
    #[inline]
    pub fn is_item(self, at: u64) -> bool {
        self.order(at) & 1 == 1
    }

    /// The claim word of item `at` (see [`View::claim_retire`]).
    #[inline]
    fn claim_word<'a>(self, at: u64) -> &'a AtomicU32 {
        // SAFETY: the `u32` at 44 of a pinned item, 4-aligned; only ever accessed atomically
        // after publication (written zero by `write_item` before).
        unsafe { &*(self.ptr(at + 44) as *const AtomicU32) }
    }

    /// Claims, for `slot`, the right to retire the unlinked item `at` (CAS of its claim word
    /// 0 → `slot + 1`): the snipper that wins it retires the item; recovery of a slot killed
    /// right after its snip claims it too, so exactly one of them retires it (`recover`).
    #[inline]
    pub fn claim_retire(self, at: u64, slot: u32) -> bool {
        self.claim_word(at)
            .compare_exchange(0, slot + 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// Who claimed item `at`'s retirement: `slot + 1`, or zero.
    #[inline]
    pub fn retire_claim(self, at: u64) -> u32 {
        self.claim_word(at).load(Ordering::Acquire)
    }

    /// An item's CAS token (one field of [`meta`](Self::meta), for a write that needs only it).
    #[inline]
    pub fn cas(self, at: u64) -> u64 {
        self.u64_at(at + 16)
    }

    /// An item's header fields.
    #[inline]
    pub fn meta(self, at: u64) -> Meta {
        Meta {
            order: self.order(at),
            cas: self.u64_at(at + 16),
            expiry: self.u32_at(at + 24),
            time: self.u32_at(at + 28),
            flags: self.u32_at(at + 32),
            lease: self.u8_at(at + 43),
        }
    }

    /// An item's key.
    #[inline]
    pub fn key<'a>(self, at: u64) -> &'a [u8] {
        // SAFETY: `u16` at 40 of a pinned item; immutable after publication.
        let len = unsafe { (self.ptr(at + 40) as *const u16).read() } as usize;
        // SAFETY: the key's bytes follow the header inside the item's block (layout above),
        // immutable after publication; the caller's pin outlives the slice ('a is bounded by
        // the guard that pins, see `memcached::Guard`).
        unsafe { std::slice::from_raw_parts(self.ptr(at + SIZE_HEADER as u64), len) }
    }

    /// An item's value.
    #[inline]
    pub fn value<'a>(self, at: u64) -> &'a [u8] {
        let klen = self.key(at).len() as u64;
        let vlen = self.u32_at(at + 36) as usize;
        // SAFETY: as `key`: the value follows the key inside the block.
        unsafe { std::slice::from_raw_parts(self.ptr(at + SIZE_HEADER as u64 + klen), vlen) }
    }

    /// Bytes of an item's block as requested from the arena.
    #[inline]
    pub fn item_size(self, at: u64) -> usize {
        SIZE_HEADER + self.key(at).len() + self.value(at).len()
    }

    /// Writes a new, unpublished item at `at` (a fresh block of `SIZE_HEADER + key + value`
    /// bytes); `value` is given in parts so append/prepend copy once, `vlen` bytes in all.
    pub fn write_item(self, at: u64, meta: &Meta, key: &[u8], value: &[&[u8]], vlen: usize) {
        debug_assert_eq!(vlen, value.iter().map(|v| v.len()).sum::<usize>());
        let p = self.ptr(at);
        // SAFETY: `at` is a fresh block this thread allocated and has not published, of at
        // least `SIZE_HEADER + key.len() + vlen` bytes, 8-aligned; nobody else can see it.
        unsafe {
            (p as *mut u64).write(0);
            (p.add(8) as *mut u64).write(meta.order);
            (p.add(16) as *mut u64).write(meta.cas);
            (p.add(24) as *mut u32).write(meta.expiry);
            (p.add(28) as *mut u32).write(meta.time);
            (p.add(32) as *mut u32).write(meta.flags);
            (p.add(36) as *mut u32).write(vlen as u32);
            (p.add(40) as *mut u16).write(key.len() as u16);
            p.add(42).write(KIND_ITEM);
            p.add(43).write(meta.lease);
            (p.add(44) as *mut u32).write(0);
            let mut q = p.add(SIZE_HEADER);
            std::ptr::copy_nonoverlapping(key.as_ptr(), q, key.len());
            q = q.add(key.len());
            for part in value {
                std::ptr::copy_nonoverlapping(part.as_ptr(), q, part.len());
                q = q.add(part.len());
            }
        }
    }
}

impl Nodes for View {
    #[inline]
    fn next(&self, at: u64) -> &AtomicU64 {
        self.word(at)
    }

    #[inline]
    fn order(&self, at: u64, probe: &Probe<'_>) -> Order {
        let order = View::order(*self, at);
        match order.cmp(&probe.order) {
            Order::Equal if order & 1 == 1 => compare_keys(self.key(at), probe.key),
            other => other,
        }
    }
}

/// `a.cmp(b)` without reading past either key. A slice comparison calls `memcmp`, whose AVX2
/// version loads 32 bytes at once: for an 8-byte key at item offset 48 that is offset 48..80,
/// the item's *second* cache line, one more miss per lookup (callgrind: 0.83 of the 3.0 D1
/// misses of a get; the value's first byte sits in the first line). Keys of equal split order
/// are almost always equal (the order is a 63-bit hash), so equality is checked first, eight
/// bytes at a time within the key; only a collision pays for the byte-wise order.
#[inline]
pub fn compare_keys(a: &[u8], b: &[u8]) -> Order {
    if a.len() == b.len() && same_bytes(a, b) {
        return Order::Equal;
    }
    a.iter().cmp(b.iter())
}

/// Whether two keys of equal length hold the same bytes, reading only their bytes.
#[inline]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let word = |c: &[u8]| u64::from_ne_bytes(c.try_into().unwrap_or([0; 8]));
    let (mut a8, mut b8) = (a.chunks_exact(8), b.chunks_exact(8));
    if !(&mut a8).zip(&mut b8).all(|(x, y)| word(x) == word(y)) {
        return false;
    }
    // Not `==`: that is `memcmp` again.
    a8.remainder().iter().eq(b8.remainder())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Split order: an item lies after its bucket's sentinel and before every other sentinel
    /// that sorts after that one, at every table size.
    #[test]
    fn items_sort_between_their_sentinel_and_the_next() {
        for key in [&b"a"[..], b"key:1", b"a much longer key than eight bytes"] {
            let h = hash(key);
            for log2 in [0u32, 1, 4, 10] {
                let bucket = h & ((1u64 << log2) - 1);
                assert!(sentinel_order(bucket) < item_order(h));
                for other in (0..1u64 << log2).filter(|&b| b != bucket) {
                    let o = sentinel_order(other);
                    assert!(
                        o < sentinel_order(bucket) || o > item_order(h),
                        "{key:?} {log2} {other}"
                    );
                }
            }
        }
    }

    #[test]
    fn keys_compare_as_slices_do() {
        let keys: [&[u8]; 9] = [
            b"",
            b"a",
            b"ab",
            b"abcdefgh",
            b"abcdefgi",
            b"abcdefgh1",
            b"abcdefgh2",
            b"abcdefgh12345678",
            b"b",
        ];
        for a in keys {
            for b in keys {
                assert_eq!(compare_keys(a, b), a.cmp(b), "{a:?} {b:?}");
            }
        }
    }

    /// The hash is persistent (every item's split order and the table's buckets come from
    /// it), so a faster computation must give the same words: this is the first one.
    fn hash_as_layout_3(key: &[u8]) -> u64 {
        const K: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut h = (key.len() as u64).wrapping_mul(K);
        let mut chunks = key.chunks_exact(8);
        for c in &mut chunks {
            let w = u64::from_le_bytes(c.try_into().unwrap());
            h = (h ^ w).wrapping_mul(K).rotate_left(29);
        }
        let mut tail = [0u8; 8];
        tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
        h = (h ^ u64::from_le_bytes(tail)).wrapping_mul(K);
        h ^= h >> 32;
        h = h.wrapping_mul(0xD6E8_FEB8_6659_FD93);
        h ^ (h >> 32)
    }

    #[test]
    fn hash_is_the_persistent_one() {
        let bytes: Vec<u8> = (0..=250u8).map(|i| i.wrapping_mul(151) ^ 0xA5).collect();
        for len in 0..=bytes.len() {
            let key = &bytes[..len];
            assert_eq!(hash(key), hash_as_layout_3(key), "length {len}");
        }
    }

    #[test]
    fn hash_spreads_low_bits() {
        let mut buckets = [0u32; 16];
        for i in 0..16_000u32 {
            buckets[(hash(&i.to_be_bytes()) & 15) as usize] += 1;
        }
        assert!(
            buckets.iter().all(|&n| (800..1200).contains(&n)),
            "{buckets:?}"
        );
    }
}
