//! Named crash points (feature `crash-points`): one at every window between the log, the
//! writes and the CAS of every transition, so a test can kill a process at each in turn and
//! prove recovery finishes what it was doing.
//!
//! A process arms one point through the environment: `PODKV_CRASH_POINT=<name>` and optionally
//! `PODKV_CRASH_SKIP=<n>` (pass the point `n` times first). When the armed point is reached the
//! thread there sends itself SIGKILL, which ends the whole process before that thread runs on:
//! no unwinding, no destructors, as in a real crash. With
//! `PODKV_CRASH_STOP=1` it sends itself SIGSTOP instead and stays frozen at the point, its
//! slots still held by a live process, until the test has acted on the heap and kills it; with
//! `PODKV_CRASH_STOP=once` it stops there once and carries on when continued (a stall, for
//! the fence's tests: [`STALL_POINTS`]). Without the feature `crash_point!` compiles to nothing.

/// Every crash point, in the order a transition passes them. The crash test runs each; a point
/// missing here fails the debug assertion in [`hit`], and a point never reached fails the test.
pub const POINTS: &[&str] = &[
    "alloc.logged",
    "free.logged",
    "free_local.logged",
    "remote_free.logged",
    "flush.logged",
    "flush.counted",
    "flush.cleared",
    "took_slab.logged",
    "took_slab.meta",
    "to_sized.logged",
    "to_sized.popped",
    "to_sized.reset",
    "to_sized.meta",
    "push_front.linked",
    "to_detached.logged",
    "to_detached.meta",
    "to_detached.kept",
    "reattach.logged",
    "reattach.cas",
    "reattach.meta",
    "push_back.linked",
    "push_back.next",
    "to_unsized.logged",
    "to_unsized.meta",
    "unlink.next",
    "unlink.list",
    "keep.logged",
    "keep.linked",
    "push_global.logged",
    "push_global.popped",
    "push_global.pushed",
    "pop_global.logged",
    "pop_global.popped",
    "grow.logged",
    "grow.grown",
    "grow.linked",
    "disown.logged",
    "disown.meta",
    "disown.empty",
    "morph.logged",
    "morph.old",
    "morph.meta",
    "morph.carved",
    "morph.counted",
    "morph_free.logged",
    "unblock.logged",
    "unblock.old",
    "unblock.freed",
    "unblock.counted",
    "unblock.ended",
    // The huge heap (`huge/`): claiming a run, allocating, freeing, unmapping, reclaiming,
    // giving runs back, and the sweep of released slots.
    "huge_claim.logged",
    "huge_claim.range",
    "huge_alloc.logged",
    "huge_alloc.backed",
    "huge_alloc.live",
    "huge_alloc.published",
    "huge_alloc.mapped",
    "huge_alloc.done",
    "huge_free.logged",
    "huge_free.marked",
    "huge_free.done",
    "huge_unmap.unmapped",
    "huge_reclaim.logged",
    "huge_reclaim.punched",
    "huge_reclaim.emptied",
    "huge_release.logged",
    "huge_release.given",
    "huge_sweep.claimed",
    "huge_sweep.collected",
];

/// Stall points: windows of lease mode's fence (`lease.rs`) where a test stops an owner
/// (`PODKV_CRASH_STOP=once`), lets a peer fence its slot and work, then resumes it. Armed and
/// marked as crash points are; not part of the crash test's list.
pub const STALL_POINTS: &[&str] = &[
    "claim.beaten",
    "release.written",
    "renew.read",
    "rejoin.beaten",
];

/// Marks a crash point (see the module docs).
#[macro_export]
macro_rules! crash_point {
    ($name:literal) => {
        #[cfg(feature = "crash-points")]
        $crate::crash::hit($name);
    };
}

#[cfg(feature = "crash-points")]
mod armed {
    use podkv_hw::sync::mapped::{AtomicU64, Ordering};
    use std::sync::OnceLock;

    static ARMED: OnceLock<Option<(String, u64)>> = OnceLock::new();
    static PASSED: AtomicU64 = AtomicU64::new(0);

    /// Called at a crash point: kills the process if it is the armed one.
    #[cold]
    pub fn hit(name: &'static str) {
        debug_assert!(
            super::POINTS.contains(&name) || super::STALL_POINTS.contains(&name),
            "crash point {name} not in POINTS"
        );
        let armed = ARMED.get_or_init(|| {
            let point = std::env::var("PODKV_CRASH_POINT").ok()?;
            let skip = std::env::var("PODKV_CRASH_SKIP")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            Some((point, skip))
        });
        if let Some((point, skip)) = armed {
            if point != name {
                return;
            }
            let passed = PASSED.fetch_add(1, Ordering::Relaxed);
            let stop = std::env::var_os("PODKV_CRASH_STOP");
            if stop.as_ref().is_some_and(|v| v == "once") {
                if passed == *skip {
                    // A stall: stop here once; the test continues the process.
                    signal_this_thread(libc::SIGSTOP);
                }
                return;
            }
            if passed >= *skip {
                let stop = stop.is_some_and(|v| v == "1");
                loop {
                    // A stopped process is killed by the test; should it be continued
                    // instead, it stops again.
                    signal_this_thread(if stop { libc::SIGSTOP } else { libc::SIGKILL });
                }
            }
        }
    }

    /// Sends `sig` to the calling thread: SIGSTOP still stops, and SIGKILL kills, the whole
    /// process, but the thread at the point handles it on its way out of the system call, so
    /// it runs no further. `kill(getpid(), ..)` addresses the process, and Linux hands such a
    /// signal to the main thread if that thread can take it (a test's, blocked in `join`, can):
    /// the thread at the point ran on until the main thread got a CPU and stopped the group. A
    /// stall at `release.written` so finished its release, and when the child's other thread
    /// released too meanwhile, the child stopped holding no slot (the fence test's flake).
    fn signal_this_thread(sig: libc::c_int) {
        // SAFETY: `raise` sends a signal to the calling thread (a `tgkill` of itself); it has no
        // memory preconditions.
        unsafe { libc::raise(sig) };
    }
}

#[cfg(feature = "crash-points")]
pub use armed::hit;
