//! The backer's tests: backing ahead, populating, cold lists, 2 MiB pages.

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
    // Chunks the grows backed before the backer came to them stay in 4 KiB pages (on two busy
    // cores, most of them), but the backer's lead past the last grow, 4 MiB of large slabs,
    // is always offered: two chunks. The kernel may refuse one (no free 2 MiB page, a page
    // busy: CI's parallel tests saw it), so what is checked is what it collapsed.
    wait_until("the backer never offered a chunk", || backer.collapses() >= 2);
    if backer.collapsed[Kind::Large as usize].load(Ordering::Relaxed) == u64::MAX {
        eprintln!("this kernel has no MADV_COLLAPSE: nothing to test");
        return;
    }
    let done = backer.collapses_done().min(2);
    if done == 0 {
        eprintln!("the kernel refused every chunk offered: no mapping to check");
    }
    assert!(
        shmem_pmd_mapped() >= done << 21,
        "the {done} collapsed chunks are mapped with 2 MiB entries"
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
    // The kernel may refuse a chunk (no free 2 MiB page, a page busy): what it collapsed is
    // mapped so.
    let done = backer.collapses_done().min(1);
    assert!(shmem_pmd_mapped() >= done << 21, "{done} chunk collapsed, not mapped so");
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
