//! A thread's frees of blocks in other slots' slabs (CXLALLOC §3.2.1): the small blocks'
//! remote path, validated against the owner's descriptor, and the slot's pending batch
//! ([`crate::pending`]): each remote free is a plain store counting it there, and one
//! detectable CAS on the slab's remote word ([`crate::remote`]) flushes the batch when it
//! names another slab, fills, or its handle goes.

use crate::class::{is_block_start, Kind, SHIFT_SMALL_SLAB, SMALL_COUNT, SMALL_RECIP};
use crate::pending::{Pending, COUNT_MAX};
use crate::remote::{self, RemoteFree};
use crate::slab::{Meta, State, SIZE_DESC_HEAD};
use crate::{crash_point, offset::Offset, recovery::Op};
use podkv_hw::sync::Ordering::Relaxed;

role! {
    /// A thread handle freeing blocks of other slots' slabs.
    RemoteFreer
}

impl RemoteFreer<'_> {
    /// Logs and does one remote free of `offset`, a block of `kind` slab `slab`: a plain store
    /// counting it in the slot's pending batch ([`crate::pending`]), flushed first if the batch
    /// names another slab or is full.
    #[inline]
    pub(super) fn remote_free_block(&self, kind: Kind, slab: u32, offset: Offset) {
        let pending = &self.slot().pending;
        let count = match Pending::unpack(pending.load(Relaxed)) {
            Some(p) if p.slab == slab && p.kind == kind && p.count < COUNT_MAX => p.count + 1,
            Some(_) => {
                self.0.flush_remote_frees();
                1
            }
            None => 1,
        };
        self.next_ver();
        self.log_block(Op::RemoteFree, offset.0);
        crash_point!("remote_free.logged");
        let batch = Pending {
            slab,
            kind,
            count,
            ver: self.ver(),
        };
        pending.store(batch.pack(), Relaxed);
    }

    /// The remote path for a small block: validate, then one detectable decrement.
    #[inline(always)]
    pub(super) fn free_remote_small(&self, offset: Offset, slab: u32, meta: u64, rel: u64) {
        // SWcc reader rule: another thread's descriptor is read fresh, not from this cache —
        // unless this slot's pending batch already counts blocks of the slab: it was read
        // fresh when the batch began, and while the batch holds live blocks of the slab
        // nobody can re-size it. (A morph may: a block that passes as one of the class read
        // is counted as it must be; one that does not goes generic and reads afresh.) Nor
        // when every process of the heap is of this cache domain, asked after the caller
        // read `meta` from this cache (`crate::domains`).
        let meta = if self.coherence.is_swcc()
            && !self.batches(Kind::Small, slab)
            && !self.shared.one_domain()
        {
            let desc = self.small_desc(slab);
            if podkv_hw::site!("alloc.remote_free.small.invalidate") {
                desc.invalidate(self.coherence, SIZE_DESC_HEAD);
            }
            desc.meta.load(Relaxed)
        } else {
            meta
        };
        let meta = Meta::unpack(meta);
        let class = usize::from(meta.class);
        let in_slab = rel & ((1 << SHIFT_SMALL_SLAB) - 1);
        let live = matches!(
            meta.state,
            Some(State::Sized | State::Detached | State::Disowned)
        );
        let scaled = in_slab * SMALL_RECIP[class];
        let exact = is_block_start(scaled) && scaled >> 32 < u64::from(SMALL_COUNT[class]);
        if !live || !exact {
            return self.0.free_generic(offset);
        }
        self.remote_free_block(Kind::Small, slab, offset);
    }

    /// Whether this slot's pending batch counts blocks of `kind` slab `slab`.
    #[inline]
    fn batches(&self, kind: Kind, slab: u32) -> bool {
        Pending::unpack(self.slot().pending.load(Relaxed))
            .is_some_and(|p| p.slab == slab && p.kind == kind)
    }

    /// `ThreadHandle::flush_remote_frees`.
    #[inline(always)]
    pub(super) fn flush_remote_frees(&self) {
        let pending = &self.slot().pending;
        let Some(batch) = Pending::unpack(pending.load(Relaxed)) else {
            return;
        };
        let heap = *self.shared.slabs.get(batch.kind);
        self.next_ver();
        self.log_step(Op::Flush, &heap, batch.slab, 0, |_| {});
        crash_point!("flush.logged");
        let word = heap.remote(batch.slab);
        let took = remote::free_remote_n(word, batch.count, self.0);
        crash_point!("flush.counted");
        pending.store(0, Relaxed);
        crash_point!("flush.cleared");
        if took == RemoteFree::TookSlab {
            self.slabs().took_slab(&heap, batch.slab);
        }
    }
}
