//! `podkv serve` conversations: one table of (request bytes, exact reply), played against one
//! server process, against two processes serving one heap (rows alternate between them, so
//! every read sees the other process's writes), and against the real memcached (proving the
//! table is memcached's own replies). Also: memccapable's ASCII suite, SIGTERM, --metrics,
//! SO_REUSEPORT, and one recache-token winner across two processes.

mod conv;

use conv::{heap_dir, Client, Server};
use std::io::{Read, Write};
use std::time::Duration;

/// One client write and the exact bytes the server must answer.
type Row = (&'static [u8], &'static [u8]);

/// Text and meta commands, binary values, noreply, pipelining, errors.
const TABLE: &[Row] = &[
    (b"set a 0 0 1\r\nx\r\n", b"STORED\r\n"),
    (b"get a\r\n", b"VALUE a 0 1\r\nx\r\nEND\r\n"),
    (b"set bin 7 0 6\r\n\x00\r\n\xff \n\r\n", b"STORED\r\n"),
    (
        b"get bin\r\n",
        b"VALUE bin 7 6\r\n\x00\r\n\xff \n\r\nEND\r\n",
    ),
    (b"add a 0 0 1\r\ny\r\n", b"NOT_STORED\r\n"),
    (b"replace nope 0 0 1\r\ny\r\n", b"NOT_STORED\r\n"),
    (b"replace a 3 0 1\r\ny\r\n", b"STORED\r\n"),
    (b"append a 0 0 2\r\nzz\r\n", b"STORED\r\n"),
    (b"prepend a 9 0 2\r\nww\r\n", b"STORED\r\n"),
    (
        b"get a nope bin\r\n",
        b"VALUE a 3 5\r\nwwyzz\r\nVALUE bin 7 6\r\n\x00\r\n\xff \n\r\nEND\r\n",
    ),
    (b"append nope 0 0 1\r\nx\r\n", b"NOT_STORED\r\n"),
    (b"cas nope 0 0 1 1\r\nx\r\n", b"NOT_FOUND\r\n"),
    (b"cas a 0 0 1 999999999\r\nx\r\n", b"EXISTS\r\n"),
    (b"incr n 1\r\n", b"NOT_FOUND\r\n"),
    (b"set n 0 0 2\r\n10\r\n", b"STORED\r\n"),
    (b"incr n 5\r\n", b"15\r\n"),
    (b"decr n 100\r\n", b"0\r\n"),
    (b"get n\r\n", b"VALUE n 0 2\r\n0 \r\nEND\r\n"),
    (
        b"incr n 18446744073709551615\r\n",
        b"18446744073709551615\r\n",
    ),
    (b"incr n 1\r\n", b"0\r\n"),
    (
        b"gets nope\r\nget n\r\n",
        b"END\r\nVALUE n 0 20\r\n0                   \r\nEND\r\n",
    ),
    (
        b"incr a 1\r\n",
        b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
    ),
    (b"touch a 100\r\n", b"TOUCHED\r\n"),
    (b"touch nope 100\r\n", b"NOT_FOUND\r\n"),
    (b"gat 0 a nope\r\n", b"VALUE a 3 5\r\nwwyzz\r\nEND\r\n"),
    (b"delete a\r\n", b"DELETED\r\n"),
    (b"delete a\r\n", b"NOT_FOUND\r\n"),
    (
        b"set q 0 0 1 noreply\r\nq\r\nget q\r\n",
        b"VALUE q 0 1\r\nq\r\nEND\r\n",
    ),
    (b"delete q noreply\r\nget q\r\n", b"END\r\n"),
    (
        b"add q 0 0 1 noreply\r\nr\r\nincr q 1 noreply\r\ntouch q 10 noreply\r\nget q\r\n",
        b"VALUE q 0 1\r\nr\r\nEND\r\n",
    ),
    (b"set e 0 -1 1\r\ne\r\nget e\r\n", b"STORED\r\nEND\r\n"),
    (b"bogus\r\n", b"ERROR\r\n"),
    (b"\r\n", b"ERROR\r\n"),
    (
        b"set k 0 0 notanumber\r\n",
        b"CLIENT_ERROR bad command line format\r\n",
    ),
    (
        b"set k 0 0 1\r\nxyz\r\n",
        b"CLIENT_ERROR bad data chunk\r\nERROR\r\n",
    ),
    (b"get k\r\n", b"END\r\n"),
    (b"verbosity 1\r\n", b"OK\r\n"),
    (b"ms m 2 T0 F5\r\nhi\r\n", b"HD\r\n"),
    (b"mg m v f\r\n", b"VA 2 f5\r\nhi\r\n"),
    (b"mg m k v t\r\n", b"VA 2 km t-1\r\nhi\r\n"),
    (b"mg m s v O123\r\n", b"VA 2 s2 O123\r\nhi\r\n"),
    (b"mg m\r\n", b"HD\r\n"),
    (b"mg nope v\r\n", b"EN\r\n"),
    (b"mg nope v q\r\nmn\r\n", b"MN\r\n"),
    (b"ms m 1 MA\r\n!\r\n", b"HD\r\n"),
    (b"mg m v\r\n", b"VA 3\r\nhi!\r\n"),
    (b"ms m 1 ME\r\nx\r\n", b"NS\r\n"),
    (b"ms nope 1 MR\r\nx\r\n", b"NS\r\n"),
    (b"ms m 1 q\r\nz\r\nmg m v\r\n", b"VA 1\r\nz\r\n"),
    (b"md m q\r\nmg m v\r\n", b"EN\r\n"),
    (b"md m\r\n", b"NF\r\n"),
    (b"ma cnt\r\n", b"NF\r\n"),
    (b"ma cnt N0 J13 v\r\n", b"VA 2\r\n13\r\n"),
    (b"ma cnt v\r\n", b"VA 2\r\n14\r\n"),
    (b"ma cnt MD D20 v\r\n", b"VA 1\r\n0\r\n"),
    (b"ma cnt q\r\nmn\r\n", b"MN\r\n"),
    (b"me nope\r\n", b"EN\r\n"),
    (b"ms Zm9v 1 b\r\nz\r\n", b"HD\r\n"),
    (b"mg foo v\r\n", b"VA 1\r\nz\r\n"),
    // Recache tokens: `N` creates and wins, later readers see `Z`.
    (b"mg tok1 v N30\r\n", b"VA 0 W\r\n\r\n"),
    (b"mg tok1 v N30\r\n", b"VA 0 Z\r\n\r\n"),
    (b"mg tok1 s\r\n", b"HD s0 Z\r\n"),
    // `R`: the first reader under the threshold wins, once.
    (b"set tok2 0 100 1\r\nx\r\n", b"STORED\r\n"),
    (b"mg tok2 v R200\r\n", b"VA 1 W\r\nx\r\n"),
    (b"mg tok2 v R200\r\n", b"VA 1 Z\r\nx\r\n"),
    (b"mg tok2 R50\r\n", b"HD Z\r\n"),
    // `md I`: stale, token released (the next reader wins), new TTL; `get` still reads it.
    (
        b"md tok2 I T30\r\nmg tok2 t v\r\n",
        b"HD\r\nVA 1 t30 X W\r\nx\r\n",
    ),
    (b"mg tok2 t\r\n", b"HD t30 Z X\r\n"),
    (b"get tok2\r\n", b"VALUE tok2 0 1\r\nx\r\nEND\r\n"),
    (
        b"set tok2 0 0 1\r\ny\r\nmg tok2 v\r\n",
        b"STORED\r\nVA 1\r\ny\r\n",
    ),
    // `ms I` with an older CAS: stored, stale, keeping the TTL and the sent token.
    (
        b"set tok3 0 100 1\r\na\r\nmg tok3 R200\r\n",
        b"STORED\r\nHD W\r\n",
    ),
    (
        b"ms tok3 1 C1 I T5\r\nb\r\nmg tok3 v t\r\n",
        b"HD\r\nVA 1 t100 Z X\r\nb\r\n",
    ),
    (b"ms tok3 1 C999999999999 I\r\nc\r\n", b"EX\r\n"),
    (b"md tok3 C1\r\nmd tok3 q C1 I\r\n", b"EX\r\nEX\r\n"),
    // `T`, `N`, `R` and `t` act in the order written.
    (
        b"set tok4 0 100 1\r\na\r\nmg tok4 t T30\r\nmg tok4 t\r\n",
        b"STORED\r\nHD t100\r\nHD t30\r\n",
    ),
    (b"mg tok4 T10 R20 t\r\n", b"HD t10 W\r\n"),
    (
        b"mg tok5 t N30\r\nmg tok5 t\r\n",
        b"HD t-1 W\r\nHD t30 Z\r\n",
    ),
    (
        b"mg tok6 N30 T60 t\r\nmg tok7 T60 N30 t\r\n",
        b"HD t60 W\r\nHD t30 W\r\n",
    ),
    (
        b"ma tok9 N30 t\r\nma tok10 t N30\r\nma tok11 N30 T60 t\r\nma tok12 T60 N30 t\r\n",
        b"HD t30\r\nHD t-1\r\nHD t60\r\nHD t30\r\n",
    ),
    (
        b"ma tok9 N30 t T90\r\nma tok9 t\r\n",
        b"HD t30\r\nHD t90\r\n",
    ),
    // memcached 1.6.18 has no append autovivify.
    (b"ms tok8 1 MA N30\r\nx\r\n", b"NS\r\n"),
    // A key over 250 bytes refuses `gat`, after the keys before it were touched.
    (b"set gl 0 1000 1\r\nx\r\nmg gl t\r\n", b"STORED\r\nHD t1000\r\n"),
    (
        b"gat 0 gl kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk\r\n",
        b"CLIENT_ERROR bad command line format\r\n",
    ),
    (b"mg gl t\r\n", b"HD t-1\r\n"),
    (b"mn\r\n", b"MN\r\n"),
    (b"flush_all\r\n", b"OK\r\n"),
    (b"get n foo bin\r\n", b"END\r\n"),
    (b"flush_all noreply\r\nmn\r\n", b"MN\r\n"),
];

/// Plays the table over `clients`, row `i` on client `i % clients.len()`, then proves no
/// client has a stray reply left.
fn play(clients: &mut [Client]) {
    for (i, (request, reply)) in TABLE.iter().enumerate() {
        let n = clients.len();
        clients[i % n].expect(request, reply);
    }
    for client in clients {
        client.expect(b"mn\r\n", b"MN\r\n");
    }
}

#[test]
fn conversation_one_process() {
    let dir = heap_dir();
    let server = Server::start(&dir.path().join("heap"), &["--threads", "2"]);
    play(&mut [server.client()]);
    let mut client = server.client();
    client.send(b"version\r\n");
    let version = String::from_utf8(client.read_n(b"VERSION 1.6.18-podkv-".len())).unwrap();
    assert_eq!(version, "VERSION 1.6.18-podkv-");
}

#[test]
fn conversation_two_processes_one_heap() {
    let dir = heap_dir();
    let heap = dir.path().join("heap");
    let a = Server::start(&heap, &["--threads", "2"]);
    let b = Server::start(&heap, &["--threads", "1"]);
    assert_ne!(a.addr, b.addr);
    play(&mut [a.client(), b.client()]);
    // And the other way round, on the same (now flushed) store.
    play(&mut [b.client(), a.client()]);
}

#[test]
fn conversation_is_memcacheds() {
    let Some(memcached) = conv::memcached(&[]) else {
        return;
    };
    play(&mut [Client::connect(memcached.addr)]);
}

#[test]
fn memccapable_ascii_suite_passes() {
    let bin = std::path::Path::new("/usr/bin/memccapable");
    if !bin.exists() {
        eprintln!(
            "\n!!! SKIPPING: no memccapable (scripts/setup installs libmemcached-tools) !!!\n"
        );
        return;
    }
    let dir = heap_dir();
    let server = Server::start(&dir.path().join("heap"), &[]);
    let out = std::process::Command::new(bin)
        .args(["-a", "-t", "5", "-h", "127.0.0.1", "-p"])
        .arg(server.addr.port().to_string())
        .output()
        .expect("memccapable runs");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "memccapable failed:\n{text}");
    assert!(text.contains("All tests passed"), "{text}");
    assert!(!text.contains("[FAIL]"), "{text}");
}

#[test]
fn sigterm_and_sigint_stop_cleanly() {
    let dir = heap_dir();
    let heap = dir.path().join("heap");
    for signal in [libc::SIGTERM, libc::SIGINT] {
        let server = Server::start(&heap, &[]);
        server
            .client()
            .expect(b"set k 0 0 1\r\nv\r\n", b"STORED\r\n");
        let mut idle = server.client();
        idle.expect(b"mn\r\n", b"MN\r\n");
        let status = server.signal(signal);
        assert!(status.success(), "exit status {status:?}");
    }
    let out = std::process::Command::new(conv::podkv())
        .args(["store", "check"])
        .arg(&heap)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "store check after clean stops: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn heap_file_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = heap_dir();
    let heap = dir.path().join("heap");
    let _server = Server::start(&heap, &[]);
    let mode = std::fs::metadata(&heap).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode & 0o077, 0, "heap mode {mode:o}");
}

#[test]
fn metrics_are_prometheus_text() {
    let dir = heap_dir();
    let port = conv::free_port();
    let metrics = format!("127.0.0.1:{port}");
    let server = Server::start(&dir.path().join("heap"), &["--metrics", &metrics]);
    let mut c = server.client();
    c.expect(
        b"set k 0 0 1\r\nv\r\nget k nope\r\n",
        b"STORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n",
    );
    let text = http_get(&metrics, "/metrics");
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    for line in [
        "podkv_get_hits 1\n",
        "podkv_get_misses 1\n",
        "podkv_cmd_set 1\n",
        "podkv_curr_connections 1\n",
        "# TYPE podkv_cmd_get counter\n",
        "# TYPE podkv_evictions counter\npodkv_evictions 0\n",
        "podkv_thread_slots_in_use ",
        "podkv_hwcc_bytes ",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    assert!(http_get(&metrics, "/nope").starts_with("HTTP/1.1 404"));
}

fn http_get(addr: &str, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text
}

#[test]
fn stats_report_memcached_fields_and_the_heap() {
    let dir = heap_dir();
    let server = Server::start(
        &dir.path().join("heap"),
        &["--threads", "2", "--max-conns", "77"],
    );
    let mut c = server.client();
    c.expect(b"set k 0 0 1\r\nv\r\n", b"STORED\r\n");
    let stats = String::from_utf8(c.call(b"stats\r\n")).unwrap();
    for field in [
        "pid",
        "uptime",
        "time",
        "version",
        "curr_items",
        "total_items",
        "bytes",
        "get_hits",
        "get_misses",
        "curr_connections",
        "total_connections",
        "cmd_get",
        "cmd_set",
        "limit_maxbytes",
        "threads",
        "podkv_heap_bytes",
        "podkv_hwcc_bytes",
        "podkv_thread_slots_in_use",
        "podkv_limit_small_bytes",
        "podkv_limit_large_bytes",
    ] {
        assert!(
            stats.contains(&format!("STAT {field} ")),
            "no {field} in\n{stats}"
        );
    }
    assert!(stats.contains(&format!("STAT pid {}\r\n", server.pid())));
    assert!(stats.contains("STAT curr_items 1\r\n"), "{stats}");
    assert!(stats.contains("STAT max_connections 77\r\n"));
    assert!(stats.ends_with("END\r\n"));
    let settings = String::from_utf8(c.call(b"stats settings\r\n")).unwrap();
    assert!(settings.contains("STAT maxconns 77\r\n"), "{settings}");
    assert!(settings.contains("STAT item_size_max 1048576\r\n"));
    for group in ["items", "slabs"] {
        let text = String::from_utf8(c.call(format!("stats {group}\r\n").as_bytes())).unwrap();
        assert!(text.ends_with("END\r\n"), "{group}: {text}");
    }
    assert_eq!(c.call(b"stats nonsense\r\n"), b"ERROR\r\n");
    assert_eq!(c.call(b"stats reset\r\n"), b"RESET\r\n");
    let stats = String::from_utf8(c.call(b"stats\r\n")).unwrap();
    assert!(stats.contains("STAT cmd_set 0\r\n"), "{stats}");
}

#[test]
fn reuseport_two_processes_one_address() {
    let dir = heap_dir();
    let heap = dir.path().join("heap");
    let listen = format!("127.0.0.1:{}", conv::free_port());
    let a = Server::start_on(&heap, &listen, &["--reuseport", "--threads", "1"]);
    let b = Server::start_on(&heap, &listen, &["--reuseport", "--threads", "1"]);
    assert_eq!(a.addr, b.addr);
    let mut writer = a.client();
    writer.expect(b"set shared 0 0 5\r\nhello\r\n", b"STORED\r\n");
    let mut pids = std::collections::HashSet::new();
    for _ in 0..64 {
        let mut c = Client::connect(a.addr);
        c.expect(b"get shared\r\n", b"VALUE shared 0 5\r\nhello\r\nEND\r\n");
        let stats = String::from_utf8(c.call(b"stats\r\n")).unwrap();
        let pid = stats
            .lines()
            .find_map(|l| l.strip_prefix("STAT pid "))
            .unwrap()
            .to_owned();
        pids.insert(pid);
    }
    assert_eq!(
        pids.len(),
        2,
        "the kernel spread 64 connections over both processes"
    );
    // Without --reuseport a second process cannot take the address.
    let out = std::process::Command::new(conv::podkv())
        .args(["serve", "--heap"])
        .arg(&heap)
        .args(["--listen", &listen])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot listen on"), "{err}");
    assert_eq!(err.lines().count(), 1, "one clear line: {err}");
}

/// `E` (explicit CAS, a flag of memcached releases after 1.6.18, which refuses it): the item
/// takes the given CAS on `ms`, `md I`, `ma`, and `mg N`; `C` on append and `md` compare it.
#[test]
fn explicit_cas_and_exact_conditions() {
    let dir = heap_dir();
    let server = Server::start(&dir.path().join("heap"), &[]);
    let mut c = server.client();
    c.expect(b"ms e 1 T100 E500 c\r\na\r\n", b"HD c500\r\n");
    c.expect(b"mg e c v\r\n", b"VA 1 c500\r\na\r\n");
    c.expect(b"ms e 1 C400 I T5 E600 c\r\nb\r\n", b"HD c600\r\n");
    c.expect(b"mg e v t c\r\n", b"VA 1 t100 c600 X W\r\nb\r\n");
    c.expect(b"ms e 1 C600 E700 c\r\nc\r\n", b"HD c700\r\n");
    c.expect(b"mg e v c\r\n", b"VA 1 c700\r\nc\r\n");
    c.expect(b"ms e 1 C900 I\r\nd\r\n", b"EX\r\n");
    c.expect(b"md e I E800\r\nmg e c\r\n", b"HD\r\nHD c800 X W\r\n");
    c.expect(b"md e C799\r\nmd e C800 q\r\nmg e\r\n", b"EX\r\nEN\r\n");
    c.expect(b"ma n N0 J5 E900 c v\r\n", b"VA 1 c900\r\n5\r\n");
    c.expect(b"ma n E901 c\r\nma n C900\r\n", b"HD c901\r\nEX\r\n");
    c.expect(b"mg nv N30 E950 c\r\n", b"HD c950 W\r\n");
    c.expect(b"ms s2 1 E1000\r\nx\r\n", b"HD\r\n");
    c.expect(b"ms s2 1 MA C999\r\ny\r\n", b"EX\r\n");
    c.expect(b"ms s2 1 MA C1000 E1001 c\r\ny\r\n", b"HD c1001\r\n");
    c.expect(
        b"ms s2 1 MP C0\r\nw\r\nmg s2 v\r\n",
        b"HD\r\nVA 3\r\nwxy\r\n",
    );
}

/// `W` to exactly one client: eight clients on two processes serving one heap race `mg R`
/// on a key whose TTL is under the threshold; one wins, the rest see `Z`. Then `md I` hands
/// the token out again, once.
#[test]
fn one_recache_winner_across_processes() {
    let dir = heap_dir();
    let heap = dir.path().join("heap");
    let servers = [
        Server::start(&heap, &["--threads", "2"]),
        Server::start(&heap, &["--threads", "2"]),
    ];
    let race = |request: &'static [u8]| -> (usize, usize) {
        let start = std::sync::Arc::new(std::sync::Barrier::new(8));
        let racers: Vec<_> = (0..8)
            .map(|i| {
                let mut client = servers[i % 2].client();
                let start = start.clone();
                std::thread::spawn(move || {
                    start.wait();
                    String::from_utf8(client.call(request)).unwrap()
                })
            })
            .collect();
        let replies: Vec<String> = racers.into_iter().map(|r| r.join().unwrap()).collect();
        let count = |flag: &str| replies.iter().filter(|r| r.contains(flag)).count();
        (count(" W\r\n"), count(" Z"))
    };
    let mut setter = servers[0].client();
    for round in 0..20 {
        setter.expect(b"set hot 0 100 1\r\nv\r\n", b"STORED\r\n");
        assert_eq!(race(b"mg hot R200\r\n"), (1, 7), "round {round}");
        setter.expect(b"md hot I\r\n", b"HD\r\n");
        assert_eq!(race(b"mg hot\r\n"), (1, 7), "round {round}: stale");
    }
}
