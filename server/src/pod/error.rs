//! What can go wrong running a pod, as values the CLI prints in one line.

use std::path::PathBuf;

/// A pod operation's failure.
#[derive(Debug, thiserror::Error)]
pub enum PodError {
    /// The pod name cannot name namespaces and interfaces.
    #[error("pod name `{0}` must be 1 to 8 characters of a-z and 0-9")]
    Name(String),
    /// A pod of that name already runs.
    #[error(
        "pod `{name}` is already up (monitor pid {pid}); `podkv pod down --name {name}` first"
    )]
    AlreadyUp {
        /// The pod.
        name: String,
        /// Its monitor.
        pid: u32,
    },
    /// State left by a monitor that is gone.
    #[error("pod `{name}` has stale state in {dir}: its monitor (pid {pid}) is gone; `{down}` cleans up")]
    Stale {
        /// The pod.
        name: String,
        /// The command that cleans up.
        down: String,
        /// Its state directory.
        dir: PathBuf,
        /// The dead monitor.
        pid: u32,
    },
    /// No state: the pod is not up.
    #[error("pod `{name}` is not up (no state in {dir})")]
    NotUp {
        /// The pod.
        name: String,
        /// Where its state would be.
        dir: PathBuf,
    },
    /// Network namespaces were asked for but cannot be used here.
    #[error("network namespaces are not usable here: {0}")]
    NoNetns(String),
    /// An `ip` command failed.
    #[error("`ip {args}` failed: {stderr}")]
    Ip {
        /// Its arguments.
        args: String,
        /// What it printed.
        stderr: String,
    },
    /// A member did not start listening in time or exited while starting.
    #[error("member {index} ({addr}) did not start: {why}; see {log}")]
    MemberStart {
        /// Which member.
        index: usize,
        /// Its address.
        addr: String,
        /// What happened.
        why: String,
        /// Its log file.
        log: PathBuf,
    },
    /// `--mcas-impl` without `--coherence mcas`.
    #[error("--mcas-impl {0} applies only to --coherence mcas")]
    McasImplWithoutMcas(String),
    /// The existing heap was created in another mode than `--coherence` names.
    #[error("heap {heap} was created with --coherence {found}, not {asked}; omit --coherence to use it, or name another --heap")]
    CoherenceMismatch {
        /// The heap.
        heap: PathBuf,
        /// Its mode (with the mCAS implementation).
        found: String,
        /// The mode asked for.
        asked: String,
    },
    /// The existing heap was created with another liveness mode than `--liveness` names.
    #[error("heap {heap} was created with --liveness {found}, not {asked}; omit --liveness to use it, or name another --heap")]
    LivenessMismatch {
        /// The heap.
        heap: PathBuf,
        /// Its mode.
        found: String,
        /// The mode asked for.
        asked: String,
    },
    /// The heap's mode is one the store does not serve (refused before a heap is created).
    #[error(transparent)]
    Unserved(podkv_store::StoreError),
    /// The heap could not be created or opened.
    #[error(transparent)]
    Heap(#[from] podkv_alloc::HeapError),
    /// The state file is not what this version writes.
    #[error("state file {path} is unreadable: {source}")]
    State {
        /// The file.
        path: PathBuf,
        /// Why.
        source: serde_json::Error,
    },
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
}

impl PodError {
    /// Wraps an I/O error with what was being done.
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> PodError {
        let what = what.into();
        move |source| PodError::Io { what, source }
    }
}
