//! The handle's trait faces: the writer of detectable words ([`Writer`]: its tag, the
//! acknowledgement of a previous writer, the heap's CAS and store hook) and the thread the huge
//! heap logs through ([`HugeThread`]); and its `Drop`.

use super::ThreadHandle;
use crate::dcas::{self, Tag, Writer};
use crate::huge::HugeThread;
use crate::recovery::{Op, Rec, SlabStep};
use podkv_hw::sync::{AtomicU64, Ordering::Acquire};

impl Writer for ThreadHandle {
    #[inline]
    fn tag(&self) -> Tag {
        Tag {
            tid: self.me as u16,
            ver: self.ver(),
        }
    }

    /// Records `previous.ver` in slot `previous.tid - 1`'s acknowledgement word (the help
    /// array of detectable CAS, [`dcas`]) unless it holds that or a later version: through the
    /// heap's hook, so by mCAS in an `mcas` heap. Lock-free: a CAS fails only when another
    /// acknowledger or the owner's window move changed the word.
    fn acknowledge(&self, previous: Tag) {
        if !self.recoverable || u64::from(previous.tid) > self.shared.geometry.slots() {
            return;
        }
        let word = self.shared.slots.ack(u64::from(previous.tid) - 1);
        let mut cur = word.load(Acquire);
        while let Some(new) = dcas::acknowledged(cur, previous.ver) {
            podkv_hw::cas_site!("alloc.thread.acknowledge.cas");
            match self.cas_word(word, cur, new) {
                Ok(_) => return,
                Err(seen) => cur = seen,
            }
        }
    }

    /// The heap's one hook (`Shared::cas_word`): CPU CAS, or memory-side CAS in an `mcas` heap.
    #[inline]
    fn cas_word(&self, word: &AtomicU64, current: u64, new: u64) -> Result<u64, u64> {
        self.shared.cas_word(self.slot_index, word, current, new)
    }

    /// The heap's one hook (`Shared::store_word`).
    #[inline]
    fn store_word(&self, word: &AtomicU64, value: u64) {
        self.shared.store_word(self.slot_index, word, value);
    }
}

impl HugeThread for ThreadHandle {
    fn log_huge_start(&self) {
        self.log(Rec::slab(Op::Idle, self.ver(), SlabStep::default()));
    }

    fn log_huge_block(&self, op: Op, offset: u64) {
        self.log_block(op, offset);
    }

    fn collect_huge(&self) -> usize {
        ThreadHandle::collect_huge(self)
    }
}

/// A dropped handle frees what it holds of the huge heap, gives its slabs back and releases
/// its slot.
impl Drop for ThreadHandle {
    fn drop(&mut self) {
        self.collect_huge();
        self.release();
    }
}
