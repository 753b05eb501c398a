//! `podkv pod status`: the pod as its state file says, with liveness checked now.

use super::error::PodError;
use super::net::Mode;
use super::state::{now_ms, MemberState, Phase, PodState, StateDir};
use serde::Serialize;
use std::path::Path;

/// One member as `pod status` shows it.
#[derive(Serialize)]
struct MemberView<'a> {
    index: usize,
    addr: std::net::SocketAddr,
    host_id: Option<u16>,
    netns: Option<&'a str>,
    pid: u32,
    alive: bool,
    restarts: u32,
    uptime_s: Option<u64>,
    last_exit: Option<&'a str>,
    last_recovery: Option<&'a str>,
    /// When the last recovery ended (ms since the Unix epoch).
    recovered_ms: Option<u64>,
}

/// The pod as `pod status --json` shows it.
#[derive(Serialize)]
struct StatusView<'a> {
    name: &'a str,
    mode: Mode,
    phase: Phase,
    heap: &'a Path,
    /// The heap's coherence mode (`hardware`, `limited`, `mcas`).
    coherence: &'a str,
    /// An `mcas` heap's implementation.
    mcas_impl: Option<&'a str>,
    /// How the heap judges members dead (`process`, `lease`).
    liveness: &'a str,
    monitor_pid: u32,
    stale: bool,
    uptime_s: u64,
    members: Vec<MemberView<'a>>,
}

impl<'a> StatusView<'a> {
    fn of(pod: &'a PodState, now: u64) -> StatusView<'a> {
        StatusView {
            name: &pod.name,
            mode: pod.mode,
            phase: pod.phase,
            heap: &pod.heap,
            coherence: &pod.heap_mode.coherence,
            mcas_impl: pod.heap_mode.mcas_impl.as_deref(),
            liveness: &pod.heap_mode.liveness,
            monitor_pid: pod.monitor.pid,
            stale: !pod.monitor.is_alive(),
            uptime_s: now.saturating_sub(pod.up_ms) / 1000,
            members: pod.members.iter().map(|m| MemberView::of(m, now)).collect(),
        }
    }
}

impl<'a> MemberView<'a> {
    fn of(m: &'a MemberState, now: u64) -> MemberView<'a> {
        let alive = m.proc.is_alive();
        MemberView {
            index: m.index,
            addr: m.addr,
            host_id: m.host_id,
            netns: m.netns.as_deref(),
            pid: m.proc.pid,
            alive,
            restarts: m.restarts,
            uptime_s: alive.then(|| now.saturating_sub(m.started_ms) / 1000),
            last_exit: m.last_exit.as_deref(),
            last_recovery: m.last_recovery.as_deref(),
            recovered_ms: m.recovered_ms,
        }
    }
}

pub(super) fn status(dir: &StateDir, name: &str, json: bool) -> anyhow::Result<()> {
    let Some(state) = dir.load()? else {
        return Err(PodError::NotUp {
            name: name.into(),
            dir: dir.dir.clone(),
        }
        .into());
    };
    let view = StatusView::of(&state, now_ms());
    if json {
        println!("{}", serde_json::to_string_pretty(&view)?);
    } else {
        print_status(&view);
    }
    if view.stale {
        return Err(PodError::Stale {
            name: name.into(),
            down: dir.down_command(name),
            dir: dir.dir.clone(),
            pid: state.monitor.pid,
        }
        .into());
    }
    Ok(())
}

fn print_status(view: &StatusView<'_>) {
    println!(
        "pod {}: {} ({}), monitor pid {}{}, up {}, heap {} (coherence {}{}, liveness {})",
        view.name,
        if view.stale {
            "STALE"
        } else {
            view.phase.name()
        },
        view.mode.name(),
        view.monitor_pid,
        if view.stale { " (gone)" } else { "" },
        duration(view.uptime_s),
        view.heap.display(),
        view.coherence,
        view.mcas_impl
            .map_or(String::new(), |kind| format!(" --mcas-impl {kind}")),
        view.liveness
    );
    println!(
        "{:<7} {:<5} {:<8} {:<22} {:<6} {:<9} uptime",
        "member", "host", "pid", "address", "alive", "restarts"
    );
    for m in &view.members {
        println!(
            "{:<7} {:<5} {:<8} {:<22} {:<6} {:<9} {}",
            m.index,
            m.host_id.map_or("-".into(), |id| id.to_string()),
            m.pid,
            m.addr,
            if m.alive { "yes" } else { "NO" },
            m.restarts,
            m.uptime_s.map_or("-".into(), duration)
        );
    }
}

/// `3h02m`, `4m05s`, `7s`.
fn duration(s: u64) -> String {
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s / 60 % 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_at_a_glance() {
        assert_eq!(duration(7), "7s");
        assert_eq!(duration(245), "4m05s");
        assert_eq!(duration(3 * 3600 + 120), "3h02m");
    }
}
