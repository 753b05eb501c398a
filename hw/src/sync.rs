//! The atomics shim: every shared word in podkv is one of these types, and this file is the one
//! place that chooses between std and loom.
//!
//! - The crate-level names ([`AtomicU64`], [`fence`], [`UnsafeCell`], [`Arc`], [`spawn`], …)
//!   are for lock-free protocols. Under `--cfg podkv_loom` they come from loom, so the
//!   protocols written against them (global free lists, remote-free counters, the store's
//!   links and epochs) are model-checked as they are; loom models build them on the ordinary
//!   heap.
//! - [`mapped`] is std's in every build: for words loom can never see (memory-mapped bytes,
//!   process-wide statics). Code that uses only it compiles and runs the same under the cfg.

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

/// Spawns a thread: loom's under the model checker (which, running every thread on one OS
/// thread, does not ask for `Send`), std's otherwise.
#[cfg(podkv_loom)]
pub use loom::thread::{spawn, JoinHandle};
#[cfg(not(podkv_loom))]
pub use std::thread::{spawn, JoinHandle};

/// An `Arc` that loom can track.
#[cfg(podkv_loom)]
pub use loom::sync::Arc;
/// An `Arc` that loom can track.
#[cfg(not(podkv_loom))]
pub use std::sync::Arc;

/// Std's atomics in every build, for the words loom can never model.
///
/// - Words in mapped memory (the mCAS region, a heap or store file): other processes map the
///   same bytes, and loom tracks only atomics it constructed itself, inside a model.
/// - Process-wide statics and flags shared with real OS threads (`persist`'s chosen flush, the
///   mCAS processor's stop flag): loom atomics are not `const` constructible and may be touched
///   only inside [`model`].
///
/// [`Ordering`] is the same type as the shim's, so protocol code may mix the two.
pub mod mapped {
    pub use std::sync::atomic::{
        fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
    };
}
