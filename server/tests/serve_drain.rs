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
