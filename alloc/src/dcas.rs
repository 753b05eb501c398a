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
//! *acknowledges* `p`: if `p`'s recovery word still carries version `v` it sets the word's
//! acknowledged bit (one CAS, never waiting). The recovery words are the help array. So after
//! `p` dies, its last CAS with version `v` took effect iff the target still names `(p, v)` or
//! `p`'s recovery word is acknowledged — whoever replaced `(p, v)` acknowledged it first.
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
