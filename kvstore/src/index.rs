//! The index protocol: copy-on-write buckets whose 8-byte words are the only shared CAS
//! targets. Written over [`Memory`] so that `tests/loom.rs` checks it as it is.
//!
//! # Bucket words
//! A bucket's word (in the store's HWcc area, `buckets`) is one of:
//! - `0`: the bucket is not made yet; its items live in its nearest made ancestor;
//! - [`EMPTY`]: made, no item;
//! - `item | TAG_ITEM`: made, one item, named directly (no block, no extra miss);
//! - `block`: made, an immutable **bucket block** (SWcc) of `(tag, item)` entries;
//! - any of the last three `| FROZEN | bit << SHIFT_SPLIT`: being split (see # Growth).
//!
//! A word naming an item or block, and a block entry's item word, carry the object's *hint*
//! (bits [`SHIFT_HINT`]..52): which cache domain wrote it, as an index into the store's
//! domain table (`layout::DomainTable`; 0: not told). A reader in that domain trusts its
//! cache for the object's lines without making even the first one fresh (the store's
//! README, Coherence, rule 2b). The index itself never reads it: [`object`] drops it.
//!
//! Every made word also carries its bucket's *split count* (bits [`SHIFT_DEPTH`]..58, mod
//! 64): a split's replacement of the parent's word raises it, and every other write keeps
//! it. Without it a split that leaves the parent's entries as they were (an empty bucket, or
//! one item that stays) would put back the very word it froze, and a writer that read that
//! word before the split would then win its CAS for a key that now belongs to the child.
//!
//! Blocks and items are immutable once published: a write builds the bucket's next block,
//! writes it back, and publishes it by one CAS of the word. The CAS winner is the one retirer
//! of what the CAS removed (the old block, the replaced or deleted item).
//!
//! # Growth (lazy splits)
//! Bucket `c = p + 2^j` (`p < 2^j`, its *parent*) is made on the first write that needs it:
//! the writer freezes `p`'s word (CAS `w → w | FROZEN | j << SHIFT_SPLIT`), installs `c`'s
//! word (CAS `0 → entries of w whose tag ≡ c mod 2^(j+1)`), then replaces `p`'s word (CAS
//! frozen → the other entries) and retires `w`'s block. A frozen word names its split, so
//! any thread that meets it finishes the split ([`finish_split`]) before writing; readers
//! read a frozen word's entries as they are (the items are all there).
//!
//! A reader of an unmade bucket reads its nearest made ancestor, then checks that the child
//! on its path is still unmade: a split installs the child before it replaces the parent, so
//! the parent's word it read held the key's items ([`read`]).
//!
//! Readers and writers work at the table's size as they last read it, and the table may
//! double meanwhile, after which splits move keys into buckets past that size. So both read
//! the size again after they read their bucket's word, and start over if it grew: a split
//! past the size they used is made only after the size grew (by whoever grew it or met it
//! grown), so a word read before that second look holds the key's items. Only the second
//! look must be fresh: the first may be any size the table had (a cached, maybe stale
//! copy of the word: in an `mcas` heap a fresh load evicts the line), since a first look
//! that differs from the second one starts over at the second one's size.

use podkv_hw::sync::AtomicU64;

/// Tag bit of a word naming one item directly.
pub const TAG_ITEM: u64 = 1;
/// The word is frozen for a split (see # Growth).
pub const FROZEN: u64 = 2;
/// A made bucket without items.
pub const EMPTY: u64 = 4;
/// Bits 58.. of a frozen word: the split's bit `j`.
pub const SHIFT_SPLIT: u32 = 58;
/// Bits 52..58 of a made word: the bucket's split count, mod 64 (see # Bucket words).
pub const SHIFT_DEPTH: u32 = 52;
/// The split count's bits.
const MASK_DEPTH: u64 = ((1 << SHIFT_SPLIT) - 1) & !((1 << SHIFT_DEPTH) - 1);
/// Bits 46..52 of a word or entry naming an object: its hint (see # Bucket words).
pub const SHIFT_HINT: u32 = 46;
/// The hint's bits.
const MASK_HINT: u64 = ((1 << SHIFT_DEPTH) - 1) & !((1 << SHIFT_HINT) - 1);
/// The largest hint.
pub const HINT_MAX: u64 = MASK_HINT >> SHIFT_HINT;
/// The object (block or item offset) bits of a word: heap offsets under 64 TiB (a heap is
/// at most 32 TiB of address space).
pub const MASK_AT: u64 = ((1 << SHIFT_HINT) - 1) & !7;
/// Bit 63 of every tag: a tag is never zero.
const TAG_TOP: u64 = 1 << 63;

/// An item's tag in a block: its key's hash with the top bit set.
#[inline]
pub fn tag(hash: u64) -> u64 {
    hash | TAG_TOP
}

/// The block or item a word names (zero for `0` and [`EMPTY`]).
#[inline]
pub fn object(word: u64) -> u64 {
    word & MASK_AT
}

/// The hint of a word or entry naming an object (see # Bucket words; 0: none).
#[inline]
pub fn hint(word: u64) -> u64 {
    (word & MASK_HINT) >> SHIFT_HINT
}

/// `object` with hint `hint` (at most [`HINT_MAX`]).
#[inline]
pub fn hinted(object: u64, hint: u64) -> u64 {
    debug_assert!(object & !MASK_AT == 0 && hint <= HINT_MAX);
    object | hint << SHIFT_HINT
}

/// Whether the word names one item directly.
#[inline]
pub fn is_item(word: u64) -> bool {
    word & TAG_ITEM != 0
}

/// Whether the word names a block.
#[inline]
pub fn is_block(word: u64) -> bool {
    word & (TAG_ITEM | EMPTY) == 0 && object(word) != 0
}

/// Whether the word is frozen for a split.
#[inline]
pub fn is_frozen(word: u64) -> bool {
    word & FROZEN != 0
}

/// A frozen word as it was before the freeze, split count included (other words unchanged).
#[inline]
pub fn unfrozen(word: u64) -> u64 {
    word & !FROZEN & ((1 << SHIFT_SPLIT) - 1)
}

/// For a word of bucket `b`: the child bucket its split installs and the mask that tells the
/// child's tags (`tag & mask == child`), if the word is frozen.
#[inline]
pub fn split_of(b: u64, word: u64) -> Option<(u64, u64)> {
    is_frozen(word).then(|| {
        let j = (word >> SHIFT_SPLIT) as u32;
        (b | 1u64 << j, (2u64 << j) - 1)
    })
}

/// The bucket a bucket is split from: its highest set bit cleared.
#[inline]
pub fn parent(bucket: u64) -> u64 {
    if bucket == 0 {
        0
    } else {
        bucket & !(1u64 << (63 - bucket.leading_zeros()))
    }
}

/// Bucket `hash` falls in at `2^log2` buckets.
#[inline]
pub fn bucket_of(hash: u64, log2: u32) -> u64 {
    hash & ((1u64 << log2) - 1)
}

/// What a new word is made of: the entries of `from` that `keep` admits, with `swap`'s old
/// item replaced by its new one and `add` appended.
#[derive(Clone, Copy, Debug)]
pub struct Change {
    /// The word whose entries the new word starts from (unfrozen or frozen).
    pub from: u64,
    /// Entries whose tag is `tag & mask == keep.1` survive (`keep.0 == 0`: all).
    pub keep: (u64, u64),
    /// Entries whose tag is `tag & mask == leave.1` do not survive (`leave.0 == 0`: none).
    pub leave: (u64, u64),
    /// `(old item, new item)`: the entry naming the old item names the new one instead.
    pub swap: Option<(u64, u64)>,
    /// The item (and its tag) to drop.
    pub drop: u64,
    /// `(tag, item)` to add.
    pub add: Option<(u64, u64)>,
    /// The caller read `from`'s entries fresh (`Memory::entries`) under the epoch pin it
    /// makes the new word in: `Memory::make` need not make them fresh again (a published
    /// object is immutable until it is reclaimed, which the pin holds off).
    pub fresh: bool,
}

impl Change {
    /// `from` unchanged in entries (a start to set fields on).
    pub fn of(from: u64) -> Change {
        Change {
            from,
            keep: (0, 0),
            leave: (0, 0),
            swap: None,
            drop: 0,
            add: None,
            fresh: false,
        }
    }

    /// [`Change::of`] a word whose entries the caller just read fresh (`find`) under the
    /// epoch pin it makes the new word in ([`Change::fresh`]).
    pub fn read(from: u64) -> Change {
        Change {
            fresh: true,
            ..Change::of(from)
        }
    }

    /// Whether the entry `(tag, item)` of `from` survives.
    #[inline]
    pub fn keeps(&self, tag: u64, item: u64) -> bool {
        item != self.drop
            && (self.keep.0 == 0 || tag & self.keep.0 == self.keep.1)
            && (self.leave.0 == 0 || tag & self.leave.0 != self.leave.1)
    }
}

/// The word that publishes `change`: the object [`Memory::make`] made for it, with the
/// split count of the word it replaces. Every write's next word comes from here.
#[inline]
pub fn make<M: Memory>(m: &M, change: &Change) -> Result<u64, M::Error> {
    Ok(m.make(change)? | change.from & MASK_DEPTH)
}

/// The memory the index lives in: bucket words (HWcc), blocks and items (SWcc), and the
/// store's allocation, logging and retirement of blocks.
pub trait Memory {
    /// Why a block could not be made.
    type Error;
    /// Bucket `b`'s word, if its segment is made (`make`: make the segment if needed; `None`
    /// then means there is no room for it).
    fn bucket(&self, b: u64, make: bool) -> Option<&AtomicU64>;
    /// A fresh load of a bucket word.
    fn load(&self, word: &AtomicU64) -> u64;
    /// The CAS of a bucket word (through the heap's hook); whether it succeeded.
    fn cas(&self, word: &AtomicU64, old: u64, new: u64) -> bool;
    /// Calls `f(tag, item)` for each entry of the word's object, read fresh, while it returns
    /// true; `item` is the entry's item word, hint included ([`object`] is the item).
    fn entries(&self, word: u64, f: impl FnMut(u64, u64) -> bool);
    /// Makes the word for `change` (zero entries: [`EMPTY`]; one: the item itself; more: a
    /// new block, written back and logged as this slot's unpublished block).
    fn make(&self, change: &Change) -> Result<u64, Self::Error>;
    /// Logs that the next CAS replaces `old` (its block, if any, is retired by the winner).
    fn replacing(&self, old: u64);
    /// After the CAS that was to replace `old` by `new`: retires `old`'s block if `won`,
    /// else frees `new`'s block (never published); clears the logs of both.
    fn replaced(&self, old: u64, new: u64, won: bool);
}

/// The nearest made bucket for `hash` and its word, at `2^first` buckets (a size the table
/// had, maybe stale), then checked by a fresh look, `log2()`, after the word's load, which
/// starts over at its size if they differ (see # Growth): what a reader reads. Never writes.
#[inline]
pub fn read<M: Memory>(m: &M, hash: u64, first: u32, log2: impl Fn() -> u32) -> (u64, u64) {
    let mut size = first;
    loop {
        let found = read_at(m, hash, size);
        let now = log2();
        if now == size {
            return found;
        }
        size = now;
    }
}

/// [`read`] at `2^log2` buckets.
#[inline]
fn read_at<M: Memory>(m: &M, hash: u64, log2: u32) -> (u64, u64) {
    'again: loop {
        let mut b = bucket_of(hash, log2);
        let mut child: Option<u64> = None;
        loop {
            if let Some(word) = m.bucket(b, false) {
                let w = m.load(word);
                if w != 0 {
                    if let Some(c) = child {
                        if m.bucket(c, false).is_some_and(|cw| m.load(cw) != 0) {
                            continue 'again;
                        }
                    }
                    return (b, w);
                }
            }
            if b == 0 {
                return (0, EMPTY);
            }
            child = Some(b);
            b = parent(b);
        }
    }
}

/// The bucket word a write for `hash` changes and its value now (made, not frozen), at
/// `2^first` buckets (a size the table had), checked by a fresh look, `log2()`, after the
/// word's load, which starts over at its size if they differ (see # Growth), making
/// the bucket first (splitting its parent) and finishing any split met on the way. When a
/// segment or block cannot be made for want of room, the write goes to the nearest made
/// ancestor instead (a correct place: the unmade bucket's items live there).
///
/// The caller publishes by a CAS from the value returned: a split of the bucket after this
/// look changes the word (the split count), so that CAS fails and the write starts over.
pub fn write_target<M: Memory>(
    m: &M,
    hash: u64,
    first: u32,
    log2: impl Fn() -> u32,
) -> Result<(&AtomicU64, u64), M::Error> {
    let mut size = first;
    loop {
        let mut b = bucket_of(hash, size);
        let found = loop {
            match made(m, b)? {
                Some(found) => break found,
                None => b = parent(b),
            }
        };
        let now = log2();
        if now == size {
            return Ok(found);
        }
        size = now;
    }
}

/// Bucket `b`'s word and value, made and unfrozen; `None` when its segment cannot be made.
fn made<M: Memory>(m: &M, b: u64) -> Result<Option<(&AtomicU64, u64)>, M::Error> {
    let Some(word) = m.bucket(b, true) else {
        return Ok(None);
    };
    loop {
        let w = m.load(word);
        if w == 0 {
            if split(m, b)?.is_none() {
                return Ok(None);
            }
        } else if is_frozen(w) {
            finish_split(m, b, word, w)?;
        } else {
            return Ok(Some((word, w)));
        }
    }
}

/// Makes bucket `c` (≠ 0) from its parent: freeze, install, replace. `None` when the
/// parent's segment cannot be made (then nor can the child be written).
fn split<M: Memory>(m: &M, c: u64) -> Result<Option<()>, M::Error> {
    let p = parent(c);
    let Some((pword, pw)) = made(m, p)? else {
        return Ok(None);
    };
    let Some(cword) = m.bucket(c, true) else {
        return Ok(None);
    };
    if m.load(cword) != 0 {
        return Ok(Some(()));
    }
    let j = 63 - c.leading_zeros();
    let frozen = pw | FROZEN | u64::from(j) << SHIFT_SPLIT;
    if m.cas(pword, pw, frozen) {
        finish_split(m, p, pword, frozen)?;
    }
    Ok(Some(()))
}

/// Finishes the split that froze bucket `p`'s word as `frozen`: installs the child's word
/// (unless done), then replaces the parent's (unless done). Any pinned thread may run it.
pub fn finish_split<M: Memory>(
    m: &M,
    p: u64,
    pword: &AtomicU64,
    frozen: u64,
) -> Result<(), M::Error> {
    let Some((c, mask)) = split_of(p, frozen) else {
        return Ok(());
    };
    let from = unfrozen(frozen);
    let cword = m
        .bucket(c, false)
        .expect("the splitter made the child's segment before it froze the parent");
    // Whether this call read `from`'s entries fresh, making the child's word: the parent's,
    // made under the same pin, need not make them fresh again (`Change::fresh`).
    let mut read = false;
    if m.load(cword) == 0 {
        let mut change = Change::of(from);
        change.keep = (mask, c);
        let new = make(m, &change)?;
        read = true;
        m.replacing(0);
        let won = m.cas(cword, 0, new);
        m.replaced(0, new, won);
    }
    if m.load(pword) == frozen {
        // The parent keeps all but the child's entries: it also holds the items of its
        // other children that are not made yet (a split at bit `j` may come before one at a
        // lower bit), which readers of those look for here.
        let mut change = Change::of(from);
        change.leave = (mask, c);
        change.fresh = read;
        let depth = (from & MASK_DEPTH).wrapping_add(1 << SHIFT_DEPTH) & MASK_DEPTH;
        let new = m.make(&change)? | depth;
        // The entries stay (they moved); only the old block goes, with `from`.
        m.replacing(from);
        let won = m.cas(pword, frozen, new);
        m.replaced(from, new, won);
    }
    Ok(())
}

/// The item whose key `same` accepts among the entries of `word` tagged `tag` (0: none).
/// `same` gets each candidate's item word as the entry holds it (with its hint: [`object`]
/// is the item).
#[inline]
pub fn find<M: Memory>(m: &M, word: u64, tag: u64, mut same: impl FnMut(u64) -> bool) -> u64 {
    let mut found = 0;
    m.entries(word, |t, item| {
        if t == tag && same(item) {
            found = object(item);
            return false;
        }
        true
    });
    found
}

/// Calls `f(tag, item)` for each entry that bucket `b`'s word `word` *owns*, while it
/// returns true: all its entries, except, in a frozen word whose split already installed
/// the child, the child's (they are the child's now, and may be retired there).
pub fn owned<M: Memory>(m: &M, b: u64, word: u64, mut f: impl FnMut(u64, u64) -> bool) {
    let skip =
        split_of(b, word).filter(|&(c, _)| m.bucket(c, false).is_some_and(|cw| m.load(cw) != 0));
    m.entries(word, |tag, item| match skip {
        Some((c, mask)) if tag & mask == c => true,
        _ => f(tag, object(item)),
    });
}

/// Bucket `b` and its ancestors, nearest first.
pub fn chain(b: u64) -> impl Iterator<Item = u64> {
    let mut next = Some(b);
    std::iter::from_fn(move || {
        let b = next?;
        next = (b != 0).then(|| parent(b));
        Some(b)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hint_rides_beside_the_object_and_every_other_field() {
        let at = (1u64 << 45) - 64; // the last line of a 32 TiB heap
        for hint in [0, 1, 17, HINT_MAX] {
            let word = hinted(at, hint) | TAG_ITEM | 5 << SHIFT_DEPTH;
            assert_eq!(object(word), at);
            assert_eq!(super::hint(word), hint);
            assert!(is_item(word));
            let frozen = word | FROZEN | 9 << SHIFT_SPLIT;
            assert_eq!(unfrozen(frozen), word);
            assert_eq!(super::hint(frozen), hint);
            assert_eq!(object(frozen), at);
        }
        assert_eq!(super::hint(EMPTY), 0);
        assert!(is_block(hinted(64, 3)));
    }

    // Every heap offset fits below the hint.
    const _: () = assert!(podkv_alloc::layout::SIZE_RESERVATION_MAX <= 1 << SHIFT_HINT);
}
