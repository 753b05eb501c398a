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
//! - [`swcc`]: the SWcc rules written once, for any mode: write back before ownership moves,
//!   invalidate and re-read before reading what one does not own, a batched flusher,
//!   per-thread counts. It knows no modes.
//! - [`coherence`]: the [`Coherence`] mode of a heap (`hardware`, `limited`, `mcas`), on top of
//!   `swcc`: it decides whether an ownership move must write its metadata back before another
//!   host may read it (callers write `coherence.write_back(..)`, a no-op under `hardware`), and
//!   whether multi-writer words change by CPU CAS or mCAS.
//! - [`mcas`]: memory-side CAS for pods without coherence: one contract ([`mcas::Mcas`]) and
//!   its implementations (`flush-cas`, the software near-memory processor `nmp`, `device`),
//!   chosen by [`mcas::McasKind`].
//! - [`model`]: a test mode (feature `coherence-model`) that gives each process its own
//!   non-coherent cache of a heap's SWcc memory, so a missing write-back or invalidation
//!   fails a test here; and the named sites (`site!`, `cas_site!`) a test may switch off.
//! - [`ab`]: the A/B switch the runner flips in alternate windows of a timed phase, for
//!   comparing two variants of code in one run (and, under the `ab-sites` feature, switching
//!   named sites off in the windows it is on).
//! - [`process`]: a process's identity over time (pid plus start time).
//! - [`cpus`]: the CPUs a thread may run on, pinning one, undoing an inherited pin.
//! - [`topology`]: the machine's NUMA nodes from sysfs (a CPU-less node is how a CXL expander
//!   appears) and the [`topology::Placement`] policy a heap mapping is bound with (`mbind`).
//!
//! Facts flow one way: `sync` and `persist` are leaves, `swcc` sits on `persist`, `coherence`
//! on `swcc`, and `mcas` on `persist` and `sync`. `hw` knows nothing of heaps: callers pass
//! byte ranges and get instructions.
//!
//! # Where a change goes
//! - a word shared by a lock-free protocol, or a new loom-checked primitive: [`sync`]; a word
//!   in mapped memory or a process-wide static: [`sync::mapped`];
//! - a flush instruction, a fence, or how the CPU's instruction is chosen: [`persist`];
//! - how a write-back or invalidation is done, batched or counted: [`swcc`];
//! - whether a mode needs SWcc or mCAS, a new mode, its header bits or name: [`coherence`];
//! - a new mCAS implementation: a file under `mcas/` and an arm of `McasKind` and `Mcas` in
//!   `mcas/mod.rs`; the NMP's wire protocol: `mcas/nmp.rs` (client) and `mcas/processor.rs`;
//! - how nodes are discovered, or a new memory policy: [`topology`].

pub mod ab;
pub mod coherence;
pub mod cpus;
pub mod mcas;
pub mod model;
pub mod persist;
pub mod process;
pub mod segv;
pub mod swcc;
pub mod sync;
pub mod topology;

pub use coherence::Coherence;
