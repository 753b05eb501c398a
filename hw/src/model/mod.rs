//! A model of non-coherent caches, for tests: with it, a missing write-back or invalidation
//! makes a test fail on this (fully coherent) machine. A test mode, never a product mode.
//!
//! # What is modelled
//! Each process plays one host with its own cache of a heap's SWcc memory, by 64-byte lines:
//! - a line keeps the value this process loaded at its first touch (a whole 4 KiB page is
//!   loaded at once, as a prefetcher may) or at its last [`invalidate`], whether or not this
//!   process ever wrote it; another process's stores become visible only after they are
//!   written back *and* this process invalidates the line (or touches it first);
//! - [`write_back`] copies every dirty line out *whole* (a line differs from the value it was
//!   loaded with), so two hosts writing different bytes of one line clobber each other;
//!   [`invalidate`] writes a dirty line back (as `clflush` does), then reloads it;
//! - dirty lines are also evicted whole at seeded random moments: at SWcc calls (one in
//!   `PODKV_COHERENCE_EVICT`, default 4) and from a background thread;
//! - the header, the HWcc region and the mCAS lines (everything below the `start` a heap gives
//!   [`Cache::map`]) stay mapped shared, so they are coherent, as are words changed by mCAS;
//! - a CPU CAS on SWcc memory acts on this process's copy only, because that is all it sees;
//!   so does a CPU CAS or store to an mCAS word (a switched-off hook site): it changes this
//!   process's copy of the line, which reaches memory whole at the process's next write-back or
//!   eviction of that line, or at a random eviction (`plain`).
//!
//! Threads of one process share its cache (they run on one host). A process killed with
//! dirty lines leaves them in its host's cache: they reach memory when a process of its host
//! judges it dead ([`settle_dead`], called by `alloc`'s liveness check), because a real
//! adopter on that host would see them in the cache they share.
//! Each modelled heap mapping is a cache of its own, named by [`cache_domain`] (a host's
//! caches are one domain on real hardware: the store tags items with the domain that wrote
//! them, and a reader in that domain trusts its cached lines of them).
//!
//! # How it is built
//! Under the `coherence-model` feature, a heap opened while the model is [`active`] maps its
//! SWcc range from a process-private memfd (the cache), `PROT_NONE` until a page is first
//! touched; a second `MAP_SHARED` mapping of the heap file is the pod's memory. The SIGSEGV
//! handler fills a page from memory on first touch (plus a snapshot of what was loaded, which
//! tells dirty lines from clean ones). A registry maps cache addresses to memory addresses, so
//! [`crate::swcc`]'s write-back and invalidation find the lines. Without the feature every
//! function here is an empty inline stub and [`site!`](crate::site) is `true`: no cost
//! (except in a measuring build with the `ab-sites` feature, [`crate::ab`]).
//!
//! # Running a heap or test in model mode
//! 1. Build with the feature: a crate's tests get it through a dev-dependency, e.g.
//!    `podkv-hw = { workspace = true, features = ["coherence-model"] }` (alloc forwards it as
//!    its own `coherence-model` feature).
//! 2. Set `PODKV_COHERENCE_MODEL=1` in the environment of every process that opens the heap
//!    (or call [`set_active`] before opening it). Only `limited` and `mcas` heaps on a file are
//!    modelled; a `hardware` heap is not (it needs no SWcc).
//! 3. `PODKV_COHERENCE_SEED=n` fixes the eviction seed; each modelled process prints its seed
//!    on stderr once (`podkv coherence model: seed n`), so a failing run can be repeated.
//!
//! A system call that reads or writes a page of a modelled heap this process has not touched
//! yet fails with `EFAULT` (the kernel does not raise SIGSEGV): [`touch`] the range first.
//!
//! # Sites: switching one write-back, invalidation or hook CAS off
//! Every such call site carries a name, `crate.module.what.kind`, e.g.
//! `alloc.slab.release.write_back`:
//! ```ignore
//! if podkv_hw::site!("alloc.global.push.write_back") {
//!     coherence.write_back(ptr, len);
//! }
//! podkv_hw::cas_site!("alloc.free_list.push.cas"); // the next hook CAS of this thread
//! ```
//! `PODKV_COHERENCE_SITE_OFF=name[,name…]` switches sites off in a test build: `site!` then
//! returns false, and `cas_site!` makes the thread's next hook CAS (or store) a plain CPU one
//! (which on an `mcas` heap under the model acts on this process's copy of the line:
//! [`cpu_cas`], [`cpu_store`]). [`hits`]
//! tells how often a site ran in this process. Without the feature `site!` is `true` and
//! `cas_site!` nothing.

#[cfg(feature = "coherence-model")]
mod cache;
#[cfg(feature = "coherence-model")]
mod clobber;
#[cfg(feature = "coherence-model")]
mod fault;
#[cfg(feature = "coherence-model")]
mod file;
#[cfg(feature = "coherence-model")]
mod plain;
#[cfg(feature = "coherence-model")]
mod registry;
#[cfg(feature = "coherence-model")]
mod site;

#[cfg(feature = "coherence-model")]
pub use real::*;
#[cfg(not(feature = "coherence-model"))]
pub use stub::*;

/// The site switches ([`site!`](crate::site), [`cas_site!`](crate::cas_site)).
#[cfg(feature = "coherence-model")]
pub use site::{hits, off_sites, sites_hit, take_cas_off, Site};

/// Says whether the named write-back or invalidation site is on: `true` unless the test build
/// has the `coherence-model` feature and `PODKV_COHERENCE_SITE_OFF` names it. See
/// [`crate::model`].
#[cfg(feature = "coherence-model")]
#[macro_export]
macro_rules! site {
    ($name:literal) => {{
        static SITE: $crate::model::Site = $crate::model::Site::new($name);
        SITE.on()
    }};
}

/// Says whether the named write-back or invalidation site is on: always, without the
/// `coherence-model` feature (and without `ab-sites`).
#[cfg(not(any(feature = "coherence-model", feature = "ab-sites")))]
#[macro_export]
macro_rules! site {
    ($name:literal) => {
        true
    };
}

/// Says whether the named write-back or invalidation site is on, in a build with the
/// `ab-sites` feature (and without the model): off while the A/B switch is on if
/// `PODKV_AB_SITES` selects it ([`crate::ab`]). For measuring what sites cost, never for
/// serving.
#[cfg(all(feature = "ab-sites", not(feature = "coherence-model")))]
#[macro_export]
macro_rules! site {
    ($name:literal) => {{
        static SELECTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        !($crate::ab::on() && *SELECTED.get_or_init(|| $crate::ab::site_selected($name)))
    }};
}

/// Names the calling thread's next hook CAS (or store); if the site is switched off, that
/// call is made as a plain CPU CAS ([`crate::model::cpu_cas`] on an `mcas` heap). Nothing
/// without the `coherence-model` feature.
#[cfg(feature = "coherence-model")]
#[macro_export]
macro_rules! cas_site {
    ($name:literal) => {{
        static SITE: $crate::model::Site = $crate::model::Site::new($name);
        SITE.arm_cas();
    }};
}

/// Names the calling thread's next hook CAS: nothing without the `coherence-model` feature
/// (and without `ab-sites`).
#[cfg(not(any(feature = "coherence-model", feature = "ab-sites")))]
#[macro_export]
macro_rules! cas_site {
    ($name:literal) => {};
}

/// Names the calling thread's next hook CAS, in a build with the `ab-sites` feature (and
/// without the model): while the A/B switch is on, if `PODKV_AB_SITES` selects the site,
/// that call is made as a CPU CAS or store ([`crate::ab`]; correct on a machine whose memory
/// is coherent, which is what lets it measure what the hook costs).
#[cfg(all(feature = "ab-sites", not(feature = "coherence-model")))]
#[macro_export]
macro_rules! cas_site {
    ($name:literal) => {{
        static SELECTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        if $crate::ab::on() && *SELECTED.get_or_init(|| $crate::ab::site_selected($name)) {
            $crate::ab::arm_cpu_cas();
        }
    }};
}

#[cfg(feature = "coherence-model")]
mod real {
    pub use super::registry::{
        active, attach, cache_domain, detach, forget_file, invalidate, seed, serve_fault,
        set_active, settle_dead, stored, touch, write_back, Cache,
    };
    use crate::sync::mapped::{AtomicU64, Ordering};

    /// A CPU CAS of an mCAS word (a switched-off hook CAS site), as a host without coherence
    /// makes it: under the model, on this process's dirty copy of the word's line, which other
    /// processes see only once the line is written back whole (`plain`); else on memory.
    pub fn cpu_cas(word: &AtomicU64, current: u64, new: u64) -> Result<u64, u64> {
        if active() {
            super::plain::cas(word, current, new)
        } else {
            word.compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire)
        }
    }

    /// A CPU store to an mCAS word: a switched-off hook store site, or a creator's first
    /// stores before anyone can name the word. Under the model it goes to this process's copy
    /// of the line until the line is written back ([`crate::swcc::write_back`]), as
    /// [`cpu_cas`]; else to memory.
    pub fn cpu_store(word: &AtomicU64, value: u64) {
        if active() {
            super::plain::store(word, value)
        } else {
            word.store(value, Ordering::Release)
        }
    }

    /// An eviction of `[ptr, ptr + len)` outside the SWcc calls (`flush-cas` evicts its target
    /// before each CAS): this process's dirty copies of mCAS lines there go to memory first.
    pub fn evict_plain(ptr: *const u8, len: usize) {
        super::plain::write_back(ptr, len)
    }
}

#[cfg(not(feature = "coherence-model"))]
mod stub {
    //! Without the `coherence-model` feature: nothing is modelled and every call is free.
    use crate::sync::mapped::{AtomicU64, Ordering};

    /// Never: the model is not built in.
    #[inline(always)]
    pub fn active() -> bool {
        false
    }

    /// Nothing to write back: the model is not built in.
    #[inline(always)]
    pub fn write_back(_ptr: *const u8, _len: usize) {}

    /// Nothing to invalidate: the model is not built in.
    #[inline(always)]
    pub fn invalidate(_ptr: *const u8, _len: usize) {}

    /// Nothing to forget: the model is not built in.
    #[inline(always)]
    pub fn forget_file(_fd: libc::c_int, _offset: u64, _len: u64) {}

    /// Nothing to settle: the model is not built in.
    #[inline(always)]
    pub fn settle_dead(_pid: u32, _start: u32) -> usize {
        0
    }

    /// Nothing to mark: the model is not built in.
    #[inline(always)]
    pub fn stored(_ptr: *const u8, _len: usize) {}

    /// No modelled cache holds anything: the model is not built in.
    #[inline(always)]
    pub fn cache_domain(_ptr: *const u8) -> Option<u64> {
        None
    }

    /// Nothing to touch: the model is not built in.
    #[inline(always)]
    pub fn touch(_ptr: *const u8, _len: usize) {}

    /// Never attached: the caller maps the file itself.
    #[inline(always)]
    pub fn attach(_addr: *mut u8, _len: usize) -> Option<bool> {
        None
    }

    /// Never attached: the caller unmaps itself.
    #[inline(always)]
    pub fn detach(_addr: *mut u8, _len: usize) -> bool {
        false
    }

    /// No fault is the model's without it.
    #[inline(always)]
    pub fn serve_fault(_addr: usize) -> bool {
        false
    }

    /// No site is ever switched off without the model (or, in an `ab-sites` build, the
    /// A/B switch: [`crate::ab::take_cpu_cas`]).
    #[inline(always)]
    pub fn take_cas_off() -> bool {
        #[cfg(feature = "ab-sites")]
        return crate::ab::take_cpu_cas();
        #[cfg(not(feature = "ab-sites"))]
        false
    }

    /// A CPU CAS: the model is not built in.
    #[inline(always)]
    pub fn cpu_cas(word: &AtomicU64, current: u64, new: u64) -> Result<u64, u64> {
        word.compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire)
    }

    /// A plain store: the model is not built in.
    #[inline(always)]
    pub fn cpu_store(word: &AtomicU64, value: u64) {
        word.store(value, Ordering::Release)
    }

    /// Nothing to write back: the model is not built in.
    #[inline(always)]
    pub fn evict_plain(_ptr: *const u8, _len: usize) {}

    /// The model's cache of one heap, as callers name it in either build.
    pub type Cache = NoCache;

    /// The model's cache of one heap: never made without the feature (a type of its own
    /// name, so the real `Cache` in `registry.rs` is the only one).
    #[derive(Debug)]
    pub enum NoCache {}

    impl NoCache {
        /// Never called: callers map a cache only when [`active`] (always false here).
        ///
        /// # Safety
        /// As the model's own `Cache::map`.
        pub unsafe fn map(
            _base: *mut u8,
            _fd: libc::c_int,
            _start: usize,
            _eager_end: usize,
            _total: usize,
        ) -> std::io::Result<NoCache> {
            unreachable!("no cache is mapped without the coherence-model feature")
        }
    }
}
