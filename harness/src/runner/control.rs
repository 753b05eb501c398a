//! The control file: a few atomics in `/dev/shm` that every process of a run maps, so the
//! launcher can hold all workers at a start line, start them at once and stop them early.
//!
//! # Protocol (per phase `ph`)
//! 1. every worker thread does its untimed set-up, then `ready[ph] += 1`;
//! 2. the launcher waits for `ready[ph] == workers`, then sets `go[ph] = 1`;
//! 3. workers run; a timed run ends at the op budget or when the launcher sets `stop = 1`
//!    (`--duration`); each worker then does `done[ph] += 1`.
//!
//! # Fields
//! `ready`, `done` and `progress` are written by workers (each `progress[w]` by worker `w`
//! only); `go` and `stop` only by the launcher; `failed` by any process that gives up, so
//! the others stop waiting. A fresh (zero-filled) file is a valid control block.

use anyhow::Context;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Most workers (processes × threads) in one run.
pub const COUNT_WORKERS_MAX: usize = 1024;

/// Operations between two updates of a worker's `progress` word.
pub const COUNT_OPS_PER_PROGRESS: u64 = 1024;

/// The shared control block.
#[repr(C, align(64))]
pub struct Control {
    /// Workers past their set-up, per phase (0: first phase, 1: second).
    pub ready: [AtomicU64; 2],
    /// Set to 1 by the launcher to start a phase.
    pub go: [AtomicU64; 2],
    /// Workers finished, per phase.
    pub done: [AtomicU64; 2],
    /// Set to 1 by the launcher to end the timed phase early.
    pub stop: AtomicU64,
    /// Set to 1 by any process that fails, so nobody waits forever.
    pub failed: AtomicU64,
    /// Operations done by each worker in the current phase (updated every
    /// [`COUNT_OPS_PER_PROGRESS`]), for the progress bar.
    pub progress: [AtomicU64; COUNT_WORKERS_MAX],
}

impl Control {
    /// Bytes of the control block.
    pub const SIZE: usize = std::mem::size_of::<Control>();

    /// Waits until `word` reaches `target`; gives up with an error if a process failed.
    pub fn wait_for(&self, word: &AtomicU64, target: u64) -> anyhow::Result<()> {
        let mut spins = 0u32;
        while word.load(Ordering::Acquire) < target {
            anyhow::ensure!(
                self.failed.load(Ordering::Acquire) == 0,
                "another worker process failed"
            );
            spins += 1;
            if spins < 1000 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        }
        Ok(())
    }

    /// A worker's steps 1-2 of the protocol: counts it ready for `phase` (its set-up done)
    /// and waits for the launcher's `go`.
    pub fn start_line(&self, phase: usize) -> anyhow::Result<()> {
        self.ready[phase].fetch_add(1, Ordering::AcqRel);
        self.wait_for(&self.go[phase], 1)
    }

    /// A worker's step 3: counts it done with `phase`.
    pub fn finish_line(&self, phase: usize) {
        self.done[phase].fetch_add(1, Ordering::AcqRel);
    }

    /// Total progress of all workers.
    pub fn progress_sum(&self, workers: usize) -> u64 {
        self.progress[..workers]
            .iter()
            .map(|p| p.load(Ordering::Relaxed))
            .sum()
    }
}

/// A mapped control file; the launcher's copy removes the file when dropped.
pub struct ControlFile {
    map: memmap2::MmapMut,
    path: PathBuf,
    owner: bool,
}

impl ControlFile {
    /// Creates a fresh zero-filled control file under `/dev/shm` (or the temp dir).
    pub fn create() -> anyhow::Result<Self> {
        static RUNS: AtomicU64 = AtomicU64::new(0);
        let dir = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let path = dir.join(format!(
            "podkv-run-{}-{}",
            std::process::id(),
            RUNS.fetch_add(1, Ordering::Relaxed)
        ));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .with_context(|| format!("cannot create control file {}", path.display()))?;
        file.set_len(Control::SIZE as u64)?;
        Self::map(&file, path, true)
    }

    /// Maps an existing control file (in a worker process).
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .with_context(|| format!("cannot open control file {}", path.display()))?;
        anyhow::ensure!(
            file.metadata()?.len() == Control::SIZE as u64,
            "{} is not a podkv control file",
            path.display()
        );
        Self::map(&file, path.to_owned(), false)
    }

    fn map(file: &std::fs::File, path: PathBuf, owner: bool) -> anyhow::Result<Self> {
        // SAFETY: the file is only ever accessed through the atomics of `Control`, by the
        // processes of one run; nobody truncates it while it is mapped.
        let map = unsafe { memmap2::MmapMut::map_mut(file)? };
        Ok(Self { map, path, owner })
    }

    /// The file's path, for worker processes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The control block.
    pub fn control(&self) -> &Control {
        // SAFETY: the mapping is `Control::SIZE` bytes, page-aligned (so aligned for
        // `Control`), and zero (or any value written through these atomics) is a valid
        // `Control`, which holds only `AtomicU64`s.
        unsafe { &*(self.map.as_ptr() as *const Control) }
    }
}

impl Drop for ControlFile {
    fn drop(&mut self) {
        if self.owner {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
