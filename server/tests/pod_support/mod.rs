//! What the pod tests share: running `podkv pod ...` as a separate process, a pod that is
//! brought down (and its heap purged) when the test ends, however it ends.

#![allow(dead_code)]

use podkv_harness::runner::memcached::{Client, Reply, Request};
use podkv_traces::Command as Op;
use serde_json::Value;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The podkv binary under test.
pub fn podkv() -> Command {
    Command::new(env!("CARGO_BIN_EXE_podkv"))
}

/// Runs `podkv ARGS`, returning its output whatever its status.
pub fn run(args: &[&str]) -> Output {
    podkv().args(args).output().expect("podkv runs")
}

/// A pod for one test: a unique name, its own state directory and heap; `down --purge` on drop.
pub struct Pod {
    pub name: String,
    pub root: std::rc::Rc<tempfile::TempDir>,
    pub heap: PathBuf,
}

static COUNT: AtomicUsize = AtomicUsize::new(0);

impl Pod {
    /// A fresh pod identity (not yet up) with its own state root. Names are `p<pid><n>`.
    pub fn new() -> Pod {
        Pod::in_root(std::rc::Rc::new(tempfile::tempdir().unwrap()))
    }

    /// Another pod under the same state root (as `pod shard` expects of the pods it joins).
    pub fn sibling(&self) -> Pod {
        Pod::in_root(self.root.clone())
    }

    fn in_root(root: std::rc::Rc<tempfile::TempDir>) -> Pod {
        let n = COUNT.fetch_add(1, Ordering::Relaxed);
        let name = format!("p{}{n}", std::process::id() % 100_000);
        let heap = PathBuf::from(format!("/dev/shm/podkv-test-{name}"));
        Pod { name, root, heap }
    }

    /// `--name N --state-dir D` for any `podkv pod` subcommand.
    pub fn args(&self) -> Vec<String> {
        vec![
            "--name".into(),
            self.name.clone(),
            "--state-dir".into(),
            self.root.path().display().to_string(),
        ]
    }

    /// Runs `podkv pod SUB <pod args> EXTRA`.
    pub fn pod(&self, sub: &str, extra: &[&str]) -> Output {
        podkv()
            .args(["pod", sub])
            .args(self.args())
            .args(extra)
            .output()
            .expect("podkv runs")
    }

    /// `pod up --detach` with `extra` arguments; panics with the output if it fails.
    pub fn up(&self, extra: &[&str]) -> Output {
        let heap = self.heap.display().to_string();
        let mut args = vec!["--detach", "--heap", &heap];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "--threads", "1"]);
        let out = self.pod("up", &args);
        assert!(out.status.success(), "pod up failed:\n{}", text(&out));
        out
    }

    /// `pod status --json`, parsed.
    pub fn status(&self) -> Value {
        let out = self.pod("status", &["--json"]);
        assert!(out.status.success(), "pod status failed:\n{}", text(&out));
        serde_json::from_slice(&out.stdout).expect("status is JSON")
    }

    /// Member addresses, by index.
    pub fn addrs(&self) -> Vec<String> {
        self.status()["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["addr"].as_str().unwrap().to_owned())
            .collect()
    }

    /// The state directory of this pod.
    pub fn dir(&self) -> PathBuf {
        self.root.path().join(&self.name)
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        if self.dir().join("pod.json").exists() {
            let _ = self.pod("down", &["--purge"]);
        }
        let _ = std::fs::remove_file(&self.heap);
    }
}

/// Both output streams, for assertion messages.
pub fn text(out: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A base port with `n` free consecutive loopback ports after it.
///
/// Taken below the kernel's ephemeral range, never from it: a port the kernel hands out for
/// `bind(0)` is also what it hands out as the source port of any outgoing connection, so
/// between this check and the member's own bind another test's client could take it (the
/// member then exits at start). A per-process cursor, started at a place of this process's
/// own, keeps the parallel tests of one binary, and concurrent binaries, on different ports.
pub fn free_ports(n: u16) -> u16 {
    static CURSOR: AtomicUsize = AtomicUsize::new(usize::MAX);
    let (low, high) = below_ephemeral();
    let span = (high - low) as usize;
    let start = (std::process::id() as usize * 97) % span;
    let _ = CURSOR.compare_exchange(usize::MAX, start, Ordering::Relaxed, Ordering::Relaxed);
    for _ in 0..1000 {
        let at = CURSOR.fetch_add(n as usize, Ordering::Relaxed) % span;
        let base = low + at as u16;
        if base + n <= high && (0..n).all(|i| TcpListener::bind(("127.0.0.1", base + i)).is_ok()) {
            return base;
        }
    }
    panic!("no {n} consecutive free ports in {low}..{high}");
}

/// Ports `low..high` that the kernel does not hand out as ephemeral ones: the ten thousand
/// below `ip_local_port_range`'s start (32768 by default).
fn below_ephemeral() -> (u16, u16) {
    let first = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let high = first.max(12_000);
    (high - 10_000, high)
}

/// One connection to one server.
pub fn client(addr: &str) -> Client {
    Client::connect(&[addr.to_owned()]).expect("connects")
}

/// `set key value` on `c`.
pub fn set(c: &mut Client, key: &[u8], value: &[u8]) -> anyhow::Result<Reply> {
    c.request(Request::store(Op::Set { ttl: 0 }, key, value))
}

/// `get key` on `c`: the value, if any.
pub fn get(c: &mut Client, key: &[u8]) -> anyhow::Result<Option<Vec<u8>>> {
    match c.request(Request::new(Op::Get, key))? {
        Reply::Value { data, .. } => Ok(Some(data)),
        Reply::Miss => Ok(None),
        other => anyhow::bail!("get answered {other:?}"),
    }
}

/// Whether process `pid` runs (and is not a zombie).
pub fn is_running(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s[s.rfind(')').unwrap() + 2..].starts_with('Z'))
        .unwrap_or(false)
}
