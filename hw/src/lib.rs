//! podkv's hardware layer: the only crate that knows which instructions move cache lines.
//!
//! # Map
//! - [`sync`]: atomics, fences, `UnsafeCell`, `Arc` and `spawn` for lock-free protocols in
//!   every crate; loom's under `--cfg podkv_loom`, so the protocols are model-checked unchanged.
//!   [`sync::mapped`] is std's in every build, for words loom cannot see (mapped memory,
//!   process-wide statics); every atomic in `hw` comes from one of the two, and `sync.rs` is
//!   the only file that names the cfg.
//! - [`persist`]: cache-line write-back (`clwb`, else `clflushopt`, else `clflush`, chosen once
//!   at run time) and the store fence that orders it.
//! - [`coherence`]: the [`Coherence`] mode of a heap (`hardware`, `limited`, `mcas`), which
//!   decides whether an ownership move must write its metadata back before another host may
//!   read it, and whether multi-writer words change by CPU CAS or mCAS.
//! - [`swcc`]: the SWcc protocol written once: write back before ownership moves, invalidate
//!   and re-read before reading what one does not own, a batched flusher, per-thread counts.
//! - [`mcas`]: memory-side CAS for pods without coherence: one contract ([`mcas::Mcas`]) and
//!   its implementations (`flush-cas`, the software near-memory processor `nmp`, `device`),
//!   chosen by [`mcas::McasKind`].
//!
//! `hw` knows nothing of heaps: callers pass byte ranges and get instructions.

pub mod coherence;
pub mod mcas;
pub mod persist;
pub mod swcc;
pub mod sync;

pub use coherence::Coherence;
