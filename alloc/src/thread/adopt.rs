//! Claiming a thread slot (a free one, or a dead owner's, adopted), the reports of slots
//! adopted from dead owners, and the application's hook that sees them
//! (`Heap::set_recovery_hook`): process-local state a [`crate::Heap`] and its handles share.

use super::{Recovered, ThreadHandle};
use crate::error::HeapError;
use crate::process::SlotLife;
use crate::shared::Hold;
use crate::slots::Slots;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex};

/// Passes over the slots a claim makes before it answers `NoSlot`. Slots change hands while
/// a pass looks at them one by one: a pass can find each taken as it passes, or lose the
/// race for the one it saw free, while others are free behind it. Eight passes that all miss
/// mean the slots stayed taken, not that they moved.
const COUNT_CLAIM_PASSES: u32 = 8;

/// Claims a free slot, or adopts a dead one (recovering it first); `NoSlot` once
/// [`COUNT_CLAIM_PASSES`] passes found none to take.
pub(crate) fn claim(shared: Hold, adoptions: Arc<Adoptions>) -> Result<ThreadHandle, HeapError> {
    let count = shared.geometry.slots();
    let me = shared.me;
    let first = RandomState::new().hash_one(std::thread::current().id()) % count;
    for _ in 0..COUNT_CLAIM_PASSES {
        for i in (first..count).chain(0..first) {
            let from = match shared.slots.life(i) {
                SlotLife::Free => 0,
                SlotLife::Dead(word) => word,
                _ => continue,
            };
            if !shared.slots.try_claim(i, from, me) {
                continue;
            }
            let handle = ThreadHandle::new(shared, adoptions, i);
            if from != 0 {
                handle.recover();
            }
            return Ok(handle);
        }
        std::thread::yield_now();
    }
    Err(HeapError::NoSlot { count })
}

/// Adopts slot `i` if its owner is dead (owner word `word`): `None` if another thread
/// changed the slot first.
pub(crate) fn adopt(
    shared: &Hold,
    adoptions: &Arc<Adoptions>,
    i: u64,
    word: u64,
) -> Option<ThreadHandle> {
    shared
        .slots
        .try_claim(i, word, shared.me)
        .then(|| ThreadHandle::new(shared.clone(), adoptions.clone(), i))
}

/// What the application runs for a slot recovered from a dead owner, while the adopting
/// handle (the first argument) still holds the slot: typically it settles the block the
/// report names as in flight ([`crate::InFlight`]) against its own records.
pub type RecoveryHook = Arc<dyn Fn(&ThreadHandle, &Recovered) + Send + Sync>;

/// This process's recovery hook and its kept adoption reports.
#[derive(Default)]
pub(crate) struct Adoptions {
    /// The application's hook for slots adopted while claiming.
    hook: Mutex<Option<RecoveryHook>>,
    /// Reports of slots this process's threads adopted while claiming, with the slot's claim
    /// generation then, until the claiming handle takes them (one per slot at most; a report
    /// of an earlier claim of the slot is never handed out).
    kept: Mutex<Vec<(u64, Recovered)>>,
}

impl Adoptions {
    /// Registers (or with `None` removes) the hook.
    pub(crate) fn set_hook(&self, hook: Option<RecoveryHook>) {
        *self.hook.lock().unwrap_or_else(|e| e.into_inner()) = hook;
    }

    pub(crate) fn hook(&self) -> Option<RecoveryHook> {
        self.hook
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Keeps the report of a slot adopted while claiming, for its claiming handle.
    pub(crate) fn keep(&self, slots: &Slots, recovered: Recovered) {
        let generation = slots.claims_of(recovered.slot);
        let mut kept = self
            .kept
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        kept.retain(|(_, r)| r.slot != recovered.slot);
        kept.push((generation, recovered));
    }

    /// Takes the kept report of slot `slot`'s adoption, if it was made by its current claim.
    pub(crate) fn take(&self, slots: &Slots, slot: u32) -> Option<Recovered> {
        let generation = slots.claims_of(slot);
        let mut kept = self
            .kept
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let at = kept.iter().position(|(_, r)| r.slot == slot)?;
        let (made, recovered) = kept.swap_remove(at);
        (made == generation).then_some(recovered)
    }
}
