//! The reports of slots adopted from dead owners, and the application's hook that sees them
//! (`Heap::set_recovery_hook`): process-local state a [`crate::Heap`] and its handles share.

use super::{Recovered, ThreadHandle};
use crate::slots::Slots;
use std::sync::{Arc, Mutex};

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
