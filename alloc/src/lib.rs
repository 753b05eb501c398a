//! The pod heap: a cross-process, lock-free slab allocator for CXL shared memory, after
//! CXLALLOC (ASPLOS '26) §3.
//!
//! # Map
//! pod → heap file → two slab heaps → slab → block; one thread slot per allocating thread.
//! - The **small heap** serves 8 B – 1 KiB from 64 KiB slabs, the **large heap** 1 KiB – 512 KiB
//!   from 512 KiB slabs, in size classes with bounded waste ([`class`]).
//! - A slab is owned by one thread slot, which allocates from it and frees to it with plain
//!   loads and stores on its SWcc descriptor's bitset ([`slab`], [`thread`]). A free by any other
//!   thread is a *remote free*: a decrement of the slab's 8-byte HWcc counter ([`remote`]),
//!   batched per slot so a run of frees to one slab costs one CAS ([`pending`]). Slabs move between states by named transitions (`unsized_to_sized`,
//!   `sized_to_detached`, …).
//! - Empty slabs wait on a slot's unsized list or on the heap's global free list, a Treiber
//!   stack changed by single CAS ([`free_list`]); a slab reaching the global list has its pages
//!   released to the OS.
//! - The heap grows by CAS on its length after backing the new slabs' file pages, so running
//!   out of space is an error value ([`heap`], [`file`]).
//! - Everything is addressed by [`Offset`]: each process maps the file at one offset inside its
//!   own reservation ([`layout`]).
//! - The **huge heap** serves blocks over 512 KiB, one file mapping each, at offsets from
//!   per-slot runs of a 1024-word reservation array ([`huge`]). Other processes map a huge block
//!   from a SIGSEGV handler on first touch ([`fault`], the one process-global module), and a
//!   freed block is reclaimed once no process's hazard record names it ([`hazard`]).
//!
//! # Reading order
//! [`layout`] → [`class`] → [`slab`] and [`remote`] → [`dcas`] → [`free_list`] → [`slot`] →
//! [`heap`] → [`thread`] → [`recovery`] (and `thread/recover.rs`) → [`huge`], [`hazard`],
//! [`fault`] → [`check`].
//!
//! # Partial failure
//! Every step is logged in the slot's recovery word before it is done, and every CAS on a
//! shared word is detectable ([`dcas`]), so a thread finding a dead slot (when claiming one, or
//! through [`Heap::recover_dead`]) adopts it and finishes its step without waiting for anyone
//! ([`recovery`]). [`crash`] names every window a crash can fall in.

#[cfg(not(podkv_loom))]
pub mod api;
#[cfg(not(podkv_loom))]
mod backer;
#[cfg(not(podkv_loom))]
pub mod check;
pub mod class;
#[cfg(not(podkv_loom))]
pub mod crash;
pub mod dcas;
#[cfg(not(podkv_loom))]
pub mod error;
#[cfg(not(podkv_loom))]
pub mod fault;
#[cfg(not(podkv_loom))]
pub mod file;
pub mod free_list;
#[cfg(not(podkv_loom))]
pub mod hazard;
#[cfg(not(podkv_loom))]
pub mod heap;
#[cfg(not(podkv_loom))]
pub mod huge;
#[cfg(not(podkv_loom))]
pub mod layout;
#[cfg(not(podkv_loom))]
mod mcas;
pub mod offset;
#[cfg(not(podkv_loom))]
pub mod pending;
#[cfg(not(podkv_loom))]
pub mod process;
#[cfg(not(podkv_loom))]
pub mod recovery;
pub mod remote;
#[cfg(not(podkv_loom))]
pub mod slab;
#[cfg(not(podkv_loom))]
pub mod slot;
#[cfg(not(podkv_loom))]
pub mod stress;
#[cfg(not(podkv_loom))]
pub mod thread;

#[cfg(not(podkv_loom))]
pub use check::HeapReport;
#[cfg(not(podkv_loom))]
pub use error::{AllocError, HeapError, ResolveError};
#[cfg(not(podkv_loom))]
pub use heap::{default_path, Config, Heap, Kind};
#[cfg(not(podkv_loom))]
pub use huge::HugeBacking;
pub use offset::{Offset, PodPtr};
#[cfg(not(podkv_loom))]
pub use process::Liveness;
#[cfg(not(podkv_loom))]
pub use thread::{InFlight, Recovered, ThreadHandle};
