//! Starting one member (`podkv serve` on the pod heap at the member's address) and waiting
//! until it listens.
//!
//! A member is ready when a TCP connection to its address succeeds. It runs in its own process
//! group (so a Ctrl-C at the terminal reaches only the monitor, which then stops the members in
//! order), with stdin closed and stdout/stderr appended to its log in the state directory.

use super::error::PodError;
use super::net::NetnsHandle;
use super::state::{MemberState, StateDir};
use std::net::{SocketAddr, TcpStream};
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
    /// The command line of a member on `heap` listening on `addr`.
    pub fn command(&self, heap: &Path, addr: SocketAddr) -> Command {
        let mut command = Command::new(&self.exe);
        command
            .arg("serve")
            .arg("--heap")
            .arg(heap)
            .arg("--listen")
            .arg(addr.to_string())
            .args(&self.serve_args);
        command
    }
}

/// Spawns member `member` and waits until it listens.
pub fn start(
    program: &Program,
    heap: &Path,
    member: &MemberState,
    dir: &StateDir,
) -> Result<Child, PodError> {
    let log_path = dir.member_log(member.index);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(PodError::io(format!("opening {}", log_path.display())))?;
    let log_err = log
        .try_clone()
        .map_err(PodError::io("duplicating a log descriptor"))?;
    let mut command = program.command(heap, member.addr);
    command
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .process_group(0);
    let netns = member.netns.as_deref().map(NetnsHandle::open).transpose()?;
    if let Some(ns) = &netns {
        ns.enter_in(&mut command);
    }
    let mut child = command
        .spawn()
        .map_err(PodError::io(format!("starting {}", program.exe.display())))?;
    drop(netns);
    match wait_ready(&mut child, member.addr, TIMEOUT_READY) {
        Ok(()) => Ok(child),
        Err(why) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(PodError::MemberStart {
                index: member.index,
                addr: member.addr.to_string(),
                why,
                log: log_path,
            })
        }
    }
}

/// Polls `addr` until it accepts a connection, the child exits, or `timeout` passes.
pub fn wait_ready(child: &mut Child, addr: SocketAddr, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        match child.try_wait() {
            Ok(Some(status)) => return Err(format!("it exited ({status})")),
            Ok(None) => {}
            Err(e) => return Err(format!("cannot wait for it: {e}")),
        }
        if Instant::now() >= deadline {
            return Err(format!("not listening after {} s", timeout.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
