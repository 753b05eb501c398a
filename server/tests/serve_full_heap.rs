//! Issue 25's scenario: a heap of 16 MiB small + 16 MiB large, 32-byte keys, 4 KiB values, 90%
//! sets, written until the large region has been overfilled several times, through 1 and 2
//! `podkv serve` processes. A full region means eviction where the item needs room, never a
//! `SERVER_ERROR`; live items keep the large region mostly full; `store check` and `heap
//! check` are clean; and evictions per set stay within 1.5× memcached's (`-m 32`, the heap's
//! two regions together) on the same load.
//!
//! `PODKV_FULL_HEAP_ROUNDS=N` overfills N times instead of 6 (the figures in the report).

mod conv;

use conv::{heap_dir, podkv, Client, Server};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};

/// The large region's bytes (`--large-bytes 16MiB`).
const LARGE_BYTES: u64 = 16 << 20;
const SIZE_VALUE: usize = 4096;
/// Requests per pipelined batch.
const BATCH: usize = 64;

/// What a load run saw.
#[derive(Debug, Default)]
struct Seen {
    sets: u64,
    stored: u64,
    errors: u64,
    gets: u64,
}

/// Sends `sets` sets of distinct 32-byte keys `{prefix}…` with 4 KiB values, and after every
/// ninth a get of a recent key (90% sets), in pipelined batches; counts the replies.
fn load(addr: SocketAddr, prefix: char, sets: u64) -> Seen {
    let stream = TcpStream::connect(addr).expect("connect");
    stream.set_nodelay(true).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    let value = vec![b'v'; SIZE_VALUE];
    let key = |i: u64| format!("{prefix}{i:031}");
    let mut seen = Seen::default();
    let mut i = 0;
    while i < sets {
        let mut batch = Vec::new();
        let mut expect = Vec::new(); // true: a set's reply, false: a get's
        for _ in 0..BATCH {
            if i == sets {
                break;
            }
            batch.extend_from_slice(format!("set {} 0 0 {SIZE_VALUE}\r\n", key(i)).as_bytes());
            batch.extend_from_slice(&value);
            batch.extend_from_slice(b"\r\n");
            expect.push(true);
            if i % 9 == 8 {
                batch.extend_from_slice(format!("get {}\r\n", key(i - 4)).as_bytes());
                expect.push(false);
            }
            i += 1;
        }
        writer.write_all(&batch).unwrap();
        for is_set in expect {
            read_reply(&mut reader, is_set, &mut seen);
        }
    }
    seen
}

/// Reads one reply to a set or a get.
fn read_reply(reader: &mut impl BufRead, is_set: bool, seen: &mut Seen) {
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    if is_set {
        seen.sets += 1;
        match line.as_str() {
            "STORED\r\n" => seen.stored += 1,
            l if l.starts_with("SERVER_ERROR") => seen.errors += 1,
            l => panic!("set reply {l:?}"),
        }
        return;
    }
    seen.gets += 1;
    while let Some(header) = line.strip_prefix("VALUE ") {
        let len: usize = header.split_whitespace().nth(2).unwrap().parse().unwrap();
        let mut data = vec![0; len + 2];
        reader.read_exact(&mut data).unwrap();
        line.clear();
        reader.read_line(&mut line).unwrap();
    }
    assert_eq!(line, "END\r\n", "get reply");
}

/// The general stats of the server at `addr`.
fn stats(addr: SocketAddr) -> HashMap<String, u64> {
    conv::stats(&mut Client::connect(addr))
}

/// Runs `podkv ARGS…` and returns its stdout, failing the test unless it succeeds.
fn podkv_ok(args: &[&str]) -> String {
    let out = std::process::Command::new(podkv())
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "podkv {args:?}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// Sets that overfill the large region `rounds` times.
fn sets_for(rounds: u64) -> u64 {
    rounds * LARGE_BYTES / SIZE_VALUE as u64
}

fn rounds() -> u64 {
    std::env::var("PODKV_FULL_HEAP_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(6)
}

/// The issue's heap: 16 MiB of small and 16 MiB of large slabs.
fn create_issue_heap(path: &str) {
    podkv_ok(&[
        "heap",
        "create",
        path,
        "--small-bytes",
        "16MiB",
        "--large-bytes",
        "16MiB",
    ]);
}

/// Loads `servers` processes on one issue-25 heap, one client each, then checks the heap;
/// evictions per set.
fn podkv_run(servers: usize) -> f64 {
    let dir = heap_dir();
    let heap = dir.path().join("heap");
    let path = heap.to_str().unwrap();
    create_issue_heap(path);
    let servers: Vec<Server> = (0..servers)
        .map(|_| Server::start(&heap, &["--threads", "1"]))
        .collect();
    let sets = sets_for(rounds()) / servers.len() as u64;
    let clients: Vec<_> = servers
        .iter()
        .zip(['a', 'b'])
        .map(|(server, prefix)| {
            let addr = server.addr;
            std::thread::spawn(move || load(addr, prefix, sets))
        })
        .collect();
    let seen: Vec<Seen> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let s = stats(servers[0].addr);
    let (all_sets, errors) = (
        seen.iter().map(|s| s.sets).sum::<u64>(),
        seen.iter().map(|s| s.errors).sum::<u64>(),
    );
    let per_set = s["evictions"] as f64 / all_sets as f64;
    let block = 4632; // the large heap's class for a 4176-byte item
    let held = s["curr_items"] * block;
    eprintln!(
        "podkv, {} process(es): {all_sets} sets, {errors} SERVER_ERROR, {} evictions ({per_set:.3} \
         per set), {} items, {} bytes of items ({:.1}% of the large region; {:.1}% in blocks)",
        servers.len(),
        s["evictions"],
        s["curr_items"],
        s["bytes"],
        100.0 * s["bytes"] as f64 / LARGE_BYTES as f64,
        100.0 * held as f64 / LARGE_BYTES as f64,
    );
    assert_eq!(errors, 0, "{seen:?}");
    assert_eq!(s["podkv_limit_large_bytes"], LARGE_BYTES);
    assert!(
        held as f64 >= 0.8 * LARGE_BYTES as f64,
        "live items' blocks fill {held} of {LARGE_BYTES}: {s:?}"
    );
    assert!(
        s["bytes"] as f64 >= 0.7 * LARGE_BYTES as f64,
        "live items fill {} of {LARGE_BYTES}",
        s["bytes"]
    );
    for server in servers {
        assert!(server.stop().success());
    }
    let store = podkv_ok(&["store", "check", path]);
    assert!(store.contains(": ok"), "{store}");
    let heap_report = podkv_ok(&["heap", "check", path]);
    assert!(heap_report.starts_with("ok"), "{heap_report}");
    per_set
}

/// memcached `-m 32` (the heap's two regions together) on the same load; evictions per set,
/// or `None` without memcached.
fn memcached_run() -> Option<f64> {
    let memcached = conv::memcached(&["-m", "32"])?;
    let seen = load(memcached.addr, 'a', sets_for(rounds()));
    assert_eq!(seen.errors, 0, "{seen:?}");
    let s = stats(memcached.addr);
    let per_set = s["evictions"] as f64 / seen.sets as f64;
    eprintln!(
        "memcached -m 32: {} sets, {} evictions ({per_set:.3} per set), {} items, {} bytes",
        seen.sets, s["evictions"], s["curr_items"], s["bytes"]
    );
    Some(per_set)
}

fn compare(ours: f64) {
    let Some(theirs) = memcached_run() else {
        return;
    };
    eprintln!(
        "evictions per set: podkv / memcached = {:.2}",
        ours / theirs
    );
    assert!(
        ours <= 1.5 * theirs,
        "podkv {ours:.3} vs memcached {theirs:.3}"
    );
}

#[test]
fn one_server_evicts_where_the_item_needs_room() {
    compare(podkv_run(1));
}

#[test]
fn two_servers_evict_where_the_item_needs_room() {
    compare(podkv_run(2));
}

/// `limit_maxbytes` is what the regions can hold: `--memory` past them is capped, and each
/// region's size is shown beside it.
#[test]
fn limit_maxbytes_follows_the_regions() {
    let dir = heap_dir();
    let heap = dir.path().join("heap");
    let path = heap.to_str().unwrap();
    create_issue_heap(path);
    let server = Server::start(&heap, &["--threads", "1", "--memory", "1GiB"]);
    let s = stats(server.addr);
    assert_eq!(s["limit_maxbytes"], 32 << 20, "{s:?}");
    assert_eq!(s["podkv_limit_small_bytes"], 16 << 20);
    assert_eq!(s["podkv_limit_large_bytes"], LARGE_BYTES);
}
