//! The heap's placement: recorded in the header by its creator, applied by every process that
//! opens it to its own mapping (seen in `/proc/self/numa_maps`), refused when it names a node
//! this machine does not have.

use podkv_alloc::{Config, Heap, HeapError};
use podkv_hw::topology::{Placement, PlacementError};
use std::alloc::Layout;

fn config(placement: &str) -> Config {
    Config {
        small_bytes: 64 << 20,
        large_bytes: 64 << 20,
        slots: 16,
        huge_bytes: 0,
        placement: placement.parse().unwrap(),
        ..Config::default()
    }
}

/// On tmpfs (as podkv heaps usually are) the policy is the file's, per offset.
fn shm_dir() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .unwrap()
}

/// This process's `numa_maps` line for the mapping that holds `addr`.
fn numa_maps_line(addr: usize) -> String {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let start = maps
        .lines()
        .find_map(|l| {
            let (a, b) = l.split_whitespace().next()?.split_once('-')?;
            let (a, b) = (
                usize::from_str_radix(a, 16).ok()?,
                usize::from_str_radix(b, 16).ok()?,
            );
            (a..b).contains(&addr).then_some(a)
        })
        .unwrap_or_else(|| panic!("no mapping holds {addr:#x}"));
    let numa = std::fs::read_to_string("/proc/self/numa_maps").unwrap();
    numa.lines()
        .find(|l| l.starts_with(&format!("{start:x} ")))
        .unwrap_or_else(|| panic!("no numa_maps line at {start:x}:\n{numa}"))
        .to_owned()
}

/// Created with a placement, dropped, then opened by a process with a default configuration:
/// the opener applies the recorded policy, and it shows for the slab data regions' mapping.
#[test]
fn a_recorded_placement_shows_in_numa_maps_for_the_heaps_data() {
    for (placement, shown) in [("node=0", "bind:0"), ("interleave=0", "interleave:0")] {
        let dir = shm_dir();
        let path = dir.path().join("heap");
        drop(Heap::open(&path, &config(placement)).unwrap());
        let heap = Heap::open(
            &path,
            &Config {
                create: false,
                ..config("local")
            },
        )
        .unwrap();
        assert_eq!(heap.placement(), placement.parse::<Placement>().unwrap());
        let t = heap.thread().unwrap();
        for size in [64, 64 << 10] {
            let block = t
                .allocate(Layout::from_size_align(size, 8).unwrap())
                .unwrap();
            let line = numa_maps_line(t.resolve(block) as usize);
            assert!(line.contains(shown), "{placement}, {size} B block: {line}");
        }
        let data = heap.layout().small_data;
        let line = numa_maps_line(heap.resolve(podkv_alloc::Offset(data)) as usize);
        assert!(line.contains(shown), "{placement}, small data: {line}");
    }
}

/// A heap made without a placement (every heap made before placements existed, too) has the
/// default policy, and its mapping no explicit one.
#[test]
fn a_heap_without_a_placement_keeps_the_default_policy() {
    let dir = shm_dir();
    let heap = Heap::open(dir.path().join("heap"), &config("local")).unwrap();
    assert_eq!(heap.placement(), Placement::Local);
    drop(heap);
    let dir = shm_dir();
    let mut plain = config("local");
    plain.placement = Placement::Default;
    let heap = Heap::open(dir.path().join("heap"), &plain).unwrap();
    assert_eq!(heap.placement(), Placement::Default);
    let data = heap.layout().small_data;
    let line = numa_maps_line(heap.resolve(podkv_alloc::Offset(data)) as usize);
    assert!(line.contains(" default"), "{line}");
}

/// A node that is not online is refused in one line, and no file is created.
#[test]
fn an_unknown_node_is_refused_and_creates_nothing() {
    let dir = shm_dir();
    let path = dir.path().join("heap");
    let err = Heap::open(&path, &config("node=7")).unwrap_err();
    assert!(
        matches!(
            err,
            HeapError::Placement {
                source: PlacementError::UnknownNode { node: 7, .. },
                ..
            }
        ),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(!text.contains('\n') && text.contains("node 7"), "{text}");
    assert!(
        !path.exists(),
        "a refused placement created {}",
        path.display()
    );
}

/// The file's placement wins over an opener's configuration, as its geometry does.
#[test]
fn the_files_placement_wins_over_a_later_openers() {
    let dir = shm_dir();
    let path = dir.path().join("heap");
    drop(Heap::open(&path, &config("interleave=0")).unwrap());
    let heap = Heap::open(&path, &config("preferred=0")).unwrap();
    assert_eq!(heap.placement(), Placement::Interleave(vec![0]));
}

/// A DAX device takes no placement: its memory is the device's.
#[test]
fn a_placement_on_a_device_is_refused() {
    let err = Heap::open("/dev/null", &config("node=0")).unwrap_err();
    assert!(matches!(err, HeapError::DaxPlacement { .. }), "{err:?}");
}

/// Huge blocks are mapped one by one, outside the mapping made at open, so each takes the
/// heap's policy as it is mapped: in the process that allocates it and in one that maps it
/// on its first touch.
#[test]
fn a_huge_block_takes_the_heaps_placement_wherever_it_is_mapped() {
    for (placement, shown) in [("node=0", "bind:0"), ("interleave=0", "interleave:0")] {
        let dir = shm_dir();
        let path = dir.path().join("heap");
        let huge = Config {
            huge_bytes: 2 << 30,
            ..config(placement)
        };
        let heap = Heap::open(&path, &huge).unwrap();
        let t = heap.thread().unwrap();
        let size = 4 << 20;
        let block = t
            .allocate(Layout::from_size_align(size, 8).unwrap())
            .unwrap();
        assert!(
            heap.huge_allocation(block).is_some(),
            "a {size} B block is huge"
        );
        let at = t.resolve(block);
        // SAFETY: the block is ours, `size` bytes long.
        unsafe { at.write_bytes(1, size) };
        let line = numa_maps_line(at as usize);
        assert!(
            line.contains(shown),
            "{placement}, allocator's mapping: {line}"
        );

        let other = Heap::open(
            &path,
            &Config {
                create: false,
                ..huge.clone()
            },
        )
        .unwrap();
        let there = other.resolve(block);
        // SAFETY: the block is live and `size` bytes long; the first touch maps it here.
        assert_eq!(unsafe { there.add(size - 1).read_volatile() }, 1);
        let line = numa_maps_line(there as usize);
        assert!(
            line.contains(shown),
            "{placement}, reopener's mapping: {line}"
        );
    }
}
