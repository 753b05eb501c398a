//! The monitor: starts the members, restarts any that dies, stops them all when asked.
//!
//! # Loop
//! Every `INTERVAL_POLL` the monitor looks at each member once, without blocking, and moves it
//! through its [`Life`]:
//! - `Running` → `Waiting`: the process exited. *Noticed* (how it ended is recorded), then
//!   *recovered*: [`recover_member`] on the heap for the dead pid, while the others serve on;
//!   unless stopping, it moves on to `Starting` in the same step.
//! - `Waiting` → `Starting`: its retry time came; a new incarnation is spawned at the same
//!   address.
//! - `Starting` → `Running`: it listens; the restart is counted and logged with its latency.
//! - `Starting` → `Waiting`: it exited or did not listen within `TIMEOUT_READY`; it is retried
//!   after a back-off that doubles up to `BACKOFF_MAX`, so a member that cannot run does not
//!   spin the machine (and never delays watching the others).
//!
//! # Lease pods
//! In a lease-mode pod (members with host ids) the monitor keeps the heap open and, every
//! `INTERVAL_WATCH`, judges every slot once ([`Heap::slot_life`]): it watches the members'
//! beats all along, so the slots of a member that stops are fenced one lease after its last
//! beat, and those of one that exited are recovered then — not a lease after the monitor
//! first looked. (Watching from the exit on cost a whole lease more plus the poll.)
//!
//! # Log
//! One `tracing` event for each member start (`member started`), exit (`member exited`, a
//! warning), restart (`member restarted`, listening `ms_since_exit` after the exit was noticed)
//! and each thread slot recovered (`slot recovered`: slot, owner pid and host, µs); the pod's
//! name is in the surrounding span, set by the command that runs the monitor.
//!
//! # Stopping
//! SIGTERM or SIGINT sets the stop flag ([`signals`]); the monitor then sends SIGTERM to each
//! member, waits up to `TIMEOUT_STOP`, kills what is left, removes the namespaces and the
//! state file. Only the monitor writes the state file while it runs.

use super::error::PodError;
use super::member::{self, Program, Spawned};
use super::net::{self, Mode};
use super::recover::{open_heap, recover_member, recover_member_in, Recovery};
use super::signals;
use super::state::{now_ms, Phase, PodState, Proc, StateDir};
use podkv_alloc::Heap;
use std::process::Child;
use std::time::{Duration, Instant};

/// How long `pod down` waits for the monitor, and `pod up --detach` for the pod.
pub(super) const TIMEOUT_MONITOR: Duration = Duration::from_secs(60);

const INTERVAL_POLL: Duration = Duration::from_millis(50);
/// Polls of a lease pod: the watch's granularity (a lapse is seen at most this late, and the
/// last beat's time is known to within this).
const INTERVAL_WATCH: Duration = Duration::from_millis(20);
/// Polls while a member starts, so a restart is counted as soon as it listens.
const INTERVAL_STARTING: Duration = Duration::from_millis(5);
const TIMEOUT_STOP: Duration = Duration::from_secs(10);
const BACKOFF_MIN: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Where a member is in its life, as the monitor sees it.
enum Life {
    /// Listening when started; watched for its exit.
    Running(Child),
    /// Spawned, not yet listening.
    Starting { spawned: Spawned, since: Instant },
    /// Not running: start it again at `at`.
    Waiting { at: Instant },
}

/// A member as the monitor holds it.
struct Slot {
    life: Life,
    backoff: Duration,
    /// When the monitor noticed the current outage.
    noticed_at: Option<Instant>,
}

impl Slot {
    fn child(&self) -> Option<&Child> {
        match &self.life {
            Life::Running(child) => Some(child),
            Life::Starting { spawned, .. } => Some(&spawned.child),
            Life::Waiting { .. } => None,
        }
    }
}

/// The running monitor of one pod.
pub struct Monitor {
    dir: StateDir,
    state: PodState,
    program: Program,
    slots: Vec<Slot>,
    /// A lease pod's heap, open while the monitor runs (see the module docs); `Err` once it
    /// could not be opened (then each recovery opens it, as in a process-mode pod).
    heap: Option<Result<Heap, ()>>,
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
                life: Life::Waiting { at: Instant::now() },
                backoff: BACKOFF_MIN,
                noticed_at: None,
            })
            .collect();
        Monitor {
            dir,
            state,
            program,
            slots,
            heap: None,
        }
    }

    /// Starts every member, waiting until each listens; on failure stops those started and
    /// cleans up.
    pub fn start_all(&mut self) -> Result<(), PodError> {
        self.dir.save(&self.state)?;
        for i in 0..self.slots.len() {
            let m = &self.state.members[i];
            match member::start(&self.program, &self.state.heap, m, &self.dir) {
                Ok(child) => {
                    self.running(i, child)?;
                    let m = &self.state.members[i];
                    tracing::info!(member = i, pid = m.proc.pid, addr = %m.addr, "member started");
                }
                Err(e) => {
                    self.stop();
                    return Err(e);
                }
            }
        }
        self.state.phase = Phase::Up;
        self.dir.save(&self.state)
    }

    /// The pod as it is now.
    pub fn state(&self) -> &PodState {
        &self.state
    }

    fn running(&mut self, i: usize, child: Child) -> Result<(), PodError> {
        let m = &mut self.state.members[i];
        m.proc = Proc::of(child.id());
        m.started_ms = now_ms();
        self.slots[i].life = Life::Running(child);
        self.dir.save(&self.state)
    }

    /// Watches the members until asked to stop, then stops them.
    pub fn run(&mut self) -> Result<(), PodError> {
        let lease = self.state.members.iter().any(|m| m.host_id.is_some());
        while !signals::stop_requested() {
            if lease {
                self.watch_beats();
            }
            for i in 0..self.slots.len() {
                self.step(i)?;
            }
            let starting = self
                .slots
                .iter()
                .any(|s| matches!(s.life, Life::Starting { .. }));
            std::thread::sleep(if starting {
                INTERVAL_STARTING
            } else if lease {
                INTERVAL_WATCH
            } else {
                INTERVAL_POLL
            });
        }
        self.stop();
        Ok(())
    }

    /// A lease pod: judges every slot of the heap once, opening it the first time (see the
    /// module docs). Fencing a lapsed owner is the heap's watch's own doing.
    fn watch_beats(&mut self) {
        let heap = self.heap.get_or_insert_with(|| {
            open_heap(&self.state.heap).map_err(|e| {
                tracing::warn!(error = %e, "cannot keep the heap open to watch the members");
            })
        });
        if let Ok(heap) = heap {
            for i in 0..heap.geometry().slots() {
                heap.slot_life(i);
            }
        }
    }

    /// Moves member `i` through its life by at most one transition; never blocks.
    fn step(&mut self, i: usize) -> Result<(), PodError> {
        let now = Instant::now();
        let life = std::mem::replace(&mut self.slots[i].life, Life::Waiting { at: now });
        self.slots[i].life = match life {
            Life::Running(mut child) => match child.try_wait() {
                Ok(Some(status)) => {
                    self.running_to_waiting(i, status.to_string());
                    if signals::stop_requested() {
                        Life::Waiting { at: now }
                    } else {
                        self.waiting_to_starting(i)
                    }
                }
                _ => Life::Running(child),
            },
            Life::Waiting { at } if now < at || signals::stop_requested() => Life::Waiting { at },
            Life::Waiting { .. } => self.waiting_to_starting(i),
            Life::Starting { mut spawned, since } => {
                if let Ok(Some(status)) = spawned.child.try_wait() {
                    self.starting_failed(i, format!("it exited ({status})"))
                } else if spawned.says_listening() {
                    return self.starting_to_running(i, spawned.child);
                } else if since.elapsed() > member::TIMEOUT_READY {
                    let _ = spawned.child.kill();
                    let _ = spawned.child.wait();
                    let why = format!("not listening after {} s", member::TIMEOUT_READY.as_secs());
                    self.starting_failed(i, why)
                } else {
                    Life::Starting { spawned, since }
                }
            }
        };
        Ok(())
    }

    fn running_to_waiting(&mut self, i: usize, how: String) {
        let m = &mut self.state.members[i];
        tracing::warn!(member = i, pid = m.proc.pid, addr = %m.addr, how = %how, "member exited");
        m.last_exit = Some(how);
        self.slots[i].noticed_at = Some(Instant::now());
        let pid = m.proc.pid;
        let host = m.host_id;
        let recovered = match &self.heap {
            Some(Ok(heap)) => Ok(recover_member_in(heap, pid, host)),
            _ => recover_member(&self.state.heap, pid, host),
        };
        self.state.members[i].recovered_ms = Some(now_ms());
        let recovery = match recovered {
            Ok(r) => {
                log_recovery(i, &r);
                r.to_string()
            }
            Err(e) => {
                tracing::error!(member = i, pid, error = %e, "recovery failed");
                format!("recovery of pid {pid} failed: {e}")
            }
        };
        self.state.members[i].last_recovery = Some(recovery);
    }

    fn waiting_to_starting(&mut self, i: usize) -> Life {
        let m = &self.state.members[i];
        match member::spawn(&self.program, &self.state.heap, m, &self.dir) {
            Ok(spawned) => Life::Starting {
                spawned,
                since: Instant::now(),
            },
            Err(e) => self.starting_failed(i, e.to_string()),
        }
    }

    fn starting_to_running(&mut self, i: usize, child: Child) -> Result<(), PodError> {
        let slot = &mut self.slots[i];
        let took = slot
            .noticed_at
            .take()
            .map_or(0, |t| t.elapsed().as_millis());
        slot.backoff = BACKOFF_MIN;
        self.state.members[i].restarts += 1;
        self.running(i, child)?;
        let m = &self.state.members[i];
        tracing::info!(
            member = i,
            pid = m.proc.pid,
            restart = m.restarts,
            ms_since_exit = took as u64,
            "member restarted"
        );
        Ok(())
    }

    fn starting_failed(&mut self, i: usize, why: String) -> Life {
        let slot = &mut self.slots[i];
        let e = member::failed(&self.state.members[i], &self.dir, why);
        tracing::warn!("{e}; retrying in {} ms", slot.backoff.as_millis());
        let at = Instant::now() + slot.backoff;
        slot.backoff = (slot.backoff * 2).min(BACKOFF_MAX);
        Life::Waiting { at }
    }

    /// Stops every member, removes the network and the state file.
    pub fn stop(&mut self) {
        self.state.phase = Phase::Stopping;
        let _ = self.dir.save(&self.state);
        for slot in &self.slots {
            if let Some(child) = slot.child() {
                signals::send(child.id(), libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + TIMEOUT_STOP;
        for slot in &mut self.slots {
            let child = match &mut slot.life {
                Life::Running(child) => child,
                Life::Starting { spawned, .. } => &mut spawned.child,
                Life::Waiting { .. } => continue,
            };
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
            if matches!(child.try_wait(), Ok(None)) {
                tracing::warn!(
                    pid = child.id(),
                    "a member ignored SIGTERM for {} s; killing it",
                    TIMEOUT_STOP.as_secs()
                );
                let _ = child.kill();
                let _ = child.wait();
            }
            slot.life = Life::Waiting { at: Instant::now() };
        }
        if self.state.mode == Mode::Netns {
            for left in net::teardown(&self.state.name, self.state.members.len()) {
                tracing::warn!("{left}");
            }
        }
        self.dir.remove_state();
    }
}

/// One event per slot recovered for member `i`, and a warning if any stayed claimed.
fn log_recovery(i: usize, r: &Recovery) {
    for s in &r.each {
        tracing::info!(
            member = i,
            slot = s.slot,
            owner.pid = s.owner.pid,
            owner.host = s.owner.host,
            us = s.took.as_micros() as u64,
            "slot recovered"
        );
    }
    if r.recovered < r.slots.len() {
        tracing::warn!(member = i, "{r}");
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
            heap_mode: Default::default(),
            mode: Mode::Loopback,
            bridge: None,
            serve_args: vec![],
            monitor: Proc::default(),
            phase: Phase::Starting,
            up_ms: now_ms(),
            members: vec![MemberState {
                host_id: None,
                index: 0,
                addr: ([127, 0, 0, 1], port).into(),
                netns: None,
                proc: Proc::default(),
                restarts: 0,
                started_ms: 0,
                last_exit: None,
                last_recovery: None,
                recovered_ms: None,
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
