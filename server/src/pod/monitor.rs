//! The monitor: starts the members, restarts any that dies, stops them all when asked.
//!
//! # Loop
//! Every `INTERVAL_POLL` the monitor reaps its children (`try_wait`). A member that exited is
//! handled in three named steps, each logged before it is taken:
//! 1. *noticed*: record how it ended;
//! 2. *recovered*: [`recover_member`] on the heap, for the dead pid (the others keep serving);
//! 3. *restarted*: spawn a new incarnation at the same address and wait until it listens.
//!
//! A member that fails to start again is retried after a back-off that doubles up to
//! `BACKOFF_MAX`, so a member that cannot run does not spin the machine.
//!
//! # Stopping
//! SIGTERM or SIGINT sets the stop flag ([`signals`]); the monitor then sends SIGTERM to each
//! member, waits up to `TIMEOUT_STOP`, kills what is left, removes the namespaces and the
//! state file. Only the monitor writes the state file while it runs.

use super::error::PodError;
use super::member::{self, Program};
use super::net::{self, Mode};
use super::recover::recover_member;
use super::signals;
use super::state::{now_ms, Phase, PodState, Proc, StateDir};
use std::process::Child;
use std::time::{Duration, Instant};

const INTERVAL_POLL: Duration = Duration::from_millis(50);
const TIMEOUT_STOP: Duration = Duration::from_secs(10);
const BACKOFF_MIN: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// A member as the monitor holds it.
struct Slot {
    child: Option<Child>,
    /// When to try starting it again, after a failed start.
    retry_at: Option<Instant>,
    backoff: Duration,
    /// When the monitor noticed the current outage.
    noticed_at: Option<Instant>,
}

/// The running monitor of one pod.
pub struct Monitor {
    dir: StateDir,
    state: PodState,
    program: Program,
    slots: Vec<Slot>,
}

impl Monitor {
    /// A monitor for `state`, whose network (if any) is already set up; records this process
    /// as the monitor. The caller installs the stop signals first ([`signals::install`]).
    pub fn new(dir: StateDir, mut state: PodState, program: Program) -> Monitor {
        state.monitor = Proc::of(std::process::id());
        state.phase = Phase::Starting;
        let slots = state
            .members
            .iter()
            .map(|_| Slot {
                child: None,
                retry_at: None,
                backoff: BACKOFF_MIN,
                noticed_at: None,
            })
            .collect();
        Monitor {
            dir,
            state,
            program,
            slots,
        }
    }

    /// Starts every member; on failure stops those started and cleans up.
    pub fn start_all(&mut self) -> Result<(), PodError> {
        self.dir.save(&self.state)?;
        for i in 0..self.slots.len() {
            if let Err(e) = self.spawn(i) {
                self.stop();
                return Err(e);
            }
        }
        self.state.phase = Phase::Up;
        self.dir.save(&self.state)
    }

    /// The pod as it is now.
    pub fn state(&self) -> &PodState {
        &self.state
    }

    fn spawn(&mut self, i: usize) -> Result<(), PodError> {
        let child = member::start(
            &self.program,
            &self.state.heap,
            &self.state.members[i],
            &self.dir,
        )?;
        let m = &mut self.state.members[i];
        m.proc = Proc::of(child.id());
        m.started_ms = now_ms();
        self.slots[i].child = Some(child);
        self.dir.save(&self.state)
    }

    /// Watches the members until asked to stop, then stops them.
    pub fn run(&mut self) -> Result<(), PodError> {
        while !signals::stop_requested() {
            for i in 0..self.slots.len() {
                self.check(i)?;
            }
            std::thread::sleep(INTERVAL_POLL);
        }
        self.stop();
        Ok(())
    }

    fn check(&mut self, i: usize) -> Result<(), PodError> {
        if let Some(child) = &mut self.slots[i].child {
            let Some(status) = child
                .try_wait()
                .map_err(PodError::io("waiting for a member"))?
            else {
                return Ok(());
            };
            self.noticed(i, status.to_string());
        }
        if signals::stop_requested() {
            return Ok(());
        }
        match self.slots[i].retry_at {
            Some(at) if Instant::now() < at => Ok(()),
            _ => self.restart(i),
        }
    }

    fn noticed(&mut self, i: usize, how: String) {
        let m = &mut self.state.members[i];
        eprintln!(
            "pod {}: member {i} (pid {}, {}) exited: {how}",
            self.state.name, m.proc.pid, m.addr
        );
        m.last_exit = Some(how);
        self.slots[i].child = None;
        self.slots[i].noticed_at = Some(Instant::now());
        let pid = m.proc.pid;
        let recovery = match recover_member(&self.state.heap, pid) {
            Ok(r) => r.to_string(),
            Err(e) => format!("recovery of pid {pid} failed: {e}"),
        };
        eprintln!("pod {}: member {i} recovered: {recovery}", self.state.name);
        self.state.members[i].last_recovery = Some(recovery);
    }

    fn restart(&mut self, i: usize) -> Result<(), PodError> {
        match self.spawn(i) {
            Ok(()) => {
                let m = &mut self.state.members[i];
                m.restarts += 1;
                let took = self.slots[i]
                    .noticed_at
                    .take()
                    .map_or(0, |t| t.elapsed().as_millis());
                eprintln!(
                    "pod {}: member {i} restarted (pid {}, restart {}) and listening {took} ms after its exit was noticed",
                    self.state.name, m.proc.pid, m.restarts
                );
                self.slots[i].retry_at = None;
                self.slots[i].backoff = BACKOFF_MIN;
                self.dir.save(&self.state)
            }
            Err(e) => {
                let slot = &mut self.slots[i];
                eprintln!(
                    "pod {}: member {i} failed to restart: {e}; retrying in {} ms",
                    self.state.name,
                    slot.backoff.as_millis()
                );
                slot.retry_at = Some(Instant::now() + slot.backoff);
                slot.backoff = (slot.backoff * 2).min(BACKOFF_MAX);
                Ok(())
            }
        }
    }

    /// Stops every member, removes the network and the state file.
    pub fn stop(&mut self) {
        self.state.phase = Phase::Stopping;
        let _ = self.dir.save(&self.state);
        for slot in &self.slots {
            if let Some(child) = &slot.child {
                signals::send(child.id(), libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + TIMEOUT_STOP;
        for slot in &mut self.slots {
            let Some(child) = &mut slot.child else {
                continue;
            };
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
            if matches!(child.try_wait(), Ok(None)) {
                eprintln!(
                    "pod {}: a member (pid {}) ignored SIGTERM for {} s; killing it",
                    self.state.name,
                    child.id(),
                    TIMEOUT_STOP.as_secs()
                );
                let _ = child.kill();
                let _ = child.wait();
            }
            slot.child = None;
        }
        if self.state.mode == Mode::Netns {
            for left in net::teardown(&self.state.name, self.state.members.len()) {
                eprintln!("pod {}: {left}", self.state.name);
            }
        }
        self.dir.remove_state();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::state::MemberState;

    fn one_member(dir: &StateDir, port: u16) -> PodState {
        PodState {
            name: "t".into(),
            heap: dir.dir.join("heap"),
            mode: Mode::Loopback,
            bridge: None,
            serve_args: vec![],
            monitor: Proc::default(),
            phase: Phase::Starting,
            up_ms: now_ms(),
            members: vec![MemberState {
                index: 0,
                addr: ([127, 0, 0, 1], port).into(),
                netns: None,
                proc: Proc::default(),
                restarts: 0,
                started_ms: 0,
                last_exit: None,
                last_recovery: None,
            }],
        }
    }

    #[test]
    fn a_member_that_exits_while_starting_fails_the_pod_and_leaves_no_state() {
        let root = tempfile::tempdir().unwrap();
        let dir = StateDir::new(root.path(), "t");
        dir.create().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let program = Program {
            exe: "false".into(),
            serve_args: vec![],
        };
        let mut monitor = Monitor::new(dir.clone(), one_member(&dir, port), program);
        let err = monitor.start_all().unwrap_err().to_string();
        assert!(err.contains("member 0") && err.contains("exited"), "{err}");
        assert!(
            err.contains("member-0.log"),
            "the error points at the log: {err}"
        );
        assert!(
            dir.load().unwrap().is_none(),
            "a failed start leaves no state"
        );
    }
}
