//! Where memory lives: the machine's NUMA nodes, read from sysfs, and a [`Placement`] policy
//! that binds a mapping's pages to some of them.
//!
//! A CXL memory expander appears to Linux as a NUMA node with memory and no CPUs
//! ([`Node::is_cpu_less`]); the characterization paper (`002`) finds that which node a page
//! lands on, and whether pages are interleaved, decides bandwidth and latency. A heap mapping
//! takes a policy with [`Placement::apply`] (`mbind`) before any of its pages is backed: on a
//! shared file mapping the kernel keeps the policy with the file's pages, so every page backed
//! later, by any process that applies the same policy, follows it.
//!
//! A policy fits in one `u64` ([`Placement::to_word`]), so a heap can record it in its header;
//! zero is [`Placement::Default`] (the kernel's choice), which is what a zero-filled header says.

use std::fmt;
use std::path::{Path, PathBuf};

/// Where sysfs lists the NUMA nodes.
pub const PATH_SYSFS_NODES: &str = "/sys/devices/system/node";

/// Most nodes a [`Placement`] can name: the bits of its word above the mode.
pub const COUNT_NODES_MAX: u32 = 56;

/// One NUMA node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// The node's number (`nodeN`).
    pub id: u32,
    /// CPUs on the node; empty for a memory-only node (a CXL expander appears so).
    pub cpus: Vec<u32>,
    /// Memory on the node in bytes (`MemTotal` of its `meminfo`).
    pub memory_bytes: u64,
    /// Distance to each node, in the order of [`Topology::nodes`] (10 is local).
    pub distances: Vec<u32>,
}

impl Node {
    /// Whether the node has memory and no CPU: how a CXL memory expander appears.
    pub fn is_cpu_less(&self) -> bool {
        self.cpus.is_empty() && self.memory_bytes > 0
    }
}

/// The machine's NUMA nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    /// Online nodes, by number.
    pub nodes: Vec<Node>,
}

/// Why the topology could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// A sysfs file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A sysfs file did not hold what the kernel writes there.
    #[error("cannot parse {path}: {text:?}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What it held.
        text: String,
    },
}

impl Topology {
    /// This machine's nodes, from [`PATH_SYSFS_NODES`].
    pub fn discover() -> Result<Topology, TopologyError> {
        Topology::from_sysfs(Path::new(PATH_SYSFS_NODES))
    }

    /// The nodes listed under `root` (a sysfs `devices/system/node` directory or a copy of
    /// one): `online`, and each node's `cpulist`, `meminfo` and `distance`.
    pub fn from_sysfs(root: &Path) -> Result<Topology, TopologyError> {
        let online = read_list(&root.join("online"))?;
        let mut nodes = Vec::with_capacity(online.len());
        for id in online {
            let dir = root.join(format!("node{id}"));
            let cpus = read_list(&dir.join("cpulist"))?;
            let memory_bytes = read_mem_total(&dir.join("meminfo"))?;
            let path = dir.join("distance");
            let text = read(&path)?;
            let distances = text
                .split_whitespace()
                .map(str::parse)
                .collect::<Result<Vec<u32>, _>>()
                .map_err(|_| TopologyError::Parse { path, text })?;
            nodes.push(Node {
                id,
                cpus,
                memory_bytes,
                distances,
            });
        }
        Ok(Topology { nodes })
    }

    /// The node numbered `id`, if online.
    pub fn node(&self, id: u32) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// Checks that every node `placement` names is online here.
    pub fn check(&self, placement: &Placement) -> Result<(), PlacementError> {
        match placement.nodes().find(|&id| self.node(id).is_none()) {
            Some(node) => Err(PlacementError::UnknownNode {
                node,
                online: self.nodes.iter().map(|n| n.id).collect(),
            }),
            None => Ok(()),
        }
    }
}

fn read(path: &Path) -> Result<String, TopologyError> {
    std::fs::read_to_string(path).map_err(|source| TopologyError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads a kernel list such as `0-3,8,10-11` (empty: no entries).
fn read_list(path: &Path) -> Result<Vec<u32>, TopologyError> {
    let text = read(path)?;
    parse_list(text.trim()).ok_or_else(|| TopologyError::Parse {
        path: path.to_path_buf(),
        text,
    })
}

fn parse_list(text: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => out.extend(a.parse::<u32>().ok()?..=b.parse::<u32>().ok()?),
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

/// `Node N MemTotal:  16384 kB` in bytes.
fn read_mem_total(path: &Path) -> Result<u64, TopologyError> {
    let text = read(path)?;
    let kib = text
        .lines()
        .find(|l| l.contains("MemTotal:"))
        .and_then(|l| l.split_whitespace().rev().nth(1)?.parse::<u64>().ok());
    kib.map(|k| k * 1024).ok_or_else(|| TopologyError::Parse {
        path: path.to_path_buf(),
        text,
    })
}

/// A memory policy for a mapping (`set_mempolicy(2)` / `mbind(2)` modes).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Placement {
    /// The kernel's default: pages go to the node of the CPU that first touches them.
    #[default]
    Default,
    /// Explicitly local: the node of the touching CPU (`MPOL_LOCAL`).
    Local,
    /// Only these nodes (`MPOL_BIND`); a full node is an allocation failure, not a spill.
    Bind(Vec<u32>),
    /// Round-robin page by page over these nodes (`MPOL_INTERLEAVE`).
    Interleave(Vec<u32>),
    /// This node first, others when it is full (`MPOL_PREFERRED`).
    Preferred(u32),
}

/// Why a placement was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlacementError {
    /// The text is not a placement.
    #[error("bad placement {0:?}: expected local, node=N, interleave=N,M,… or preferred=N")]
    Syntax(String),
    /// A node number at or over [`COUNT_NODES_MAX`].
    #[error("node {0} is beyond the {COUNT_NODES_MAX} nodes a placement can name")]
    NodeTooLarge(u32),
    /// A node this machine does not have online.
    #[error("node {node} is not online here (online: {online:?})")]
    UnknownNode {
        /// The node named.
        node: u32,
        /// The nodes that are.
        online: Vec<u32>,
    },
    /// The kernel refused the policy.
    #[error("mbind refused the placement: {0}")]
    Kernel(String),
}

/// Mode numbers of the word (the low 8 bits); 0 is [`Placement::Default`].
const MODE_LOCAL: u64 = 1;
const MODE_BIND: u64 = 2;
const MODE_INTERLEAVE: u64 = 3;
const MODE_PREFERRED: u64 = 4;
/// Where the node mask starts in the word.
const SHIFT_NODES: u32 = 8;

impl Placement {
    /// The nodes the policy names.
    pub fn nodes(&self) -> impl Iterator<Item = u32> + '_ {
        let list: &[u32] = match self {
            Placement::Default | Placement::Local => &[],
            Placement::Bind(nodes) | Placement::Interleave(nodes) => nodes,
            Placement::Preferred(node) => std::slice::from_ref(node),
        };
        list.iter().copied()
    }

    /// The policy as one word: mode in the low 8 bits, a node mask above. Zero is `Default`.
    pub fn to_word(&self) -> u64 {
        let mode = match self {
            Placement::Default => return 0,
            Placement::Local => MODE_LOCAL,
            Placement::Bind(_) => MODE_BIND,
            Placement::Interleave(_) => MODE_INTERLEAVE,
            Placement::Preferred(_) => MODE_PREFERRED,
        };
        mode | (self.mask() << SHIFT_NODES)
    }

    /// The policy a word written by [`to_word`](Self::to_word) names; `None` for a word no
    /// placement writes.
    pub fn from_word(word: u64) -> Option<Placement> {
        let mask = word >> SHIFT_NODES;
        let nodes: Vec<u32> = (0..COUNT_NODES_MAX)
            .filter(|n| mask >> n & 1 == 1)
            .collect();
        Some(match word & 0xff {
            0 if word == 0 => Placement::Default,
            MODE_LOCAL if mask == 0 => Placement::Local,
            MODE_BIND if !nodes.is_empty() => Placement::Bind(nodes),
            MODE_INTERLEAVE if !nodes.is_empty() => Placement::Interleave(nodes),
            MODE_PREFERRED if nodes.len() == 1 => Placement::Preferred(nodes[0]),
            _ => return None,
        })
    }

    fn mask(&self) -> u64 {
        self.nodes().fold(0, |m, n| m | 1 << n)
    }

    /// Binds the pages of `[addr, addr + len)` (page-aligned, a mapping of this process) to
    /// the policy. Pages already backed keep where they are: apply it before backing any.
    pub fn apply(&self, addr: *mut u8, len: usize) -> Result<(), PlacementError> {
        self.raw().bind(addr, len).map_err(|errno| {
            PlacementError::Kernel(std::io::Error::from_raw_os_error(errno).to_string())
        })
    }

    /// The policy as mbind(2) takes it, for code that must apply it where it cannot
    /// allocate (a SIGSEGV handler mapping a huge block).
    pub fn raw(&self) -> RawPlacement {
        let (mode, mask) = match self {
            Placement::Default => (libc::MPOL_DEFAULT, 0u64),
            Placement::Local => (libc::MPOL_LOCAL, 0),
            Placement::Bind(_) => (libc::MPOL_BIND, self.mask()),
            Placement::Interleave(_) => (libc::MPOL_INTERLEAVE, self.mask()),
            Placement::Preferred(_) => (libc::MPOL_PREFERRED, self.mask()),
        };
        RawPlacement { mode, mask }
    }
}

/// A [`Placement`] reduced to mbind(2)'s arguments: `Copy`, and applied by one system call
/// with no allocation, so a signal handler may apply it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawPlacement {
    mode: libc::c_int,
    mask: u64,
}

impl RawPlacement {
    /// Whether this is the kernel's default policy (applying it changes nothing).
    pub fn is_default(self) -> bool {
        self.mode == libc::MPOL_DEFAULT
    }

    /// Binds the pages of `[addr, addr + len)` (page-aligned, a mapping of this process) to
    /// the policy; the errno on failure. Async-signal-safe: one system call.
    pub fn bind(self, addr: *mut u8, len: usize) -> Result<(), i32> {
        let maxnode = if self.mask == 0 {
            0
        } else {
            u64::from(u64::BITS)
        };
        let nodemask: *const u64 = if self.mask == 0 {
            std::ptr::null()
        } else {
            &self.mask
        };
        // SAFETY: mbind only changes the memory policy of the range, which the caller says is
        // a mapping of this process; `nodemask` points at one u64 for `maxnode` = 64 bits (or
        // is null with maxnode 0), as mbind(2) reads it.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_mbind,
                addr as usize,
                len,
                self.mode as libc::c_long,
                nodemask,
                maxnode,
                0u32,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            // SAFETY: errno is this thread's; reading it is async-signal-safe.
            Err(unsafe { *libc::__errno_location() })
        }
    }
}

impl std::str::FromStr for Placement {
    type Err = PlacementError;

    /// `local`, `node=N`, `interleave=N,M,…`, `preferred=N` (and `default`).
    fn from_str(text: &str) -> Result<Placement, PlacementError> {
        let syntax = || PlacementError::Syntax(text.to_owned());
        let nodes = |list: &str| -> Result<Vec<u32>, PlacementError> {
            let nodes = parse_list(list)
                .filter(|n| !n.is_empty())
                .ok_or_else(syntax)?;
            match nodes.iter().find(|&&n| n >= COUNT_NODES_MAX) {
                Some(&n) => Err(PlacementError::NodeTooLarge(n)),
                None => Ok(nodes),
            }
        };
        match text.split_once('=') {
            None if text == "default" => Ok(Placement::Default),
            None if text == "local" => Ok(Placement::Local),
            Some(("node", list)) => Ok(Placement::Bind(nodes(list)?)),
            Some(("interleave", list)) => Ok(Placement::Interleave(nodes(list)?)),
            Some(("preferred", list)) => match nodes(list)?[..] {
                [node] => Ok(Placement::Preferred(node)),
                _ => Err(syntax()),
            },
            _ => Err(syntax()),
        }
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |nodes: &[u32]| {
            nodes
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        match self {
            Placement::Default => f.write_str("default"),
            Placement::Local => f.write_str("local"),
            Placement::Bind(nodes) => write!(f, "node={}", list(nodes)),
            Placement::Interleave(nodes) => write!(f, "interleave={}", list(nodes)),
            Placement::Preferred(node) => write!(f, "preferred={node}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sysfs tree of two nodes: node 0 with CPUs 0–3, node 1 with 64 GiB and no CPU (how
    /// a CXL expander appears).
    fn fixture() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let write = |rel: &str, text: &str| {
            let path = dir.path().join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        write("online", "0-1\n");
        write("node0/cpulist", "0-3\n");
        write(
            "node0/meminfo",
            "Node 0 MemTotal:       16777216 kB\nNode 0 MemFree: 1 kB\n",
        );
        write("node0/distance", "10 20\n");
        write("node1/cpulist", "\n");
        write("node1/meminfo", "Node 1 MemTotal:       67108864 kB\n");
        write("node1/distance", "20 10\n");
        dir
    }

    #[test]
    fn a_cpu_less_node_is_found_in_a_sysfs_tree() {
        let dir = fixture();
        let t = Topology::from_sysfs(dir.path()).unwrap();
        assert_eq!(t.nodes.len(), 2);
        assert_eq!(t.nodes[0].cpus, vec![0, 1, 2, 3]);
        assert!(!t.nodes[0].is_cpu_less());
        assert!(t.nodes[1].is_cpu_less());
        assert_eq!(t.nodes[1].memory_bytes, 64 << 30);
        assert_eq!(t.nodes[1].distances, vec![20, 10]);
        assert!(t.check(&"interleave=0,1".parse().unwrap()).is_ok());
        assert_eq!(
            t.check(&"node=2".parse().unwrap()),
            Err(PlacementError::UnknownNode {
                node: 2,
                online: vec![0, 1]
            })
        );
    }

    #[test]
    fn a_broken_sysfs_file_is_named() {
        let dir = fixture();
        std::fs::write(dir.path().join("node1/distance"), "20 x\n").unwrap();
        let err = Topology::from_sysfs(dir.path()).unwrap_err().to_string();
        assert!(err.contains("node1/distance"), "{err}");
    }

    #[test]
    fn this_machine_has_a_node_with_its_cpus() {
        let t = Topology::discover().unwrap();
        let cpus: usize = t.nodes.iter().map(|n| n.cpus.len()).sum();
        assert!(cpus >= 1, "{t:?}");
        assert!(t.nodes.iter().all(|n| n.distances.len() == t.nodes.len()));
    }

    #[test]
    fn placements_parse_print_and_round_trip_through_one_word() {
        for text in [
            "default",
            "local",
            "node=0",
            "node=0,2",
            "interleave=0,1",
            "preferred=3",
        ] {
            let p: Placement = text.parse().unwrap();
            assert_eq!(p.to_string(), text);
            assert_eq!(Placement::from_word(p.to_word()), Some(p));
        }
        assert_eq!(
            Placement::Default.to_word(),
            0,
            "a zero header is the default"
        );
        assert_eq!(Placement::from_word(MODE_BIND), None, "bind to no node");
        for bad in ["", "nodes=1", "node=", "preferred=0,1", "interleave=a"] {
            assert!(matches!(
                bad.parse::<Placement>(),
                Err(PlacementError::Syntax(_))
            ));
        }
        assert_eq!(
            "node=60".parse::<Placement>(),
            Err(PlacementError::NodeTooLarge(60))
        );
    }

    /// The policy shows in `/proc/self/numa_maps` for the mapping it was applied to.
    #[test]
    fn an_applied_policy_shows_in_numa_maps() {
        let dir = tempfile::tempdir_in("/dev/shm")
            .or_else(|_| tempfile::tempdir())
            .unwrap();
        let file = std::fs::File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("mapped"))
            .unwrap();
        file.set_len(1 << 20).unwrap();
        // SAFETY: a fresh private file of 1 MiB, mapped shared; nothing else maps it.
        let mut map = unsafe { memmap2::MmapMut::map_mut(&file) }.unwrap();
        let addr = map.as_mut_ptr();
        for (placement, shown) in [
            ("node=0", "bind:0"),
            ("interleave=0", "interleave:0"),
            ("preferred=0", "prefer:0"),
        ] {
            let p: Placement = placement.parse().unwrap();
            p.apply(addr, map.len()).unwrap();
            let maps = std::fs::read_to_string("/proc/self/numa_maps").unwrap();
            let line = maps
                .lines()
                .find(|l| l.starts_with(&format!("{:x} ", addr as usize)))
                .unwrap_or_else(|| panic!("no numa_maps line for the mapping:\n{maps}"));
            assert!(line.contains(shown), "{placement}: {line}");
        }
    }
}
