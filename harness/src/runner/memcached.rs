//! A small memcached text-protocol client: one TCP connection per server, keys spread over
//! the servers by hash, requests pipelined (written in one go, replies read in order).
//!
//! It speaks the classic text commands (`get`, `gets`, `set`, `add`, `replace`, `cas`,
//! `append`, `prepend`, `delete`, `incr`, `decr`), so it drives real memcached, the podkv
//! server, or a proxy. Server of a key: `⌊key_hash(key) · S / 2⁶⁴⌋` (as the trace
//! partitioner splits workers). A pipeline must fit in the socket buffers of both sides
//! (keep it to a few hundred small requests): requests are all written before any reply
//! is read.

use super::targets::{Outcome, ServerTally, Session, Target};
use anyhow::Context;
use podkv_traces::{key_hash, Command};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One request of a pipeline.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// What to do (TTLs and deltas inside).
    pub command: Command,
    /// The key.
    pub key: &'a [u8],
    /// Bytes stored (storage commands only).
    pub value: &'a [u8],
    /// The token of a `cas`.
    pub cas: u64,
}

impl<'a> Request<'a> {
    /// A request without value or token.
    pub fn new(command: Command, key: &'a [u8]) -> Self {
        Self {
            command,
            key,
            value: &[],
            cas: 0,
        }
    }

    /// A storage request.
    pub fn store(command: Command, key: &'a [u8], value: &'a [u8]) -> Self {
        Self {
            command,
            key,
            value,
            cas: 0,
        }
    }
}

/// A server's reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `VALUE …` then `END`: the item (`cas` for `gets`).
    Value {
        /// Client flags.
        flags: u32,
        /// The bytes.
        data: Vec<u8>,
        /// The CAS token (`gets` only).
        cas: Option<u64>,
    },
    /// `END` alone: a read miss.
    Miss,
    /// `STORED`.
    Stored,
    /// `NOT_STORED`.
    NotStored,
    /// `EXISTS` (a `cas` whose token is stale).
    Exists,
    /// `NOT_FOUND`.
    NotFound,
    /// `DELETED`.
    Deleted,
    /// The new value of `incr`/`decr`.
    Number(u64),
    /// `ERROR`, `CLIENT_ERROR …`, `SERVER_ERROR …` (e.g. `incr` of a non-number).
    Error(String),
}

impl Reply {
    /// Whether the request hit (found, stored, deleted, counted).
    pub fn is_hit(&self) -> bool {
        matches!(
            self,
            Reply::Value { .. } | Reply::Stored | Reply::Deleted | Reply::Number(_)
        )
    }
}

struct Connection {
    reader: BufReader<TcpStream>,
    out: Vec<u8>,
}

impl Connection {
    /// Connects to `server` (`HOST:PORT`); with a `timeout`, connecting, reading and writing
    /// each give up after it.
    fn open(server: &str, timeout: Option<Duration>) -> anyhow::Result<Self> {
        let cannot = || format!("cannot connect to memcached at {server}");
        let stream = match timeout {
            None => TcpStream::connect(server).with_context(cannot)?,
            Some(t) => {
                let addr = server
                    .to_socket_addrs()
                    .with_context(cannot)?
                    .next()
                    .with_context(cannot)?;
                let stream = TcpStream::connect_timeout(&addr, t).with_context(cannot)?;
                stream.set_read_timeout(Some(t))?;
                stream.set_write_timeout(Some(t))?;
                stream
            }
        };
        stream.set_nodelay(true)?;
        Ok(Connection {
            reader: BufReader::with_capacity(64 * 1024, stream),
            out: Vec::with_capacity(4096),
        })
    }

    /// Sends one composed request (in `out`) and reads its reply.
    fn exchange(&mut self, line: &mut Vec<u8>, r: &Request<'_>) -> anyhow::Result<Reply> {
        self.reader.get_mut().write_all(&self.out)?;
        self.out.clear();
        read_reply(&mut self.reader, line, r)
    }
}

/// The server (index among `count`) that holds `key`.
fn server_of(key: &[u8], count: usize) -> usize {
    ((u128::from(key_hash(key)) * count as u128) >> 64) as usize
}

/// A client of one or more memcached servers.
pub struct Client {
    connections: Vec<Connection>,
    line: Vec<u8>,
}

impl Client {
    /// Connects to every server (`HOST:PORT`).
    pub fn connect(servers: &[String]) -> anyhow::Result<Self> {
        anyhow::ensure!(!servers.is_empty(), "no memcached server given");
        let connections = servers
            .iter()
            .map(|s| Connection::open(s, None))
            .collect::<anyhow::Result<_>>()?;
        Ok(Self {
            connections,
            line: Vec::new(),
        })
    }

    /// The server (index) that holds `key`.
    pub fn server_of(&self, key: &[u8]) -> usize {
        server_of(key, self.connections.len())
    }

    /// Sends every request, then reads every reply, in order.
    pub fn pipeline(&mut self, requests: &[Request<'_>]) -> anyhow::Result<Vec<Reply>> {
        let servers: Vec<usize> = requests.iter().map(|r| self.server_of(r.key)).collect();
        for (r, &s) in requests.iter().zip(&servers) {
            compose(&mut self.connections[s].out, r)?;
        }
        for c in &mut self.connections {
            if !c.out.is_empty() {
                c.reader.get_mut().write_all(&c.out)?;
                c.out.clear();
            }
        }
        requests
            .iter()
            .zip(&servers)
            .map(|(r, &s)| read_reply(&mut self.connections[s].reader, &mut self.line, r))
            .collect()
    }

    /// One request.
    pub fn request(&mut self, request: Request<'_>) -> anyhow::Result<Reply> {
        let s = self.server_of(request.key);
        let c = &mut self.connections[s];
        compose(&mut c.out, &request)?;
        c.exchange(&mut self.line, &request)
    }
}

/// Writes one request in the text protocol.
fn compose(out: &mut Vec<u8>, r: &Request<'_>) -> anyhow::Result<()> {
    anyhow::ensure!(
        !r.key.is_empty() && r.key.len() <= 250 && r.key.iter().all(|&b| b > b' ' && b != 127),
        "key {:?} cannot be sent in the memcached text protocol",
        String::from_utf8_lossy(r.key)
    );
    let storage = |out: &mut Vec<u8>, verb: &[u8], ttl: u32| {
        out.extend_from_slice(verb);
        out.push(b' ');
        out.extend_from_slice(r.key);
        write!(out, " 0 {ttl} {}", r.value.len())
    };
    match r.command {
        Command::Get | Command::Gets => {
            out.extend_from_slice(if r.command == Command::Get {
                b"get "
            } else {
                b"gets "
            });
            out.extend_from_slice(r.key);
        }
        Command::Set { ttl } => storage(out, b"set", ttl)?,
        Command::Add { ttl } => storage(out, b"add", ttl)?,
        Command::Replace { ttl } => storage(out, b"replace", ttl)?,
        Command::Append { ttl } => storage(out, b"append", ttl)?,
        Command::Prepend { ttl } => storage(out, b"prepend", ttl)?,
        Command::Cas { ttl } => {
            storage(out, b"cas", ttl)?;
            write!(out, " {}", r.cas)?;
        }
        Command::Delete => {
            out.extend_from_slice(b"delete ");
            out.extend_from_slice(r.key);
        }
        Command::Incr { delta } | Command::Decr { delta } => {
            let verb: &[u8] = if matches!(r.command, Command::Incr { .. }) {
                b"incr "
            } else {
                b"decr "
            };
            out.extend_from_slice(verb);
            out.extend_from_slice(r.key);
            write!(out, " {delta}")?;
        }
    }
    out.extend_from_slice(b"\r\n");
    if r.command.op().stores_value() {
        out.extend_from_slice(r.value);
        out.extend_from_slice(b"\r\n");
    }
    Ok(())
}

fn read_line<'l>(
    reader: &mut BufReader<TcpStream>,
    line: &'l mut Vec<u8>,
) -> anyhow::Result<&'l [u8]> {
    line.clear();
    let n = reader.read_until(b'\n', line)?;
    anyhow::ensure!(n > 0, "memcached closed the connection");
    anyhow::ensure!(
        line.ends_with(b"\r\n"),
        "memcached sent a line without CRLF"
    );
    Ok(&line[..line.len() - 2])
}

/// Reads the reply to `r`.
fn read_reply(
    reader: &mut BufReader<TcpStream>,
    line: &mut Vec<u8>,
    r: &Request<'_>,
) -> anyhow::Result<Reply> {
    let text = read_line(reader, line)?;
    let bad = || {
        anyhow::anyhow!(
            "unexpected reply from memcached: {:?}",
            String::from_utf8_lossy(text)
        )
    };
    Ok(match text {
        b"END" => Reply::Miss,
        b"STORED" => Reply::Stored,
        b"NOT_STORED" => Reply::NotStored,
        b"EXISTS" => Reply::Exists,
        b"NOT_FOUND" => Reply::NotFound,
        b"DELETED" => Reply::Deleted,
        t if t.starts_with(b"VALUE ") => {
            let fields: Vec<&str> = std::str::from_utf8(t)?.split(' ').collect();
            let (flags, len) = match fields.get(2..4) {
                Some([f, n]) => (f.parse()?, n.parse::<usize>()?),
                _ => return Err(bad()),
            };
            let cas = fields.get(4).map(|c| c.parse()).transpose()?;
            let mut data = vec![0; len + 2];
            std::io::Read::read_exact(reader, &mut data)?;
            data.truncate(len);
            anyhow::ensure!(read_line(reader, line)? == b"END", "VALUE without END");
            Reply::Value { flags, data, cas }
        }
        t if t.starts_with(b"ERROR")
            || t.starts_with(b"CLIENT_ERROR")
            || t.starts_with(b"SERVER_ERROR") =>
        {
            Reply::Error(String::from_utf8_lossy(t).into_owned())
        }
        t if matches!(r.command, Command::Incr { .. } | Command::Decr { .. }) => {
            Reply::Number(std::str::from_utf8(t)?.trim().parse().map_err(|_| bad())?)
        }
        _ => return Err(bad()),
    })
}

/// `--target memcached://…`: one client (connection per server) per worker thread.
pub struct MemcachedTarget {
    servers: Vec<String>,
    /// `?timeout_ms=`: count failures per server instead of ending the run.
    timeout: Option<Duration>,
    /// Requests and errors per server, summed over the sessions (tolerant targets only).
    counts: Arc<[Counts]>,
}

/// One server's requests and errors, counted by every session of a tolerant target.
#[derive(Default)]
struct Counts {
    requests: AtomicU64,
    errors: AtomicU64,
}

impl MemcachedTarget {
    /// A target over `servers`: the first failure ends the run, or, with a `timeout`, each is
    /// counted against its server (see the module docs).
    pub fn new(servers: Vec<String>, timeout: Option<Duration>) -> Self {
        let counts = servers.iter().map(|_| Counts::default()).collect();
        Self {
            servers,
            timeout,
            counts,
        }
    }
}

/// A worker's client, remembering its `gets` tokens for `cas`.
pub struct MemcachedSession {
    link: Link,
    tokens: HashMap<Box<[u8]>, u64>,
}

/// How a session reaches the servers.
enum Link {
    /// Every server connected up front; the first failure is the run's.
    Strict(Client),
    /// Each server on its own: failures counted, the server retried after the timeout.
    Tolerant(Tolerant),
}

/// A tolerant session's servers (see the module docs).
struct Tolerant {
    servers: Vec<String>,
    /// Each server's connection, `None` while down.
    connections: Vec<Option<Connection>>,
    /// When each down server is tried again.
    retry_at: Vec<Instant>,
    timeout: Duration,
    counts: Arc<[Counts]>,
    out: Vec<u8>,
    line: Vec<u8>,
}

impl Tolerant {
    /// One request; `None` when it failed (counted against its server).
    fn request(&mut self, r: &Request<'_>) -> anyhow::Result<Option<Reply>> {
        self.out.clear();
        compose(&mut self.out, r)?;
        let s = server_of(r.key, self.servers.len());
        self.counts[s].requests.fetch_add(1, Ordering::Relaxed);
        let reply = match self.exchange(s, r) {
            Ok(Reply::Error(_)) | Err(_) => None,
            Ok(reply) => Some(reply),
        };
        if reply.is_none() {
            self.counts[s].errors.fetch_add(1, Ordering::Relaxed);
        }
        Ok(reply)
    }

    fn exchange(&mut self, s: usize, r: &Request<'_>) -> anyhow::Result<Reply> {
        let c = match &mut self.connections[s] {
            Some(c) => c,
            None => {
                anyhow::ensure!(Instant::now() >= self.retry_at[s], "server down");
                self.retry_at[s] = Instant::now() + self.timeout;
                self.connections[s].insert(Connection::open(&self.servers[s], Some(self.timeout))?)
            }
        };
        c.out.clear();
        c.out.extend_from_slice(&self.out);
        let reply = c.exchange(&mut self.line, r);
        if reply.is_err() {
            // Its stream may still carry the late reply: never read it as another's.
            self.connections[s] = None;
            self.retry_at[s] = Instant::now() + self.timeout;
        }
        reply
    }
}

impl Target for MemcachedTarget {
    type Session<'t> = MemcachedSession;

    fn session(&self, _worker: usize) -> anyhow::Result<MemcachedSession> {
        let link = match self.timeout {
            None => Link::Strict(Client::connect(&self.servers)?),
            Some(timeout) => Link::Tolerant(Tolerant {
                servers: self.servers.clone(),
                connections: self.servers.iter().map(|_| None).collect(),
                retry_at: vec![Instant::now(); self.servers.len()],
                timeout,
                counts: self.counts.clone(),
                out: Vec::new(),
                line: Vec::new(),
            }),
        };
        Ok(MemcachedSession {
            link,
            tokens: HashMap::new(),
        })
    }

    fn server_tallies(&self) -> Vec<ServerTally> {
        if self.timeout.is_none() {
            return Vec::new();
        }
        self.servers
            .iter()
            .zip(self.counts.iter())
            .map(|(server, c)| ServerTally {
                server: server.clone(),
                requests: c.requests.load(Ordering::Relaxed),
                errors: c.errors.load(Ordering::Relaxed),
            })
            .collect()
    }

    fn server_version(&self) -> Option<String> {
        let server = self.servers.first()?;
        let mut stream = TcpStream::connect(server).ok()?;
        stream.write_all(b"version\r\n").ok()?;
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line).ok()?;
        line.trim_end().strip_prefix("VERSION ").map(str::to_owned)
    }
}

impl Session for MemcachedSession {
    fn execute(&mut self, command: Command, key: &[u8], value: &[u8]) -> anyhow::Result<Outcome> {
        let mut request = Request::store(command, key, value);
        if let Command::Cas { .. } = command {
            match self.tokens.remove(key) {
                Some(token) => request.cas = token,
                None => return Ok(Outcome::Miss),
            }
        }
        let reply = match &mut self.link {
            Link::Strict(client) => client.request(request)?,
            // A failed request counts as a miss here, and as an error of its server.
            Link::Tolerant(t) => match t.request(&request)? {
                Some(reply) => reply,
                None => return Ok(Outcome::Miss),
            },
        };
        if let (Command::Gets, Reply::Value { cas: Some(t), .. }) = (command, &reply) {
            self.tokens.insert(key.into(), *t);
        }
        Ok(Outcome::from_bool(reply.is_hit()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(r: Request<'_>) -> String {
        let mut out = Vec::new();
        compose(&mut out, &r).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn requests_compose() {
        assert_eq!(text(Request::new(Command::Get, b"k")), "get k\r\n");
        assert_eq!(
            text(Request::store(Command::Set { ttl: 5 }, b"k", b"vv")),
            "set k 0 5 2\r\nvv\r\n"
        );
        let mut cas = Request::store(Command::Cas { ttl: 0 }, b"k", b"v");
        cas.cas = 42;
        assert_eq!(text(cas), "cas k 0 0 1 42\r\nv\r\n");
        assert_eq!(
            text(Request::new(Command::Decr { delta: 3 }, b"k")),
            "decr k 3\r\n"
        );
        assert_eq!(text(Request::new(Command::Delete, b"k")), "delete k\r\n");
        let mut out = Vec::new();
        assert!(compose(&mut out, &Request::new(Command::Get, b"a b")).is_err());
    }
}
