//! Beyond one pod: `podkv pod shard` writes a nutcracker (twemproxy) configuration that
//! spreads keys over several pods, and with `--run` becomes that nutcracker.
//!
//! Each pod is one server of the proxy's pool, named after the pod, so ketama places a key by
//! pod name: a key lives on exactly one pod, and a member restarting at another address moves
//! no key. Any member of a pod serves every key of that pod (they map one heap), so the proxy
//! may use any of them; `--member K` picks member `K mod hosts` of each pod, so that a proxy
//! per host can talk to the member on its own host.

use super::error::PodError;
use super::state::{PodState, StateDir};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// `podkv pod shard` arguments.
#[derive(clap::Args, Debug)]
pub struct ShardArgs {
    /// The pods to shard over, by name (each must be up), e.g. `a,b`.
    #[arg(long, value_delimiter = ',', required = true)]
    pub pods: Vec<String>,
    /// State directory root of the pods [default: as `pod up`].
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Where the proxy listens.
    #[arg(long, default_value = "127.0.0.1:22121")]
    pub listen: SocketAddr,
    /// Which member of each pod the proxy talks to (modulo the pod's size).
    #[arg(long, default_value_t = 0)]
    pub member: usize,
    /// Where to write the configuration [default: <state-dir>/nutcracker-<port>.yml].
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Then run nutcracker on it (replacing this process), its stats on this port.
    #[arg(long)]
    pub run: bool,
    /// nutcracker's stats port (with --run).
    #[arg(long, default_value_t = 22222)]
    pub stats_port: u16,
}

/// One pod as the proxy sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shard {
    /// The pod's name (the ketama key of its server entry).
    pub name: String,
    /// The member address the proxy uses.
    pub addr: SocketAddr,
}

/// The shard of each pod, read from its state; fails naming the pod that is not up.
pub fn shards(root: &Path, pods: &[String], member: usize) -> Result<Vec<Shard>, PodError> {
    pods.iter()
        .map(|name| {
            super::state::check_name(name)?;
            let dir = StateDir::new(root, name);
            let state: PodState = dir.load()?.ok_or_else(|| PodError::NotUp {
                name: name.clone(),
                dir: dir.dir.clone(),
            })?;
            let m = &state.members[member % state.members.len()];
            Ok(Shard {
                name: name.clone(),
                addr: m.addr,
            })
        })
        .collect()
}

/// The nutcracker YAML for one pool named `podkv` over `shards`.
pub fn nutcracker_yaml(listen: SocketAddr, shards: &[Shard]) -> String {
    let mut y = String::new();
    y.push_str("# Written by `podkv pod shard`: one server per pod, keys placed by pod name.\n");
    y.push_str("podkv:\n");
    let _ = writeln!(y, "  listen: {listen}");
    // Not fnv1a_64: with it, keys sharing a prefix and a short counter (`demo:1`..`demo:100`)
    // all fell on one arc of the ring, so on one pod; murmur spreads them (42 / 58).
    y.push_str("  hash: murmur\n");
    y.push_str("  distribution: ketama\n");
    y.push_str("  timeout: 2000\n");
    y.push_str("  preconnect: true\n");
    // A pod's monitor restarts a dead member within a second: retry it, never re-shard.
    y.push_str("  auto_eject_hosts: false\n");
    y.push_str("  server_retry_timeout: 200\n");
    y.push_str("  server_connections: 1\n");
    y.push_str("  servers:\n");
    for s in shards {
        let _ = writeln!(y, "    - {}:1 {}", s.addr, s.name);
    }
    y
}

/// Runs `podkv pod shard`.
pub fn run(args: &ShardArgs, root: &Path) -> anyhow::Result<()> {
    let shards = shards(root, &args.pods, args.member)?;
    let yaml = nutcracker_yaml(args.listen, &shards);
    let config = args
        .config
        .clone()
        .unwrap_or_else(|| root.join(format!("nutcracker-{}.yml", args.listen.port())));
    std::fs::create_dir_all(root)?;
    std::fs::write(&config, &yaml)
        .map_err(PodError::io(format!("writing {}", config.display())))?;
    tracing::info!("pod shard: wrote {}", config.display());
    if !args.run {
        print!("{yaml}");
        return Ok(());
    }
    let log = config.with_extension("log");
    tracing::info!(
        "pod shard: running nutcracker on {} over {} pods (log {})",
        args.listen,
        shards.len(),
        log.display()
    );
    use std::os::unix::process::CommandExt;
    let err = std::process::Command::new("nutcracker")
        .arg("-c")
        .arg(&config)
        .args(["-s", &args.stats_port.to_string(), "-a", "127.0.0.1"])
        .arg("-o")
        .arg(&log)
        .exec();
    if err.kind() == std::io::ErrorKind::NotFound {
        anyhow::bail!(
            "nutcracker is not installed (apt-get install nutcracker; scripts/setup installs it)"
        );
    }
    Err(PodError::io("running nutcracker")(err).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_pod_is_one_server_named_after_it() {
        let shards = [
            Shard {
                name: "a".into(),
                addr: "127.0.0.1:7000".parse().unwrap(),
            },
            Shard {
                name: "b".into(),
                addr: "10.77.1.10:11211".parse().unwrap(),
            },
        ];
        let y = nutcracker_yaml("127.0.0.1:22121".parse().unwrap(), &shards);
        assert!(y.contains("  listen: 127.0.0.1:22121\n"));
        assert!(y.contains("    - 127.0.0.1:7000:1 a\n"));
        assert!(y.contains("    - 10.77.1.10:11211:1 b\n"));
        assert!(y.contains("distribution: ketama"));
    }

    #[test]
    fn a_pod_that_is_not_up_is_named() {
        let root = tempfile::tempdir().unwrap();
        let err = shards(root.path(), &["nope".into()], 0).unwrap_err();
        assert!(err.to_string().contains("pod `nope` is not up"), "{err}");
    }
}
