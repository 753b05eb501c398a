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
//!   batched per slot so a run of frees to one slab costs one CAS ([`pending`]). Slabs
//!   move between states by named transitions (`unsized_to_sized`, `sized_to_detached`, …).
//! - Empty slabs wait on a slot's unsized list or on the heap's global free list, a Treiber
//!   stack changed by single CAS ([`free_list`]); a slab reaching the global list has its pages
//!   released to the OS.
//! - The heap grows by CAS on its length after backing the new slabs' file pages, so running
//!   out of space is an error value ([`heap`], [`file`](mod@file)).
//! - Everything is addressed by [`Offset`]: each process maps the file at one offset inside its
//!   own reservation ([`layout`]).
//! - The **huge heap** serves blocks over 512 KiB, one file mapping each, at offsets from
//!   per-slot runs of a 1024-word reservation array ([`huge`]). Other processes map a huge block
//!   from a SIGSEGV handler on first touch ([`fault`], the one process-global module), and a
//!   freed block is reclaimed once no process's hazard record names it ([`hazard`]).
//!
//! # Who owns what
//! Layered bottom to top; each module names only modules below it (no import circles).
//!
//! | module | owns |
//! | --- | --- |
//! | [`layout`] | the file format: header word, [`layout::Geometry`], where each region lies, `FORMAT_VERSION` |
//! | [`class`] | size classes and [`Kind`] (small or large slab heap) |
//! | [`slab`], [`slot`] | the shared records: a slab's descriptor and states, a thread slot's words |
//! | [`dcas`], [`remote`], [`free_list`], [`pending`] | the lock-free protocols on shared words |
//! | [`recovery`] | the recovery word: [`recovery::Rec`], one step per [`recovery::Op`], and [`InFlight`] |
//! | [`file`](mod@file), [`process`], [`lease`], `mcas`, `backer`, `domains` | the file and its mapping; slot owners and liveness; lease mode's heartbeats, watch and fence; an `mcas` heap's region and CAS hook; the backer thread; the cache domains that opened a `limited` heap (one host: descriptors read from the cache) |
//! | [`slabs`] | component `SlabHeaps`: each [`SlabHeap`](heap::SlabHeap)'s placement, descriptors, remote words, `len` and growth |
//! | [`global`] | component `GlobalLists`: the warm and cold global free lists ([`heap::List`]) |
//! | `slots` | component `Slots`: the thread-slot table — claim, release, liveness, leases |
//! | [`huge`] | component `HugeHeap` (this process's part: view, hazard record, sweep) and `HugeOwner` (a slot's part: allocate, free, reclaim, recover) |
//! | [`hazard`], [`fault`] | hazard offsets of mapped huge blocks; the process-global SIGSEGV handler |
//! | `shared` | `Shared`: the components, the mapping, the mCAS hook — what a [`Heap`] and its handles hold; starts the backer and the lease renewer |
//! | [`thread`] | [`ThreadHandle`]: the fast paths; `thread/transition.rs` the slab transitions; `thread/remote_free.rs` frees into other slots' slabs and the pending batch; `thread/recover.rs` the recovery of an adopted slot; `thread/adopt.rs` adoption reports and the hook; `thread/morph.rs` morphing and frees into morphing slabs; `thread/hooks.rs` the handle as a [`dcas::Writer`] and huge-heap thread |
//! | [`heap`] | [`Heap`]: opening (its steps, `heap/open.rs`, [`Config`]), the public API over the components |
//! | [`morph`] | a morphing slab's two sets in its bitset: which new blocks are blocked, which offsets are old blocks |
//! | [`check`], [`occupancy`], [`census`], [`sparse`], [`crash`], [`stress`], [`api`] | the heap checker, slab occupancy bands and the slab-utilisation census over its walk, the disowned slabs worth draining, the named crash points, the stress drivers, `allocator_api2` |
//!
//! # Where a change goes
//! - **A slab transition** (a new state move, a change to when a slab is detached, kept or
//!   released): its `a_to_b` method in `thread/transition.rs`, its [`recovery::Op`] and the
//!   arm that finishes it in `thread/recover.rs`, its crash points in [`crash`], and the
//!   states' table in [`slab`]. Global lists in [`global`], growth in [`slabs`].
//! - **Huge blocks**: [`huge`] (a slot's steps in `huge/owner.rs`, the view every process maps
//!   through in `huge/view.rs`, the records in `huge/desc.rs`), hazard rules in [`hazard`],
//!   fault-time mapping in [`fault`].
//! - **Recovery**: the step's arm in `thread/recover.rs` (slab heaps) or `huge/owner.rs` (huge
//!   heap); never a heap scan. A new word in a shared record changes [`layout`]'s
//!   `FORMAT_VERSION`.
//!
//! # Background threads
//! [`Heap::open`] lists them in its opening steps: the **backer** (a heap on a file; backs slabs
//! ahead of growth, `backer`), the **lease renewer** (a lease heap, started by the first slot the
//! process claims), and an `nmp` heap's **mCAS processor** (when no process of the host runs
//! one). All end once the last [`Heap`] clone is dropped: the backer and the renewer hold the
//! heap weakly and see it gone within their period; the processor is stopped by the drop.
//!
//! # Reading order
//! [`layout`] → [`class`] → [`slab`] and [`remote`] → [`dcas`] → [`free_list`] → [`slot`] →
//! [`slabs`], [`global`], `slots` → [`heap`] → [`thread`] (and `thread/transition.rs`) →
//! [`recovery`] (and `thread/recover.rs`) → [`huge`], [`hazard`], [`fault`] → [`check`].
//!
//! # Partial failure
//! Every step is logged in the slot's recovery word before it is done, and every CAS on a
//! shared word is detectable ([`dcas`]), so a thread finding a dead slot (when claiming one, or
//! through [`Heap::recover_dead`]) adopts it and finishes its step without waiting for anyone
//! ([`recovery`]). [`crash`] names every window a crash can fall in. A slot whose owner may
//! only be paused (lease mode: another host's process) is fenced, not adopted, and its owner's
//! late writes are harmless by construction ([`lease`], with the windows that remain).

/// Items that map a heap file: left out of loom builds, whose models build the lock-free
/// protocols ([`dcas`], [`free_list`], [`remote`]) on the ordinary heap (loom cannot see
/// mapped bytes). One group instead of a `cfg` per line.
macro_rules! not_under_loom {
    ($($item:item)*) => { $( #[cfg(not(podkv_loom))] $item )* };
}

// Built under loom too: the protocols the loom models check, and the leaf types they use.
pub mod class;
pub mod dcas;
pub mod free_list;
pub mod offset;
pub mod remote;

pub use offset::{Offset, PodPtr};

// Outside the group: a `#[macro_export]` macro (`crash_point!`) may not come from a macro
// expansion and still be named by path.
#[cfg(not(podkv_loom))]
pub mod crash;

not_under_loom! {
    pub mod api;
    mod backer;
    pub mod census;
    pub mod check;
    mod domains;
    pub mod error;
    pub mod fault;
    pub mod file;
    pub mod global;
    pub mod hazard;
    pub mod heap;
    pub mod huge;
    pub mod hwcc_user;
    pub mod layout;
    pub mod lease;
    pub mod occupancy;
    mod mcas;
    pub mod morph;
    pub mod pending;
    pub mod process;
    pub mod recovery;
    mod shared;
    pub mod slab;
    pub mod slabs;
    mod slots;
    pub mod sparse;
    pub mod slot;
    pub mod stress;
    pub mod thread;

    pub use census::Census;
    pub use check::HeapReport;
    pub use sparse::{Disowned, SparseSlabs};
    pub use error::{AllocError, HeapError, ResolveError};
    pub use heap::{default_path, Config, Heap, Kind};
    pub use huge::HugeBacking;
    pub use hwcc_user::HwccUser;
    pub use process::Liveness;
    pub use thread::{InFlight, Recovered, ThreadHandle};
}
