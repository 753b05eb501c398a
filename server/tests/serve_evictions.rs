//! `evictions` in `stats` (and `--metrics`): a server with a small `--memory`, filled well past
//! it, evicts, and every item it stored is either current or evicted — the same equation the
//! real memcached (`-m 2`) satisfies on the same workload; without memory pressure both report
//! none.

mod conv;

use conv::{heap_dir, stats, Client, Server};
use std::collections::HashMap;
use std::path::Path;

/// Values per fill and their size: 20000 × ~550 B is about five times 2 MiB.
const COUNT_FILL: usize = 20_000;
const SIZE_VALUE: usize = 500;

/// Sets `count` distinct keys (`noreply`, pipelined) and returns the stats after.
fn fill(client: &mut Client, prefix: &str, count: usize) -> HashMap<String, u64> {
    let value = vec![b'x'; SIZE_VALUE];
    for chunk in (0..count).collect::<Vec<_>>().chunks(500) {
        let mut batch = Vec::new();
        for i in chunk {
            let head = format!("set {prefix}{i} 0 0 {SIZE_VALUE} noreply\r\n");
            batch.extend_from_slice(head.as_bytes());
            batch.extend_from_slice(&value);
            batch.extend_from_slice(b"\r\n");
        }
        client.send(&batch);
    }
    client.expect(b"mn\r\n", b"MN\r\n");
    stats(client)
}

/// The equation both servers satisfy after a fill: stored = current + evicted.
fn assert_accounted(who: &str, stats: &HashMap<String, u64>, stored: u64) {
    let (items, evictions) = (stats["curr_items"], stats["evictions"]);
    assert_eq!(stats["total_items"], stored, "{who}: every set stored");
    assert_eq!(
        items + evictions,
        stored,
        "{who}: {items} current + {evictions} evicted"
    );
}

/// A server on `heap` with 2 MiB for items (memcached's `-m 2`) and one worker.
fn small_server(heap: &Path) -> Server {
    Server::start(heap, &["--memory", "2MiB", "--threads", "1"])
}

#[test]
fn filling_past_memory_evicts_like_memcached() {
    let dir = heap_dir();
    let server = small_server(&dir.path().join("heap"));
    let ours = fill(&mut server.client(), "k", COUNT_FILL);
    assert!(ours["evictions"] > 0, "podkv evicted nothing: {ours:?}");
    assert_accounted("podkv", &ours, COUNT_FILL as u64);
    let mut client = server.client();
    client.expect(b"stats reset\r\n", b"RESET\r\n");
    assert_eq!(stats(&mut client)["evictions"], 0, "reset, as memcached's");
    let Some(memcached) = conv::memcached(&["-m", "2"]) else {
        return;
    };
    let theirs = fill(&mut Client::connect(memcached.addr), "k", COUNT_FILL);
    assert!(theirs["evictions"] > 0, "{theirs:?}");
    assert_accounted("memcached", &theirs, COUNT_FILL as u64);
}

#[test]
fn no_pressure_no_evictions() {
    let dir = heap_dir();
    let server = small_server(&dir.path().join("heap"));
    let mut client = server.client();
    for _ in 0..3 {
        let ours = fill(&mut client, "k", 1000);
        assert_eq!(ours["evictions"], 0, "{ours:?}");
        assert_eq!(ours["curr_items"], 1000);
    }
    let Some(memcached) = conv::memcached(&["-m", "2"]) else {
        return;
    };
    let theirs = fill(&mut Client::connect(memcached.addr), "k", 1000);
    assert_eq!(theirs["evictions"], 0, "{theirs:?}");
}

/// The count lives in the heap: a second process on the same heap reports the first's.
#[test]
fn evictions_are_the_stores_not_the_process() {
    let dir = heap_dir();
    let heap = dir.path().join("heap");
    let first = small_server(&heap);
    let evicted = fill(&mut first.client(), "k", COUNT_FILL / 2)["evictions"];
    assert!(evicted > 0);
    first.stop();
    let second = Server::start(&heap, &["--threads", "1"]);
    let mut client = second.client();
    assert_eq!(stats(&mut client)["evictions"], evicted);
}
