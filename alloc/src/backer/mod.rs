//! Backing ahead: a process's thread that backs the next few slabs of each slab heap before any
//! operation needs them.
//!
//! # Why
//! Growing a slab heap happens on an allocation's path, and its slabs' pages must be backed
//! (`fallocate`: constitution rule 8, so that running out of memory is an error value rather
//! than a `SIGBUS` later) before `len` names them. On tmpfs that system call allocates and
//! zeroes every page of the range: 33 µs on average for a large slab here, and up to several
//! milliseconds when the machine is busy — the slowest step any operation took (measured by
//! `podkv heap chaos`, whose tail it was).
//!
//! # How
//! Each process that opens a heap on a file runs one backer thread. Whenever a grow in this
//! process uses slabs past what the backer last backed, it wakes the backer, which backs
//! `[len, len + count_back_ahead)` of each slab heap (remote words, descriptors and data, the
//! same ranges a grow backs) and notes how far it got in a header word per slab heap (raised
//! only, after the backing succeeded). A grow whose slabs lie below that word skips the system
//! call, whichever process's backer backed them; any other grow backs its slabs itself, as
//! before, so no operation ever waits for a backer and a dead or slow one only costs time.
//! Slabs past `len` are never released, so the word cannot go stale. It is a file's word only
//! (a device needs no backing and has no backer), and a file's processes share one host, so
//! a plain CPU atomic serves in every coherence mode.
//!
//! The price: up to `count_back_ahead` slabs per slab heap backed before they are used (a
//! bounded amount: `SlabHeaps::slack_bytes`), which also counts against the file system's space
//! a little earlier. A device (DAX) needs no backing and gets no backer.
//!
//! # Populating
//! Backing puts pages in the file, but each process still takes a page fault at its first
//! store into each page of its mapping: about 2.2 M of them to load 8.4 M items of 1 KiB, on
//! the operations' path. So the backer also populates the data of the slabs in its lead in
//! this process's mapping (`MADV_POPULATE_WRITE`, one call per batch, no trap per page), and
//! a grow wakes it while this process's population is behind, even if another process's
//! backer backed the slabs. The pages are the file's already, but mapped they count towards
//! the process's PSS, so only the first `BYTES_POPULATE_AHEAD` (256 KiB, at least one slab) of
//! the lead are populated: the grows wake the backer often enough for that to stay ahead. A kernel without the call (before Linux 5.14) and the coherence model (whose copy
//! of the heap fills on touch) leave the pages to fault as before.
//!
//! # The cold list
//! A slab pushed on the cold list has its pages released (rule 7), so the thread that pops it
//! must back them again: a 512 KiB `fallocate` for a large slab (65 µs here when quiet, backing
//! pages that are already there costs nearly as much), and `podkv heap chaos` pops hundreds of
//! them after kills, when a dead process's slabs were released and the restarted one wants
//! slabs again. So a cold pop also wakes this process's backer, which backs the data of the
//! next `count_back_cold` slabs of the list and notes, in this process, each slab with the
//! count of releases its `pages` word held when the backer read it
//! ([`crate::slab::SlabDesc::pages`]); a popper of this process that finds its slab noted at
//! the count the word still holds makes no system call. Every release bumps the count after
//! punching, so a note taken before a release never matches after it.
//!
//! Nothing is owned or logged for this, and the backer writes nothing in the heap: it only
//! reads the list (stale links lead it to slabs in use, which backing cannot harm) and the
//! words, which only a slab's owner writes. (It once set a bit of the word by CAS: a write by
//! a non-owner into a descriptor line, whose cached copy, written back later, could carry the
//! owner's older bitset words back with it.) A backer that dies leaves nothing: the notes
//! die with its process, and the next popper backs again. The price is rule 7's: up to
//! `count_back_cold` free slabs per slab heap keep their pages while a burst of pops drains
//! the list, counted in `SlabHeaps::slack_bytes`. Pushes never wake the backer, so slabs
//! released in a burst of frees stay released.

use crate::class::Kind;
use crate::file::{Collapse, Words};
// Process-local state shared with a real OS thread: std's atomics in every build.
use podkv_hw::sync::mapped::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// The backer's state, shared by the process's threads and the backer thread. How far the
/// slab heaps are backed is not here but in the heap's header (`SlabHeap::backed_ahead`), so
/// that every process's grows benefit from every process's backer.
#[derive(Debug, Default)]
pub(crate) struct Backer {
    /// Grows in this process that had to back their own slabs (the backer was behind).
    behind: AtomicU64,
    /// Cold pops in this process that had to back their slab's pages themselves.
    behind_cold: AtomicU64,
    /// Cold-list slabs this backer backed.
    backed_cold: AtomicU64,
    /// Per slab heap (index `kind`): how many of its slabs this process's mapping has
    /// populated (page-table entries made by the backer, so that the slabs' first stores take
    /// no fault). Written by the backer thread only.
    populated: [AtomicU64; 2],
    /// Per range the backer maps as 2 MiB pages (the slab heaps' data by `kind`, then
    /// [`RANGE_HWCC_USER`]): the file offset below which this process offered it to the
    /// kernel ([`Backer::collapse`]); `u64::MAX` once the kernel said it never will. Written by
    /// the backer thread only.
    collapsed: [AtomicU64; 3],
    /// 2 MiB chunks offered for huge pages ([`Backer::collapse`]). Written by the backer
    /// thread only; read by tests.
    collapses: AtomicU64,
    /// Of those, the chunks the kernel collapsed (it may refuse one: no free huge page, a
    /// page busy). Written by the backer thread only; read by tests.
    collapsed_done: AtomicU64,
    /// Set when a grow or a cold pop wants the backer to run.
    wanted: AtomicBool,
    /// Bit `kind`: a pop off that slab heap's cold list since the backer last looked at it.
    wanted_cold: AtomicU64,
    /// Cold-list slabs this process's backer backed: `(kind, slab + 1, releases)` packed by
    /// [`cold_note`], at the index [`cold_index`] picks (a later slab of the same index
    /// replaces the note: a missed note costs one system call).
    cold_notes: [AtomicU64; COUNT_COLD_NOTES],
    /// What the backer sleeps on. A grow only ever *tries* the lock to wake it, so no
    /// operation waits on a lock (nor deadlocks on one a fork left held); a wake lost that
    /// way costs at most one `PERIOD_IDLE` before the backer sees `wanted`.
    sleep: Mutex<()>,
    wake: Condvar,
}

/// Notes of backed cold-list slabs a process keeps: several times `count_back_cold` of both
/// slab heaps.
const COUNT_COLD_NOTES: usize = 32;
const SHIFT_NOTE_SLAB: u32 = 38;

/// A note of slab `slab` of heap `kind` backed when its release count was `releases` (the
/// count's low 38 bits: a note is compared with the count of the same slab a few releases
/// later at most). Never zero: the slab is stored plus one.
fn cold_note(kind: Kind, slab: u32, releases: u64) -> u64 {
    (kind as u64) << 63
        | (u64::from(slab) + 1) << SHIFT_NOTE_SLAB
        | releases & ((1 << SHIFT_NOTE_SLAB) - 1)
}

fn cold_index(kind: Kind, slab: u32) -> usize {
    (slab as usize ^ (kind as usize) << 5) % COUNT_COLD_NOTES
}

/// The index of the user's HWcc area among the ranges [`Backer::collapse`] tracks (after the
/// two slab heaps'); its bucket words are read as randomly as the items.
pub(crate) const RANGE_HWCC_USER: usize = 2;

/// A huge page (x86-64's PMD size), the unit the backer offers for collapse.
pub(crate) const SIZE_HUGE_PAGE: u64 = 2 << 20;

/// Most 2 MiB chunks one [`Backer::collapse`] offers (128 MiB), so that a process that opens
/// a large heap keeps backing ahead of its grows while it maps the rest.
const COUNT_COLLAPSE_PASS: u64 = 64;

/// How long the backer sleeps between looks at whether its heap is still open.
const PERIOD_IDLE: Duration = Duration::from_millis(200);

impl Backer {
    /// A backer that maps the slabs it backs as 2 MiB pages when `huge_pages`, and the user's
    /// HWcc area when `huge_area` ([`Backer::collapse`]).
    pub(crate) fn new(huge_pages: bool, huge_area: bool) -> Backer {
        let backer = Backer::default();
        for (range, on) in backer.collapsed.iter().zip([huge_pages, huge_pages, huge_area]) {
            if !on {
                range.store(u64::MAX, Ordering::Relaxed);
            }
        }
        backer
    }

    /// Whether this backer maps anything as 2 MiB pages.
    pub(crate) fn huge_pages(&self) -> bool {
        self.collapsed.iter().any(|r| r.load(Ordering::Relaxed) != u64::MAX)
    }

    /// Whether this backer maps the slabs it backs as 2 MiB pages.
    pub(crate) fn huge_slabs(&self) -> bool {
        self.collapsed[..2].iter().any(|r| r.load(Ordering::Relaxed) != u64::MAX)
    }

    /// Notes a grow that backs its own slabs.
    #[inline]
    pub(crate) fn missed(&self) {
        self.behind.fetch_add(1, Ordering::Relaxed);
    }

    /// Notes a cold pop that backs its own slab's pages.
    #[inline]
    pub(crate) fn missed_cold(&self) {
        self.behind_cold.fetch_add(1, Ordering::Relaxed);
    }

    /// Called after a pop off slab heap `kind`'s cold list: the backer backs the list's next
    /// slabs.
    #[inline]
    pub(crate) fn cold_popped(&self, kind: Kind) {
        self.wanted_cold.fetch_or(1 << kind as u32, Ordering::AcqRel);
        self.want();
    }

    /// Takes the note of which slab heaps' cold lists were popped since the last look (bit
    /// `kind`).
    pub(crate) fn take_cold_popped(&self) -> u64 {
        self.wanted_cold.swap(0, Ordering::AcqRel)
    }

    /// Notes that the backer backed slab `slab` of heap `kind` after reading its release
    /// count `releases` (read before backing, so a release since makes the note stale).
    pub(crate) fn note_backed_cold(&self, kind: Kind, slab: u32, releases: u64) {
        self.cold_notes[cold_index(kind, slab)]
            .store(cold_note(kind, slab, releases), Ordering::Release);
    }

    /// Whether this process's backer backed slab `slab` of heap `kind` since its release
    /// count became `releases`, as the popper just read it.
    pub(crate) fn backed_cold_at(&self, kind: Kind, slab: u32, releases: u64) -> bool {
        self.cold_notes[cold_index(kind, slab)].load(Ordering::Acquire)
            == cold_note(kind, slab, releases)
    }

    /// Counts cold-list slabs the backer backed.
    pub(crate) fn backed_cold(&self, count: u32) {
        self.backed_cold
            .fetch_add(u64::from(count), Ordering::Relaxed);
    }

    /// Called after a grow of slab heap `kind` to `len` slabs, with the slabs backed so far
    /// and the leads the backer keeps (`back` slabs backed, `populate` of them populated):
    /// wakes the backer unless its whole lead is still there, backed in the file and
    /// populated in this process.
    #[inline]
    pub(crate) fn grown(&self, kind: Kind, len: u64, backed: u64, (back, populate): (u32, u32)) {
        let populated = self.populated[kind as usize].load(Ordering::Relaxed);
        let (back, populate) = (u64::from(back), u64::from(populate));
        if back == 0 || (backed >= len + back && populated >= len + populate) {
            return;
        }
        self.want();
    }

    /// How many of slab heap `kind`'s slabs this process has populated.
    pub(crate) fn populated(&self, kind: Kind) -> u64 {
        self.populated[kind as usize].load(Ordering::Relaxed)
    }

    /// Notes that this process has populated slab heap `kind` up to slab `to` (the backer
    /// thread only).
    pub(crate) fn note_populated(&self, kind: Kind, to: u64) {
        self.populated[kind as usize].fetch_max(to, Ordering::Relaxed);
    }

    /// Offers this process's mapping of `[start, end)` to the kernel as 2 MiB pages: each
    /// aligned 2 MiB chunk once, past what it offered of `range` before, at most
    /// [`COUNT_COLLAPSE_PASS`] chunks a call (the backer thread only). The range must be
    /// backed and hold no released page: a collapse backs a hole again (rule 7). Slabs the
    /// backer has just backed past `len`, and the user's HWcc area, which is never released,
    /// are such ranges.
    ///
    /// A heap of millions of items in 4 KiB pages misses the TLB on nearly every bucket word,
    /// block and item a lookup reads, and the walk's own page-table loads miss the cache too;
    /// mimalloc's heap, in transparent huge pages, does not. `MADV_COLLAPSE` (Linux 6.1)
    /// works on a tmpfs file whatever `shmem_enabled` says. A chunk collapsed before its
    /// first use costs the backer a huge page's allocation and clearing, and spares the
    /// operations one page fault per 4 KiB.
    pub(crate) fn collapse(&self, words: Words, range: usize, start: u64, end: u64) {
        let done = self.collapsed[range].load(Ordering::Relaxed);
        if done == u64::MAX {
            return;
        }
        let from = start.max(done).next_multiple_of(SIZE_HUGE_PAGE);
        let to = (end / SIZE_HUGE_PAGE * SIZE_HUGE_PAGE)
            .min(from + COUNT_COLLAPSE_PASS * SIZE_HUGE_PAGE);
        let mut at = from;
        while at < to {
            match words.collapse(at, SIZE_HUGE_PAGE) {
                Collapse::Unsupported => {
                    self.collapsed[range].store(u64::MAX, Ordering::Relaxed);
                    return;
                }
                Collapse::Done => {
                    self.collapsed_done.fetch_add(1, Ordering::Relaxed);
                }
                Collapse::Refused => {}
            }
            self.collapses.fetch_add(1, Ordering::Relaxed);
            at += SIZE_HUGE_PAGE;
        }
        if to > from {
            self.collapsed[range].fetch_max(to, Ordering::Relaxed);
        }
    }

    /// 2 MiB chunks this process's backer offered for huge pages so far.
    #[cfg(test)]
    pub(crate) fn collapses(&self) -> u64 {
        self.collapses.load(Ordering::Relaxed)
    }

    /// Of those, the chunks the kernel collapsed.
    #[cfg(test)]
    pub(crate) fn collapses_done(&self) -> u64 {
        self.collapsed_done.load(Ordering::Relaxed)
    }

    /// Wakes the backer. A grow or pop only ever *tries* the lock, so no operation waits.
    #[inline]
    fn want(&self) {
        self.wanted.store(true, Ordering::Release);
        if let Ok(_sleeping) = self.sleep.try_lock() {
            self.wake.notify_one();
        }
    }

    /// Starts the backer thread of a heap. `work(wanted)` runs on every wake — `wanted` when
    /// a grow or a cold pop asked for backing, else after `PERIOD_IDLE` — and returns false
    /// once the heap is closed (it holds the heap weakly), which ends the thread.
    pub(crate) fn start(backer: Arc<Backer>, work: impl Fn(bool) -> bool + Send + 'static) {
        // Without the thread (the process is out of threads) every grow backs its own slabs,
        // as it always may.
        let _ = std::thread::Builder::new()
            .name("podkv-backer".into())
            .spawn(move || run(&backer, work));
    }
}

fn run(backer: &Backer, work: impl Fn(bool) -> bool) {
    loop {
        {
            let sleeping = backer.sleep.lock().unwrap_or_else(|e| e.into_inner());
            if !backer.wanted.load(Ordering::Acquire) {
                let _ = backer.wake.wait_timeout(sleeping, PERIOD_IDLE);
            }
        }
        if !work(backer.wanted.swap(false, Ordering::AcqRel)) {
            return;
        }
    }
}

#[cfg(test)]
mod tests;
