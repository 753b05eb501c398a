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
    /// 2 MiB chunks offered for huge pages ([`Backer::collapse`]).
    collapses: AtomicU64,
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
            if words.collapse(at, SIZE_HUGE_PAGE) == Collapse::Unsupported {
                self.collapsed[range].store(u64::MAX, Ordering::Relaxed);
                return;
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
mod tests {
    use crate::{Config, Heap, Kind};
    use podkv_hw::sync::Ordering;
    use std::alloc::Layout;
    use std::time::{Duration, Instant};

    fn config() -> Config {
        Config {
            create: true,
            small_bytes: 64 << 20,
            large_bytes: 64 << 20,
            huge_bytes: 0,
            ..Config::default()
        }
    }

    /// Polls `done` until it holds; fails, saying `what` never happened, after 20 s.
    fn wait_until(what: &str, done: impl Fn() -> bool) {
        let start = Instant::now();
        while !done() {
            assert!(start.elapsed() < Duration::from_secs(20), "{what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn wait_for_lead(heap: &Heap, kind: Kind) {
        let slabs = heap.slab_heap(kind);
        let lead = u64::from(heap.len(slabs)) + u64::from(slabs.count_back_ahead);
        wait_until("the backer never backed ahead", || {
            slabs.backed_ahead().load(Ordering::Acquire) >= lead
        });
    }

    #[test]
    fn grows_within_the_backers_lead_make_no_system_call() {
        let dir = tempfile::tempdir().unwrap();
        let heap = Heap::open(dir.path().join("heap"), &config()).unwrap();
        let t = heap.thread().unwrap();
        let small = heap.slab_heap(Kind::Small);
        let layout = Layout::from_size_align(1024, 8).unwrap();
        let mut blocks = vec![t.allocate(layout).unwrap()];
        let len = u64::from(heap.len(small));
        assert_eq!(
            heap.shared.slabs.backer().behind.load(Ordering::Relaxed),
            1,
            "the first grow"
        );
        wait_for_lead(&heap, Kind::Small);
        // Fill the slabs grown so far and the lead's first half: those grows find their
        // slabs backed.
        let per_slab = small.slab_bytes() as usize / 1024;
        while u64::from(heap.len(small)) < len + u64::from(small.count_back_ahead) / 2 {
            blocks.push(t.allocate(layout).unwrap());
        }
        blocks.extend((0..per_slab).map(|_| t.allocate(layout).unwrap()));
        assert!(u64::from(heap.len(small)) > len, "grew again");
        assert_eq!(heap.shared.slabs.backer().behind.load(Ordering::Relaxed), 1);
        for off in blocks {
            t.free(off);
        }
    }

    /// Bytes of shared memory this process maps with 2 MiB page-table entries.
    fn shmem_pmd_mapped() -> u64 {
        let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
        rollup
            .lines()
            .find_map(|l| l.strip_prefix("ShmemPmdMapped:"))
            .and_then(|kb| kb.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb << 10)
    }

    /// Whether `dir` is on tmpfs, where the kernel can collapse a file's pages (Linux 6.1).
    fn on_tmpfs(dir: &std::path::Path) -> bool {
        // SAFETY: `statfs` is plain old data; the call fills it in for a valid path.
        let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
        let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path and a valid out pointer.
        unsafe { libc::statfs(path.as_ptr(), &mut fs) == 0 && fs.f_type == libc::TMPFS_MAGIC }
    }

    #[test]
    fn slabs_in_use_are_mapped_with_2_mib_pages_and_keep_their_bytes() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        if !on_tmpfs(dir.path()) {
            eprintln!("/dev/shm is not tmpfs here: nothing to test");
            return;
        }
        let huge = Config {
            huge_pages: true,
            ..config()
        };
        let heap = Heap::open(dir.path().join("heap"), &huge).unwrap();
        let t = heap.thread().unwrap();
        let layout = Layout::from_size_align(32 << 10, 8).unwrap();
        // 16 MiB of large blocks, each written whole and stamped with its offset.
        let blocks: Vec<_> = (0..512)
            .map(|_| {
                let off = t.allocate(layout).unwrap();
                // SAFETY: a fresh block of 32 KiB this thread owns.
                unsafe {
                    std::ptr::write_bytes(heap.resolve(off), 0x5A, 32 << 10);
                    (heap.resolve(off) as *mut u64).write(off.0);
                }
                off
            })
            .collect();
        let backer = heap.shared.slabs.backer();
        wait_until("the backer never collapsed a chunk", || backer.collapses() >= 4);
        if backer.collapsed[Kind::Large as usize].load(Ordering::Relaxed) == u64::MAX {
            eprintln!("this kernel has no MADV_COLLAPSE: nothing to test");
            return;
        }
        assert!(
            shmem_pmd_mapped() >= 4 << 20,
            "the collapsed chunks are mapped with 2 MiB entries"
        );
        for &off in &blocks {
            // SAFETY: as above; the block is still allocated.
            assert_eq!(unsafe { (heap.resolve(off) as *const u64).read() }, off.0);
            t.free(off);
        }
        // Off (the default), the backer leaves the pages as they are.
        let other = Heap::open(dir.path().join("plain"), &config()).unwrap();
        let t = other.thread().unwrap();
        let blocks: Vec<_> = (0..512).map(|_| t.allocate(layout).unwrap()).collect();
        wait_for_lead(&other, Kind::Large);
        assert_eq!(other.shared.slabs.backer().collapses(), 0);
        blocks.into_iter().for_each(|off| t.free(off));
    }

    #[test]
    fn the_stores_bucket_words_are_mapped_with_2_mib_pages_by_default() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        if !on_tmpfs(dir.path()) {
            return;
        }
        let heap = Heap::open(dir.path().join("heap"), &config()).unwrap();
        let area = heap.hwcc_user();
        area.back(6 << 20).unwrap();
        let word = area.word(8);
        word.store(42, Ordering::Release);
        let backer = heap.shared.slabs.backer();
        // The store backs its area without waking the backer: an idle wake collapses it.
        wait_until("the backer never collapsed the area", || {
            backer.collapses() >= 2
                || backer.collapsed[super::RANGE_HWCC_USER].load(Ordering::Relaxed) == u64::MAX
        });
        if backer.collapsed[super::RANGE_HWCC_USER].load(Ordering::Relaxed) == u64::MAX {
            eprintln!("this kernel has no MADV_COLLAPSE: nothing to test");
            return;
        }
        assert!(shmem_pmd_mapped() >= 2 << 20);
        assert_eq!(area.word(8).load(Ordering::Acquire), 42, "the word kept its value");
        assert_eq!(
            backer.collapsed[Kind::Large as usize].load(Ordering::Relaxed),
            u64::MAX,
            "slabs stay in 4 KiB pages by default"
        );
    }

    /// Page faults this thread has taken so far (minor: the heap's pages are in memory).
    fn faults_of_this_thread() -> i64 {
        // SAFETY: `rusage` is plain old data; getrusage fills it in.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: a valid out pointer; RUSAGE_THREAD is this thread's own counters.
        assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) }, 0);
        usage.ru_minflt
    }

    #[test]
    fn slabs_within_the_populated_lead_take_no_page_fault_at_their_first_stores() {
        let dir = tempfile::tempdir().unwrap();
        let heap = Heap::open(dir.path().join("heap"), &config()).unwrap();
        let t = heap.thread().unwrap();
        let large = heap.slab_heap(Kind::Large);
        let layout = Layout::from_size_align(100_000, 8).unwrap();
        let mut blocks = vec![t.allocate(layout).unwrap()];
        let len = u64::from(heap.len(large));
        let backer = heap.shared.slabs.backer();
        let ahead = u64::from(large.count_populate_ahead());
        let wait_for_population = || {
            let lead = u64::from(heap.len(large)) + ahead;
            wait_until("the backer never populated ahead", || {
                backer.populated(Kind::Large) >= lead
            });
        };
        wait_for_population();
        if backer.populated(Kind::Large) == u64::MAX {
            eprintln!("this kernel has no MADV_POPULATE_WRITE: nothing to test");
            return;
        }
        // Fill four slabs past the first grow's (which the backer had not reached), each block
        // once the backer has populated its lead: each page is written for the first time,
        // by this thread.
        let first_new = large.data_at + (len << large.shift);
        let (mut faults, mut pages) = (0, 0);
        while u64::from(heap.len(large)) < len + 4 {
            wait_for_population();
            let off = t.allocate(layout).unwrap();
            blocks.push(off);
            if off.0 >= first_new {
                let before = faults_of_this_thread();
                // SAFETY: a fresh block of 100 000 bytes, this thread's.
                unsafe { std::ptr::write_bytes(t.resolve(off), 7, 100_000) };
                faults += faults_of_this_thread() - before;
                pages += 100_000 / 4096;
            }
        }
        assert!(pages > 300, "{pages} pages written");
        // Without the population every page faults once; a few stray ones (the kernel may
        // split or reclaim) are not the point.
        assert!(faults < pages / 16, "{faults} faults for {pages} pages written");
        for off in blocks {
            t.free(off);
        }
    }

    #[test]
    fn a_heap_is_closed_when_its_last_handle_is_dropped_while_the_backer_works() {
        // The file is truncated the moment the user lets go: a close or a backing that ran
        // later, on the backer's thread, would fault on it (SIGBUS) or grow it again.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("heap");
        let layout = Layout::from_size_align(300_000, 8).unwrap();
        for _ in 0..30 {
            let heap = Heap::open(&path, &config()).unwrap();
            let t = heap.thread().unwrap();
            let blocks: Vec<_> = (0..8).map(|_| t.allocate(layout).unwrap()).collect();
            for off in blocks {
                t.free(off);
            }
            drop(t);
            drop(heap);
            let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            file.set_len(0).unwrap();
            std::thread::sleep(Duration::from_millis(2));
            assert_eq!(file.metadata().unwrap().len(), 0, "the closed heap's file grew again");
        }
    }

    #[test]
    fn a_grow_finds_slabs_another_opener_backed_without_backing_them_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("heap");
        let first = Heap::open(&path, &config()).unwrap();
        let t = first.thread().unwrap();
        let layout = Layout::from_size_align(100_000, 8).unwrap();
        let block = t.allocate(layout).unwrap();
        wait_for_lead(&first, Kind::Large);
        let second = Heap::open(
            &path,
            &Config {
                create: false,
                ..config()
            },
        )
        .unwrap();
        let u = second.thread().unwrap();
        let large = second.slab_heap(Kind::Large);
        let len = second.len(large);
        let mut blocks = Vec::new();
        while second.len(large) == len {
            blocks.push(u.allocate(layout).unwrap());
        }
        let behind = second.shared.slabs.backer().behind.load(Ordering::Relaxed);
        assert_eq!(behind, 0, "the file said the slabs were backed");
        for off in blocks {
            u.free(off);
        }
        t.free(block);
    }

    #[test]
    fn a_note_of_a_backed_slab_holds_only_at_the_release_count_it_was_taken_at() {
        let backer = super::Backer::new(false, false);
        backer.note_backed_cold(Kind::Large, 5, 3);
        assert!(backer.backed_cold_at(Kind::Large, 5, 3));
        assert!(!backer.backed_cold_at(Kind::Large, 5, 4), "released since");
        assert!(!backer.backed_cold_at(Kind::Small, 5, 3), "the other heap's slab 5");
        assert!(!backer.backed_cold_at(Kind::Large, 6, 3));
        backer.note_backed_cold(Kind::Large, 5 + super::COUNT_COLD_NOTES as u32, 3);
        assert!(
            !backer.backed_cold_at(Kind::Large, 5, 3),
            "a slab of the same index took the note's place"
        );
    }

    #[test]
    fn a_cold_pop_after_the_backer_backed_the_lists_head_makes_no_system_call() {
        let dir = tempfile::tempdir().unwrap();
        let heap = Heap::open(dir.path().join("heap"), &config()).unwrap();
        let t = heap.thread().unwrap();
        let large = heap.slab_heap(Kind::Large);
        // One block per large slab; freed, the slot keeps `count_keep_unsized`, the warm list
        // takes `count_warm_max` and the rest go cold, their pages released.
        let layout = Layout::from_size_align(300_000, 8).unwrap();
        let cold = 2 * large.count_back_cold;
        let slabs = large.count_keep_unsized + large.count_warm_max + cold;
        let blocks: Vec<_> = (0..slabs).map(|_| t.allocate(layout).unwrap()).collect();
        for off in blocks {
            t.free(off);
        }
        let backer = heap.shared.slabs.backer();
        let popped_by_self = || backer.behind_cold.load(Ordering::Relaxed);
        // Kept and warm slabs (and a class's last sized slab, kept sized) need no backing;
        // the first cold pop backs its own slab.
        let len = heap.len(large);
        let mut blocks = Vec::new();
        while popped_by_self() == 0 {
            assert!(blocks.len() <= slabs as usize - cold as usize + 1);
            blocks.push(t.allocate(layout).unwrap());
        }
        assert!(blocks.len() >= (large.count_keep_unsized + large.count_warm_max) as usize);
        assert_eq!(popped_by_self(), 1);
        wait_until("the backer never backed the cold list's head", || {
            backer.backed_cold.load(Ordering::Relaxed) >= u64::from(large.count_back_cold)
        });
        for _ in 0..large.count_back_cold {
            let off = t.allocate(layout).unwrap();
            // SAFETY: a fresh block of 300 000 bytes: its pages must be there to write.
            unsafe { std::ptr::write_bytes(t.resolve(off), 7, 300_000) };
            blocks.push(off);
        }
        assert_eq!(heap.len(large), len, "they came off the cold list");
        assert_eq!(popped_by_self(), 1, "the backer had backed them");
        for off in blocks {
            t.free(off);
        }
    }
}
