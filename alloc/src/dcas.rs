//! Detectable CAS (CXLALLOC §3.4.2, after Attiya et al.): a shared word names its last writer,
//! so a thread recovering a dead one can tell whether the dead thread's CAS took effect.
//!
//! # The word
//! Every word that several threads change by CAS (the global free lists' heads, the heaps'
//! lengths, the slabs' remote-free counters) is
//!
//! ```text
//! payload (bits 0..32) | writer tid (32..48) | writer version (48..64)
//! ```
//!
//! where the tid is the writer's thread slot plus one (zero: nobody wrote it yet, so a
//! zero-filled heap is valid) and the version is the writer's count of detectable operations
//! (mod 2^16), which it also logs in its recovery word before the CAS. The (tid, version) pair
//! changes on every successful CAS, so it doubles as the ABA tag of the Treiber stacks.
//!
//! # The help array
//! Before a thread overwrites a word last written by another thread `p` with version `v`, it
//! *acknowledges* `p`: it records `v` in `p`'s acknowledgement word (one CAS, never waiting).
//! Those words, one per thread slot at the end of the HWcc region (`Layout::slot_acks`), are
//! the help array. So after `p` dies, its last CAS with version `v` took effect iff the target
//! still names `(p, v)` or `p`'s acknowledgement word says `v` — whoever replaced `(p, v)`
//! acknowledged it first.
//!
//! An acknowledgement word is a multi-writer word like the targets, so it changes only through
//! [`Writer::cas_word`] (CPU CAS, or mCAS in an `mcas` heap), never by the owner's plain
//! stores: its recovery word stays a single-writer word on the fast paths.
//!
//! # The acknowledgement word
//! ```text
//! acked version (bits 0..16) | ACKED (16) | window base (32..48)
//! ```
//! Acknowledgements only move forward: one for an older version than the word holds is
//! dropped, so a slow acknowledger cannot overwrite a newer one that recovery needs. "Older"
//! is measured from the *window base*, which the owner keeps `WINDOW..2 * WINDOW` versions
//! behind its own ([`ack_base`]; set when a slot is claimed and every `WINDOW` versions after,
//! through the same hook): a version outside `base .. base + 2 * WINDOW` belongs to a tag older
//! than the owner's recent operations (a word it last wrote long ago) and is not recorded.
//!
//! Versions wrap after 65,536 operations of one thread; recovery also checks the payload where
//! that tells success apart (a pop that took effect moved the head off the popped slab), so a
//! stale word from 65,536 operations ago is not taken for success.

use podkv_hw::sync::{AtomicU64, Ordering};

/// A writer's identity in a detectable word: thread slot plus one, and version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag {
    /// Thread slot plus one (zero: nobody).
    pub tid: u16,
    /// The writer's operation version.
    pub ver: u16,
}

/// The payload of a detectable word.
#[inline]
pub const fn payload(word: u64) -> u32 {
    word as u32
}

/// The last writer of a detectable word.
#[inline]
pub const fn tag(word: u64) -> Tag {
    Tag {
        tid: (word >> 32) as u16,
        ver: (word >> 48) as u16,
    }
}

/// A detectable word holding `payload`, written by `tag`.
#[inline]
pub const fn pack(payload: u32, tag: Tag) -> u64 {
    payload as u64 | (tag.tid as u64) << 32 | (tag.ver as u64) << 48
}

/// Versions per step of an acknowledgement word's window (its span is twice this).
pub const WINDOW: u16 = 0x4000;
/// Set in an acknowledgement word that records a version.
const ACKED: u64 = 1 << 16;

/// The window base an owner at version `ver` keeps in its acknowledgement word: `ver` lies
/// `WINDOW..2 * WINDOW` versions after it.
#[inline]
pub const fn ack_base(ver: u16) -> u16 {
    (ver & !(WINDOW - 1)).wrapping_sub(WINDOW)
}

/// Whether acknowledgement word `word` records version `ver`.
#[inline]
pub const fn is_acked(word: u64, ver: u16) -> bool {
    word & ACKED != 0 && word as u16 == ver
}

/// Where `ver` lies in `word`'s window (`None`: outside it).
#[inline]
const fn in_window(word: u64, ver: u16) -> Option<u16> {
    let at = ver.wrapping_sub((word >> 32) as u16);
    if at < 2 * WINDOW {
        Some(at)
    } else {
        None
    }
}

/// Acknowledgement word `word` after acknowledging `ver`, or `None` when it stays as it is:
/// it already records `ver` or a later version, or `ver` lies outside its window.
#[inline]
pub const fn acknowledged(word: u64, ver: u16) -> Option<u64> {
    let Some(at) = in_window(word, ver) else {
        return None;
    };
    if word & ACKED != 0 {
        if let Some(held) = in_window(word, word as u16) {
            if held >= at {
                return None;
            }
        }
    }
    Some(word & !0x1_FFFF | ACKED | ver as u64)
}

/// Acknowledgement word `word` with window base `base`, keeping the version it records if
/// that lies in the new window.
#[inline]
pub const fn rebased(word: u64, base: u16) -> u64 {
    let moved = (base as u64) << 32;
    if word & ACKED != 0 && in_window(moved, word as u16).is_some() {
        moved | (word & 0x1_FFFF)
    } else {
        moved
    }
}

/// The writer side of detectable CAS: who writes, how it acknowledges the word's previous
/// writer before replacing it, and how it changes a multi-writer word.
///
/// [`Writer::cas_word`] and [`Writer::store_word`] are the one hook every change of a
/// multi-writer word (global list heads, heap lengths, remote words) goes through. By default
/// they are CPU atomics, right wherever the word is hardware coherent (`hardware` and `limited`
/// heaps, and tests); a thread of an `mcas` heap overrides them with memory-side CAS.
pub trait Writer {
    /// This writer's tag for the operation under way.
    fn tag(&self) -> Tag;
    /// Acknowledges `previous` (the last writer of a word about to be replaced): called only
    /// when it is another thread.
    fn acknowledge(&self, previous: Tag);

    /// Replaces `word` by `new` if it holds `current`: `Ok(current)`, or `Err(seen)`.
    #[inline]
    fn cas_word(&self, word: &AtomicU64, current: u64, new: u64) -> Result<u64, u64> {
        cpu_cas(word, current, new)
    }

    /// Writes `value` to `word`, which no other thread may change concurrently by contract of
    /// the caller, ordered after every earlier change of it.
    #[inline]
    fn store_word(&self, word: &AtomicU64, value: u64) {
        cpu_store(word, value);
    }
}

/// [`Writer::cas_word`] by CPU atomics (a hardware-coherent word).
#[inline]
pub fn cpu_cas(word: &AtomicU64, current: u64, new: u64) -> Result<u64, u64> {
    word.compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire)
}

/// [`Writer::store_word`] by a CPU release store (a hardware-coherent word).
#[inline]
pub fn cpu_store(word: &AtomicU64, value: u64) {
    word.store(value, Ordering::Release);
}

/// One detectable CAS attempt: replaces `current` (as loaded) with `new_payload` tagged by
/// `writer`, acknowledging the previous writer first. Returns the word seen on failure.
#[inline]
pub fn cas(
    word: &AtomicU64,
    current: u64,
    new_payload: u32,
    writer: &impl Writer,
) -> Result<u64, u64> {
    let me = writer.tag();
    let previous = tag(current);
    if previous.tid != 0 && previous.tid != me.tid {
        writer.acknowledge(previous);
    }
    writer.cas_word(word, current, pack(new_payload, me))
}

/// A writer with no recovery log: tags words (keeping the ABA protection) but acknowledges
/// nobody. For unit tests and models of the protocols built on detectable words.
#[derive(Clone, Copy, Debug)]
pub struct Untracked(pub Tag);

impl Writer for Untracked {
    fn tag(&self) -> Tag {
        self.0
    }
    fn acknowledge(&self, _previous: Tag) {}
}

#[cfg(all(test, not(podkv_loom)))]
mod tests {
    use super::*;
    use std::cell::Cell;

    struct Logged {
        me: Tag,
        acked: Cell<Option<Tag>>,
    }

    impl Writer for Logged {
        fn tag(&self) -> Tag {
            self.me
        }
        fn acknowledge(&self, previous: Tag) {
            self.acked.set(Some(previous));
        }
    }

    #[test]
    fn replacing_another_writer_acknowledges_it_first() {
        let word = AtomicU64::new(pack(7, Tag { tid: 3, ver: 9 }));
        let me = Logged {
            me: Tag { tid: 5, ver: 1 },
            acked: Cell::new(None),
        };
        let cur = word.load(Ordering::Relaxed);
        assert!(cas(&word, cur, 8, &me).is_ok());
        assert_eq!(me.acked.get(), Some(Tag { tid: 3, ver: 9 }));
        let now = word.load(Ordering::Relaxed);
        assert_eq!((payload(now), tag(now)), (8, Tag { tid: 5, ver: 1 }));
    }

    #[test]
    fn acknowledgements_move_forward_inside_the_window_only() {
        let owner_ver = 40_000u16;
        let word = rebased(0, ack_base(owner_ver));
        assert_eq!(ack_base(owner_ver), 0x4000);
        let acked = acknowledged(word, owner_ver).unwrap();
        assert!(is_acked(acked, owner_ver));
        assert_eq!(acknowledged(acked, owner_ver), None, "already recorded");
        assert_eq!(
            acknowledged(acked, owner_ver - 5),
            None,
            "older than recorded"
        );
        let later = acknowledged(acked, owner_ver + 3).unwrap();
        assert!(is_acked(later, owner_ver + 3));
        // A tag from long before the window (a word the owner wrote 30,000 operations ago)
        // leaves the word alone, where an unordered write would lose the recent one.
        assert_eq!(acknowledged(later, owner_ver.wrapping_sub(30_000)), None);
        // Rebasing keeps a recorded version inside the new window and drops one outside.
        assert!(is_acked(
            rebased(later, ack_base(owner_ver + 3)),
            owner_ver + 3
        ));
        assert_eq!(
            rebased(later, ack_base(owner_ver.wrapping_add(40_000))) & ACKED,
            0
        );
        // Every version the owner can be at lies in the window it keeps, across the wrap.
        for ver in [0u16, 1, WINDOW - 1, WINDOW, u16::MAX] {
            assert!(
                acknowledged(rebased(0, ack_base(ver)), ver).is_some(),
                "{ver}"
            );
        }
    }

    #[test]
    fn own_and_fresh_words_need_no_acknowledgement() {
        let me = Logged {
            me: Tag { tid: 5, ver: 2 },
            acked: Cell::new(None),
        };
        let word = AtomicU64::new(0);
        assert!(cas(&word, 0, 1, &me).is_ok());
        let cur = word.load(Ordering::Relaxed);
        assert!(cas(&word, cur, 2, &me).is_ok());
        assert_eq!(me.acked.get(), None);
        assert_eq!(cas(&word, cur, 3, &me), Err(pack(2, me.me)));
    }
}
