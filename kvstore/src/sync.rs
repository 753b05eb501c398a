//! The atomics this crate's protocols use: `podkv_hw::sync` normally, loom's under
//! `--cfg podkv_loom` (mirrors `hw::sync`, which the loom build cannot compile today).

#[cfg(not(podkv_loom))]
pub use podkv_hw::sync::{fence, model, spawn, Arc, AtomicU64, Ordering, UnsafeCell};

#[cfg(podkv_loom)]
pub use loom::{
    cell::UnsafeCell,
    sync::atomic::{fence, AtomicU64, Ordering},
    sync::Arc,
    thread::spawn,
};

/// Runs `f` under loom's model checker.
#[cfg(podkv_loom)]
pub fn model<F>(f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    loom::model(f);
}
