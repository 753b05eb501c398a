//! Pointer consistency across processes and the huge heap, with real processes: this test
//! binary re-executed with `PODKV_HUGE_CHILD=<role>|<heap path>` plays the other process.
//!
//! - a small heap grown by one process is usable in another at once (no remap call);
//! - 64 MiB and 1 GiB huge blocks made in one process are read and freed in another; both end
//!   up unmapped, the file's storage falls back, and the next block reuses range and descriptor;
//! - a null dereference, one just past the heap, one into unallocated huge address space and
//!   one into a freed huge block still die of SIGSEGV;
//! - a block freed by a thread that then exits, while another process still maps it, is
//!   reclaimed by that process's next allocator call (a sweep of released slots), which reuses
//!   its range; the next claimer of the released slot reuses its descriptor;
//! - threads of several processes allocate, hand over and free huge blocks; afterwards no huge
//!   block is left unreclaimed and the file's storage is back to its baseline.

use podkv_alloc::{Config, Heap, HugeBacking, Kind, Offset};
use std::alloc::Layout;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output};
use std::sync::atomic::Ordering::{Acquire, Release};
use std::time::{Duration, Instant};

const ENV_ROLE: &str = "PODKV_HUGE_CHILD";
const MIB: usize = 1 << 20;

fn config() -> Config {
    Config {
        small_bytes: 1 << 30,
        large_bytes: 1 << 30,
        slots: 64,
        ..Config::default()
    }
}

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, 8).unwrap()
}

/// Opening a heap reads the huge descriptors of the slots holding runs only: the pages of the
/// others (4 KiB each) stay untouched, so they cost no process any memory (at 1024 slots they
/// were 4 MiB of an idle server's PSS).
#[test]
fn opening_a_heap_touches_no_huge_descriptor_page_of_a_slot_without_runs() {
    if std::env::var_os(ENV_ROLE).is_some() {
        return;
    }
    let dir = shm_dir();
    let path = dir.path().join("heap");
    drop(Heap::open(&path, &config()).unwrap());
    let heap = Heap::open(
        &path,
        &Config {
            create: false,
            ..config()
        },
    )
    .unwrap();
    let layout = heap.layout();
    let start = heap.resolve(Offset(layout.huge_local)) as u64;
    let pages = (layout.huge_data - layout.huge_local).div_ceil(4096);
    // The file's pages exist (backed at open): whether this process maps them is in its page
    // tables, bit 63 of each page's entry in /proc/self/pagemap.
    let mut entries = vec![0u8; pages as usize * 8];
    let pagemap = std::fs::File::open("/proc/self/pagemap").unwrap();
    std::os::unix::fs::FileExt::read_exact_at(&pagemap, &mut entries, start / 4096 * 8).unwrap();
    let touched = entries
        .chunks_exact(8)
        .filter(|e| u64::from_le_bytes((*e).try_into().unwrap()) >> 63 != 0)
        .count();
    assert_eq!(
        touched, 0,
        "{touched} of {pages} pages of huge descriptors mapped"
    );
}

/// A fresh directory in `/dev/shm` (huge blocks are memory, not disk).
fn shm_dir() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm").unwrap()
}

fn spawn(role: &str, path: &std::path::Path) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(ENV_ROLE, format!("{role}|{}", path.display()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

fn succeeded(out: &Output) -> bool {
    if !out.status.success() {
        eprintln!(
            "child: {}\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out.status.success()
}

/// Waits (bounded) until root `i` is non-zero and returns it.
fn wait_root(heap: &Heap, i: usize) -> u64 {
    wait_root_of(heap, i, None)
}

/// As `wait_root`, failing at once if `child` exits first.
fn wait_root_of(heap: &Heap, i: usize, mut child: Option<&mut std::process::Child>) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v = heap.root(i).load(Acquire);
        if v != 0 {
            return v;
        }
        if let Some(status) = child.as_mut().and_then(|c| c.try_wait().unwrap()) {
            let mut err = String::new();
            let stderr = child.unwrap().stderr.as_mut().unwrap();
            std::io::Read::read_to_string(stderr, &mut err).unwrap();
            panic!("child exited ({status}) before setting root {i}: {err}");
        }
        assert!(Instant::now() < deadline, "root {i} never set");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Bytes of `path` this process maps at file offsets at or past `from` (huge mappings; the
/// kernel may merge the first one with the eager mapping below it).
fn huge_bytes_mapped_here(path: &std::path::Path, from: u64) -> u64 {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let name = path.canonicalize().unwrap();
    maps.lines()
        .filter(|l| l.ends_with(name.to_str().unwrap()))
        .map(|l| {
            let mut fields = l.split_whitespace();
            let (start, end) = fields.next().unwrap().split_once('-').unwrap();
            let len =
                u64::from_str_radix(end, 16).unwrap() - u64::from_str_radix(start, 16).unwrap();
            let offset = u64::from_str_radix(fields.nth(1).unwrap(), 16).unwrap();
            (offset + len).saturating_sub(offset.max(from))
        })
        .sum()
}

/// The children's entry point: runs only when re-executed with the role variable set.
#[test]
fn child() {
    let Ok(spec) = std::env::var(ENV_ROLE) else {
        return;
    };
    let (role, path) = spec.split_once('|').unwrap();
    let heap = Heap::open(path, &config()).expect("child opens the heap");
    match role {
        "grown" => child_reads_grown_small_heap(&heap),
        "huge" => child_reads_and_frees_huge_blocks(&heap, path.as_ref()),
        "null" => {
            // SAFETY: none: the point is that this dies of SIGSEGV.
            unsafe { std::ptr::read_volatile(std::ptr::null::<u64>()) };
        }
        "past-end" => {
            let end = heap
                .resolve(Offset(heap.layout().total - 1))
                .wrapping_add(1);
            // SAFETY: a PROT_NONE page just past the reservation (refusing to replace anything
            // there), so the read below faults whatever else this process maps.
            let guard = unsafe {
                libc::mmap(
                    end.cast(),
                    4096,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                    -1,
                    0,
                )
            };
            assert_eq!(guard, end.cast(), "the page past the heap is free");
            // SAFETY: none: dies of SIGSEGV.
            unsafe { std::ptr::read_volatile(end as *const u64) };
        }
        "unallocated-huge" => {
            let inside = heap.resolve(Offset(heap.layout().huge_data + (5 << 30)));
            // SAFETY: none: reserved but unallocated huge address space dies of SIGSEGV.
            unsafe { std::ptr::read_volatile(inside as *const u64) };
        }
        "freed-huge" => {
            let t = heap.thread().unwrap();
            let off = t.allocate(layout(4 * MIB)).unwrap();
            // SAFETY: a live 4 MiB block.
            unsafe { std::ptr::write_volatile(heap.resolve(off) as *mut u64, 7) };
            t.free(off);
            // SAFETY: none: a use after free of a huge block dies of SIGSEGV.
            unsafe { std::ptr::read_volatile(heap.resolve(off) as *const u64) };
        }
        "stress" => stress_worker(&heap),
        "handover" => child_frees_and_exits(&heap),
        other => panic!("unknown role {other}"),
    }
    std::process::exit(0);
}

fn child_reads_grown_small_heap(heap: &Heap) {
    heap.root(0).store(1, Release); // mapped, before the parent grows the heap
    let offset = Offset(wait_root(heap, 1));
    let p = heap.resolve(offset) as *mut u64;
    // SAFETY: the parent allocated 64 bytes at `offset` and published it only after writing.
    unsafe {
        assert_eq!(std::ptr::read_volatile(p), 0x005E_ED0F_6120);
        std::ptr::write_volatile(p.add(1), 0xB0B);
    }
    heap.root(2).store(1, Release);
}

fn child_reads_and_frees_huge_blocks(heap: &Heap, path: &std::path::Path) {
    let t = heap.thread().unwrap();
    for (root, size) in [(1, 64 * MIB), (2, 1024 * MIB)] {
        let offset = Offset(heap.root(root).load(Acquire));
        let p = heap.resolve(offset);
        // SAFETY: the parent wrote these bytes before publishing the live block's offset; the
        // first touch faults and the handler maps the block here.
        unsafe {
            assert_eq!(std::ptr::read_volatile(p as *const u64), offset.0);
            let last = p.add(size - 8) as *const u64;
            assert_eq!(std::ptr::read_volatile(last), !offset.0);
            std::ptr::write_volatile(p.add(8) as *mut u64, 0xB0B);
        }
    }
    let from = heap.layout().huge_data;
    assert_eq!(
        huge_bytes_mapped_here(path, from),
        (64 + 1024) << 20,
        "both blocks mapped here"
    );
    assert_eq!(heap.check().huge.mapped_here, 2);
    heap.root(3).store(1, Release);
    wait_root(heap, 4); // the parent saw our writes
    t.free(Offset(heap.root(1).load(Acquire)));
    t.free(Offset(heap.root(2).load(Acquire)));
    assert_eq!(
        huge_bytes_mapped_here(path, from),
        0,
        "the freer unmapped both"
    );
    assert_eq!(heap.check().huge.mapped_here, 0);
}

/// Allocates a 64 MiB block, publishes it, frees it once the parent mapped it, and lets its
/// slot go (the thread's handle drops) while the parent still maps the block.
fn child_frees_and_exits(heap: &Heap) {
    let offset = std::thread::scope(|s| {
        s.spawn(|| {
            let t = heap.thread().unwrap();
            let offset = t.allocate(layout(64 * MIB)).unwrap();
            // SAFETY: a live 64 MiB block of ours.
            unsafe { std::ptr::write_volatile(heap.resolve(offset) as *mut u64, offset.0) };
            heap.root(1).store(offset.0, Release);
            wait_root(heap, 2); // the parent maps it
            t.free(offset);
            offset
        })
        .join()
        .unwrap()
    });
    let left = heap.huge_allocation(offset).expect("still a descriptor");
    assert_eq!(
        heap.check().huge.freed,
        1,
        "the parent's mapping keeps {left:?} from being reclaimed"
    );
}

#[test]
fn a_block_freed_by_an_exited_thread_is_reclaimed_by_another_process_s_next_call() {
    if std::env::var(ENV_ROLE).is_ok() {
        return;
    }
    let dir = shm_dir();
    let path = dir.path().join("heap");
    // Two slots: the parent's thread holds one, so the child's thread and the next claimer
    // both take the other.
    let heap = Heap::open(
        &path,
        &Config {
            slots: 2,
            ..config()
        },
    )
    .unwrap();
    let t = heap.thread().unwrap();
    let baseline = heap.file_allocated_bytes().unwrap();
    let mut child = spawn("handover", &path);
    let offset = Offset(wait_root_of(&heap, 1, Some(&mut child)));
    // SAFETY: the child wrote the block's first word before publishing it; the read maps it.
    let first_word = unsafe { std::ptr::read_volatile(heap.resolve(offset) as *const u64) };
    assert_eq!(first_word, offset.0);
    let first = heap.huge_allocation(offset).unwrap();
    heap.root(2).store(1, Release);
    assert!(succeeded(&child.wait_with_output().unwrap()));
    let before = heap.check();
    assert_eq!(
        (
            before.huge.freed,
            before.huge.awaiting_unmap,
            before.huge.freed_in_released
        ),
        (1, 1, 1)
    );
    assert!(
        before
            .claimed_slots
            .iter()
            .all(|s| s.index != u64::from(first.slot)),
        "the freeing thread's slot is released"
    );

    let again = t.allocate(layout(64 * MIB)).unwrap();
    assert_eq!(
        again, offset,
        "reclaimed by this call, and its range reused"
    );
    assert_eq!(heap.huge_allocation(again).unwrap().slot, t.slot_index());
    let reused = std::thread::scope(|s| {
        s.spawn(|| {
            let u = heap.thread().unwrap();
            assert_eq!(
                u.slot_index(),
                first.slot,
                "the released slot, claimed again"
            );
            let block = u.allocate(layout(64 * MIB)).unwrap();
            let found = heap.huge_allocation(block).unwrap();
            u.free(block);
            found
        })
        .join()
        .unwrap()
    });
    assert_eq!(
        (reused.slot, reused.desc),
        (first.slot, first.desc),
        "and the descriptor reused"
    );
    t.free(again);
    let after = heap.check();
    assert!(after.is_valid(), "{:#?}", after.problems);
    assert_eq!(
        (after.huge.live, after.huge.freed, after.huge.ranges_claimed),
        (0, 0, 0)
    );
    assert_eq!(heap.file_allocated_bytes().unwrap(), baseline);
}

#[test]
fn a_grown_small_heap_is_usable_in_another_process_at_once() {
    if std::env::var(ENV_ROLE).is_ok() {
        return;
    }
    let dir = shm_dir();
    let path = dir.path().join("heap");
    let heap = Heap::open(&path, &config()).unwrap();
    let mut child = spawn("grown", &path);
    wait_root_of(&heap, 0, Some(&mut child));
    let t = heap.thread().unwrap();
    let before = heap.file_len().unwrap();
    let blocks: Vec<Offset> = (0..64 * 1024)
        .map(|_| t.allocate(layout(1024)).unwrap())
        .collect();
    let last = *blocks.iter().max().unwrap();
    assert!(
        heap.check().heaps[0].len * heap.slab_heap(Kind::Small).slab_bytes() >= 64 << 20,
        "grew by 64 MiB of small slabs"
    );
    let p = heap.resolve(last) as *mut u64;
    // SAFETY: `last` is a live 1 KiB block of ours.
    unsafe { std::ptr::write_volatile(p, 0x005E_ED0F_6120) };
    heap.root(1).store(last.0, Release);
    wait_root(&heap, 2);
    // SAFETY: as above; the child wrote the second word.
    assert_eq!(unsafe { std::ptr::read_volatile(p.add(1)) }, 0xB0B);
    assert!(succeeded(&child.wait_with_output().unwrap()));
    assert!(heap.file_len().unwrap() >= before);
    for b in blocks {
        t.free(b);
    }
}

#[test]
fn huge_blocks_cross_processes_are_unmapped_everywhere_and_their_range_reused() {
    if std::env::var(ENV_ROLE).is_ok() {
        return;
    }
    let dir = shm_dir();
    let path = dir.path().join("heap");
    let heap = Heap::open(&path, &config()).unwrap();
    let t = heap.thread().unwrap();
    let baseline = heap.file_allocated_bytes().unwrap();
    let mut first = None;
    for (root, size) in [(1, 64 * MIB), (2, 1024 * MIB)] {
        let offset = t.allocate(layout(size)).unwrap();
        first.get_or_insert(offset);
        let p = heap.resolve(offset);
        // SAFETY: a live block of `size` bytes.
        unsafe {
            std::ptr::write_volatile(p as *mut u64, offset.0);
            std::ptr::write_volatile(p.add(size - 8) as *mut u64, !offset.0);
        }
        heap.root(root).store(offset.0, Release);
    }
    let first = first.unwrap();
    let grown = heap.file_allocated_bytes().unwrap();
    assert!(grown >= baseline + (1088 << 20), "Reserve backs every page");
    let mut child = spawn("huge", &path);
    wait_root_of(&heap, 3, Some(&mut child));
    // SAFETY: the 64 MiB block is live and mapped here; the child wrote its second word.
    let second = unsafe { std::ptr::read_volatile(heap.resolve(first).add(8) as *const u64) };
    assert_eq!(second, 0xB0B);
    heap.root(4).store(1, Release);
    assert!(succeeded(&child.wait_with_output().unwrap()));
    let freed = heap.check();
    assert_eq!((freed.huge.live, freed.huge.freed), (0, 2));
    assert_eq!(freed.huge.awaiting_unmap, 2, "still mapped here");
    assert_eq!(
        huge_bytes_mapped_here(&path, heap.layout().huge_data),
        (64 + 1024) << 20
    );
    let desc = heap.huge_allocation(first).unwrap();

    assert_eq!(
        t.collect_huge(),
        2,
        "unmapped here, then reclaimed by their owner"
    );
    assert_eq!(huge_bytes_mapped_here(&path, heap.layout().huge_data), 0);
    let after = heap.check();
    assert!(after.is_valid(), "{:#?}", after.problems);
    assert_eq!(
        (after.huge.live, after.huge.freed, after.huge.ranges_claimed),
        (0, 0, 0)
    );
    assert!(
        heap.file_allocated_bytes().unwrap() <= baseline,
        "storage back to the baseline: {} > {baseline}",
        heap.file_allocated_bytes().unwrap()
    );

    let again = t.allocate(layout(64 * MIB)).unwrap();
    assert_eq!(again, first, "the range is reused");
    assert_eq!(
        heap.huge_allocation(again).unwrap().desc,
        desc.desc,
        "and the descriptor"
    );
    t.free(again);
    assert!(heap.check().is_valid());
}

fn dies_of_sigsegv(role: &str) {
    let dir = shm_dir();
    let path = dir.path().join("heap");
    drop(Heap::open(&path, &config()).unwrap());
    let out = spawn(role, &path).wait_with_output().unwrap();
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGSEGV),
        "{role}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn real_bugs_still_die_of_sigsegv() {
    if std::env::var(ENV_ROLE).is_ok() {
        return;
    }
    for role in ["null", "past-end", "unallocated-huge", "freed-huge"] {
        dies_of_sigsegv(role);
    }
}

#[test]
fn resolve_checked_refuses_offsets_outside_live_ranges() {
    if std::env::var(ENV_ROLE).is_ok() {
        return;
    }
    let dir = shm_dir();
    let heap = Heap::open(dir.path().join("heap"), &config()).unwrap();
    let t = heap.thread().unwrap();
    let small = t.allocate(layout(64)).unwrap();
    let huge = t.allocate(layout(3 * MIB)).unwrap();
    let l = heap.layout();
    assert!(heap.resolve_checked(small, 64).is_ok());
    assert!(heap.resolve_checked(huge, 3 * MIB as u64).is_ok());
    assert!(heap
        .resolve_checked(huge.add(MIB as u64), MIB as u64)
        .is_ok());
    for (offset, len) in [
        (Offset(0), 8),                          // the header
        (Offset(l.slots), 8),                    // thread slots
        (Offset(l.large_data + (100 << 19)), 8), // a large slab never grown
        (huge, 3 * MIB as u64 + 4096),           // past the huge block's end
        (Offset(l.huge_data + (7 << 30)), 8),    // unallocated huge space
        (Offset(l.total), 8),                    // past the heap
        (Offset(u64::MAX - 3), 8),               // wraps
    ] {
        assert!(
            heap.resolve_checked(offset, len).is_err(),
            "{offset} + {len}"
        );
    }
    t.free(huge);
    assert!(
        heap.resolve_checked(huge, 8).is_err(),
        "a freed block is refused"
    );
    t.free(small);
}

#[test]
fn huge_blocks_too_big_or_too_many_are_errors_not_crashes() {
    if std::env::var(ENV_ROLE).is_ok() {
        return;
    }
    let dir = shm_dir();
    let config = Config {
        huge_bytes: 2 << 30, // 1024 ranges of 2 MiB
        huge_backing: HugeBacking::Sparse,
        ..config()
    };
    let heap = Heap::open(dir.path().join("heap"), &config).unwrap();
    let t = heap.thread().unwrap();
    assert!(
        t.allocate(layout(4 << 30)).is_err(),
        "larger than the huge heap"
    );
    let blocks: Vec<Offset> = std::iter::from_fn(|| t.allocate(layout(MIB)).ok()).collect();
    assert_eq!(
        blocks.len(),
        podkv_alloc::huge::COUNT_HUGE_DESC,
        "descriptors run out first"
    );
    for b in blocks {
        t.free(b);
    }
    let report = heap.check();
    assert!(report.is_valid(), "{:#?}", report.problems);
    assert_eq!(report.huge.ranges_claimed, 0);
}

const COUNT_STRESS_PROCESSES: usize = 3;
const COUNT_STRESS_THREADS: usize = 2;
const ROOT_EXCHANGE: usize = 8;
const COUNT_EXCHANGE: usize = 8;

fn stress_rounds() -> usize {
    if std::env::var_os("PODKV_SOAK").is_some() {
        2000
    } else {
        150
    }
}

/// Allocates blocks of 0.6–12 MiB, tags their ends, swaps each into a random exchange root
/// and frees whatever came out after checking its tags (usually another process's block, so
/// the read faults it in and the free is remote).
fn stress_worker(heap: &Heap) {
    let threads: Vec<_> = (0..COUNT_STRESS_THREADS)
        .map(|i| {
            let heap = heap.clone();
            std::thread::spawn(move || {
                let t = heap.thread().unwrap();
                let mut x = (std::process::id() as u64) << 8 | i as u64;
                for _ in 0..stress_rounds() {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let size = (600 * 1024 + (x % (12 * MIB as u64)) as usize) & !7;
                    let off = t.allocate(layout(size)).expect("huge allocation");
                    let p = heap.resolve(off);
                    // SAFETY: a live block of `size` bytes, ours until published.
                    unsafe {
                        std::ptr::write_volatile(p as *mut u64, off.0);
                        std::ptr::write_volatile(p.add(size - 8) as *mut u64, size as u64);
                    }
                    let root = heap.root(ROOT_EXCHANGE + (x >> 40) as usize % COUNT_EXCHANGE);
                    let out = root.swap(off.0, std::sync::atomic::Ordering::AcqRel);
                    if out != 0 {
                        check_and_free(&heap, &t, Offset(out));
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

fn check_and_free(heap: &Heap, t: &podkv_alloc::ThreadHandle, off: Offset) {
    let p = heap.resolve(off);
    // SAFETY: a live block handed over through the exchange, now ours alone; its first word is
    // its offset and its last word its size.
    unsafe {
        assert_eq!(std::ptr::read_volatile(p as *const u64), off.0);
        let len = heap.huge_allocation(off).unwrap().len as usize;
        let size = (len - 4096 + 8..=len)
            .step_by(8)
            .find(|&s| std::ptr::read_volatile(p.add(s - 8) as *const u64) == s as u64);
        assert!(size.is_some(), "tail tag of {off}");
    }
    t.free(off);
}

#[test]
fn threads_of_several_processes_allocate_and_free_huge_blocks() {
    if std::env::var(ENV_ROLE).is_ok() {
        return;
    }
    let dir = shm_dir();
    let path = dir.path().join("heap");
    let heap = Heap::open(&path, &config()).unwrap();
    let baseline = heap.file_allocated_bytes().unwrap();
    let children: Vec<_> = (0..COUNT_STRESS_PROCESSES)
        .map(|_| spawn("stress", &path))
        .collect();
    for child in children {
        assert!(succeeded(&child.wait_with_output().unwrap()));
    }
    let t = heap.thread().unwrap();
    for i in 0..COUNT_EXCHANGE {
        let out = heap.root(ROOT_EXCHANGE + i).swap(0, Acquire);
        if out != 0 {
            check_and_free(&heap, &t, Offset(out));
        }
    }
    drop(t);
    // Blocks freed while another process mapped them, in slots released since, are reclaimed
    // by the sweeps of later collections (each claims at most COUNT_SWEEP_SLOTS slots).
    let slots = config().slots as usize;
    for _ in 0..slots.div_ceil(podkv_alloc::huge::COUNT_SWEEP_SLOTS) {
        heap.collect_huge();
    }
    let report = heap.check();
    assert!(report.is_valid(), "{:#?}", report.problems);
    assert_eq!(report.huge.live, 0);
    assert_eq!(report.huge.mapped_here, 0);
    assert_eq!(
        (report.huge.freed, report.huge.ranges_claimed),
        (0, 0),
        "every freed block reclaimed, every range given back: {:?}",
        report.huge
    );
    assert_eq!(
        heap.file_allocated_bytes().unwrap(),
        baseline,
        "the file's storage is back to its baseline"
    );
}
