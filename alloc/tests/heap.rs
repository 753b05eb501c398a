//! The heap through its public API, in one process: allocation, free, reuse, statistics,
//! growth, exhaustion, and every refused file.

use podkv_alloc::{AllocError, Config, Heap, HeapError, Kind, Offset};
use std::alloc::Layout;
use std::io::Write;

fn small_config() -> Config {
    Config {
        small_bytes: 64 << 20,
        large_bytes: 256 << 20,
        slots: 16,
        ..Config::default()
    }
}

fn fresh(dir: &tempfile::TempDir) -> Heap {
    Heap::open(dir.path().join("heap"), &small_config()).expect("fresh heap opens")
}

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, 8).unwrap()
}

#[test]
fn blocks_are_distinct_aligned_and_writable_then_all_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let heap = fresh(&dir);
    let t = heap.thread().unwrap();
    let sizes = [
        1usize, 8, 9, 24, 64, 100, 1000, 1024, 1025, 4000, 65536, 300_000, 524_288,
    ];
    let mut blocks = Vec::new();
    for round in 0..50 {
        for &size in &sizes {
            let off = t.allocate(layout(size)).unwrap();
            assert_eq!(off.0 % 8, 0);
            // SAFETY: the block is `size` bytes, freshly allocated and ours.
            unsafe { std::ptr::write_bytes(t.resolve(off), round as u8, size) };
            blocks.push((off, size, round as u8));
        }
    }
    let mut sorted = blocks.clone();
    sorted.sort();
    for pair in sorted.windows(2) {
        assert!(
            pair[0].0 .0 + pair[0].1 as u64 <= pair[1].0 .0,
            "blocks overlap: {pair:?}"
        );
    }
    for &(off, size, fill) in &blocks {
        // SAFETY: still allocated, `size` bytes long.
        let bytes = unsafe { std::slice::from_raw_parts(t.resolve(off), size) };
        assert!(
            bytes.iter().all(|&b| b == fill),
            "block {off} was overwritten"
        );
    }
    let report = heap.check();
    assert!(report.is_valid(), "{:#?}", report.problems);
    assert_eq!(report.live_blocks(), blocks.len() as u64);
    for (off, _, _) in blocks {
        t.free(off);
    }
    let report = heap.check();
    assert!(report.is_valid(), "{:#?}", report.problems);
    assert_eq!(report.live_blocks(), 0);
    assert_eq!(report.live_bytes(), 0);
}

#[test]
fn over_alignment_is_honoured() {
    let dir = tempfile::tempdir().unwrap();
    let heap = fresh(&dir);
    let t = heap.thread().unwrap();
    for align in [16usize, 64, 256, 1024, 4096, 65536] {
        for size in [1usize, 100, 5000] {
            let off = t
                .allocate(Layout::from_size_align(size, align).unwrap())
                .unwrap();
            assert_eq!(
                t.resolve(off) as usize % align,
                0,
                "size {size} align {align}"
            );
            t.free(off);
        }
    }
    assert!(heap.check().is_valid());
}

#[test]
fn freed_blocks_are_reused_and_empty_slabs_return_to_the_global_list() {
    let dir = tempfile::tempdir().unwrap();
    let heap = fresh(&dir);
    let t = heap.thread().unwrap();
    let first: Vec<Offset> = (0..10_000)
        .map(|_| t.allocate(layout(64)).unwrap())
        .collect();
    let len_after_first = heap.len(heap.slab_heap(Kind::Small));
    for &off in &first {
        t.free(off);
    }
    let second: Vec<Offset> = (0..10_000)
        .map(|_| t.allocate(layout(64)).unwrap())
        .collect();
    assert_eq!(
        heap.len(heap.slab_heap(Kind::Small)),
        len_after_first,
        "no growth when reusing"
    );
    for off in second {
        t.free(off);
    }
    drop(t);
    let report = heap.check();
    assert!(report.is_valid(), "{:#?}", report.problems);
    let states = &report.heaps[0].slabs_by_state;
    assert_eq!(
        states.get("free").copied().unwrap_or(0),
        u64::from(len_after_first),
        "{states:?}"
    );
}

#[test]
fn released_slabs_give_their_pages_back() {
    let dir = tempfile::tempdir().unwrap();
    let heap = fresh(&dir);
    let baseline = heap.file_allocated_bytes().unwrap();
    {
        let t = heap.thread().unwrap();
        let blocks: Vec<Offset> = (0..200)
            .map(|_| t.allocate(layout(300_000)).unwrap())
            .collect();
        for &off in &blocks {
            // SAFETY: each block is 300 000 bytes and ours.
            unsafe { std::ptr::write_bytes(t.resolve(off), 1, 300_000) };
        }
        assert!(heap.file_allocated_bytes().unwrap() > baseline + (50 << 20));
        for off in blocks {
            t.free(off);
        }
    }
    let after = heap.file_allocated_bytes().unwrap();
    // Metadata pages stay, up to `count_warm_max` empty slabs per heap stay warm on the
    // global list, and the backer may have backed a few slabs ahead of the lengths; every
    // other slab's pages are released.
    let warm: u64 = Kind::ALL
        .iter()
        .map(|&k| u64::from(heap.slab_heap(k).count_warm_max) * heap.slab_heap(k).slab_bytes())
        .sum();
    let ahead = heap.back_ahead_bytes();
    assert!(
        after <= baseline + warm + ahead + (1 << 20),
        "baseline {baseline}, warm {warm}, ahead {ahead}, after {after}"
    );
}

#[test]
fn remote_frees_from_another_slot_recycle_full_slabs() {
    let dir = tempfile::tempdir().unwrap();
    let heap = fresh(&dir);
    let producer = heap.thread().unwrap();
    let consumer = heap.thread().unwrap();
    for _ in 0..20 {
        let blocks: Vec<Offset> = (0..5000)
            .map(|_| producer.allocate(layout(128)).unwrap())
            .collect();
        for off in blocks {
            consumer.free(off);
        }
    }
    let report = heap.check();
    assert!(report.is_valid(), "{:#?}", report.problems);
    // 5000 × 128 B is 20 slabs: recycling keeps the heap far below 20 × 20.
    assert!(
        report.heaps[0].len < 80,
        "heap grew to {} slabs",
        report.heaps[0].len
    );
    assert!(report.live_blocks() < 5000);
}

#[test]
fn a_dropped_handle_disowns_partly_used_slabs_and_the_last_free_reclaims_them() {
    let dir = tempfile::tempdir().unwrap();
    let heap = fresh(&dir);
    let survivor = heap.thread().unwrap();
    let blocks: Vec<Offset> = {
        let t = heap.thread().unwrap();
        (0..100).map(|_| t.allocate(layout(48)).unwrap()).collect()
    };
    let report = heap.check();
    assert!(report.is_valid(), "{:#?}", report.problems);
    assert_eq!(report.heaps[0].slabs_by_state.get("disowned"), Some(&1));
    for off in blocks {
        survivor.free(off);
    }
    // The frees wait in the survivor's pending batch: free, but not yet counted on the slab.
    let report = heap.check();
    assert!(report.is_valid(), "{:#?}", report.problems);
    assert_eq!(report.live_blocks(), 0);
    assert_eq!(report.heaps[0].pending_blocks, 100);
    assert_eq!(report.heaps[0].slabs_by_state.get("disowned"), Some(&1));
    // One CAS counts them all, and the flusher takes the emptied slab.
    survivor.flush_remote_frees();
    let report = heap.check();
    assert!(report.is_valid(), "{:#?}", report.problems);
    assert_eq!(report.heaps[0].slabs_by_state.get("disowned"), None);
    assert_eq!(report.heaps[0].pending_blocks, 0);
    assert_eq!(report.live_blocks(), 0);
}

#[test]
fn remote_frees_of_one_slab_batch_into_one_count_and_a_released_slot_holds_none() {
    let dir = tempfile::tempdir().unwrap();
    let heap = fresh(&dir);
    let owner = heap.thread().unwrap();
    let freer = heap.thread().unwrap();
    // 64 B blocks: 1024 to a 64 KiB slab, so 2000 blocks span two slabs.
    let blocks: Vec<Offset> = (0..2000)
        .map(|_| owner.allocate(layout(64)).unwrap())
        .collect();
    for &off in &blocks[..1200] {
        freer.free(off);
    }
    let report = heap.check();
    assert!(report.is_valid(), "{:#?}", report.problems);
    // The first slab's 1024 were flushed when a block of the second came; 176 wait.
    assert_eq!(report.heaps[0].pending_blocks, 176);
    assert_eq!(report.live_blocks(), 800);
    drop(freer);
    let report = heap.check();
    assert!(report.is_valid(), "{:#?}", report.problems);
    assert_eq!(report.heaps[0].pending_blocks, 0);
    assert_eq!(report.live_blocks(), 800);
}

#[test]
fn exhaustion_is_an_error_and_the_heap_stays_usable() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        small_bytes: 1 << 20,
        large_bytes: 1 << 20,
        slots: 4,
        ..Config::default()
    };
    let heap = Heap::open(dir.path().join("tiny"), &config).unwrap();
    let t = heap.thread().unwrap();
    let mut blocks = Vec::new();
    let err = loop {
        match t.allocate(layout(1024)) {
            Ok(off) => blocks.push(off),
            Err(e) => break e,
        }
    };
    assert_eq!(err, AllocError::OutOfMemory);
    assert_eq!(blocks.len(), 1024, "1 MiB of 1 KiB blocks");
    let huge = t
        .allocate(layout(600_000))
        .expect("over 512 KiB is the huge heap's, which has room");
    t.free(huge);
    let report = heap.check();
    assert!(report.is_valid(), "{:#?}", report.problems);
    for off in blocks.drain(..) {
        t.free(off);
    }
    let again = t.allocate(layout(1024)).expect("usable after exhaustion");
    t.free(again);
    assert!(heap.check().is_valid());
}

#[test]
fn zero_filled_files_of_any_length_are_fresh_heaps() {
    let dir = tempfile::tempdir().unwrap();
    for len in [0u64, 100, 4096, 10 << 20] {
        let path = dir.path().join(format!("zero-{len}"));
        std::fs::File::create(&path).unwrap().set_len(len).unwrap();
        let heap = Heap::open(&path, &small_config()).expect("zero file is a heap");
        let t = heap.thread().unwrap();
        let off = t.allocate(layout(10)).unwrap();
        t.free(off);
        drop(t);
        assert!(heap.check().is_valid());
    }
}

#[test]
fn reopening_keeps_geometry_and_contents() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("heap");
    let off = {
        let heap = Heap::open(&path, &small_config()).unwrap();
        let t = heap.thread().unwrap();
        let off = t.allocate(layout(16)).unwrap();
        // SAFETY: a 16-byte block we own.
        unsafe { t.resolve(off).cast::<u64>().write(0xfeed) };
        heap.root(0)
            .store(off.0, std::sync::atomic::Ordering::Release);
        std::mem::forget(t); // keep the block's slab owned, as a crashed thread would
        off
    };
    let other = Config {
        small_bytes: 1 << 30,
        ..small_config()
    };
    let heap = Heap::open(&path, &other).unwrap();
    assert_eq!(
        heap.geometry(),
        small_config().geometry().unwrap(),
        "the file's geometry wins"
    );
    assert_eq!(
        heap.root(0).load(std::sync::atomic::Ordering::Acquire),
        off.0
    );
    // SAFETY: the block is still allocated.
    assert_eq!(unsafe { heap.resolve(off).cast::<u64>().read() }, 0xfeed);
}

fn write_file(path: &std::path::Path, bytes: &[u8]) {
    std::fs::File::create(path)
        .unwrap()
        .write_all(bytes)
        .unwrap();
}

#[test]
fn foreign_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("text");
    write_file(&path, &b"hello, this is not a heap\n".repeat(400));
    let err = Heap::open(&path, &small_config()).unwrap_err();
    assert!(matches!(err, HeapError::Foreign { .. }), "{err}");
    assert!(err.to_string().contains("not a podkv heap"));
}

#[test]
fn short_nonzero_files_are_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("short");
    write_file(&path, b"PKV\x01");
    let err = Heap::open(&path, &small_config()).unwrap_err();
    assert!(matches!(err, HeapError::Truncated { .. }), "{err}");
}

#[test]
fn truncated_heaps_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("heap");
    {
        let heap = Heap::open(&path, &small_config()).unwrap();
        let t = heap.thread().unwrap();
        let off = t.allocate(layout(100_000)).unwrap();
        t.free(off);
    }
    let len = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let err = Heap::open(&path, &small_config()).unwrap_err();
    assert!(matches!(err, HeapError::Truncated { .. }), "{err}");
}

#[test]
fn other_versions_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("heap");
    drop(Heap::open(&path, &small_config()).unwrap());
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[3] = 99; // format version byte
    std::fs::write(&path, &bytes).unwrap();
    let err = Heap::open(&path, &small_config()).unwrap_err();
    assert!(matches!(err, HeapError::Version { found: 99, .. }), "{err}");
}

/// Writes a heap of this build, rewrites its format version byte to `old`, and checks the
/// heap is refused with a version error that names both versions.
fn assert_refused_as_format(old: u8) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("heap");
    drop(Heap::open(&path, &small_config()).unwrap());
    let mut bytes = std::fs::read(&path).unwrap();
    let current = podkv_alloc::layout::FORMAT_VERSION;
    assert_eq!(u64::from(bytes[3]), current);
    bytes[3] = old;
    std::fs::write(&path, &bytes).unwrap();
    let err = Heap::open(&path, &small_config()).unwrap_err();
    assert!(
        matches!(err, HeapError::Version { found, expected, .. }
            if found == u64::from(old) && expected == current),
        "{err}"
    );
    let said = format!("has format version {old}; this podkv reads version {current}");
    let line = err.to_string();
    assert!(line.contains(&said), "{err}");
    assert!(
        line.contains("podkv store dump") && line.contains("podkv store load"),
        "the way across is named: {err}"
    );
    assert_eq!(line.lines().count(), 1, "{err}");
}

/// Format 4 had 32 KiB small slabs and 576 B descriptors: its offsets name other bytes in this
/// build's layout, so such a heap is refused before anything is mapped over it.
#[test]
fn a_format_4_heap_of_32_kib_slabs_is_refused_by_version() {
    assert_refused_as_format(4);
}

/// Format 5 kept each thread slot's and hazard record's owner word in the slot or record,
/// changed by CPU CAS; format 6 keeps them in the HWcc region: a format 5 heap's owners would
/// be read from the wrong bytes, so it is refused before anything is mapped over it.
#[test]
fn a_format_5_heap_with_owner_words_in_the_slots_is_refused_by_version() {
    assert_refused_as_format(5);
}

/// Format 6 had no user HWcc area (the store's multi-writer words); format 7 ends the HWcc
/// region with it and uses format word bits 58–63 for its size, which format 6 required zero.
#[test]
fn a_format_6_heap_without_a_user_hwcc_area_is_refused_by_version() {
    assert_refused_as_format(6);
}

/// Format 7 knew no morphing slab (`podkv_alloc::morph`): a build of 7 would take a morphing
/// slab's old blocks for blocks of its new class, so a format 7 heap is refused by version too.
#[test]
fn a_format_7_heap_without_morphing_slabs_is_refused_by_version() {
    assert_refused_as_format(7);
}

/// Format 8 knew no `Op::Unblock` step (an owner's free of a morphing slab's old block): a
/// build of 8 would drop a dead owner's half-made one, so a format 8 heap is refused too.
#[test]
fn a_format_8_heap_without_the_unblock_step_is_refused_by_version() {
    assert_refused_as_format(8);
}

/// Format 9 kept two huge descriptors to a line, which a remote free's write-back can clobber;
/// a build of 9 would also read format 10's `HugeLocal` at the wrong places: refused too.
#[test]
fn a_format_9_heap_with_two_huge_descriptors_to_a_line_is_refused_by_version() {
    assert_refused_as_format(9);
}

#[test]
fn read_only_files_are_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("heap");
    drop(Heap::open(&path, &small_config()).unwrap());
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
    let err = Heap::open(&path, &small_config()).unwrap_err();
    assert!(matches!(err, HeapError::ReadOnly { .. }), "{err}");
}

#[test]
fn missing_files_are_not_created_unless_asked() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        create: false,
        ..small_config()
    };
    let err = Heap::open(dir.path().join("absent"), &config).unwrap_err();
    assert!(matches!(err, HeapError::Open { .. }), "{err}");
    assert!(!dir.path().join("absent").exists());
}

#[test]
fn created_heaps_are_private_to_their_user() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let heap = fresh(&dir);
    let mode = std::fs::metadata(heap.path()).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn slots_run_out_with_an_error_and_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let heap = fresh(&dir);
    let handles: Vec<_> = (0..16).map(|_| heap.thread().unwrap()).collect();
    assert!(matches!(
        heap.thread().unwrap_err(),
        HeapError::NoSlot { count: 16 }
    ));
    drop(handles);
    assert!(heap.thread().is_ok());
}

/// As many threads as slots, each claiming and releasing one over and over: a slot is always
/// free for each of them, so none is ever refused, however their claims race (a claim that
/// loses the race for a slot it saw free looks again). Two slots make the race likely: one
/// thread looks at the slot the other holds, then loses the other slot to it.
#[test]
fn racing_claims_never_run_out_while_a_slot_is_free() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        slots: 2,
        ..small_config()
    };
    let heap = Heap::open(dir.path().join("heap"), &config).unwrap();
    let refused = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                for _ in 0..20_000 {
                    match heap.thread() {
                        Ok(handle) => drop(handle),
                        Err(HeapError::NoSlot { .. }) => {
                            refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            });
        }
    });
    assert_eq!(refused.into_inner(), 0, "claims refused with a slot free");
}

#[test]
#[should_panic(expected = "double free")]
fn a_local_double_free_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let heap = fresh(&dir);
    let t = heap.thread().unwrap();
    let keep = t.allocate(layout(32)).unwrap();
    let off = t.allocate(layout(32)).unwrap();
    t.free(off);
    t.free(off);
    t.free(keep);
}

#[test]
#[should_panic(expected = "not an allocated block")]
fn an_interior_pointer_free_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let heap = fresh(&dir);
    let t = heap.thread().unwrap();
    let off = t.allocate(layout(64)).unwrap();
    t.free(off.add(8));
}

#[test]
fn collections_live_in_the_heap() {
    let dir = tempfile::tempdir().unwrap();
    let heap = fresh(&dir);
    let t = heap.thread().unwrap();
    {
        let mut v = allocator_api2::vec::Vec::new_in(&t);
        v.extend(0..60_000u64); // 480 KB: the large heap's largest class (huge blocks come with the huge heap)
        assert!(
            heap.offset_of(v.as_ptr().cast()).is_some(),
            "vector storage is in the heap"
        );
        assert_eq!(v.iter().sum::<u64>(), 59_999 * 60_000 / 2);
        let mut map = hashbrown::HashMap::new_in(&t);
        for i in 0..10_000u32 {
            map.insert(i, i * 2);
        }
        assert_eq!(map[&777], 1554);
    }
    let report = heap.check();
    assert!(report.is_valid(), "{:#?}", report.problems);
    assert_eq!(report.live_blocks(), 0);
}

/// The file system refuses to back more (here: a file-size limit, as a full `/dev/shm` would):
/// the allocation is an `OutOfMemory` value, never a `SIGBUS`, and the heap stays usable.
/// Runs in a child process so the limit does not touch the test harness.
#[test]
fn a_full_file_system_is_out_of_memory_not_sigbus() {
    const ROLE: &str = "PODKV_FSIZE_CHILD";
    if let Ok(path) = std::env::var(ROLE) {
        // SAFETY: ignoring SIGXFSZ makes an over-limit write fail with EFBIG instead of killing.
        unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
        // No huge heap: its metadata lies past the large slabs and would set the file's length
        // beyond the limit this test puts just past the slabs.
        let config = Config {
            huge_bytes: 0,
            ..small_config()
        };
        let heap = Heap::open(&path, &config).unwrap();
        let limit = heap.layout().large_data + 10 * (512 << 10);
        let rlimit = libc::rlimit {
            rlim_cur: limit,
            rlim_max: limit,
        };
        // SAFETY: a valid rlimit for this process only.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &rlimit) }, 0);
        let t = heap.thread().unwrap();
        let mut blocks = Vec::new();
        let err = loop {
            match t.allocate(layout(300_000)) {
                Ok(off) => {
                    // SAFETY: a fresh 300 000-byte block: touching it must not fault.
                    unsafe { std::ptr::write_bytes(t.resolve(off), 0xAB, 300_000) };
                    blocks.push(off);
                }
                Err(e) => break e,
            }
        };
        assert_eq!(err, AllocError::OutOfMemory);
        assert!(
            (1..=10).contains(&blocks.len()),
            "{} blocks fit",
            blocks.len()
        );
        for off in blocks {
            t.free(off);
        }
        let again = t
            .allocate(layout(300_000))
            .expect("usable after the file system refused");
        t.free(again);
        drop(t);
        assert!(heap.check().is_valid());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("heap");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_full_file_system_is_out_of_memory_not_sigbus",
            "--nocapture",
        ])
        .env(ROLE, &path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "child failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn cold_slabs_are_reused_before_the_heap_grows() {
    let dir = tempfile::tempdir().unwrap();
    let heap = fresh(&dir);
    let small = heap.slab_heap(Kind::Small);
    let blocks_per_round = 400 * (small.slab_bytes() as usize / 512);
    let round = |heap: &Heap| {
        let t = heap.thread().unwrap();
        let blocks: Vec<Offset> = (0..blocks_per_round)
            .map(|_| t.allocate(layout(512)).unwrap())
            .collect();
        for off in blocks {
            t.free(off);
        }
    };
    round(&heap);
    let grown = heap.len(small);
    assert!(grown >= 400, "{grown}");
    for _ in 0..3 {
        round(&heap);
    }
    assert_eq!(
        heap.len(small),
        grown,
        "later rounds reuse the warm and cold slabs"
    );
}
