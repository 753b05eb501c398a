//! The pod's state on disk: one JSON file plus pidfiles in the pod's state directory.
//!
//! # Files (in `<state-dir>/<name>/`)
//! - `pod.json`: [`PodState`]. Written only by the monitor (atomically: temporary file, then
//!   rename); read by `pod status` and `pod down`. Removed by the monitor when it stops.
//! - `monitor.pid`, `member-<i>.pid`: the pids, one decimal number each, for other tools.
//! - `monitor.log`, `member-<i>.log`: what the detached monitor and each member print.
//!
//! A process is named by its pid *and* its start time (`/proc/PID/stat` field 22), so a pid the
//! kernel has since given to another process is never taken for a member or the monitor.
//! State whose monitor is gone is *stale*: reported as such, and cleaned by `pod down`.

use super::error::PodError;
use super::net::Mode;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// A running (or once running) process: pid plus start time.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Proc {
    /// Its pid (zero: none).
    pub pid: u32,
    /// Its start time in clock ticks after boot.
    pub start_time: u64,
}

impl Proc {
    /// The process `pid` as it is now.
    pub fn of(pid: u32) -> Proc {
        Proc {
            pid,
            start_time: podkv_alloc::process::start_time(pid).unwrap_or(0),
        }
    }

    /// Whether this very process still runs (a zombie counts as gone).
    pub fn is_alive(&self) -> bool {
        self.pid != 0
            && self.start_time != 0
            && podkv_alloc::process::start_time(self.pid) == Some(self.start_time)
            && !is_zombie(self.pid)
    }
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| s[i + 2..].starts_with('Z')))
        .unwrap_or(false)
}

/// Where the pod is in its life.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Members are being started.
    Starting,
    /// Every member has listened once; the monitor watches them.
    Up,
    /// The monitor is stopping the members.
    Stopping,
}

impl Phase {
    /// The phase as `podkv pod status` shows it.
    pub(super) fn name(self) -> &'static str {
        match self {
            Phase::Starting => "starting",
            Phase::Up => "up",
            Phase::Stopping => "stopping",
        }
    }
}

/// One member: a server process playing one host.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MemberState {
    /// Its index in the pod (0-based).
    pub index: usize,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its network namespace (netns mode only).
    pub netns: Option<String>,
    /// Its host id in the heap's slot owners (`podkv serve --host-id`): one per member in a
    /// lease-mode pod, none in a process-mode one (its members share this machine's id, so a
    /// dead member's slots are known by pid).
    #[serde(default)]
    pub host_id: Option<u16>,
    /// The current incarnation.
    pub proc: Proc,
    /// How many times the monitor restarted it.
    pub restarts: u32,
    /// When the current incarnation started (ms since the Unix epoch).
    pub started_ms: u64,
    /// How the previous incarnation ended, if one did.
    pub last_exit: Option<String>,
    /// What recovering the previous incarnation's thread slots did.
    pub last_recovery: Option<String>,
    /// When that recovery ended (ms since the Unix epoch).
    #[serde(default)]
    pub recovered_ms: Option<u64>,
}

/// A pod heap's coherence mode, as `pod status` shows it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct HeapMode {
    /// `hardware`, `limited` or `mcas`.
    pub coherence: String,
    /// An `mcas` heap's implementation (`flush-cas`, `nmp`); none in other modes.
    pub mcas_impl: Option<String>,
    /// How the heap judges a slot's owner dead: `process` or `lease` (state files from before
    /// it was recorded: process, the only mode a pod could have then).
    #[serde(default = "liveness_process")]
    pub liveness: String,
}

fn liveness_process() -> String {
    podkv_alloc::Liveness::Process.name().into()
}

impl HeapMode {
    /// The mode of a heap in `coherence`, with its mCAS implementation if it has one.
    pub fn of(
        coherence: podkv_hw::Coherence,
        mcas_impl: Option<podkv_hw::mcas::McasKind>,
    ) -> HeapMode {
        HeapMode {
            coherence: coherence.name().into(),
            mcas_impl: mcas_impl.map(|kind| kind.name().into()),
            liveness: liveness_process(),
        }
    }
}

impl Default for HeapMode {
    fn default() -> HeapMode {
        HeapMode::of(podkv_hw::Coherence::Hardware, None)
    }
}

impl std::fmt::Display for HeapMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.mcas_impl {
            Some(kind) => write!(f, "{} --mcas-impl {kind}", self.coherence),
            None => f.write_str(&self.coherence),
        }
    }
}

/// The whole pod.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PodState {
    /// The pod's name.
    pub name: String,
    /// The pod heap every member maps.
    pub heap: PathBuf,
    /// The heap's coherence mode (state files from before it was recorded: hardware, the
    /// only mode a pod could have then).
    #[serde(default)]
    pub heap_mode: HeapMode,
    /// How members get their own addresses.
    pub mode: Mode,
    /// The bridge joining the members' namespaces (netns mode only).
    pub bridge: Option<String>,
    /// Extra arguments given to every `podkv serve`.
    pub serve_args: Vec<String>,
    /// The monitor.
    pub monitor: Proc,
    /// Where the pod is in its life.
    pub phase: Phase,
    /// When the pod came up (ms since the Unix epoch).
    pub up_ms: u64,
    /// The members, by index.
    pub members: Vec<MemberState>,
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The state directory root: `$XDG_RUNTIME_DIR/podkv`, else `/tmp/podkv-$UID`.
pub fn default_root() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(dir) if !dir.is_empty() => Path::new(&dir).join("podkv"),
        // SAFETY: getuid has no preconditions and cannot fail.
        _ => PathBuf::from(format!("/tmp/podkv-{}", unsafe { libc::getuid() })),
    }
}

/// Refuses a pod name that could not name a directory, namespace and interface: 1 to 8
/// characters of a-z and 0-9.
pub fn check_name(name: &str) -> Result<(), PodError> {
    let ok = (1..=8).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(PodError::Name(name.to_owned()))
    }
}

/// One pod's state directory.
#[derive(Clone, Debug)]
pub struct StateDir {
    /// `<root>/<name>`.
    pub dir: PathBuf,
}

impl StateDir {
    /// Refuses to start over a pod that is up, or over stale state.
    pub(super) fn refuse_existing(&self, name: &str) -> Result<(), PodError> {
        match self.load()? {
            None => Ok(()),
            Some(s) if s.monitor.is_alive() => Err(PodError::AlreadyUp {
                name: name.into(),
                pid: s.monitor.pid,
            }),
            Some(s) => Err(PodError::Stale {
                name: name.into(),
                down: self.down_command(name),
                dir: self.dir.clone(),
                pid: s.monitor.pid,
            }),
        }
    }

    /// The `podkv pod down` that cleans up pod `name` in `dir`.
    pub(super) fn down_command(&self, name: &str) -> String {
        match self.dir.parent() {
            Some(root) if root != default_root() => {
                format!(
                    "podkv pod down --name {name} --state-dir {}",
                    root.display()
                )
            }
            _ => format!("podkv pod down --name {name}"),
        }
    }

    /// The directory of pod `name` under `root`.
    pub fn new(root: &Path, name: &str) -> StateDir {
        StateDir {
            dir: root.join(name),
        }
    }

    /// Creates the directory (mode 0700).
    pub fn create(&self) -> Result<(), PodError> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(PodError::io(format!("creating {}", self.dir.display())))
    }

    /// The state file.
    pub fn state_file(&self) -> PathBuf {
        self.dir.join("pod.json")
    }

    /// A member's log file.
    pub fn member_log(&self, index: usize) -> PathBuf {
        self.dir.join(format!("member-{index}.log"))
    }

    /// The detached monitor's log file.
    pub fn monitor_log(&self) -> PathBuf {
        self.dir.join("monitor.log")
    }

    /// Reads the state, `None` when there is none.
    pub fn load(&self) -> Result<Option<PodState>, PodError> {
        let path = self.state_file();
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|source| PodError::State { path, source }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(PodError::io(format!("reading {}", path.display()))(e)),
        }
    }

    /// Writes the state and the pidfiles (each atomically).
    pub fn save(&self, state: &PodState) -> Result<(), PodError> {
        let json = serde_json::to_vec_pretty(state).expect("state serialises");
        self.write_atomic("pod.json", &json)?;
        self.write_atomic("monitor.pid", format!("{}\n", state.monitor.pid).as_bytes())?;
        for m in &state.members {
            let name = format!("member-{}.pid", m.index);
            self.write_atomic(&name, format!("{}\n", m.proc.pid).as_bytes())?;
        }
        Ok(())
    }

    fn write_atomic(&self, name: &str, bytes: &[u8]) -> Result<(), PodError> {
        let path = self.dir.join(name);
        let tmp = self.dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, bytes)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(PodError::io(format!("writing {}", path.display())))
    }

    /// Removes the state file and pidfiles (logs stay for post-mortems).
    pub fn remove_state(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name == "pod.json" || name.ends_with(".pid") || name.ends_with(".tmp") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(dir: &Path) -> PodState {
        PodState {
            name: "t".into(),
            heap: dir.join("heap"),
            heap_mode: HeapMode::default(),
            mode: Mode::Loopback,
            bridge: None,
            serve_args: vec![],
            monitor: Proc::of(std::process::id()),
            phase: Phase::Up,
            up_ms: now_ms(),
            members: vec![MemberState {
                host_id: None,
                index: 0,
                addr: "127.0.0.1:1".parse().unwrap(),
                netns: None,
                proc: Proc::default(),
                restarts: 2,
                started_ms: 0,
                last_exit: None,
                last_recovery: None,
                recovered_ms: None,
            }],
        }
    }

    #[test]
    fn state_round_trips_and_removal_keeps_logs() {
        let root = tempfile::tempdir().unwrap();
        let dir = StateDir::new(root.path(), "t");
        dir.create().unwrap();
        assert!(dir.load().unwrap().is_none());
        std::fs::write(dir.member_log(0), "log").unwrap();
        dir.save(&sample(root.path())).unwrap();
        let back = dir.load().unwrap().unwrap();
        assert_eq!(back.members[0].restarts, 2);
        assert_eq!(
            std::fs::read_to_string(dir.dir.join("monitor.pid")).unwrap(),
            format!("{}\n", std::process::id())
        );
        dir.remove_state();
        assert!(dir.load().unwrap().is_none());
        assert!(dir.member_log(0).exists());
    }

    #[test]
    fn garbage_state_is_a_clear_error() {
        let root = tempfile::tempdir().unwrap();
        let dir = StateDir::new(root.path(), "t");
        dir.create().unwrap();
        std::fs::write(dir.state_file(), "{not json").unwrap();
        let err = dir.load().unwrap_err().to_string();
        assert!(err.contains("pod.json is unreadable"), "{err}");
    }

    #[test]
    fn a_process_is_its_pid_and_start_time() {
        let me = Proc::of(std::process::id());
        assert!(me.is_alive());
        let other = Proc {
            start_time: me.start_time + 1,
            ..me
        };
        assert!(!other.is_alive(), "a reused pid is another process");
        assert!(!Proc::default().is_alive());
    }
}
