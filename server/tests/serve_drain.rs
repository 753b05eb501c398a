//! `podkv serve --drain`: a worker's compaction pass moves the items of sparse slabs out, the
//! clients see every item unchanged, and `stats` counts the work as memcached counts its slab
//! mover's (`slabs_moved`, `slab_reassign_rescues`).

mod conv;

use conv::{heap_dir, stats, Client, Server};
use std::time::{Duration, Instant};

const COUNT_KEYS: u32 = 20_000;
const SIZE_VALUE: usize = 300;
/// Requests per pipelined batch.
const BATCH: u32 = 100;

fn key(i: u32) -> String {
    format!("key{i:06}")
}

fn value(i: u32) -> Vec<u8> {
    vec![b'a' + (i % 26) as u8; SIZE_VALUE]
}

/// Sends `count` requests made by `request`, pipelined, and checks each reply is `reply`.
fn pipelined(client: &mut Client, keys: &[u32], request: impl Fn(u32) -> Vec<u8>, reply: &[u8]) {
    for batch in keys.chunks(BATCH as usize) {
        let bytes: Vec<u8> = batch.iter().flat_map(|&i| request(i)).collect();
        client.send(&bytes);
        let got = client.read_n(reply.len() * batch.len());
        assert_eq!(got, reply.repeat(batch.len()), "replies to a batch");
    }
}

#[test]
fn a_drain_moves_the_items_of_sparse_slabs_and_stats_counts_them() {
    let dir = heap_dir();
    let heap = dir.path().join("heap");
    let server = Server::start(
        &heap,
        &["--threads", "1", "--drain", "50", "--drain-interval", "1"],
    );
    let mut client = server.client();
    let settings = String::from_utf8(client.call(b"stats settings\r\n")).unwrap();
    assert!(
        settings.contains("STAT slab_reassign yes\r\n"),
        "{settings}"
    );
    assert!(
        settings.contains("STAT podkv_drain_percent 50\r\n"),
        "{settings}"
    );

    let all: Vec<u32> = (0..COUNT_KEYS).collect();
    pipelined(
        &mut client,
        &all,
        |i| {
            let mut r = format!("set {} 0 0 {SIZE_VALUE}\r\n", key(i)).into_bytes();
            r.extend_from_slice(&value(i));
            r.extend_from_slice(b"\r\n");
            r
        },
        b"STORED\r\n",
    );
    // Three keys of every five go: every slab of the values' class is left about 40% full.
    let (kept, gone): (Vec<u32>, Vec<u32>) = all.iter().partition(|&&i| i % 5 < 2);
    pipelined(
        &mut client,
        &gone,
        |i| format!("delete {}\r\n", key(i)).into_bytes(),
        b"DELETED\r\n",
    );

    let start = Instant::now();
    let moved = loop {
        let s = stats(&mut client);
        // `curr_items` lags by up to a second (each worker publishes its counts so).
        if s["slab_reassign_rescues"] > 0 && s["curr_items"] == kept.len() as u64 {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no item moved within a minute of one-second passes: {s:?}\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(moved["slabs_moved"] > 0, "{moved:?}");
    assert!(
        moved["podkv_slab_reassign_rescued_bytes"]
            >= moved["slab_reassign_rescues"] * SIZE_VALUE as u64,
        "{moved:?}"
    );

    // Every item kept reads back unchanged; every one deleted stays gone.
    for &i in &kept {
        let mut want = format!("VALUE {} 0 {SIZE_VALUE}\r\n", key(i)).into_bytes();
        want.extend_from_slice(&value(i));
        want.extend_from_slice(b"\r\nEND\r\n");
        client.expect(format!("get {}\r\n", key(i)).as_bytes(), &want);
    }
    for &i in gone.iter().step_by(7) {
        client.expect(format!("get {}\r\n", key(i)).as_bytes(), b"END\r\n");
    }
}

#[test]
fn drain_zero_turns_the_mover_off() {
    let dir = heap_dir();
    let server = Server::start(
        &dir.path().join("heap"),
        &["--threads", "1", "--drain", "0"],
    );
    let mut client = server.client();
    let settings = String::from_utf8(client.call(b"stats settings\r\n")).unwrap();
    assert!(settings.contains("STAT slab_reassign no\r\n"), "{settings}");
    let s = stats(&mut client);
    assert_eq!((s["slabs_moved"], s["slab_reassign_rescues"]), (0, 0));
}

/// `--memory` bounds the slab memory the heap holds, as memcached's `-m` bounds its pages:
/// after a size shift has outgrown it, the worker's passes (then every second while over) move
/// what fits and evict the items of its sparsest slabs until `stats slabs`' total_malloced
/// is within the limit; the items left read back unchanged.
#[test]
fn memory_bounds_the_slabs_held_after_a_size_shift() {
    let dir = heap_dir();
    let server = Server::start(
        &dir.path().join("heap"),
        &[
            "--threads",
            "1",
            "--memory",
            "2MiB",
            "--drain-interval",
            "5",
        ],
    );
    let mut client = server.client();
    // 3,000 keys written at 100, then 300, then 700 bytes: about 1 MiB of items last, in the
    // slabs of three classes.
    let keys: Vec<u32> = (0..3_000).collect();
    let sized = |len: usize| {
        move |i: u32| {
            let mut r = format!("set {} 0 0 {len}\r\n", key(i)).into_bytes();
            r.extend(std::iter::repeat_n(b'a' + (i % 26) as u8, len));
            r.extend_from_slice(b"\r\n");
            r
        }
    };
    for len in [100, 300, 700] {
        pipelined(&mut client, &keys, sized(len), b"STORED\r\n");
    }
    let malloced = |client: &mut Client| {
        let reply = String::from_utf8(client.call(b"stats slabs\r\n")).unwrap();
        let line = reply
            .lines()
            .find(|l| l.starts_with("STAT total_malloced "))
            .unwrap();
        line.rsplit(' ').next().unwrap().parse::<u64>().unwrap()
    };
    // The first pass is due 5 s after the start; the writes take a fraction of that.
    let shifted = malloced(&mut client);
    assert!(
        shifted > 2 << 20,
        "the shift outgrew the limit: {shifted} bytes"
    );
    let start = Instant::now();
    while malloced(&mut client) > 2 << 20 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "over the limit after a minute: {} bytes, {:?}\n{}",
            malloced(&mut client),
            stats(&mut client),
            server.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let s = stats(&mut client);
    assert!(s["slabs_moved"] > 0, "{s:?}");
    assert!(
        s["slab_reassign_evictions_nomem"] <= s["evictions"],
        "{s:?}"
    );
    for i in keys {
        let reply = client.call(format!("get {}\r\n", key(i)).as_bytes());
        if reply != b"END\r\n" {
            let mut want = format!("VALUE {} 0 700\r\n", key(i)).into_bytes();
            want.extend(std::iter::repeat_n(b'a' + (i % 26) as u8, 700));
            want.extend_from_slice(b"\r\nEND\r\n");
            assert_eq!(reply, want, "{}", key(i));
        }
    }
}
