//! `podkv pod down`: ask the monitor to stop the pod, or clean up after a monitor that died.

use super::error::PodError;
use super::monitor::TIMEOUT_MONITOR;
use super::net::{self, Mode};
use super::signals;
use super::state::{MemberState, PodState, StateDir};
use std::time::{Duration, Instant};

pub(super) fn down(dir: &StateDir, name: &str, purge: bool) -> anyhow::Result<()> {
    let Some(state) = dir.load()? else {
        return Err(PodError::NotUp {
            name: name.into(),
            dir: dir.dir.clone(),
        }
        .into());
    };
    let _pod = tracing::info_span!("pod", name = %name).entered();
    if state.monitor.is_alive() {
        signals::send(state.monitor.pid, libc::SIGTERM);
        let deadline = Instant::now() + TIMEOUT_MONITOR;
        while state.monitor.is_alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        anyhow::ensure!(
            !state.monitor.is_alive(),
            "the monitor (pid {}) did not stop in {} s",
            state.monitor.pid,
            TIMEOUT_MONITOR.as_secs()
        );
    } else {
        tracing::warn!(
            "monitor pid {} is gone (stale state); stopping members directly",
            state.monitor.pid
        );
    }
    if dir.load()?.is_some() {
        clean_stale(dir, &state);
    }
    if purge {
        std::fs::remove_file(&state.heap)
            .or_else(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Ok(()),
                _ => Err(e),
            })
            .map_err(PodError::io(format!("removing {}", state.heap.display())))?;
    }
    println!(
        "pod {name}: down; heap {} {}",
        state.heap.display(),
        if purge { "removed" } else { "kept" }
    );
    Ok(())
}

/// What a monitor that died left behind: members, namespaces, state.
fn clean_stale(dir: &StateDir, state: &PodState) {
    let alive: Vec<&MemberState> = state.members.iter().filter(|m| m.proc.is_alive()).collect();
    for m in &alive {
        signals::send(m.proc.pid, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive.iter().any(|m| m.proc.is_alive()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for m in alive.iter().filter(|m| m.proc.is_alive()) {
        tracing::warn!(pid = m.proc.pid, "a member ignored SIGTERM; killing it");
        signals::send(m.proc.pid, libc::SIGKILL);
    }
    if state.mode == Mode::Netns {
        for left in net::teardown(&state.name, state.members.len()) {
            tracing::warn!("{left}");
        }
    }
    dir.remove_state();
}
