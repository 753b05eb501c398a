//! The atomics shim: every shared word in podkv is one of these types.
//!
//! Under `--cfg podkv_loom` the same names come from loom, so the lock-free protocols written
//! against this module (global free lists, remote-free counters) are model-checked as they are.
//! Loom cannot see memory-mapped bytes, so loom models build those protocols on the ordinary
//! heap; the mapped heap itself is compiled only without the cfg.

#[cfg(not(podkv_loom))]
pub use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

#[cfg(podkv_loom)]
pub use loom::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

#[cfg(not(podkv_loom))]
pub use std::cell::UnsafeCell;

#[cfg(podkv_loom)]
pub use loom::cell::UnsafeCell;

/// Runs `f` under loom's model checker, or once when loom is not in use.
///
/// Protocol tests call this so the same test body serves as a plain unit test and a loom model.
pub fn model<F>(f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    #[cfg(podkv_loom)]
    loom::model(f);
    #[cfg(not(podkv_loom))]
    f();
}

/// Spawns a thread: loom's under the model checker, std's otherwise.
pub fn spawn<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    #[cfg(podkv_loom)]
    return loom::thread::spawn(f);
    #[cfg(not(podkv_loom))]
    return std::thread::spawn(f);
}

/// The join handle returned by [`spawn`].
#[cfg(podkv_loom)]
pub type JoinHandle<T> = loom::thread::JoinHandle<T>;
/// The join handle returned by [`spawn`].
#[cfg(not(podkv_loom))]
pub type JoinHandle<T> = std::thread::JoinHandle<T>;

/// An `Arc` that loom can track.
#[cfg(podkv_loom)]
pub use loom::sync::Arc;
/// An `Arc` that loom can track.
#[cfg(not(podkv_loom))]
pub use std::sync::Arc;
