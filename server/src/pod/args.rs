//! The flags the `podkv pod` subcommands share: which pod (its name and state directory) and
//! how `podkv pod up` starts it.

use super::error::PodError;
use super::net::NetChoice;
use super::state::{default_root, StateDir};
use std::path::PathBuf;

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
    /// Coherence of the pod heap `pod up` creates: `hardware`, `limited` or `mcas` (as
    /// `podkv heap create --coherence`) [default: hardware]. An existing heap keeps the mode it
    /// was created with; naming another is refused, and so is a mode the store does not serve.
    #[arg(long)]
    pub coherence: Option<podkv_hw::Coherence>,
    /// With `--coherence mcas`: the mCAS implementation, `flush-cas` or `nmp` [default:
    /// flush-cas].
    #[arg(long)]
    pub mcas_impl: Option<podkv_hw::mcas::McasKind>,
    /// How the heap `pod up` creates judges a member dead: `lease` (heartbeats watched by each
    /// process's own clock; members get host ids 1..N, as separate hosts would) or `process`
    /// (pid and start time: one machine) [default: lease with `--net netns`, else process]. An
    /// existing heap keeps the mode it was created with; naming another is refused.
    #[arg(long)]
    pub liveness: Option<podkv_alloc::Liveness>,
    /// Run the monitor in the background; return once every member listens.
    #[arg(long)]
    pub detach: bool,
    /// Extra arguments for every `podkv serve` (after `--`).
    #[arg(last = true)]
    pub serve_args: Vec<String>,
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
