//! podkv's hardware layer: the only crate that knows which instructions move cache lines.
//!
//! # Map
//! - [`sync`]: atomics, fences and `UnsafeCell` for every other crate; loom's under
//!   `--cfg podkv_loom`, so lock-free protocols can be model-checked unchanged.
//! - [`persist`]: cache-line write-back (`clwb`, else `clflushopt`, else `clflush`, chosen once
//!   at run time) and the store fence that orders it.
//! - [`coherence`]: the [`Coherence`] mode of a heap, which decides whether an ownership move
//!   must write its metadata back before another host may read it.
//!
//! `hw` knows nothing of heaps: callers pass byte ranges and get instructions.

pub mod coherence;
pub mod persist;
pub mod sync;

pub use coherence::Coherence;
