//! `podkv store dump` / `podkv store load` as real processes: 100k items with TTLs and meta
//! state cross into a heap of another geometry, both heaps pass `podkv store check` and read
//! back identically; a dump taken while `podkv serve` writes to the heap has every untouched
//! key once; a truncated or foreign stream fails in one line and writes nothing.

mod conv;

use conv::{heap_dir, podkv, Server};
use podkv_store::meta::{Delete, Rank, Read};
use podkv_store::transfer::stream;
use podkv_store::{Store, StoreConfig};
use std::collections::HashSet;
use std::fs::File;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const COUNT: usize = 100_000;

/// Runs `podkv ARGS…` with `stdin` and `stdout` files (or null) and returns its output.
fn run(args: &[&str], stdin: Option<&Path>, stdout: Option<&Path>) -> Output {
    let mut cmd = Command::new(podkv());
    cmd.args(args);
    cmd.stdin(stdin.map_or(Stdio::null(), |p| File::open(p).unwrap().into()));
    cmd.stdout(stdout.map_or(Stdio::piped(), |p| File::create(p).unwrap().into()));
    cmd.output().expect("podkv runs")
}

fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The source heap's geometry: 1 GiB slab heaps, 64 slots, the default huge heap.
fn source_config() -> StoreConfig {
    StoreConfig {
        heap: podkv_alloc::Config {
            small_bytes: 1 << 30,
            large_bytes: 1 << 30,
            slots: 64,
            ..podkv_alloc::Config::default()
        },
        ..StoreConfig::default()
    }
}

/// `COUNT` keys: values of varied length, flags, an hour's TTL on a third, already expired
/// on every 50th (they must stay behind), a recache token won on every 7th (`Z` to the next
/// reader), stale (`X`) every 11th.
fn fill(path: &Path) {
    let store = Store::open(path, source_config()).unwrap();
    let h = store.handle().unwrap();
    for i in 0..COUNT {
        let key = format!("key:{i}");
        let value = format!("{i},").repeat(i % 17);
        let ttl = match i {
            _ if i % 50 == 0 => -1,
            _ if i % 3 == 0 || i % 7 == 0 => 3600,
            _ => 0,
        };
        h.set(key.as_bytes(), value.as_bytes(), i as u32, ttl)
            .unwrap();
        if i % 7 == 0 && i % 50 != 0 {
            let read = Read {
                recache: Some((100_000, Rank(0))),
                ..Read::default()
            };
            let won = h.meta_get(key.as_bytes(), read).unwrap().unwrap();
            assert!(won.lease.won);
        }
        if i % 11 == 0 && i % 50 != 0 {
            let stale = Delete {
                invalidate: Some(None),
                ..Delete::default()
            };
            h.meta_delete(key.as_bytes(), stale).unwrap();
        }
    }
}

#[test]
fn a_store_crosses_into_another_geometry_and_reads_back_identically() {
    let dir = heap_dir();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let (items, again) = (dir.path().join("items"), dir.path().join("again"));
    fill(&a);
    let out = run(&["store", "dump", path_str(&a)], None, Some(&items));
    ok(&out, "dump");
    let said = String::from_utf8_lossy(&out.stderr);
    let kept = COUNT - COUNT / 50;
    assert!(said.contains(&format!("dumped {kept} items")), "{said}");

    let geometry = [
        "--small-bytes",
        "512MiB",
        "--large-bytes",
        "256MiB",
        "--slots",
        "32",
        "--huge-bytes",
        "0",
    ];
    let create = [&["heap", "create", path_str(&b)][..], &geometry].concat();
    ok(&run(&create, None, None), "heap create");
    let out = run(&["store", "load", path_str(&b)], Some(&items), None);
    ok(&out, "load");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains(&format!("loaded {kept} items")), "{said}");

    for heap in [&a, &b] {
        ok(
            &run(&["store", "check", path_str(heap)], None, None),
            "check",
        );
    }
    ok(
        &run(&["store", "dump", path_str(&b)], None, Some(&again)),
        "dump",
    );
    let (first, second) = (
        std::fs::read(&items).unwrap(),
        std::fs::read(&again).unwrap(),
    );
    assert!(first == second, "both heaps dump the same stream");
    read_back_identically(&a, &b);
}

/// Every key reads the same from both heaps: value, flags, expiry, CAS token, meta state.
fn read_back_identically(a: &Path, b: &Path) {
    let (a, b) = (
        Store::open(a, source_config()).unwrap(),
        Store::open(b, StoreConfig::default()).unwrap(),
    );
    assert_ne!(a.heap().geometry().slots(), b.heap().geometry().slots());
    let (ha, hb) = (a.handle().unwrap(), b.handle().unwrap());
    let (mut stale, mut token_sent) = (0, 0);
    for i in 0..COUNT {
        let key = format!("key:{i}");
        let (x, y) = (
            ha.get(key.as_bytes()).unwrap(),
            hb.get(key.as_bytes()).unwrap(),
        );
        let (Some(x), Some(y)) = (x, y) else {
            assert!(i % 50 == 0, "{key} is missing");
            continue;
        };
        assert_eq!(x.value(), y.value(), "{key}");
        let fields = |g: &podkv_store::Guard<'_, _>| (g.flags(), g.expiry(), g.cas(), g.lease());
        assert_eq!(fields(&x), fields(&y), "{key}");
        stale += usize::from(y.lease().stale);
        token_sent += usize::from(y.lease().token_sent);
    }
    assert!(
        stale > 0 && token_sent > 0,
        "{stale} stale, {token_sent} with a token sent"
    );
}

#[test]
fn a_served_heap_dumps_while_it_takes_writes() {
    const PRELOAD: usize = 20_000;
    let dir = heap_dir();
    let (live, copy) = (dir.path().join("live"), dir.path().join("copy"));
    let items = dir.path().join("items");
    let server = Server::start(&live, &["--threads", "2"]);
    let mut client = server.client();
    for chunk in (0..PRELOAD).collect::<Vec<_>>().chunks(500) {
        let mut batch = Vec::new();
        for i in chunk {
            batch.extend_from_slice(format!("set still:{i} {i} 0 1 noreply\r\nv\r\n").as_bytes());
        }
        client.send(&batch);
    }
    client.expect(b"mn\r\n", b"MN\r\n");

    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (mut client, stop) = (server.client(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("moving:{}", n % 3000);
                client.expect(
                    format!("set {key} 0 0 8\r\n{n:08}\r\n").as_bytes(),
                    b"STORED\r\n",
                );
                n += 1;
            }
            n
        })
    };
    let out = run(&["store", "dump", path_str(&live)], None, Some(&items));
    stop.store(true, Ordering::Relaxed);
    let writes = writer.join().unwrap();
    ok(&out, "dump of a served heap");
    assert!(writes > 0, "the server took writes during the dump");

    let bytes = std::fs::read(&items).unwrap();
    let records = stream::decode(&bytes).unwrap();
    let mut seen = HashSet::new();
    for r in &records {
        assert!(
            seen.insert(r.key),
            "{} twice",
            String::from_utf8_lossy(r.key)
        );
    }
    for i in 0..PRELOAD {
        assert!(seen.contains(format!("still:{i}").as_bytes()), "still:{i}");
    }
    client.expect(b"get still:7\r\n", b"VALUE still:7 7 1\r\nv\r\nEND\r\n");
    assert!(server.stop().success());
    ok(
        &run(&["store", "load", path_str(&copy)], Some(&items), None),
        "load",
    );
    for heap in [&live, &copy] {
        ok(
            &run(&["store", "check", path_str(heap)], None, None),
            "check",
        );
    }
}

#[test]
fn a_truncated_or_foreign_stream_fails_in_one_line_and_writes_nothing() {
    let dir = heap_dir();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let (items, cut, foreign) = (
        dir.path().join("items"),
        dir.path().join("cut"),
        dir.path().join("foreign"),
    );
    {
        let store = Store::open(&a, source_config()).unwrap();
        let h = store.handle().unwrap();
        for i in 0..1000 {
            h.set(format!("k{i}").as_bytes(), b"value", 0, 0).unwrap();
        }
    }
    ok(
        &run(&["store", "dump", path_str(&a)], None, Some(&items)),
        "dump",
    );
    let bytes = std::fs::read(&items).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() - 100]).unwrap();
    std::fs::write(&foreign, b"VALUE k0 0 5\r\nvalue\r\nEND\r\n").unwrap();
    for (stream, says) in [(&cut, "truncated dump"), (&foreign, "not a podkv dump")] {
        let out = run(&["store", "load", path_str(&b)], Some(stream), None);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains(says) && err.trim_end().lines().count() == 1,
            "{err}"
        );
        assert!(!b.exists(), "a refused stream makes no heap");
    }
    let missing = run(&["store", "dump", path_str(&b)], None, Some(&cut));
    assert!(!missing.status.success());
}
