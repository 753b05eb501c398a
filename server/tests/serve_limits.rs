//! `podkv serve` at its limits, each answered as memcached answers it: over-long lines,
//! over-size values, over-long keys, HTTP probes, garbage, input split into single bytes,
//! too many connections, idle connections, and thousands of connections at once.
//!
//! Where memcached is installed the same inputs go to it too and the transcripts (reply bytes,
//! and whether the connection closed) must be identical.

mod conv;

use conv::{heap_dir, Client, Server};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// What a server did with one input: its reply bytes, and whether it closed the connection.
#[derive(Debug, PartialEq, Eq)]
struct Transcript {
    reply: String,
    closed: bool,
}

/// Sends `input` (then `mn\r\n`) on a fresh connection; reads until `MN\r\n` or end of stream.
fn transcript(addr: SocketAddr, input: &[u8]) -> Transcript {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(conv::SECONDS_REPLY)))
        .unwrap();
    // A server that closes early may reset the rest of the write; that is part of the answer.
    // Input that does not end a line is sent alone (an `mn` would finish its line).
    let _ = s.write_all(input);
    if input.ends_with(b"\r\n") {
        let _ = s.write_all(b"mn\r\n");
    }
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    let closed = loop {
        if out.ends_with(b"MN\r\n") {
            break false;
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break true,
            Ok(n) => out.extend_from_slice(&chunk[..n]),
        }
    };
    Transcript {
        reply: String::from_utf8_lossy(&out).into_owned(),
        closed,
    }
}

/// The inputs and what memcached 1.6 answers to each.
fn cases() -> Vec<(&'static str, Vec<u8>, Transcript)> {
    let answer = |reply: &str, closed| Transcript {
        reply: reply.to_owned(),
        closed,
    };
    let mut long_get = b"get".to_vec();
    for n in 0..600 {
        long_get.extend_from_slice(format!(" key{n:06}").as_bytes());
    }
    long_get.extend_from_slice(b"\r\n");
    let mut big = b"set big 0 0 2000000\r\n".to_vec();
    big.extend(std::iter::repeat_n(b'v', 2_000_000));
    big.extend_from_slice(b"\r\nget big\r\n");
    let mut big_noreply = b"set big 0 0 1048577 noreply\r\n".to_vec();
    big_noreply.extend(std::iter::repeat_n(b'\n', 1_048_577));
    big_noreply.extend_from_slice(b"\r\n");
    let mut long_key = b"set ".to_vec();
    long_key.extend(std::iter::repeat_n(b'k', 251));
    long_key.extend_from_slice(b" 0 0 1\r\nx\r\n");
    vec![
        (
            "3000 bytes, no newline",
            vec![b'x'; 3000],
            answer("", true),
        ),
        (
            "3000 bytes with a newline",
            [vec![b'x'; 3000], b"\r\n".to_vec()].concat(),
            answer("ERROR\r\nMN\r\n", false),
        ),
        ("a 5000-byte multiget", long_get, answer("END\r\nMN\r\n", false)),
        (
            "a 2 MB value",
            big,
            answer(
                "SERVER_ERROR object too large for cache\r\nEND\r\nMN\r\n",
                false,
            ),
        ),
        ("a 1 MiB + 1 value, noreply", big_noreply, answer("MN\r\n", false)),
        (
            "a 251-byte key",
            long_key,
            answer("CLIENT_ERROR bad command line format\r\nERROR\r\nMN\r\n", false),
        ),
        ("an HTTP probe", b"GET / HTTP/1.1\r\n".to_vec(), answer("", true)),
        (
            "garbage",
            b"\x00\x01\x02 set\t\x7f\r\nget\r\nincr\r\ngets \r\n  \r\ncas k 0 0\r\n".to_vec(),
            answer(
                "ERROR\r\nERROR\r\nERROR\r\nERROR\r\nERROR\r\nERROR\r\nMN\r\n",
                false,
            ),
        ),
        (
            "bad numbers",
            b"set k 0 0 -1\r\nset k abc 0 1\r\nincr k -1\r\ntouch k x\r\nset k 0 0 1 2 3 4\r\n"
                .to_vec(),
            answer(
                "CLIENT_ERROR bad command line format\r\nCLIENT_ERROR bad command line format\r\n\
                 CLIENT_ERROR invalid numeric delta argument\r\nCLIENT_ERROR invalid exptime argument\r\n\
                 ERROR\r\nMN\r\n",
                false,
            ),
        ),
        ("quit", b"quit\r\nget k\r\n".to_vec(), answer("", true)),
    ]
}

#[test]
fn edge_inputs_answered_as_memcached_answers_them() {
    let dir = heap_dir();
    let server = Server::start(&dir.path().join("heap"), &[]);
    let memcached = conv::memcached(&[]);
    for (name, input, expected) in cases() {
        let got = transcript(server.addr, &input);
        assert_eq!(got, expected, "podkv, {name}");
        if let Some(m) = &memcached {
            assert_eq!(transcript(m.addr, &input), expected, "memcached, {name}");
        }
    }
}

#[test]
fn input_split_into_single_bytes() {
    let dir = heap_dir();
    let server = Server::start(&dir.path().join("heap"), &[]);
    let mut c = server.client();
    let input = b"set k 1 0 5\r\nab\r\nc\r\nget k\r\nmn\r\n";
    for byte in input {
        c.send(&[*byte]);
        std::thread::sleep(Duration::from_millis(2));
    }
    let expected = b"STORED\r\nVALUE k 1 5\r\nab\r\nc\r\nEND\r\nMN\r\n";
    assert_eq!(
        String::from_utf8_lossy(&c.read_n(expected.len())),
        String::from_utf8_lossy(expected)
    );
}

#[test]
fn one_connection_too_many_is_refused_like_memcached() {
    let dir = heap_dir();
    let server = Server::start(&dir.path().join("heap"), &["--max-conns", "3"]);
    let mut open: Vec<Client> = (0..3).map(|_| server.client()).collect();
    for c in &mut open {
        c.expect(b"mn\r\n", b"MN\r\n");
    }
    let mut extra = server.client();
    let refused = extra.read_n(64);
    assert_eq!(
        String::from_utf8_lossy(&refused),
        "ERROR Too many open connections\r\n",
        "then closed"
    );
    // A slot frees when a client leaves.
    drop(open.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut c = server.client();
        c.send(b"mn\r\n");
        let reply = c.read_n(4);
        if reply == b"MN\r\n" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no connection admitted after one left"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let stats = String::from_utf8(open[0].call(b"stats\r\n")).unwrap();
    assert!(stats.contains("STAT rejected_connections "), "{stats}");
    assert!(
        !stats.contains("STAT rejected_connections 0\r\n"),
        "{stats}"
    );
}

#[test]
fn idle_connections_are_closed_after_the_timeout() {
    let dir = heap_dir();
    let server = Server::start(&dir.path().join("heap"), &["--idle-timeout", "1"]);
    let mut idle = server.client();
    idle.expect(b"mn\r\n", b"MN\r\n");
    let mut busy = server.client();
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(1500) {
        busy.expect(b"mn\r\n", b"MN\r\n");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        idle.closes_silently(Duration::from_secs(3)),
        "idle connection closed"
    );
    busy.expect(b"mn\r\n", b"MN\r\n");
    let stats = String::from_utf8(busy.call(b"stats\r\n")).unwrap();
    assert!(stats.contains("STAT idle_kicks 1\r\n"), "{stats}");
}

#[test]
fn thousands_of_connections() {
    const COUNT: usize = 3000;
    let dir = heap_dir();
    let server = Server::start(&dir.path().join("heap"), &["--max-conns", "4000"]);
    let mut clients: Vec<TcpStream> = (0..COUNT)
        .map(|_| TcpStream::connect(server.addr).unwrap())
        .collect();
    for (i, c) in clients.iter_mut().enumerate() {
        write!(c, "set key{i} 0 0 {}\r\n{i}\r\n", i.to_string().len()).unwrap();
    }
    for c in &mut clients {
        c.set_read_timeout(Some(Duration::from_secs(conv::SECONDS_REPLY)))
            .unwrap();
        let mut reply = [0u8; 8];
        c.read_exact(&mut reply).unwrap();
        assert_eq!(&reply, b"STORED\r\n");
    }
    let mut probe = Client {
        stream: clients.pop().unwrap(),
    };
    let stats = String::from_utf8(probe.call(b"stats\r\n")).unwrap();
    assert!(
        stats.contains(&format!("STAT curr_connections {COUNT}\r\n")),
        "{stats}"
    );
    for (i, c) in clients.iter_mut().enumerate().step_by(7) {
        let key = format!("key{}", (i * 13) % COUNT);
        write!(c, "get {key}\r\n").unwrap();
        let value = ((i * 13) % COUNT).to_string();
        let expected = format!("VALUE {key} 0 {}\r\n{value}\r\nEND\r\n", value.len());
        let mut reply = vec![0u8; expected.len()];
        c.read_exact(&mut reply).unwrap();
        assert_eq!(String::from_utf8_lossy(&reply), expected);
    }
}
