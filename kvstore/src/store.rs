//! The embedding API: [`Store`] in the pod heap, [`LocalStore`] in process memory, the
//! background crawler, and the heap-wide check behind `podkv store check|stats`.

use crate::arena::{Arena, LocalArena, PodArena};
use crate::check::StoreReport;
use crate::config::StoreConfig;
use crate::maintain::CrawlReport;
use crate::map::{Handle, Map};
use crate::StoreError;
use podkv_alloc::{Config, Heap};
use podkv_hw::Coherence;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The coherence modes whose heaps the store serves. Its link CASes, epoch words and item
/// bytes assume caches coherent across hosts, which only a `hardware` heap promises.
pub const SERVED_COHERENCE: &[Coherence] = &[Coherence::Hardware];

/// The store in a pod heap: any process that opens the same file shares it.
pub type Store = Map<PodArena>;
/// One thread's handle on a [`Store`].
pub type StoreHandle = Handle<PodArena>;
/// The same index over process-local memory from mimalloc (evaluation only).
pub type LocalStore = Map<LocalArena>;

impl Store {
    /// Opens (creating if needed) the heap at `path` and the store in it. Any number of
    /// processes may do this at once; they agree on one store (root CAS).
    pub fn open(path: impl AsRef<Path>, config: StoreConfig) -> Result<Store, StoreError> {
        let heap = Heap::open(path, &config.heap)?;
        Store::open_heap(heap, &config)
    }

    /// Opens the store in an already opened heap (root 0).
    ///
    /// Refuses, before writing anything, a heap whose coherence mode the store does not
    /// serve ([`SERVED_COHERENCE`]).
    pub fn open_heap(heap: Heap, config: &StoreConfig) -> Result<Store, StoreError> {
        let mode = heap.geometry().coherence;
        if !SERVED_COHERENCE.contains(&mode) {
            return Err(StoreError::UnservedCoherence { mode });
        }
        Map::open_in(
            PodArena {
                heap,
                root_index: 0,
            },
            config,
        )
    }

    /// The heap the store lives in.
    pub fn heap(&self) -> &Heap {
        &self.inner.arena.heap
    }

    /// Walks the store and the allocator and proves every live block belongs to exactly one
    /// item, sentinel, segment, limbo bag or limbo entry (or the descriptor / slot array).
    /// Run on a quiescent heap.
    pub fn check(&self) -> CheckReport {
        let store = self.walk();
        let heap = self.heap().check();
        let mut problems: Vec<String> = store.problems.clone();
        problems.extend(heap.problems.iter().map(|p| format!("heap: {p}")));
        // Huge allocations (values past the large heap's blocks) are blocks too.
        let live = heap.live_blocks() + heap.huge.live;
        if live != store.blocks {
            problems.push(format!(
                "heap has {live} live blocks but the store references {}: {} leaked",
                store.blocks,
                live as i64 - store.blocks as i64
            ));
        }
        CheckReport {
            heap_live_blocks: live,
            heap_live_bytes: heap.live_bytes() + heap.huge.live_bytes,
            store,
            problems,
        }
    }
}

impl LocalStore {
    /// A fresh index in process memory (mimalloc).
    pub fn new_local(config: &StoreConfig) -> Result<LocalStore, StoreError> {
        Map::open_in(LocalArena::default(), config)
    }
}

/// The result of [`Store::check`].
#[derive(Clone, Debug, serde::Serialize)]
pub struct CheckReport {
    /// What the store walk found.
    pub store: StoreReport,
    /// Live blocks according to the allocator.
    pub heap_live_blocks: u64,
    /// Live bytes according to the allocator (block sizes).
    pub heap_live_bytes: u64,
    /// Store and heap problems, and the leak equation if it fails.
    pub problems: Vec<String>,
}

impl CheckReport {
    /// Whether the store and heap are sound and account for each other.
    pub fn is_valid(&self) -> bool {
        self.problems.is_empty()
    }

    /// Heap bytes per linked item (all live blocks, metadata included).
    pub fn heap_bytes_per_item(&self) -> f64 {
        self.heap_live_bytes as f64 / self.store.items.max(1) as f64
    }
}

/// Opens an existing store read-only in spirit (no creation) and checks it.
pub fn check_path(path: impl AsRef<Path>) -> Result<CheckReport, StoreError> {
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
    Ok(Store::open_heap(heap, &StoreConfig::default())?.check())
}

/// A background thread running the expiry crawler every `interval`; stops on drop.
#[derive(Debug)]
pub struct Crawler {
    stop: Arc<AtomicBool>,
    passes: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<CrawlReport>>,
}

impl<A: Arena> Map<A> {
    /// Starts the expiry crawler on a background thread (its own handle and slot).
    pub fn spawn_crawler(&self, interval: Duration) -> Crawler {
        let stop = Arc::new(AtomicBool::new(false));
        let passes = Arc::new(AtomicU64::new(0));
        let (map, flag, count) = (self.clone(), stop.clone(), passes.clone());
        let thread = std::thread::spawn(move || crawl_loop(&map, &flag, &count, interval));
        Crawler {
            stop,
            passes,
            thread: Some(thread),
        }
    }
}

fn crawl_loop<A: Arena>(
    map: &Map<A>,
    stop: &AtomicBool,
    passes: &AtomicU64,
    interval: Duration,
) -> CrawlReport {
    let mut total = CrawlReport::default();
    // No free slot: nothing to crawl with; `stop` reports zero passes.
    let Ok(handle) = map.handle() else {
        return total;
    };
    while !stop.load(Ordering::Relaxed) {
        let pass = handle.crawl();
        total.visited += pass.visited;
        total.reclaimed += pass.reclaimed;
        handle.collect();
        passes.fetch_add(1, Ordering::Release);
        std::thread::park_timeout(interval);
    }
    total
}

impl Crawler {
    /// Passes completed so far.
    pub fn passes(&self) -> u64 {
        self.passes.load(Ordering::Acquire)
    }

    /// Stops the crawler and returns what it did.
    pub fn stop(mut self) -> CrawlReport {
        self.finish()
    }

    fn finish(&mut self) -> CrawlReport {
        self.stop.store(true, Ordering::Relaxed);
        let Some(thread) = self.thread.take() else {
            return CrawlReport::default();
        };
        thread.thread().unpark();
        thread.join().unwrap_or_default()
    }
}

impl Drop for Crawler {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use podkv_hw::mcas::McasKind;

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

    /// A heap whose mode the store does not serve is refused with one line naming the mode
    /// and the way out, whether the store creates the heap or is handed an opened one, and
    /// the refusal writes nothing: root 0 stays zero.
    #[test]
    fn a_heap_whose_coherence_is_not_served_is_refused_before_any_write() {
        let unserved = [
            (Coherence::Limited, McasKind::FlushCas),
            (Coherence::Mcas, McasKind::FlushCas),
            (Coherence::Mcas, McasKind::Nmp),
        ];
        for (mode, mcas) in unserved {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("heap");
            let config = StoreConfig {
                heap: heap_config(mode, mcas),
                ..StoreConfig::default()
            };
            let err = Store::open(&path, config.clone()).unwrap_err();
            let line = err.to_string();
            assert!(
                matches!(err, StoreError::UnservedCoherence { mode: m, .. } if m == mode),
                "{line}"
            );
            assert!(line.contains(mode.name()) && line.contains("--coherence hardware"));
            assert!(!line.contains('\n'), "one line: {line}");

            let heap = Heap::open(&path, &config.heap).unwrap();
            assert_eq!(
                heap.root(0).load(Ordering::Acquire),
                0,
                "{mode}: nothing written"
            );
            assert!(matches!(
                Store::open_heap(heap, &config),
                Err(StoreError::UnservedCoherence { .. })
            ));
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
}
