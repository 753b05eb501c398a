//! The thread-slot table: every slot's record ([`Slot`]), its HWcc owner and acknowledgement
//! words, claiming and giving slots back, their owners' liveness, and this process's leases.
//!
//! # Sharing
//! - owner words (HWcc): changed only by [`Slots::try_claim`] (CAS on this process's line)
//!   and [`Slots::release`] (CAS on the slot's line), through the heap's mCAS hook; read by
//!   anyone.
//! - acknowledgement words (HWcc): the help array of detectable CAS ([`crate::dcas`]),
//!   changed only by CAS through the hook.
//! - a slot's own words: written by its owner only; written back before it gives the slot
//!   back, invalidated by the next claimer (SWcc).
//! - `held` (process-local): the slots this process's threads hold, for the lease renewer.

use crate::file::Words;
use crate::layout::{Geometry, Layout};
use crate::mcas::{cas_as_process, HeapMcas};
use crate::process::{Liveness, SlotLife};
use crate::slot::{Owner, Slot, SIZE_SLOT};
use podkv_hw::sync::{AtomicU64, Ordering};
use podkv_hw::Coherence;
use std::sync::{Arc, Mutex};

/// The thread slots of an open heap, as this process sees them.
pub(crate) struct Slots {
    words: Words,
    /// Offsets of the first slot, owner word and acknowledgement word.
    slots_at: u64,
    owners_at: u64,
    acks_at: u64,
    count: u64,
    liveness: Liveness,
    /// How long an owner's lease lasts after each renewal (this process's configuration).
    pub(crate) lease: std::time::Duration,
    coherence: Coherence,
    /// An `mcas` heap's hook, through which owner and acknowledgement words change.
    mcas: Option<Arc<HeapMcas>>,
    /// Slots this process holds, whose leases its renewer keeps fresh (lease mode only).
    held: Mutex<Vec<u32>>,
}

impl Slots {
    pub(crate) fn new(
        geometry: &Geometry,
        layout: &Layout,
        words: Words,
        mcas: Option<Arc<HeapMcas>>,
        lease: std::time::Duration,
    ) -> Slots {
        Slots {
            words,
            slots_at: layout.slots,
            owners_at: layout.slot_owners,
            acks_at: layout.slot_acks,
            count: geometry.slots(),
            liveness: geometry.liveness,
            lease,
            coherence: geometry.coherence,
            mcas,
            held: Mutex::new(Vec::new()),
        }
    }

    /// Thread slot `i`.
    pub(crate) fn slot(&self, i: u64) -> &Slot {
        assert!(i < self.count);
        let at = self.words.at(self.slots_at + i * SIZE_SLOT as u64);
        // SAFETY: slot `i` lies in the slots region, which is backed at open and mapped for the
        // heap's lifetime; a slot is plain atomics, valid for any bytes.
        unsafe { &*(at as *const Slot) }
    }

    /// Thread slot `i`'s acknowledgement word: the help array of detectable CAS, in the HWcc
    /// region and changed only through the heap's CAS hook (`ThreadHandle::acknowledge`).
    pub(crate) fn ack(&self, i: u64) -> &AtomicU64 {
        assert!(i < self.count);
        self.words.word(self.acks_at + 8 * i)
    }

    /// Thread slot `i`'s owner word ([`Owner`] packed, zero: free), in the HWcc region.
    pub(crate) fn owner_word(&self, i: u64) -> &AtomicU64 {
        assert!(i < self.count);
        self.words.word(self.owners_at + 8 * i)
    }

    /// Takes slot `i` for `owner` if its owner word holds `from`: see `Heap::try_claim_slot`.
    pub(crate) fn try_claim(&self, i: u64, from: u64, owner: Owner) -> bool {
        let word = self.owner_word(i);
        if word.load(Ordering::Acquire) != from {
            return false;
        }
        let slot = self.slot(i);
        let coherence = self.coherence;
        slot.lease
            .store(crate::process::lease_until(self.lease), Ordering::Release);
        coherence.write_back((&slot.lease as *const AtomicU64).cast(), 8);
        if cas_as_process(self.mcas.as_deref(), word, from, owner.pack()).is_err() {
            return false;
        }
        let (bytes, len) = slot.bytes();
        coherence.invalidate(bytes, len);
        // The owner's own word now: a plain increment.
        let claims = slot.generation.load(Ordering::Relaxed);
        slot.generation.store(claims + 1, Ordering::Release);
        true
    }

    /// Gives slot `i`, held by `owner`, back: writes the slot back (SWcc), then CASes its owner
    /// word from `owner` to zero on the slot's own line. False if the word no longer names
    /// `owner` (in lease mode, an adopter judged it dead meanwhile).
    pub(crate) fn release(&self, i: u32, owner: Owner) -> bool {
        let (bytes, len) = self.slot(u64::from(i)).bytes();
        self.coherence.write_back(bytes, len);
        let word = self.owner_word(u64::from(i));
        crate::mcas::cas_word(self.mcas.as_deref(), i, word, owner.pack(), 0).is_ok()
    }

    /// How many times slot `i` has been claimed (its `generation`).
    pub(crate) fn claims_of(&self, i: u32) -> u64 {
        self.slot(u64::from(i))
            .generation
            .load(Ordering::Acquire)
    }

    /// Whether slot `i`'s owner is alive, dead, or the slot free.
    pub(crate) fn life(&self, i: u64) -> SlotLife {
        crate::process::life_of(
            self.owner_word(i),
            self.slot(i),
            self.liveness,
            self.coherence,
        )
    }

    /// Notes that this process holds slot `i`. True when the heap keeps leases (the caller
    /// then makes sure the lease renewer runs).
    pub(crate) fn hold(&self, i: u32) -> bool {
        if self.liveness != Liveness::Lease {
            return false;
        }
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(i);
        true
    }

    /// Notes that this process no longer holds slot `i`.
    pub(crate) fn unhold(&self, i: u32) {
        if self.liveness == Liveness::Lease {
            self.held
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|&h| h != i);
        }
    }

    /// The lease renewer's work: renews the lease of every slot this process holds.
    pub(crate) fn renew_held(&self) {
        let until = crate::process::lease_until(self.lease);
        let held = self
            .held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for i in held {
            let lease = &self.slot(u64::from(i)).lease;
            lease.store(until, Ordering::Release);
            // SWcc: other hosts judge the owner by this line.
            self.coherence
                .write_back((lease as *const AtomicU64).cast(), 8);
        }
    }
}
