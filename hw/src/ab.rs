//! A/B windows: one process-wide switch that the YCSB and trace runner turns on and off in
//! alternate windows of its timed phase (`--ab-windows`), so that two variants of some code
//! run interleaved in one process, on one heap, under the same machine noise.
//!
//! # Why
//! On a shared VM two runs of one binary differ by up to a third (other guests, the host
//! backing the guest's memory anew after it was freed): a change worth a few percent cannot
//! be told from noise by comparing runs. Windows of a millisecond alternate far faster than
//! that noise moves, so the ratio of the time per operation with the switch on to the time
//! with it off measures the variant alone.
//!
//! # Use
//! - **A variant of the code:** in a build for the experiment, branch on [`on`] where the
//!   variant differs, and run `podkv ycsb … --ab-windows 1000`. Nothing in the project's
//!   own code reads the switch: it is off in every run without the flag.
//! - **What coherence sites cost:** a build with the `ab-sites` feature of this crate
//!   (`cargo build --release -p podkv --features podkv-hw/ab-sites`) switches off every
//!   write-back and invalidation site ([`crate::site!`]) whose name starts with one of the
//!   comma-separated prefixes in `PODKV_AB_SITES`, while the switch is on, and makes every
//!   such hook site ([`crate::cas_site!`]) a CPU CAS or store (`scripts/coherence-costs`).
//!   Such a build breaks the SWcc protocol and mCAS in those windows (this machine's memory
//!   is coherent, so the runs stay correct here): for measuring, never for serving.
//! - With neither, both halves run the same code, and the ratio shows the method's own noise.

#[cfg(feature = "ab-sites")]
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

/// The switch (process-local).
static ON: AtomicBool = AtomicBool::new(false);

/// Whether the switch is on (see the module doc).
#[inline(always)]
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Turns the switch on or off (the runner, at each window's edge).
#[inline]
pub fn set(on: bool) {
    ON.store(on, Ordering::Relaxed);
}

#[cfg(feature = "ab-sites")]
thread_local! {
    /// An `ab-sites` build's hook site switched off: the thread's next hook CAS or store is
    /// a CPU one ([`arm_cpu_cas`], [`take_cpu_cas`]). Other builds have no such state.
    static CPU_CAS: Cell<bool> = const { Cell::new(false) };
}

/// Makes the calling thread's next hook CAS or store a CPU one (a `cas_site!` of an
/// `ab-sites` build, while the switch is on and the site selected).
#[cfg(feature = "ab-sites")]
#[inline]
pub fn arm_cpu_cas() {
    CPU_CAS.with(|armed| armed.set(true));
}

/// Whether the calling thread's next hook CAS or store is to be a CPU one; disarms it.
#[cfg(feature = "ab-sites")]
#[inline]
pub fn take_cpu_cas() -> bool {
    CPU_CAS.with(|armed| armed.replace(false))
}

/// Whether `list` (comma-separated prefixes, as in `PODKV_AB_SITES`) selects the site `name`.
pub fn selects(list: &str, name: &str) -> bool {
    list.split(',')
        .map(str::trim)
        .any(|prefix| !prefix.is_empty() && name.starts_with(prefix))
}

/// Whether `PODKV_AB_SITES` selects the site `name` (read by each site once, under the
/// `ab-sites` feature).
pub fn site_selected(name: &str) -> bool {
    std::env::var("PODKV_AB_SITES").is_ok_and(|list| selects(&list, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_selects_sites_by_prefix() {
        assert!(selects("store.slot.", "store.slot.write_back"));
        assert!(selects("alloc., store.claim.", "store.claim.write_back"));
        assert!(!selects("store.slot.", "store.claim.write_back"));
        assert!(
            !selects("", "store.slot.write_back"),
            "an empty list selects nothing"
        );
        assert!(
            !selects(",", "store.slot.write_back"),
            "nor do empty prefixes"
        );
    }

    #[cfg(feature = "ab-sites")]
    #[test]
    fn an_armed_cpu_cas_is_taken_once_by_its_thread() {
        assert!(!take_cpu_cas());
        arm_cpu_cas();
        assert!(
            !std::thread::spawn(take_cpu_cas).join().unwrap(),
            "another thread's"
        );
        assert!(take_cpu_cas());
        assert!(!take_cpu_cas(), "taken once");
    }

    #[test]
    fn the_switch_is_off_until_set() {
        assert!(!on());
        set(true);
        assert!(on());
        set(false);
        assert!(!on());
    }
}
