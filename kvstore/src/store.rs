//! The embedding API's names: [`Store`] in the pod heap, `LocalStore` in process memory,
//! their handles, and the check behind `podkv store check|stats`. The types themselves are
//! `map`'s ([`Map`], [`Handle`]).

use crate::arena::PodArena;
use crate::config::StoreConfig;
#[cfg(feature = "baselines")]
use crate::local_arena::LocalArena;
use crate::map::{Handle, Map};
use crate::StoreError;
use podkv_alloc::{Config, Heap};
use podkv_hw::sync::mapped::Ordering;
use std::path::Path;

pub use crate::check::CheckReport;
pub use crate::crawler::{Crawler, GROWTH_POLL};
pub use crate::map::SERVED_COHERENCE;

/// The store in a pod heap: any process that opens the same file shares it.
pub type Store = Map<PodArena>;
/// One thread's handle on a [`Store`].
pub type StoreHandle = Handle<PodArena>;
/// The same index over process-local memory from mimalloc (feature `baselines`; evaluation
/// only).
#[cfg(feature = "baselines")]
pub type LocalStore = Map<LocalArena>;

/// Opens the store in an existing heap file: never creates the file, and refuses a heap that
/// holds no store (root 0 is zero) instead of making one. For tools that inspect or move a
/// store (`podkv store check|recover|dump|load`).
pub fn open_existing(path: impl AsRef<Path>) -> Result<Store, StoreError> {
    let heap = Heap::open(
        path,
        &Config {
            create: false,
            ..Config::default()
        },
    )?;
    if heap.root(0).load(Ordering::Acquire) == 0 {
        return Err(StoreError::Corrupt(
            "the heap holds no store (root 0 is zero)".into(),
        ));
    }
    Store::open_heap(heap, &StoreConfig::default())
}

/// Opens an existing store ([`open_existing`]) and checks it.
pub fn check_path(path: impl AsRef<Path>) -> Result<CheckReport, StoreError> {
    Ok(open_existing(path)?.check())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Outcome;
    use podkv_hw::mcas::McasKind;
    use podkv_hw::Coherence;

    fn heap_config(coherence: Coherence, mcas: McasKind) -> Config {
        Config {
            small_bytes: 1 << 20,
            large_bytes: 4 << 20,
            slots: 8,
            huge_bytes: 0,
            coherence,
            mcas,
            ..Config::default()
        }
    }

    /// Every mode is served: a `limited` heap (store words HWcc, items and blocks SWcc) and
    /// an `mcas` one of either implementation (store words changed through the heap's mCAS
    /// hook, which the heap counts): a write reads back, a delete goes, the check is clean.
    #[test]
    fn limited_and_mcas_heaps_are_served() {
        let modes = [
            (Coherence::Limited, McasKind::FlushCas),
            (Coherence::Mcas, McasKind::FlushCas),
            (Coherence::Mcas, McasKind::Nmp),
        ];
        for (mode, mcas) in modes {
            let dir = tempfile::tempdir().unwrap();
            let config = StoreConfig {
                heap: heap_config(mode, mcas),
                ..StoreConfig::default()
            };
            let store = Store::open(dir.path().join("heap"), config).unwrap();
            let h = store.handle().unwrap();
            let before = store.heap().mcas_ops();
            h.set(b"k", b"v", 0, 0).unwrap();
            assert_eq!(h.get(b"k").unwrap().unwrap().value(), b"v", "{mode:?}");
            assert_eq!(h.delete(b"k").unwrap(), Outcome::Deleted, "{mode:?}");
            assert!(h.get(b"k").unwrap().is_none(), "{mode:?}");
            let hooked = store.heap().mcas_ops() - before;
            assert_eq!(
                hooked > 0,
                mode == Coherence::Mcas,
                "{mode:?}: {hooked} mCAS"
            );
            drop(h);
            let report = store.check();
            assert!(report.is_valid(), "{mode:?}: {:?}", report.problems);
        }
    }

    /// A store whose shared words read zero (its creator's stores never reached memory: a
    /// coherence bug, or a damaged file) is refused with one line, not opened to recurse
    /// looking for bucket 0.
    #[test]
    fn a_store_whose_shared_words_read_zero_is_refused_as_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("heap");
        let config = StoreConfig {
            heap: heap_config(Coherence::Hardware, McasKind::FlushCas),
            ..StoreConfig::default()
        };
        drop(Store::open(&path, config.clone()).unwrap());
        let heap = Heap::open(&path, &config.heap).unwrap();
        let desc_at = heap.root(0).load(Ordering::Acquire);
        // SAFETY: root 0 names the store's live descriptor, and its `hwcc_at` the store's
        // HWcc block, whose first word is the table size; no handle is open.
        unsafe {
            let desc =
                &*(heap.resolve(podkv_alloc::Offset(desc_at)) as *const crate::layout::Descriptor);
            let size = heap.resolve(podkv_alloc::Offset(desc.hwcc_at)) as *mut u64;
            size.write_volatile(0);
        }
        match Store::open_heap(heap, &config) {
            Err(StoreError::Corrupt(why)) => assert!(why.contains("read zero"), "{why}"),
            other => panic!("opened: {:?}", other.map(|_| ())),
        }
    }

    #[test]
    fn a_hardware_heap_is_served() {
        let dir = tempfile::tempdir().unwrap();
        let config = StoreConfig {
            heap: heap_config(Coherence::Hardware, McasKind::FlushCas),
            ..StoreConfig::default()
        };
        let store = Store::open(dir.path().join("heap"), config).unwrap();
        assert!(SERVED_COHERENCE.contains(&store.heap().geometry().coherence));
        assert_ne!(store.heap().root(0).load(Ordering::Acquire), 0);
    }

    /// The store's shared words take one block of the heap's HWcc area, and its bucket words
    /// one segment at first: their size is in the store's report and inside the heap's
    /// `hwcc_bytes`, and a heap without room for them is refused with one line naming
    /// `--hwcc-bytes`.
    #[test]
    fn the_stores_hwcc_block_is_counted_and_a_heap_without_room_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let config = StoreConfig {
            heap: heap_config(Coherence::Hardware, McasKind::FlushCas),
            ..StoreConfig::default()
        };
        let store = Store::open(dir.path().join("heap"), config.clone()).unwrap();
        let report = store.check();
        assert!(report.is_valid(), "{:?}", report.problems);
        let slots = store.heap().geometry().slots();
        assert_eq!(
            report.store.hwcc_bytes,
            (crate::layout::size_hwcc_block(slots) + crate::layout::SIZE_SEGMENT) as u64
        );
        assert!(report.heap_hwcc_bytes >= report.store.hwcc_bytes);
        assert_eq!(report.heap_hwcc_bytes, store.heap().hwcc_bytes());

        let small = StoreConfig {
            heap: Config {
                hwcc_user_bytes: 64 << 10,
                ..config.heap
            },
            ..StoreConfig::default()
        };
        let err = Store::open(dir.path().join("small"), small.clone()).unwrap_err();
        let line = err.to_string();
        assert!(matches!(err, StoreError::NoHwccRoom { .. }), "{line}");
        assert!(
            line.contains("--hwcc-bytes") && !line.contains('\n'),
            "{line}"
        );
        let heap = Heap::open(dir.path().join("small"), &small.heap).unwrap();
        assert_eq!(
            heap.check().live_blocks(),
            0,
            "refused before any block was taken"
        );
    }
}
