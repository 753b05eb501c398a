//! The `podkv pod` command line: its subcommands and the dispatch (their flags: [`super::args`]).

use super::args::{PodArgs, UpArgs};
use super::state::default_root;
use super::{down, status, up};

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
