//! Set-up and the closing check shared by the tests in which two processes (this test binary,
//! re-executed as a child) write one modelled heap (`podkv_hw::model`): `tenure.rs`,
//! `huge_lines.rs`, `model_scenarios.rs`.

use podkv_alloc::{Config, Heap};
use std::path::PathBuf;
use std::process::Command;

/// A fresh heap file in a temporary directory, opened modelled by this process (the parent).
pub fn modelled_heap(config: &Config) -> (tempfile::TempDir, PathBuf, Heap) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("heap");
    std::fs::File::create(&path).unwrap();
    podkv_hw::model::set_active(true);
    let heap = Heap::open(&path, config).unwrap();
    (dir, path, heap)
}

/// This test binary, to run only test `test` modelled, with `role` set to `spec`. The child
/// dies (SIGKILL) when the thread that spawns it ends, so a scenario that fails or is killed
/// leaves no child waiting or spinning behind it.
pub fn child(test: &str, role: &str, spec: &str) -> Command {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(role, spec)
        .env("PODKV_COHERENCE_MODEL", "1");
    // SAFETY: `prctl` is async-signal-safe, allocates nothing and takes no lock, as a
    // `pre_exec` closure must.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    command
}

/// The end of a scenario: once this process's huge blocks are collected, the heap checks
/// valid and holds no live block, slab or huge (`what` names the case in a failure).
pub fn assert_clean(heap: &Heap, what: &str) {
    heap.collect_huge();
    let report = heap.check();
    assert!(
        report.is_valid(),
        "{what}check: {}",
        report.problems.join("; ")
    );
    assert_eq!(
        report.live_blocks() + report.huge.live,
        0,
        "{what}blocks left live"
    );
}
