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
//! - `watch` (process-local): what this process last saw of each slot's owner and beat, and
//!   when by its own clock (`lease.rs`).

use crate::file::Words;
use crate::layout::{Geometry, Layout};
use crate::mcas::{cas_as_process, HeapMcas};
use crate::crash_point;
use crate::lease::{Watch, FLAG_FENCED};
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
    /// This process's watch over the slots' heartbeats (lease mode only).
    watch: Watch,
    /// Slots this process held that were taken from it while it was stopped (an operator's
    /// `recover_host` of a host that was only paused).
    lost: AtomicU64,
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
            watch: Watch::new(if geometry.liveness == Liveness::Lease {
                geometry.slots()
            } else {
                0
            }),
            lost: AtomicU64::new(0),
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

    /// Every slot's owner word, in slot order (HWcc, contiguous): for scans that skip free
    /// slots.
    pub(crate) fn owner_words(&self) -> &[podkv_hw::sync::mapped::AtomicU64] {
        let first = self.words.at(self.owners_at);
        // SAFETY: the owner words are `count` aligned words at `owners_at`, backed and mapped
        // for as long as the heap (`owner_word`'s contract); mapped memory is read with std's
        // atomics in every build, which are valid for any bits.
        unsafe { std::slice::from_raw_parts(first.cast(), self.count as usize) }
    }

    /// Takes slot `i` for `owner` if its owner word holds `from`: see `Heap::try_claim_slot`.
    pub(crate) fn try_claim(&self, i: u64, from: u64, owner: Owner) -> bool {
        let word = self.owner_word(i);
        if word.load(Ordering::Acquire) != from {
            return false;
        }
        let slot = self.slot(i);
        let coherence = self.coherence;
        if self.liveness == Liveness::Lease {
            self.beat(slot, owner.pid);
            crash_point!("claim.beaten");
        }
        podkv_hw::cas_site!("alloc.slots.claim.cas");
        if cas_as_process(self.mcas.as_deref(), word, from, owner.pack()).is_err() {
            return false;
        }
        let (bytes, len) = slot.bytes();
        if podkv_hw::site!("alloc.slots.claim.invalidate") {
            coherence.invalidate(bytes, len);
        }
        // The owner's own word now: a plain increment.
        let claims = slot.generation.load(Ordering::Relaxed);
        slot.generation.store(claims + 1, Ordering::Release);
        true
    }

    /// Gives slot `i`, held by `owner`, back: writes the slot back (SWcc), then CASes its owner
    /// word from `owner` (or from `owner` fenced: it stopped for a while, and nobody took the
    /// slot) to zero. False if the word names someone else (an operator recovered the host
    /// while this process was stopped).
    ///
    /// The CAS goes on the process line, not the slot's own: once it is performed the slot is
    /// free, and in an `nmp` heap its next holder takes over the slot's line at once, whose
    /// first request would overwrite the reply this thread has yet to read (and a request it
    /// then sent again would share the line with the new holder's).
    pub(crate) fn release(&self, i: u32, owner: Owner) -> bool {
        let (bytes, len) = self.slot(u64::from(i)).bytes();
        if podkv_hw::site!("alloc.slots.release.write_back") {
            self.coherence.write_back(bytes, len);
        }
        crash_point!("release.written");
        let word = self.owner_word(u64::from(i));
        let cas = |from| {
            podkv_hw::cas_site!("alloc.slots.release.cas");
            cas_as_process(self.mcas.as_deref(), word, from, 0)
        };
        match cas(owner.pack()) {
            Ok(_) => true,
            Err(seen) if seen == owner.pack() | FLAG_FENCED => cas(seen).is_ok(),
            Err(_) => false,
        }
    }

    /// Advances slot `i`'s beat as process `pid` and writes its line back (SWcc: other hosts
    /// watch it).
    fn beat(&self, slot: &Slot, pid: u32) {
        if podkv_hw::site!("alloc.slots.beat.invalidate") {
            self.coherence
                .invalidate((&slot.beat as *const AtomicU64).cast(), 8);
        }
        let beat = crate::lease::beat_of(&slot.beat).next(pid);
        slot.beat.store(beat.0, Ordering::Release);
        if podkv_hw::site!("alloc.slots.beat.write_back") {
            self.coherence
                .write_back((&slot.beat as *const AtomicU64).cast(), 8);
        }
    }

    /// How many times slot `i` has been claimed (its `generation`).
    pub(crate) fn claims_of(&self, i: u32) -> u64 {
        self.slot(u64::from(i))
            .generation
            .load(Ordering::Acquire)
    }

    /// Whether slot `i`'s owner is alive, dead (known stopped), fenced, or the slot free, as
    /// this process judges it now. In lease mode this watches the owner's beat and fences an
    /// owner silent for a lease (`lease.rs`).
    pub(crate) fn life(&self, i: u64) -> SlotLife {
        let word = self.owner_word(i).load(Ordering::Acquire);
        let life = crate::process::life_of_word(word);
        if self.liveness != Liveness::Lease || !matches!(life, SlotLife::Alive(_)) {
            return life;
        }
        let slot = self.slot(i);
        if podkv_hw::site!("alloc.slots.life.invalidate_beat") {
            self.coherence
                .invalidate((&slot.beat as *const AtomicU64).cast(), 8);
        }
        let beat = crate::lease::beat_of(&slot.beat);
        if !self.watch.lapsed(i, word, beat, self.lease) {
            return life;
        }
        let fenced = word | FLAG_FENCED;
        podkv_hw::cas_site!("alloc.slots.life.fence.cas");
        match cas_as_process(self.mcas.as_deref(), self.owner_word(i), word, fenced) {
            Ok(_) => SlotLife::Fenced(fenced),
            // It changed meanwhile (released, rejoined, claimed): judge that next time.
            Err(seen) => crate::process::life_of_word(seen),
        }
    }

    /// Slot `i`'s life from its owner word alone: no watching, no fencing (for reports).
    pub(crate) fn peek(&self, i: u64) -> SlotLife {
        crate::process::life_of_word(self.owner_word(i).load(Ordering::Acquire))
    }

    /// Slots this process held that were taken from it while it was stopped.
    pub(crate) fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
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

    /// The lease renewer's work: beats in every slot this process holds; rejoins a slot
    /// fenced while this process was stopped (beat first, then clear the flag by CAS, so no
    /// watcher sees the unfenced owner silent). A slot whose word names someone else is not
    /// beaten (released meanwhile, or taken by `recover_host`: then its rejoin CAS failed and
    /// counted it lost).
    pub(crate) fn renew_held(&self, me: Owner) {
        let held = self
            .held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mine = me.pack();
        for i in held {
            let word = self.owner_word(u64::from(i));
            let seen = word.load(Ordering::Acquire);
            crash_point!("renew.read");
            if seen != mine && seen != mine | FLAG_FENCED {
                continue;
            }
            self.beat(self.slot(u64::from(i)), me.pid);
            if seen == mine | FLAG_FENCED {
                crash_point!("rejoin.beaten");
                podkv_hw::cas_site!("alloc.slots.rejoin.cas");
                if crate::mcas::cas_word(self.mcas.as_deref(), i, word, seen, mine).is_err() {
                    self.lost.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}
