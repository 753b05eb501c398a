//! Starting one member (`podkv serve` on the pod heap at the member's address) and waiting
//! until it listens.
//!
//! A member is ready when it says so: `podkv serve` prints `podkv serve: listening on ADDR
//! (heap PATH, pid N)` on stderr once it listens (its CLI contract), and the monitor looks for
//! that line with the child's own pid in the log written since the spawn — so another process
//! already listening on the address is never taken for the member. It runs in its own process
//! group (so a Ctrl-C at the terminal reaches only the monitor, which then stops the members in
//! order), with stdin closed and stdout/stderr appended to its log in the state directory.

use super::error::PodError;
use super::net::NetnsHandle;
use super::state::{MemberState, StateDir};
use std::io::{Read, Seek, SeekFrom};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a member may take to listen.
pub const TIMEOUT_READY: Duration = Duration::from_secs(30);

/// What every member runs: a program and the arguments before the member's own.
#[derive(Clone, Debug)]
pub struct Program {
    /// The `podkv` binary.
    pub exe: PathBuf,
    /// Extra `podkv serve` arguments.
    pub serve_args: Vec<String>,
}

impl Program {
    /// The command line of a member on `heap` listening on `addr`, as host `host_id` if it
    /// has its own.
    pub fn command(&self, heap: &Path, addr: SocketAddr, host_id: Option<u16>) -> Command {
        let mut command = Command::new(&self.exe);
        command
            .arg("serve")
            .arg("--heap")
            .arg(heap)
            .arg("--listen")
            .arg(addr.to_string());
        if let Some(id) = host_id {
            command.arg("--host-id").arg(id.to_string());
        }
        command.args(&self.serve_args);
        command
    }
}

/// A member process just spawned, and where its log output begins.
#[derive(Debug)]
pub struct Spawned {
    /// The process.
    pub child: Child,
    log: PathBuf,
    log_from: u64,
}

impl Spawned {
    /// Whether it has said that it listens (see the module documentation).
    pub fn says_listening(&self) -> bool {
        let mut text = String::new();
        let read = std::fs::File::open(&self.log).and_then(|mut f| {
            f.seek(SeekFrom::Start(self.log_from))?;
            f.read_to_string(&mut text)
        });
        let me = format!("pid {})", self.child.id());
        read.is_ok()
            && text
                .lines()
                .any(|l| l.starts_with("podkv serve: listening on ") && l.ends_with(&me))
    }
}

/// Spawns member `member` and waits until it listens.
pub fn start(
    program: &Program,
    heap: &Path,
    member: &MemberState,
    dir: &StateDir,
) -> Result<Child, PodError> {
    let mut spawned = spawn(program, heap, member, dir)?;
    match wait_ready(&mut spawned, TIMEOUT_READY) {
        Ok(()) => Ok(spawned.child),
        Err(why) => {
            let _ = spawned.child.kill();
            let _ = spawned.child.wait();
            Err(failed(member, dir, why))
        }
    }
}

/// The error of member `member` that did not start, pointing at its log.
pub fn failed(member: &MemberState, dir: &StateDir, why: String) -> PodError {
    PodError::MemberStart {
        index: member.index,
        addr: member.addr.to_string(),
        why,
        log: dir.member_log(member.index),
    }
}

/// Spawns member `member` (in its namespace, if it has one) without waiting.
pub fn spawn(
    program: &Program,
    heap: &Path,
    member: &MemberState,
    dir: &StateDir,
) -> Result<Spawned, PodError> {
    let log_path = dir.member_log(member.index);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(PodError::io(format!("opening {}", log_path.display())))?;
    let log_from = log.metadata().map_or(0, |m| m.len());
    let log_err = log
        .try_clone()
        .map_err(PodError::io("duplicating a log descriptor"))?;
    let mut command = program.command(heap, member.addr, member.host_id);
    command
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .process_group(0);
    let netns = member.netns.as_deref().map(NetnsHandle::open).transpose()?;
    if let Some(ns) = &netns {
        ns.enter_in(&mut command);
    }
    let child = command
        .spawn()
        .map_err(PodError::io(format!("starting {}", program.exe.display())))?;
    Ok(Spawned {
        child,
        log: log_path,
        log_from,
    })
}

/// Polls until `spawned` says it listens, exits, or `timeout` passes.
pub fn wait_ready(spawned: &mut Spawned, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        if spawned.says_listening() {
            return Ok(());
        }
        match spawned.child.try_wait() {
            Ok(Some(status)) => return Err(format!("it exited ({status})")),
            Ok(None) => {}
            Err(e) => return Err(format!("cannot wait for it: {e}")),
        }
        if Instant::now() >= deadline {
            return Err(format!("not listening after {} s", timeout.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
