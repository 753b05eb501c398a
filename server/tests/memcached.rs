//! The memcached client against a real memcached on 127.0.0.1 (skipped, loudly, when the
//! `memcached` binary is not installed: `apt-get install -y memcached`).

use podkv_harness::runner::memcached::{Client, Reply, Request};
use podkv_traces::Command;
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// A memcached child on a free port, killed on drop.
struct Memcached {
    child: Child,
    addr: String,
}

impl Drop for Memcached {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn memcached_binary() -> Option<std::path::PathBuf> {
    [
        "/usr/bin/memcached",
        "/usr/local/bin/memcached",
        "/usr/sbin/memcached",
    ]
    .iter()
    .map(std::path::PathBuf::from)
    .find(|p| p.exists())
}

fn start() -> Option<Memcached> {
    let Some(bin) = memcached_binary() else {
        eprintln!("\n!!! SKIPPING memcached tests: no memcached binary (apt-get install -y memcached) !!!\n");
        return None;
    };
    for _ in 0..10 {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let mut child = std::process::Command::new(&bin)
            .args([
                "-l",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-U",
                "0",
                "-m",
                "64",
            ])
            .args(if unsafe_is_root() {
                &["-u", "root"][..]
            } else {
                &[][..]
            })
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("memcached starts");
        let addr = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            // A listener on the port proves little on its own: the port was free when it was
            // picked, but another test's server may have taken it since, and then ours exits
            // on its failed bind while the connect reaches the other one. Accept the port only
            // once our child has outlived a connect by a moment.
            if TcpStream::connect(&addr).is_ok() {
                std::thread::sleep(Duration::from_millis(100));
                if child.try_wait().unwrap().is_none() {
                    return Some(Memcached { child, addr });
                }
                break;
            }
            if child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("memcached did not start");
}

/// memcached refuses to run as root without `-u`.
fn unsafe_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

fn value(data: &[u8]) -> Reply {
    Reply::Value {
        flags: 0,
        data: data.to_vec(),
        cas: None,
    }
}

#[test]
fn round_trips_against_real_memcached() {
    let Some(server) = start() else { return };
    let mut c = Client::connect(std::slice::from_ref(&server.addr)).unwrap();
    let set = Command::Set { ttl: 0 };
    assert_eq!(
        c.request(Request::new(Command::Get, b"k")).unwrap(),
        Reply::Miss
    );
    assert_eq!(
        c.request(Request::store(set, b"k", b"10")).unwrap(),
        Reply::Stored
    );
    assert_eq!(
        c.request(Request::new(Command::Get, b"k")).unwrap(),
        value(b"10")
    );
    let add = Command::Add { ttl: 0 };
    assert_eq!(
        c.request(Request::store(add, b"k", b"x")).unwrap(),
        Reply::NotStored
    );
    let incr = Command::Incr { delta: 5 };
    assert_eq!(
        c.request(Request::new(incr, b"k")).unwrap(),
        Reply::Number(15)
    );
    let decr = Command::Decr { delta: 20 };
    assert_eq!(
        c.request(Request::new(decr, b"k")).unwrap(),
        Reply::Number(0)
    );
    let Reply::Value {
        cas: Some(token), ..
    } = c.request(Request::new(Command::Gets, b"k")).unwrap()
    else {
        panic!("gets returns a token");
    };
    let mut cas = Request::store(Command::Cas { ttl: 0 }, b"k", b"new");
    cas.cas = token;
    assert_eq!(c.request(cas).unwrap(), Reply::Stored);
    assert_eq!(
        c.request(cas).unwrap(),
        Reply::Exists,
        "the token is stale now"
    );
    let append = Command::Append { ttl: 0 };
    assert_eq!(
        c.request(Request::store(append, b"k", b"!")).unwrap(),
        Reply::Stored
    );
    assert_eq!(
        c.request(Request::new(Command::Get, b"k")).unwrap(),
        value(b"new!")
    );
    assert!(matches!(
        c.request(Request::new(incr, b"k")).unwrap(),
        Reply::Error(_)
    ));
    assert_eq!(
        c.request(Request::new(Command::Delete, b"k")).unwrap(),
        Reply::Deleted
    );
    assert_eq!(
        c.request(Request::new(Command::Delete, b"k")).unwrap(),
        Reply::NotFound
    );
}

#[test]
fn pipelines_keep_order_across_two_servers() {
    let (Some(a), Some(b)) = (start(), start()) else {
        return;
    };
    let mut c = Client::connect(&[a.addr.clone(), b.addr.clone()]).unwrap();
    let keys: Vec<Vec<u8>> = (0..200).map(|i| format!("key{i}").into_bytes()).collect();
    let vals: Vec<Vec<u8>> = (0..200).map(|i| format!("v{i}").into_bytes()).collect();
    let mut reqs: Vec<Request> = keys
        .iter()
        .zip(&vals)
        .map(|(k, v)| Request::store(Command::Set { ttl: 0 }, k, v))
        .collect();
    reqs.extend(keys.iter().map(|k| Request::new(Command::Get, k)));
    reqs.push(Request::new(Command::Get, b"absent"));
    let replies = c.pipeline(&reqs).unwrap();
    assert!(replies[..200].iter().all(|r| *r == Reply::Stored));
    for (i, r) in replies[200..400].iter().enumerate() {
        assert_eq!(*r, value(&vals[i]));
    }
    assert_eq!(replies[400], Reply::Miss);
    let servers: std::collections::BTreeSet<usize> = keys.iter().map(|k| c.server_of(k)).collect();
    assert_eq!(servers.len(), 2, "keys spread over both servers");
    // Each server holds only its own keys.
    let mut only_a = Client::connect(std::slice::from_ref(&a.addr)).unwrap();
    let on_a = keys.iter().filter(|k| c.server_of(k) == 0).count();
    let found = keys
        .iter()
        .filter(|k| only_a.request(Request::new(Command::Get, k)).unwrap() != Reply::Miss)
        .count();
    assert_eq!(found, on_a);
}

#[test]
fn ycsb_runs_against_memcached_from_two_processes() {
    let Some(server) = start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.ndjson");
    let target = format!("memcached://{}", server.addr);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_podkv"))
        .args([
            "ycsb",
            "--workload",
            "c",
            "--records",
            "1000",
            "--ops",
            "4000",
        ])
        .args([
            "--processes",
            "2",
            "--threads",
            "1",
            "--target",
            &target,
            "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&json).unwrap().trim()).unwrap();
    assert_eq!(r["ops"], 4000);
    assert_eq!(
        r["per_op"]["read"]["hits"], 4000,
        "every loaded record is found: {r}"
    );
}
