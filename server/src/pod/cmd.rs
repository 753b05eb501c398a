//! The `podkv pod` command line: its arguments, the dispatch, and what the subcommands share.

use super::error::PodError;
use super::net::{Mode, NetChoice};
use super::state::{default_root, Phase, StateDir};
use super::{down, status, up};
use std::path::PathBuf;
use std::time::Duration;

/// How long `pod down` waits for the monitor, and `pod up --detach` for the pod.
pub(super) const TIMEOUT_MONITOR: Duration = Duration::from_secs(60);

/// The `podkv pod` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum PodCommand {
    /// Start a pod: create or open the pod heap, start N `podkv serve` members (one per
    /// emulated host) and watch them, restarting any that dies.
    ///
    /// Each member gets its own network namespace and address (10.77.K.10+i) when run as root
    /// with a working `ip netns`, else its own loopback port (--base-port + i); the mode chosen
    /// is printed. Runs in the foreground until SIGTERM/Ctrl-C, or in the background with
    /// --detach. Arguments after `--` go to every `podkv serve`.
    Up(UpArgs),
    /// Show the pod's members: pids, addresses, alive, restarts, uptime.
    Status {
        #[command(flatten)]
        pod: PodArgs,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Stop the pod: SIGTERM its members, wait, remove namespaces and state; keep the heap
    /// unless --purge. Also cleans up after a monitor that died (stale state).
    Down {
        #[command(flatten)]
        pod: PodArgs,
        /// Remove the heap file too.
        #[arg(long)]
        purge: bool,
    },
    /// Shard keys over several pods with nutcracker (twemproxy): write its configuration
    /// (one server per pod) and, with --run, run it.
    ///
    /// Example: `podkv pod shard --pods a,b --listen 127.0.0.1:22121 --run`.
    Shard(super::shard::ShardArgs),
    /// The detached monitor (started by `podkv pod up --detach`).
    #[command(hide = true)]
    Monitor {
        #[command(flatten)]
        pod: PodArgs,
    },
}

/// Which pod.
#[derive(clap::Args, Debug, Clone)]
pub struct PodArgs {
    /// The pod's name (1–8 of a-z, 0-9); names its state, heap and namespaces.
    #[arg(long, default_value = "main")]
    pub name: String,
    /// State directory root [default: $XDG_RUNTIME_DIR/podkv, else /tmp/podkv-$UID].
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
}

impl PodArgs {
    /// The pod's state directory (after checking its name).
    pub fn dir(&self) -> Result<StateDir, PodError> {
        super::state::check_name(&self.name)?;
        let root = self.state_dir.clone().unwrap_or_else(default_root);
        Ok(StateDir::new(&root, &self.name))
    }
}

/// `podkv pod up` arguments.
#[derive(clap::Args, Debug)]
pub struct UpArgs {
    #[command(flatten)]
    pub pod: PodArgs,
    /// Member servers, one per emulated host.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub hosts: u16,
    /// The pod heap [default: /dev/shm/podkv-pod-NAME]; created (mode 0600) if missing.
    #[arg(long)]
    pub heap: Option<PathBuf>,
    /// Port of member 0 (loopback: member i listens on base-port + i; netns: every member
    /// listens on this port at its own address).
    #[arg(long, default_value_t = 11211)]
    pub base_port: u16,
    /// How members get their own addresses.
    #[arg(long, value_enum, default_value_t = NetChoice::Auto)]
    pub net: NetChoice,
    /// Run the monitor in the background; return once every member listens.
    #[arg(long)]
    pub detach: bool,
    /// Extra arguments for every `podkv serve` (after `--`).
    #[arg(last = true)]
    pub serve_args: Vec<String>,
}

/// Runs a `podkv pod` subcommand.
pub fn run(command: &PodCommand) -> anyhow::Result<()> {
    match command {
        PodCommand::Up(args) => up::up(args),
        PodCommand::Status { pod, json } => status::status(&pod.dir()?, &pod.name, *json),
        PodCommand::Down { pod, purge } => down::down(&pod.dir()?, &pod.name, *purge),
        PodCommand::Monitor { pod } => up::monitor_detached(&pod.dir()?),
        PodCommand::Shard(args) => {
            let root = args.state_dir.clone().unwrap_or_else(default_root);
            super::shard::run(args, &root)
        }
    }
}

/// Refuses to start over a pod that is up, or over stale state.
pub(super) fn refuse_existing(dir: &StateDir, name: &str) -> Result<(), PodError> {
    match dir.load()? {
        None => Ok(()),
        Some(s) if s.monitor.is_alive() => Err(PodError::AlreadyUp {
            name: name.into(),
            pid: s.monitor.pid,
        }),
        Some(s) => Err(PodError::Stale {
            name: name.into(),
            down: down_command(dir, name),
            dir: dir.dir.clone(),
            pid: s.monitor.pid,
        }),
    }
}

/// The `podkv pod down` that cleans up pod `name` in `dir`.
pub(super) fn down_command(dir: &StateDir, name: &str) -> String {
    match dir.dir.parent() {
        Some(root) if root != default_root() => {
            format!(
                "podkv pod down --name {name} --state-dir {}",
                root.display()
            )
        }
        _ => format!("podkv pod down --name {name}"),
    }
}

pub(super) fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Loopback => "loopback",
        Mode::Netns => "netns",
    }
}

pub(super) fn phase_name(phase: Phase) -> &'static str {
    match phase {
        Phase::Starting => "starting",
        Phase::Up => "up",
        Phase::Stopping => "stopping",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_cannot_name_interfaces_are_refused() {
        for bad in ["", "Main", "a-b", "toolongname"] {
            let args = PodArgs {
                name: bad.into(),
                state_dir: None,
            };
            assert!(args.dir().is_err(), "{bad}");
        }
    }
}
