//! `podkv serve --io uring|epoll`: both kinds of workers keep a pipelining client's replies in
//! order, keep serving others while one client sends and does not read, report which kind
//! runs, and `--io uring` where the kernel refuses io_uring fails in one line.

mod conv;

use conv::{heap_dir, Server};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

/// The kinds of workers this machine runs: `epoll` always, `uring` where the kernel allows
/// it (else `--io uring` must refuse, see `io_uring_is_used_or_refused_in_one_line`).
fn modes() -> Vec<&'static str> {
    if uring_allowed() {
        vec!["uring", "epoll"]
    } else {
        vec!["epoll"]
    }
}

/// Whether io_uring is allowed to this process (`kernel.io_uring_disabled`, where the kernel
/// has it; a seccomp filter shows as `podkv serve --io uring` refusing).
fn uring_allowed() -> bool {
    let disabled = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .map(|s| s.trim() != "0")
        .unwrap_or(false);
    !disabled
}

/// A server with `io` workers (and `more` arguments) on a heap in a fresh directory, which
/// lives as long as the server is used.
fn serve(io: &str, more: &[&str]) -> (tempfile::TempDir, Server) {
    let dir = heap_dir();
    let args: Vec<&str> = ["--io", io].iter().chain(more).copied().collect();
    let server = Server::start(&dir.path().join("heap"), &args);
    (dir, server)
}

/// A value of `len` bytes that names its key, so that a reply in the wrong order shows.
fn value(key: usize, len: usize) -> Vec<u8> {
    let tag = format!("<{key}>");
    tag.bytes().cycle().take(len).collect()
}

#[test]
fn pipelined_replies_keep_their_order() {
    for io in modes() {
        let (_dir, server) = serve(io, &[]);
        let mut client = server.client();
        let keys = 40;
        let mut request = Vec::new();
        let mut expected = Vec::new();
        for key in 0..keys {
            // Large values, so that replies outgrow a send and queue behind one another.
            let value = value(key, 60_000 + key * 1000);
            request.extend_from_slice(format!("set k{key} 0 0 {}\r\n", value.len()).as_bytes());
            request.extend_from_slice(&value);
            request.extend_from_slice(b"\r\n");
            expected.extend_from_slice(b"STORED\r\n");
        }
        for round in 0..3 {
            for key in (0..keys).rev() {
                let k = (key + round) % keys;
                let value = value(k, 60_000 + k * 1000);
                request.extend_from_slice(format!("get k{k}\r\n").as_bytes());
                expected.extend_from_slice(format!("VALUE k{k} 0 {}\r\n", value.len()).as_bytes());
                expected.extend_from_slice(&value);
                expected.extend_from_slice(b"\r\nEND\r\n");
            }
        }
        // Sent from a thread: the replies fill the socket long before the requests are all out.
        let mut writer = client.stream.try_clone().unwrap();
        let sending = std::thread::spawn(move || writer.write_all(&request).unwrap());
        let got = client.read_n(expected.len());
        sending.join().unwrap();
        assert!(
            got == expected,
            "--io {io}: the replies came out of order or changed"
        );
        client.expect(b"mn\r\n", b"MN\r\n");
    }
}

#[test]
fn a_client_that_does_not_read_holds_up_no_one_else() {
    for io in modes() {
        // One worker: the stalled client and the others share it.
        let (_dir, server) = serve(io, &["--threads", "1"]);
        let mut other = server.client();
        let big = value(7, 500_000);
        let mut set = format!("set big 0 0 {}\r\n", big.len()).into_bytes();
        set.extend_from_slice(&big);
        set.extend_from_slice(b"\r\n");
        other.expect(&set, b"STORED\r\n");
        // 100 MB of replies asked for, one request at a time, none read: the server must
        // stop reading this client rather than hold its replies.
        let before = rss_anon(server.pid());
        let mut stalled = TcpStream::connect(server.addr).unwrap();
        let mut writer = stalled.try_clone().unwrap();
        let sending = std::thread::spawn(move || {
            // Half in one write (one read's worth of requests: the server answers a batch at
            // a time), half one by one (read while the replies wait: its reads pause).
            writer.write_all(&b"get big\r\n".repeat(100)).unwrap();
            for _ in 0..100 {
                writer.write_all(b"get big\r\n").unwrap();
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        std::thread::sleep(Duration::from_millis(800));
        let grown = rss_anon(server.pid()).saturating_sub(before);
        assert!(
            grown < 40 << 20,
            "--io {io}: the server holds {grown} bytes more for a client that does not read"
        );
        for i in 0..50 {
            other.expect(format!("set s{i} 0 0 1\r\nx\r\n").as_bytes(), b"STORED\r\n");
            let reply = format!("VALUE s{i} 0 1\r\nx\r\nEND\r\n");
            other.expect(format!("get s{i}\r\n").as_bytes(), reply.as_bytes());
        }
        // The stalled client then reads every reply, whole and in order.
        let one = {
            let mut r = format!("VALUE big 0 {}\r\n", big.len()).into_bytes();
            r.extend_from_slice(&big);
            r.extend_from_slice(b"\r\nEND\r\n");
            r
        };
        stalled
            .set_read_timeout(Some(Duration::from_secs(conv::SECONDS_REPLY)))
            .unwrap();
        let mut got = vec![0; one.len()];
        for n in 0..200 {
            stalled.read_exact(&mut got).unwrap();
            assert!(
                got == one,
                "--io {io}: reply {n} to the stalled client is wrong"
            );
        }
        sending.join().unwrap();
        other.expect(b"mn\r\n", b"MN\r\n");
    }
}

/// The anonymous memory `pid` holds (`RssAnon`), in bytes.
fn rss_anon(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("RssAnon:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib << 10
}

#[test]
fn io_uring_is_used_or_refused_in_one_line() {
    let dir = heap_dir();
    let heap = dir.path().join("heap");
    for io in modes() {
        let server = Server::start(&heap, &["--io", io]);
        let mut client = server.client();
        let settings = client.call(b"stats settings\r\n");
        let settings = String::from_utf8_lossy(&settings);
        assert!(
            settings.contains(&format!("STAT podkv_io {io}\r\n")),
            "--io {io}: {settings}"
        );
        server.stop();
    }
    // `auto`, the default, serves with io_uring wherever the kernel allows it.
    let server = Server::start(&heap, &[]);
    let settings = server.client().call(b"stats settings\r\n");
    let want = if uring_allowed() { "uring" } else { "epoll" };
    assert!(String::from_utf8_lossy(&settings).contains(&format!("STAT podkv_io {want}\r\n")));
    server.stop();
    if !uring_allowed() {
        let out = Command::new(conv::podkv())
            .args([
                "serve",
                "--io",
                "uring",
                "--listen",
                "127.0.0.1:0",
                "--heap",
            ])
            .arg(&heap)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains("--io epoll"), "{err}");
    }
}

#[test]
fn stop_with_connections_open_and_replies_pending() {
    for io in modes() {
        let (_dir, server) = serve(io, &[]);
        let mut idle = server.client();
        idle.expect(b"set a 0 0 1\r\nx\r\n", b"STORED\r\n");
        // Its replies fill the socket unread, so the server has sends pending when told to stop.
        let mut busy = server.client().stream;
        std::thread::spawn(move || {
            let _ = busy.write_all(&b"get a\r\n".repeat(100_000));
        });
        std::thread::sleep(Duration::from_millis(300));
        let status = server.stop();
        assert!(status.success(), "--io {io}: {status:?}");
    }
}
