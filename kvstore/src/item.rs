//! Items and bucket blocks: what bucket words name (see `index`).
//!
//! # Item layout (one block: [`SIZE_HEADER`] = 48 bytes of header, then key, then value)
//! ```text
//!  0 writer  u64  cache domain     written once before publication (# Writer domain)
//!  8 order   u64  reverse(hash)|1   written once before publication; read by anyone
//! 16 cas     u64  CAS token         written once before publication
//! 24 expiry  u32  unix s, 0 = never written once before publication
//! 28 time    u32  unix s of write   written once before publication (flush_all)
//! 32 flags   u32  client flags      written once before publication
//! 36 vlen    u32  value bytes       written once before publication
//! 40 klen    u16  key bytes         written once before publication
//! 42 kind    u8   KIND_ITEM         written once before publication
//! 43 lease   u8   LEASE_* bits      written once before publication (meta protocol state)
//! 44 claim   u32  retirer slot + 1  CAS 0 → slot + 1 by the one remover (or recoverer) retiring it
//! 48 key, then value
//! ```
//! Everything but `claim` is immutable once the item is published: a change is a new item
//! that replaces the old one by one CAS of its bucket word (see `index`), so readers need no
//! locks and no copies. That includes `lease`, memcached's per-item meta state
//! (`ITEM_TOKEN_SENT`, `ITEM_STALE`): winning a recache token or marking an item stale
//! replaces the item, so the replace CAS decides the one winner, and a concurrent touch or
//! replace can never lose a bit (see `meta`). Per-item overhead: **48 bytes** (memcached's
//! header is 48–56 B), plus the allocator's rounding to its size class.
//!
//! # Writer domain
//! An item's first word names the cache domain whose stores wrote it ([`View::domain`]):
//! the host on real hardware, one heap mapping under the model of non-coherent caches, zero
//! for none (a coherent heap, the local arena). A reader in that same domain, its header
//! line made fresh first, trusts its own cached lines of the key and value: the argument is
//! the README's (Coherence, rule 2a).
//!
//! # Bucket block layout ([`SIZE_BLOCK_HEADER`] + 16 bytes per entry)
//! ```text
//!  0 len     u32  entries           written once before publication
//!  4 claim   u32  retirer slot + 1  as an item's
//!  8 entries (tag u64, item u64)    written once before publication; tag = hash | 1 << 63
//! ```
//!
//! # Claims
//! The thread whose CAS removed an item or block from its bucket retires it; if that thread
//! dies between its CAS and the retirement, its recoverer must do it, and if a writer dies
//! between publishing a block or item and clearing its log, its recoverer cannot tell
//! "never published" from "published, then removed by a live thread". So the retirer first
//! claims the object (CAS of `claim`, 0 → slot + 1), and so does a recoverer for the dead
//! slot: exactly one of them retires it (`recover`).

use crate::index;
pub use crate::key::{compare_keys, hash};
use podkv_hw::sync::mapped::{AtomicU32, AtomicU64, Ordering};
use podkv_hw::Coherence;

/// Bytes of item header before the key.
pub const SIZE_HEADER: usize = 48;
/// Bytes of a bucket block's header before its entries.
pub const SIZE_BLOCK_HEADER: usize = 8;
/// Bytes of a bucket block entry.
pub const SIZE_ENTRY: usize = 16;
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

/// Bytes of a bucket block of `len` entries.
#[inline]
pub fn block_size(len: usize) -> usize {
    SIZE_BLOCK_HEADER + len * SIZE_ENTRY
}

/// The split order of a key's hash: bit-reversed, low bit set (the dump's order).
#[inline]
pub fn item_order(hash: u64) -> u64 {
    hash.reverse_bits() | 1
}

/// A view of nodes at `base + offset` in this process (a heap mapping or, for the local arena,
/// address zero).
#[derive(Clone, Copy, Debug)]
pub struct View {
    base: *mut u8,
    /// How the memory is kept coherent: under SWcc (`limited`, `mcas`) a writer writes an
    /// item or block back before publishing it and a reader invalidates it before reading
    /// (README, Coherence); nothing under `Hardware`.
    coherence: Coherence,
    /// The cache domain this process's loads and stores go through (# Writer domain); zero
    /// when items need no SWcc (and then no item is trusted by it).
    domain: u64,
    /// The domain's index in the store's domain table, which words and entries naming an
    /// object this view writes carry (`index`, # Bucket words); zero: none.
    hint: u64,
}

// SAFETY: a view is a base address; the memory it names is shared deliberately and accessed
// only through atomics (links) or fields immutable after publication (see the layout above).
unsafe impl Send for View {}
// SAFETY: as above.
unsafe impl Sync for View {}

impl View {
    /// A view over memory starting at `base`, kept coherent by hardware.
    pub fn new(base: *mut u8) -> View {
        View {
            base,
            coherence: Coherence::Hardware,
            domain: 0,
            hint: 0,
        }
    }

    /// The same view over memory kept coherent as `coherence` says.
    pub fn with_coherence(self, coherence: Coherence) -> View {
        View { coherence, ..self }
    }

    /// The same view, whose stores and loads go through cache domain `domain` (never zero
    /// for a heap whose items are SWcc; see # Writer domain).
    pub fn with_domain(self, domain: u64) -> View {
        View { domain, ..self }
    }

    /// The cache domain items written through this view are tagged with.
    #[inline]
    pub fn domain(self) -> u64 {
        self.domain
    }

    /// The same view, whose writes name their objects with hint `hint` (its domain's index in
    /// the store's domain table; zero: none).
    pub fn with_hint(self, hint: u64) -> View {
        debug_assert!(hint <= index::HINT_MAX);
        View { hint, ..self }
    }

    /// Object `at` as a word or block entry names one this view wrote: with its hint.
    #[inline]
    pub fn hinted(self, at: u64) -> u64 {
        index::hinted(at, self.hint)
    }

    /// Whether the word or entry `word` names an object written through this view's cache
    /// domain (its hint is this view's, never zero): what [`View::written_here`] tells from
    /// the object's first line, told by the word that names it (README, Coherence, rule 2b),
    /// so that not even that line is made fresh.
    #[inline]
    pub fn hinted_here(self, word: u64) -> bool {
        self.hint != 0 && index::hint(word) == self.hint
    }

    /// Whether item `at` was written through this view's cache domain, so that its lines in
    /// this domain's cache hold what it wrote (README, Coherence, rule 2a). Its header line
    /// must be fresh already: the word is read from it.
    #[inline]
    pub fn written_here(self, at: u64) -> bool {
        self.domain != 0 && self.u64_at(at) == self.domain
    }

    /// Writes back `len` bytes at `at` that this thread has just stored, every byte (a new
    /// item or block, written whole before publication): the SWcc writer's rule. Under the
    /// model the lines are marked dirty first, as the stores made them on real hardware
    /// (`podkv_hw::model::stored`): a block this cache last loaded with the same bytes would
    /// otherwise look clean there, and rule 2a leans on memory holding every published byte.
    #[inline]
    pub fn write_back_new(self, at: u64, len: usize) {
        self.coherence.write_back_new(self.ptr(at), len);
    }

    /// [`View::write_back_new`] without its fence: the lines start for memory now, and the
    /// publishing CAS ([`View::publish_fence`], in `buckets::Table::cas`) waits for them, so
    /// the work between (making the bucket's next block) overlaps with their trip.
    #[inline]
    pub fn write_back_new_unfenced(self, at: u64, len: usize) {
        self.coherence.write_back_new_unfenced(self.ptr(at), len);
    }

    /// Waits until the write-backs this thread started are complete: before a CAS publishes
    /// what they carry (nothing under `Hardware`).
    #[inline]
    pub fn publish_fence(self) {
        self.coherence.fence();
    }

    /// The heap's coherence mode.
    #[inline]
    pub fn coherence(self) -> Coherence {
        self.coherence
    }

    /// Whether items and blocks follow the SWcc rules here (and sit on whole lines).
    #[inline]
    pub fn is_swcc(self) -> bool {
        self.coherence.is_swcc()
    }

    /// Writes back `len` bytes at `at` (the SWcc writer's rule; nothing under `Hardware`).
    #[inline]
    pub fn write_back(self, at: u64, len: usize) {
        self.coherence.write_back(self.ptr(at), len);
    }

    /// Drops any stale copy of `len` bytes at `at` (the SWcc reader's rule).
    #[inline]
    pub fn invalidate(self, at: u64, len: usize) {
        self.coherence.invalidate(self.ptr(at), len);
    }

    /// Makes item `at` fresh before reading it: its header line (the lengths), then the
    /// rest. Items are immutable once published and, under SWcc, sit on whole lines.
    #[inline]
    pub fn fresh_item(self, at: u64) {
        if self.is_swcc() && podkv_hw::site!("store.item.invalidate") {
            self.invalidate(at, 64);
            let size = self.item_size(at);
            if size > 64 {
                self.invalidate(at + 64, size - 64);
            }
        }
    }

    /// Makes item `at`'s header line fresh (its tag, lengths, meta and the key's first 16
    /// bytes): what a bucket word naming one item is read for.
    #[inline]
    pub fn fresh_header(self, at: u64) {
        if self.is_swcc() && podkv_hw::site!("store.item.header_invalidate") {
            self.invalidate(at, 64);
        }
    }

    /// Makes the header line of the item a lookup's candidate `entry` (an item word of the
    /// bucket word `word`) names fresh, unless `word` names it directly (`buckets::entries`
    /// made that line fresh already) or this domain wrote it (rule 2b); the item's offset.
    #[inline]
    pub fn fresh_candidate(self, word: u64, entry: u64) -> u64 {
        let at = index::object(entry);
        if !index::is_item(word) && !self.hinted_here(entry) {
            self.fresh_header(at);
        }
        at
    }

    /// Makes the lines of item `at`'s key past its header line fresh, its header line being
    /// fresh already (a writer compares keys and reads meta only; [`View::fresh_value`]
    /// before it reads the value). Nothing for an item this domain wrote.
    #[inline]
    pub fn fresh_key(self, at: u64) {
        if self.is_swcc() && !self.written_here(at) && podkv_hw::site!("store.item.key_invalidate")
        {
            let end = SIZE_HEADER + self.key(at).len();
            if end > 64 {
                self.invalidate(at + 64, end - 64);
            }
        }
    }

    /// Makes the lines of item `at` past its header line fresh (after [`View::fresh_key`]:
    /// its value). Nothing for an item this domain wrote.
    #[inline]
    pub fn fresh_value(self, at: u64) {
        if self.is_swcc()
            && !self.written_here(at)
            && podkv_hw::site!("store.item.value_invalidate")
        {
            let size = self.item_size(at);
            if size > 64 {
                self.invalidate(at + 64, size - 64);
            }
        }
    }

    /// Makes bucket block `at` fresh before reading it: its header line (the length), then
    /// its entries.
    #[inline]
    pub fn fresh_block(self, at: u64) {
        if self.is_swcc() && podkv_hw::site!("store.block.invalidate") {
            self.invalidate(at, 64);
            let size = block_size(self.block_len(at));
            if size > 64 {
                self.invalidate(at + 64, size - 64);
            }
        }
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

    /// An item's split order (`reverse(hash) | 1`).
    #[inline]
    pub fn order(self, at: u64) -> u64 {
        self.u64_at(at + 8)
    }

    /// An item's tag (`index::tag` of its key's hash), from its split order.
    #[inline]
    pub fn tag(self, at: u64) -> u64 {
        self.order(at).reverse_bits()
    }

    /// The claim word of item or block `at` (see # Claims).
    #[inline]
    fn claim_word<'a>(self, at: u64, block: bool) -> &'a AtomicU32 {
        let off = if block { 4 } else { 44 };
        // SAFETY: the `u32` at 44 of a pinned item or at 4 of a pinned block, 4-aligned; only
        // ever accessed atomically after publication (written zero before).
        unsafe { &*(self.ptr(at + off) as *const AtomicU32) }
    }

    /// Claims, for `slot`, the right to retire the removed item or block `at` (CAS of its
    /// claim word 0 → `slot + 1`; see # Claims). Under SWcc the claim's line (the object's
    /// first, its own) is read fresh and written back at once; the CAS is on this host's
    /// copy, so two hosts claiming at once are told apart only by recovery's grace period
    /// (README, Coherence). For a recoverer; a remover uses [`View::claim_removed`].
    #[inline]
    pub fn claim_retire(self, at: u64, block: bool, slot: u32) -> bool {
        if self.is_swcc() && podkv_hw::site!("store.claim.invalidate") {
            self.invalidate(at, 64);
        }
        let won = self
            .claim_word(at, block)
            .compare_exchange(0, slot + 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok();
        if won && self.is_swcc() && podkv_hw::site!("store.claim.write_back") {
            self.write_back(at, 64);
        }
        won
    }

    /// [`View::claim_retire`] by the thread whose bucket CAS just removed `at`, still pinned
    /// as when it read `at`'s first line (a key it compared, or a block's entries it copied):
    /// that line holds the object as published (read fresh, or written by this cache domain:
    /// rules 2a, 2b), and nobody but a recoverer writes the claim after publication, which
    /// `recover::grace` holds off until this pin ends. So the CAS needs no fresh read first;
    /// the caller writes the claim's line back before it unpins ([`View::claim_line`]), so
    /// that a recoverer waiting for the unpin reads it.
    #[inline]
    pub fn claim_removed(self, at: u64, block: bool, slot: u32) -> bool {
        self.claim_word(at, block)
            .compare_exchange(0, slot + 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// The address and length of `at`'s claim word, for a write-back batch.
    #[inline]
    pub fn claim_line(self, at: u64, block: bool) -> (*const u8, usize) {
        ((self.claim_word(at, block) as *const AtomicU32).cast(), 4)
    }

    /// Who claimed `at`'s retirement: `slot + 1`, or zero.
    #[inline]
    pub fn retire_claim(self, at: u64, block: bool) -> u32 {
        if self.is_swcc() && podkv_hw::site!("store.claim.read_invalidate") {
            self.invalidate(at, 64);
        }
        self.claim_word(at, block).load(Ordering::Acquire)
    }

    /// Entries of bucket block `at`.
    #[inline]
    pub fn block_len(self, at: u64) -> usize {
        self.u32_at(at) as usize
    }

    /// Entry `i` of bucket block `at`: `(tag, item)`.
    #[inline]
    pub fn block_entry(self, at: u64, i: usize) -> (u64, u64) {
        let e = at + (SIZE_BLOCK_HEADER + i * SIZE_ENTRY) as u64;
        (self.u64_at(e), self.u64_at(e + 8))
    }

    /// Starts a new, unpublished bucket block of `len` entries at `at` (a fresh block of
    /// `block_size(len)` bytes); [`write_entry`](Self::write_entry) fills the entries.
    #[inline]
    pub fn write_block(self, at: u64, len: usize) {
        let p = self.ptr(at);
        // SAFETY: `at` is a fresh block this thread allocated and has not published, of
        // `block_size(len)` bytes, 8-aligned; nobody else can see it.
        unsafe {
            (p as *mut u32).write(len as u32);
            (p.add(4) as *mut u32).write(0);
        }
    }

    /// Writes entry `i` of the unpublished bucket block at `at`.
    #[inline]
    pub fn write_entry(self, at: u64, i: usize, (tag, item): (u64, u64)) {
        let e = self.ptr(at + (SIZE_BLOCK_HEADER + i * SIZE_ENTRY) as u64) as *mut u64;
        // SAFETY: as `write_block`: entry `i` lies inside the fresh block (`i < len`).
        unsafe {
            e.write(tag);
            e.add(1).write(item);
        }
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
            (p as *mut u64).write(self.domain);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An item's tag is its key's hash with the top bit set, whatever the key.
    #[test]
    fn an_items_tag_is_its_hash_with_the_top_bit() {
        for key in [&b"a"[..], b"key:1", b"a much longer key than eight bytes"] {
            let h = hash(key);
            assert_eq!(item_order(h).reverse_bits(), crate::index::tag(h));
        }
    }
}
