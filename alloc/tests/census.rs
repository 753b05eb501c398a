//! The slab-utilisation census through the public API: sparse slabs fall in the low band,
//! full ones in the high band, and live bytes match the blocks held.

use podkv_alloc::census::BAND_NAMES;
use podkv_alloc::{Config, Heap, Kind};
use std::alloc::Layout;

#[test]
fn census_bands_follow_how_full_each_slab_is() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        small_bytes: 64 << 20,
        large_bytes: 64 << 20,
        slots: 4,
        ..Config::default()
    };
    let heap = Heap::open(dir.path().join("heap"), &config).unwrap();
    let t = heap.thread().unwrap();
    let layout = Layout::from_size_align(128, 8).unwrap();
    // Eight 64 KiB slabs' worth of 128-byte blocks; keep one in twenty (5% of each slab).
    let blocks: Vec<_> = (0..8 * 512).map(|_| t.allocate(layout).unwrap()).collect();
    let (kept, freed): (Vec<_>, Vec<_>) = blocks.iter().enumerate().partition(|(i, _)| i % 20 == 0);
    for (_, &off) in freed {
        t.free(off);
    }
    let census = heap.census();
    let class = census
        .classes
        .iter()
        .find(|c| c.kind == Kind::Small && c.block_bytes == 128)
        .expect("the 128-byte class has slabs");
    assert_eq!(class.live_bytes, 128 * kept.len() as u64);
    assert_eq!(class.slab_bytes, class.slabs * (64 << 10));
    assert!(class.slabs >= 8, "{class:?}");
    assert_eq!(
        class.occupancy.slabs[1..],
        [0, 0],
        "every slab is 5% full: all in {}",
        BAND_NAMES[0]
    );
    // Fill new slabs completely: they land in the top band, the sparse ones stay low.
    let full: Vec<_> = (0..16 * 512).map(|_| t.allocate(layout).unwrap()).collect();
    let census = heap.census();
    assert!(census.occupancy.slabs[2] >= 8, "{:?}", census.occupancy);
    assert_eq!(census.live_bytes, 128 * (kept.len() + full.len()) as u64);
    assert!(census.utilisation() > 0.5 && census.utilisation() <= 1.0);
    for off in full.into_iter().chain(kept.into_iter().map(|(_, &o)| o)) {
        t.free(off);
    }
    assert_eq!(heap.census().live_bytes, 0);
}
