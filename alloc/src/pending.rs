//! Batched remote frees: a slot's `pending` word.
//!
//! A remote free only counts: it takes one from the slab's remote word ([`crate::remote`]),
//! and the block comes back when the whole slab does. So a slot freeing a run of blocks of
//! one slab (a consumer draining what one producer allocated, in order) need not touch the
//! shared word for each: it counts them in its own `pending` word with a plain store, and
//! *flushes* the count with one detectable CAS when the next remote free names another slab,
//! when the count reaches [`COUNT_MAX`], or when the slot is given back. Every remote free
//! becomes a plain store and one CAS serves a run (CXLALLOC §5.4 notes mCAS xmalloc drops to
//! 1% of hardware mode because every remote free is an mCAS; batching is the remedy).
//!
//! # The word
//! `slab + 1` (bits 0..24; zero: nothing pending), the slab heap (bit 24: large), `count` (bits 32..48),
//! and the version (bits 48..64) of the remote-free step that stored it — so recovery can
//! tell whether a logged remote free reached the word.
//!
//! # What a batch holds back
//! Blocks counted here are free (the application gave them up) but their slab still counts
//! them live until the flush: a slab whose last blocks wait here is taken by the flush, not
//! by the free. At most one slab per slot waits so, and a slot's release flushes it;
//! [`crate::Heap::check`] counts pending blocks as free.

use crate::class::Kind;

/// Most remote frees one pending word counts before it is flushed.
pub const COUNT_MAX: u32 = u16::MAX as u32;

/// A decoded pending word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pending {
    /// The slab whose blocks are counted.
    pub slab: u32,
    /// The slab heap it lies in.
    pub kind: Kind,
    /// Remote frees counted (at least one).
    pub count: u32,
    /// Version of the remote-free step that stored this word.
    pub ver: u16,
}

impl Pending {
    /// Packs into a nonzero word.
    pub const fn pack(self) -> u64 {
        debug_assert!(self.slab < (1 << 24) - 1 && self.count >= 1 && self.count <= COUNT_MAX);
        (self.slab as u64 + 1)
            | (self.kind as u64) << 24
            | (self.count as u64) << 32
            | (self.ver as u64) << 48
    }

    /// Unpacks a word; `None` when nothing is pending.
    pub const fn unpack(word: u64) -> Option<Pending> {
        let slab = word & 0xFF_FFFF;
        if slab == 0 {
            return None;
        }
        Some(Pending {
            slab: slab as u32 - 1,
            kind: if word >> 24 & 1 == 1 {
                Kind::Large
            } else {
                Kind::Small
            },
            count: (word >> 32) as u32 & 0xFFFF,
            ver: (word >> 48) as u16,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_round_trips_and_zero_is_nothing() {
        assert_eq!(Pending::unpack(0), None);
        for p in [
            Pending {
                slab: 0,
                kind: Kind::Small,
                count: 1,
                ver: 0,
            },
            Pending {
                slab: (1 << 24) - 2,
                kind: Kind::Large,
                count: COUNT_MAX,
                ver: u16::MAX,
            },
        ] {
            assert_eq!(Pending::unpack(p.pack()), Some(p));
        }
    }
}
