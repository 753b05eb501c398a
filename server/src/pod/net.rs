//! How each member gets an address of its own: a network namespace per member (netns mode) or
//! a loopback port per member (loopback mode), chosen at run time.
//!
//! # Netns mode (root with a working `ip netns`)
//! ```text
//!   root namespace: bridge pkv-<pod>  10.77.K.1/24
//!        |-- veth pkv-<pod>-<i>  <->  eth0 in namespace podkv-<pod>-<i>  10.77.K.(10+i)/24
//! ```
//! K is the first third octet no interface on this machine uses yet, so two pods get two
//! subnets. Every member listens on the same port at its own address, as a host would. The
//! root namespace reaches every member through the bridge (clients, proxies, tests).
//! Removing a namespace removes its veth pair; the bridge goes last.
//!
//! # Loopback mode
//! Member `i` listens on `127.0.0.1:(base_port + i)`.

use super::error::PodError;
use serde::{Deserialize, Serialize};
use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;

/// How members get their own addresses.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// One loopback port per member.
    Loopback,
    /// One network namespace and address per member.
    Netns,
}

impl Mode {
    /// The mode as the pod's messages name it.
    pub(super) fn name(self) -> &'static str {
        match self {
            Mode::Loopback => "loopback",
            Mode::Netns => "netns",
        }
    }
}

/// What the user asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum NetChoice {
    /// Netns when usable here, else loopback.
    Auto,
    /// Loopback ports.
    Loopback,
    /// Network namespaces (fails when unusable).
    Netns,
}

/// Picks the mode and says why.
pub fn choose(choice: NetChoice) -> Result<(Mode, String), PodError> {
    match (choice, netns_usable()) {
        (NetChoice::Loopback, _) => Ok((Mode::Loopback, "loopback ports, as asked".into())),
        (NetChoice::Netns, Ok(())) => Ok((Mode::Netns, "network namespaces, as asked".into())),
        (NetChoice::Netns, Err(why)) => Err(PodError::NoNetns(why)),
        (NetChoice::Auto, Ok(())) => Ok((
            Mode::Netns,
            "network namespaces (root and `ip netns` work here)".into(),
        )),
        (NetChoice::Auto, Err(why)) => Ok((Mode::Loopback, format!("loopback ports ({why})"))),
    }
}

/// Whether this process can make namespaces and veth pairs: tried, not guessed.
pub fn netns_usable() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root".into());
    }
    let probe = format!("podkv-probe-{}", std::process::id());
    ip(&["netns", "add", &probe]).map_err(|e| e.to_string())?;
    let veth = format!("pkv-p{}", std::process::id());
    let veth = ip(&[
        "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &probe,
    ]);
    let _ = ip(&["netns", "del", &probe]);
    veth.map_err(|e| e.to_string())
}

/// Runs `ip ARGS`, failing with what it printed.
pub fn ip(args: &[&str]) -> Result<(), PodError> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(PodError::io("running `ip` (install iproute2)"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(PodError::Ip {
        args: args.join(" "),
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
    })
}

/// The namespace of member `index` of pod `pod`.
pub fn netns_name(pod: &str, index: usize) -> String {
    format!("podkv-{pod}-{index}")
}

/// The bridge of pod `pod`.
pub fn bridge_name(pod: &str) -> String {
    format!("pkv-{pod}")
}

fn veth_name(pod: &str, index: usize) -> String {
    format!("pkv-{pod}-{index}")
}

/// The first `10.77.K.0/24` no interface here uses.
fn free_subnet() -> Result<u8, PodError> {
    let out = Command::new("ip")
        .args(["-4", "-o", "addr", "show"])
        .output()
        .map_err(PodError::io("running `ip -4 -o addr show`"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    (0..=255u8)
        .find(|k| !text.contains(&format!(" 10.77.{k}.")))
        .ok_or_else(|| PodError::NoNetns("every 10.77.K.0/24 subnet is in use".into()))
}

/// Member addresses in loopback mode.
pub fn loopback_addrs(base_port: u16, hosts: usize) -> Vec<SocketAddr> {
    (0..hosts)
        .map(|i| SocketAddr::from((Ipv4Addr::LOCALHOST, base_port + i as u16)))
        .collect()
}

/// Makes the bridge and one namespace per member; returns the bridge and member addresses.
/// On failure, removes whatever it made.
pub fn setup(pod: &str, hosts: usize, port: u16) -> Result<(String, Vec<SocketAddr>), PodError> {
    let bridge = bridge_name(pod);
    let k = free_subnet()?;
    let made = (|| {
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        ip(&["addr", "add", &format!("10.77.{k}.1/24"), "dev", &bridge])?;
        ip(&["link", "set", &bridge, "up"])?;
        (0..hosts)
            .map(|i| {
                add_member(
                    pod,
                    &bridge,
                    i,
                    Ipv4Addr::new(10, 77, k, 10 + i as u8),
                    port,
                )
            })
            .collect::<Result<Vec<_>, _>>()
    })();
    if made.is_err() {
        teardown(pod, hosts);
    }
    Ok((bridge, made?))
}

fn add_member(
    pod: &str,
    bridge: &str,
    index: usize,
    addr: Ipv4Addr,
    port: u16,
) -> Result<SocketAddr, PodError> {
    let ns = netns_name(pod, index);
    let veth = veth_name(pod, index);
    ip(&["netns", "add", &ns])?;
    ip(&["-n", &ns, "link", "set", "lo", "up"])?;
    ip(&[
        "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns,
    ])?;
    ip(&["link", "set", &veth, "master", bridge, "up"])?;
    ip(&[
        "-n",
        &ns,
        "addr",
        "add",
        &format!("{addr}/24"),
        "dev",
        "eth0",
    ])?;
    ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
    Ok(SocketAddr::from((addr, port)))
}

/// Removes the pod's namespaces and bridge, whichever exist; returns what it could not remove.
pub fn teardown(pod: &str, hosts: usize) -> Vec<String> {
    let mut left = Vec::new();
    for i in 0..hosts {
        let ns = netns_name(pod, i);
        if std::path::Path::new("/run/netns").join(&ns).exists() {
            if let Err(e) = ip(&["netns", "del", &ns]) {
                left.push(e.to_string());
            }
        }
    }
    let bridge = bridge_name(pod);
    if std::path::Path::new("/sys/class/net")
        .join(&bridge)
        .exists()
    {
        if let Err(e) = ip(&["link", "del", &bridge]) {
            left.push(e.to_string());
        }
    }
    left
}

/// An open handle on a namespace, to enter in a child between fork and exec.
#[derive(Debug)]
pub struct NetnsHandle(std::fs::File);

impl NetnsHandle {
    /// Opens namespace `name` (made by `ip netns add`).
    pub fn open(name: &str) -> Result<NetnsHandle, PodError> {
        let path = std::path::Path::new("/run/netns").join(name);
        std::fs::File::open(&path)
            .map(NetnsHandle)
            .map_err(PodError::io(format!("opening {}", path.display())))
    }

    /// Makes `command`'s child enter this namespace before it runs.
    pub fn enter_in(&self, command: &mut Command) {
        use std::os::fd::AsRawFd;
        use std::os::unix::process::CommandExt;
        let fd = self.0.as_raw_fd();
        // SAFETY: the closure runs in the forked child before exec and calls only setns, which
        // is async-signal-safe; `fd` stays open in the parent (and so in the child) because
        // `self` outlives the `spawn` the caller makes while borrowing it.
        unsafe {
            command.pre_exec(move || {
                if libc::setns(fd, libc::CLONE_NEWNET) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_members_get_consecutive_ports() {
        let addrs = loopback_addrs(20000, 3);
        assert_eq!(addrs[0].to_string(), "127.0.0.1:20000");
        assert_eq!(addrs[2].to_string(), "127.0.0.1:20002");
    }

    #[test]
    fn interface_names_fit_the_kernel_limit() {
        // IFNAMSIZ is 16 with the NUL: names are at most 15 bytes for the longest pod name.
        assert!(veth_name("abcdefgh", 63).len() <= 15);
        assert!(bridge_name("abcdefgh").len() <= 15);
    }

    #[test]
    fn asking_for_loopback_never_probes() {
        let (mode, why) = choose(NetChoice::Loopback).unwrap();
        assert_eq!(mode, Mode::Loopback);
        assert!(why.contains("as asked"));
    }
}
