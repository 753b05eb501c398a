//! Reclamation: when a node unlinked from the index may be freed, across processes (after
//! crossbeam-epoch and CXLALLOC §5.2.1), and what a handle does with the nodes it retired.
//!
//! # Parts
//! - [`epoch`]: the words and the rule — pin, unpin, `try_advance`, `r + 2` (loom-checked);
//! - `limbo`: a slot's limbo list in the heap (bags of retired nodes, stamped), pushed by
//!   `retire` and walked by `collect`, every step logged for `recover`;
//! - `spare`: reclaimable items a handle keeps in limbo and reuses in place for new items of
//!   the same size;
//! - `reclaimer`: `Reclaim`, a handle's pins, its collect schedule (every `BATCH_COLLECT`
//!   retirements, sooner while the epoch is stuck) and its spares.
//!
//! A change to *when* nodes are freed goes in `epoch` (the rule) or `reclaimer` (the
//! schedule); to *how* limbo is kept in the heap, in `limbo` (and `layout`, `recover`).

pub mod epoch;

#[cfg(not(podkv_loom))]
pub(crate) mod limbo;
#[cfg(not(podkv_loom))]
mod reclaimer;
#[cfg(not(podkv_loom))]
pub(crate) mod spare;

#[cfg(all(test, not(podkv_loom)))]
pub(crate) use reclaimer::BATCH_COLLECT;
#[cfg(not(podkv_loom))]
pub(crate) use reclaimer::{Pin, Reclaim};
