//! Shared by the `serve*` integration tests: real `podkv serve` processes on a heap in a
//! temporary directory, a real memcached on a free port, and a blocking client that reads
//! exact replies.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a reply may take before a test fails.
pub const SECONDS_REPLY: u64 = 10;

/// A directory for heap files: under /dev/shm when it exists (the heap's home), else temp.
pub fn heap_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::Builder::new()
            .prefix("podkv-serve-test")
            .tempdir_in(shm)
            .expect("temp dir in /dev/shm")
    } else {
        tempfile::tempdir().expect("temp dir")
    }
}

/// The `podkv` binary under test.
pub fn podkv() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_podkv"))
}

/// One `podkv serve` process; SIGKILLed on drop unless stopped.
pub struct Server {
    child: Option<Child>,
    /// The address it listens on.
    pub addr: SocketAddr,
    log: Arc<Mutex<String>>,
}

/// Creates `heap` in the coherence mode `PODKV_TEST_COHERENCE` names (`limited`, `mcas`,
/// `mcas-nmp`; unset or `hardware`: `podkv serve` creates it with its defaults), unless it
/// exists: so the conversations run in every mode, and under the model of non-coherent
/// caches with `PODKV_COHERENCE_MODEL=1` and a `podkv` built with `--features
/// coherence-model`.
pub fn create_in_test_mode(heap: &Path) {
    let flags: &[&str] = match std::env::var("PODKV_TEST_COHERENCE").as_deref() {
        Ok("limited") => &["--coherence", "limited"],
        Ok("mcas") => &["--coherence", "mcas", "--mcas-impl", "flush-cas"],
        Ok("mcas-nmp") => &["--coherence", "mcas", "--mcas-impl", "nmp"],
        _ => return,
    };
    if heap.exists() {
        return;
    }
    let out = Command::new(podkv())
        .args(["heap", "create"])
        .arg(heap)
        .args(flags)
        .output()
        .expect("podkv heap create runs");
    assert!(
        out.status.success(),
        "podkv heap create {flags:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `--io MODE` when `PODKV_TEST_IO` names one and `args` do not, so that the conversations
/// run over both kinds of workers (`scripts/test` runs them again with `epoll`).
fn io_in_test_mode(args: &[&str]) -> Vec<String> {
    match std::env::var("PODKV_TEST_IO") {
        Ok(io) if !io.is_empty() && !args.contains(&"--io") => vec!["--io".into(), io],
        _ => Vec::new(),
    }
}

impl Server {
    /// Starts `podkv serve --heap HEAP --listen 127.0.0.1:0 ARGS…` and waits for its ready line.
    pub fn start(heap: &Path, args: &[&str]) -> Server {
        Server::start_on(heap, "127.0.0.1:0", args)
    }

    /// Starts a server on `listen`.
    pub fn start_on(heap: &Path, listen: &str, args: &[&str]) -> Server {
        create_in_test_mode(heap);
        let child = Command::new(podkv())
            .arg("serve")
            .arg("--heap")
            .arg(heap)
            .args(["--listen", listen])
            .args(args)
            .args(io_in_test_mode(args))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("podkv serve starts");
        let log = Arc::new(Mutex::new(String::new()));
        // Killed on drop if it never gets ready.
        let mut server = Server {
            child: Some(child),
            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
            log: log.clone(),
        };
        let stderr = server.child.as_mut().and_then(|c| c.stderr.take());
        let mut stderr = BufReader::new(stderr.expect("stderr"));
        let mut line = String::new();
        loop {
            line.clear();
            let n = stderr.read_line(&mut line).expect("read stderr");
            assert!(
                n > 0,
                "podkv serve exited before it was ready: {}",
                log.lock().unwrap()
            );
            log.lock().unwrap().push_str(&line);
            if let Some(rest) = line.strip_prefix("podkv serve: listening on ") {
                let addr = rest.split_whitespace().next().expect("address");
                let addr: SocketAddr = addr.parse().expect("a socket address");
                let sink = log.clone();
                std::thread::spawn(move || {
                    let mut rest = String::new();
                    let _ = stderr.read_to_string(&mut rest);
                    sink.lock().unwrap().push_str(&rest);
                });
                server.addr = addr;
                return server;
            }
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// What it wrote on stderr so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// A new client connection.
    pub fn client(&self) -> Client {
        Client::connect(self.addr)
    }

    /// Sends `signal` and waits for the exit.
    pub fn signal(mut self, signal: i32) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        unsafe { libc::kill(child.id() as i32, signal) };
        child.wait().expect("wait")
    }

    /// SIGTERM, then the exit status (a clean stop exits 0).
    pub fn stop(self) -> ExitStatus {
        self.signal(libc::SIGTERM)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A blocking memcached client that reads exact replies.
pub struct Client {
    /// The connection.
    pub stream: TcpStream,
}

impl Client {
    /// Connects to `addr`.
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(SECONDS_REPLY)))
            .unwrap();
        stream.set_nodelay(true).unwrap();
        Client { stream }
    }

    /// Writes `bytes`.
    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }

    /// Reads exactly `n` bytes (fewer if the server closes first).
    pub fn read_n(&mut self, n: usize) -> Vec<u8> {
        let mut out = vec![0u8; n];
        let mut got = 0;
        while got < n {
            match self.stream.read(&mut out[got..]) {
                Ok(0) => break,
                Ok(k) => got += k,
                Err(e) => panic!("read after {got} of {n} bytes: {e}"),
            }
        }
        out.truncate(got);
        out
    }

    /// Sends `request` and checks that the reply is exactly `expected`.
    pub fn expect(&mut self, request: &[u8], expected: &[u8]) {
        self.send(request);
        let got = self.read_n(expected.len());
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(expected),
            "request {:?}",
            String::from_utf8_lossy(request)
        );
    }

    /// Sends `request` then `mn`, and returns everything before the `MN` that answers it
    /// (requests whose replies may contain `MN\r\n` must not use this).
    pub fn call(&mut self, request: &[u8]) -> Vec<u8> {
        self.send(request);
        self.send(b"mn\r\n");
        let mut out = Vec::new();
        let mut chunk = [0u8; 16 * 1024];
        while !out.ends_with(b"MN\r\n") {
            match self.stream.read(&mut chunk) {
                Ok(0) => panic!(
                    "closed while waiting for MN; got {:?}",
                    String::from_utf8_lossy(&out)
                ),
                Ok(k) => out.extend_from_slice(&chunk[..k]),
                Err(e) => panic!("read: {e}; got {:?}", String::from_utf8_lossy(&out)),
            }
        }
        out.truncate(out.len() - 4);
        out
    }

    /// Whether the server closes the connection within `within` without sending anything.
    pub fn closes_silently(&mut self, within: Duration) -> bool {
        self.stream.set_read_timeout(Some(within)).unwrap();
        let mut byte = [0u8; 1];
        let closed = matches!(self.stream.read(&mut byte), Ok(0));
        self.stream
            .set_read_timeout(Some(Duration::from_secs(SECONDS_REPLY)))
            .unwrap();
        closed
    }
}

/// A real memcached child on a free port, killed on drop.
pub struct Memcached {
    child: Child,
    /// Its address.
    pub addr: SocketAddr,
}

impl Drop for Memcached {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The memcached binary, if installed.
pub fn memcached_binary() -> Option<PathBuf> {
    ["/usr/bin/memcached", "/usr/local/bin/memcached"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// Starts `memcached -p PORT -U 0 -t 2 ARGS…` on 127.0.0.1, or `None` (said loudly) when it
/// is not installed.
pub fn memcached(args: &[&str]) -> Option<Memcached> {
    let Some(bin) = memcached_binary() else {
        eprintln!("\n!!! SKIPPING: no memcached binary (scripts/setup installs it) !!!\n");
        return None;
    };
    let root = std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false);
    for _ in 0..10 {
        let port = free_port();
        let mut child = Command::new(&bin)
            .args([
                "-l",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-U",
                "0",
                "-t",
                "2",
            ])
            .args(if root { &["-u", "root"][..] } else { &[][..] })
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("memcached starts");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if child.try_wait().unwrap().is_some() {
                break; // the port was taken after all (tests run in parallel): another port
            }
            if is_memcached(addr) {
                return Some(Memcached { child, addr });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("memcached did not start");
}

/// Whether a real memcached answers at `addr` (not, say, a podkv another test started on a
/// port that was free a moment ago).
fn is_memcached(addr: SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let mut reply = [0u8; 64];
    let n = s
        .write_all(b"version\r\n")
        .and_then(|()| s.read(&mut reply))
        .unwrap_or(0);
    let reply = String::from_utf8_lossy(&reply[..n]);
    reply.starts_with("VERSION ") && !reply.contains("podkv")
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// The general `stats` of the server `client` talks to, as a map of its numeric fields.
pub fn stats(client: &mut Client) -> std::collections::HashMap<String, u64> {
    let reply = String::from_utf8(client.call(b"stats\r\n")).unwrap();
    reply
        .lines()
        .filter_map(|line| {
            let mut words = line.split(' ').skip(1);
            let (name, value) = (words.next()?, words.next()?);
            Some((name.to_owned(), value.parse().ok()?))
        })
        .collect()
}
