//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod children;

use podkv_store::{Clock, Store, StoreConfig};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// A small heap geometry for tests (sparse file, few slots), in the coherence mode
/// `PODKV_TEST_COHERENCE` names (`hardware` by default; `limited`, `mcas`, `mcas-nmp`). With
/// `PODKV_COHERENCE_MODEL=1` and the `coherence-model` feature, a `limited` or `mcas` heap
/// is opened under the model of non-coherent caches in every process of the test.
pub fn heap_config() -> podkv_alloc::Config {
    use podkv_hw::mcas::McasKind;
    use podkv_hw::Coherence;
    let (coherence, mcas) = match std::env::var("PODKV_TEST_COHERENCE").as_deref() {
        Ok("limited") => (Coherence::Limited, McasKind::FlushCas),
        Ok("mcas") => (Coherence::Mcas, McasKind::FlushCas),
        Ok("mcas-nmp") => (Coherence::Mcas, McasKind::Nmp),
        _ => (Coherence::Hardware, McasKind::FlushCas),
    };
    podkv_alloc::Config {
        small_bytes: 1 << 30,
        large_bytes: 1 << 30,
        slots: 64,
        coherence,
        mcas,
        ..podkv_alloc::Config::default()
    }
}

/// A store config over [`heap_config`].
pub fn config() -> StoreConfig {
    StoreConfig {
        heap: heap_config(),
        ..StoreConfig::default()
    }
}

/// A fresh heap file path in a temp dir (kept alive by the returned dir).
pub fn heap_path(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir_in(shm()).expect("tempdir");
    let path = dir.path().join(name);
    (dir, path)
}

fn shm() -> &'static Path {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm
    } else {
        Path::new("/tmp")
    }
}

/// The store's check once a fresh handle has collected what the test's handles retired
/// (twice: the epoch moves the two steps that make a retired item reclaimable), asserted
/// valid.
pub fn settled_check(store: &Store) -> podkv_store::CheckReport {
    let h = store.handle().expect("a handle");
    h.collect();
    h.collect();
    drop(h);
    let report = store.check();
    assert!(report.is_valid(), "{:#?}", report.problems);
    report
}

/// A fresh store with a fake clock at `t0`.
pub fn fake_store(t0: u64) -> (tempfile::TempDir, Store, Arc<AtomicU64>) {
    let (dir, path) = heap_path("heap");
    let (clock, time) = Clock::fake(t0);
    let store = Store::open(&path, StoreConfig { clock, ..config() }).expect("open");
    (dir, store, time)
}

/// Makes the child `command` spawns die (SIGKILL) when the thread that spawned it ends: a
/// child a test meant to kill or stop outlives a parent that failed or was killed otherwise,
/// and some spin until killed.
pub fn dies_with_parent(command: &mut std::process::Command) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: `prctl` is async-signal-safe, allocates nothing and touches no lock of the
    // parent, as a `pre_exec` closure must.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        })
    }
}
