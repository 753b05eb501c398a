//! The classic text protocol: tokenize one command line, parse it into a [`Request`], and
//! compose replies. Byte-literal tests sit beside each command at the bottom.
//!
//! # Map
//! - [`ErrorReply`]: memcached's error lines, verbatim.
//! - [`Parsed`]: what one line yields — a request, a header awaiting its data block, an
//!   error, a swallowed block, nothing (`noreply`), or a close.
//! - [`tokenize`]: memcached's tokenizer (split on `' '` only; NUL ends the line).
//! - [`parse_line`]: dispatch on the command name, in memcached's order, then one small
//!   parser per command family.
//! - Compose: [`compose_value`], [`compose_store`], … write exact reply bytes.

use std::fmt::Write as _;

use bytes::{BufMut, Bytes, BytesMut};

use super::meta;
use super::numeric::{parse_i32, parse_u32, parse_u64};
use super::request::{
    Delete, Delta, Exptime, FlushAll, Request, Retrieve, Stats, StatsGroup, Store, Touch, Verbosity,
};
use super::storage::{DeltaOutcome, KeyOutcome, StoreOutcome};
use super::ProtocolLimits;

/// One of memcached's error lines, without its `\r\n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ErrorReply(pub &'static str);

impl ErrorReply {
    /// Unknown command or wrong number of tokens.
    pub const ERROR: Self = Self("ERROR");
    /// A malformed argument or an over-long key.
    pub const BAD_FORMAT: Self = Self("CLIENT_ERROR bad command line format");
    /// `delete` with arguments other than `0` / `noreply`.
    pub const DELETE_USAGE: Self =
        Self("CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]");
    /// A bad exptime on `touch`, `gat`, `flush_all`.
    pub const INVALID_EXPTIME: Self = Self("CLIENT_ERROR invalid exptime argument");
    /// A bad delta on `incr` / `decr`.
    pub const INVALID_DELTA: Self = Self("CLIENT_ERROR invalid numeric delta argument");
    /// The two bytes after a data block were not `\r\n`.
    pub const BAD_DATA_CHUNK: Self = Self("CLIENT_ERROR bad data chunk");
    /// incr/decr of a value that is not a number.
    pub const NON_NUMERIC: Self =
        Self("CLIENT_ERROR cannot increment or decrement non-numeric value");
    /// A value over the item size limit.
    pub const TOO_LARGE: Self = Self("SERVER_ERROR object too large for cache");
    /// The store could not allocate the item.
    pub const OUT_OF_MEMORY_STORING: Self = Self("SERVER_ERROR out of memory storing object");
    /// incr/decr could not allocate.
    pub const OUT_OF_MEMORY: Self = Self("SERVER_ERROR out of memory");
    /// `shutdown` without memcached's `-A`.
    pub const SHUTDOWN_DISABLED: Self = Self("ERROR: shutdown not enabled");
    /// `stats cachedump` with dumps disabled.
    pub const CACHEDUMP_DISABLED: Self = Self("CLIENT_ERROR stats cachedump not allowed");
    /// `stats detail` with a bad argument.
    pub const DETAIL_USAGE: Self = Self("CLIENT_ERROR usage: stats detail on|off|dump");

    /// Writes the line and its `\r\n`.
    pub fn compose(self, out: &mut BytesMut) {
        out.put_slice(self.0.as_bytes());
        out.put_slice(b"\r\n");
    }
}

/// What one command line yields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A complete request.
    Request(Request),
    /// A storage command: its data block (`len` bytes, then `\r\n`) follows.
    Data(DataHeader),
    /// Reply with this error and carry on with the next line.
    Error(ErrorReply),
    /// Reply with this error, then discard the next `len + 2` bytes (an `ms` refused after
    /// its length was read).
    Swallow(ErrorReply, usize),
    /// A `noreply` command failed: nothing to send.
    Silent,
    /// Close the connection without a reply (an HTTP request).
    Close,
}

/// A storage command waiting for its data block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataHeader {
    /// The request, its value still empty.
    pub request: Request,
    /// The data block length, without `\r\n`.
    pub len: usize,
}

/// Splits a line into tokens at spaces, as memcached's `tokenize_command`: only `' '`
/// separates, runs of spaces count once, and a NUL byte ends the line.
pub fn tokenize(line: &Bytes) -> Vec<Bytes> {
    let end = line.iter().position(|b| *b == 0).unwrap_or(line.len());
    let mut tokens = Vec::new();
    let mut start = 0;
    for (at, byte) in line[..end].iter().enumerate() {
        if *byte == b' ' {
            if at > start {
                tokens.push(line.slice(start..at));
            }
            start = at + 1;
        }
    }
    if end > start {
        tokens.push(line.slice(start..end));
    }
    tokens
}

/// memcached's `set_noreply_maybe`: the last token is exactly `noreply`.
fn noreply(tokens: &[Bytes]) -> bool {
    tokens.last().is_some_and(|t| t[..] == b"noreply"[..])
}

/// An error, or nothing when `noreply` hides it (memcached's `out_string`).
fn fail(error: ErrorReply, quiet: bool) -> Parsed {
    if quiet {
        Parsed::Silent
    } else {
        Parsed::Error(error)
    }
}

/// Parses one command line (without its `\r\n`).
pub fn parse_line(line: &Bytes, limits: &ProtocolLimits) -> Parsed {
    let tokens = tokenize(line);
    let Some(command) = tokens.first() else {
        return Parsed::Error(ErrorReply::ERROR);
    };
    if command.len() < 2 {
        return Parsed::Error(ErrorReply::ERROR);
    }
    if command[0] == b'm' && command.len() == 2 {
        return meta::parse(command[1], &tokens, limits);
    }
    match &command[..] {
        b"get" | b"bget" => parse_retrieve(&tokens, limits, Request::Get, false),
        b"gets" => parse_retrieve(&tokens, limits, Request::Gets, false),
        b"gat" => parse_retrieve(&tokens, limits, Request::Gat, true),
        b"gats" => parse_retrieve(&tokens, limits, Request::Gats, true),
        b"set" => parse_store(&tokens, limits, Request::Set, false),
        b"add" => parse_store(&tokens, limits, Request::Add, false),
        b"replace" => parse_store(&tokens, limits, Request::Replace, false),
        b"append" => parse_store(&tokens, limits, Request::Append, false),
        b"prepend" => parse_store(&tokens, limits, Request::Prepend, false),
        b"cas" => parse_store(&tokens, limits, Request::Cas, true),
        b"delete" => parse_delete(&tokens, limits),
        b"incr" => parse_delta(&tokens, limits, Request::Incr),
        b"decr" => parse_delta(&tokens, limits, Request::Decr),
        b"touch" => parse_touch(&tokens, limits),
        b"flush_all" => parse_flush_all(&tokens),
        b"stats" => parse_stats(&tokens),
        b"verbosity" => parse_verbosity(&tokens),
        b"version" => Parsed::Request(Request::Version),
        b"quit" => Parsed::Request(Request::Quit),
        b"shutdown" => Parsed::Request(Request::Shutdown),
        _ => parse_unknown(&tokens),
    }
}

/// An unknown command: memcached answers `ERROR`, except that outside its first-letter
/// families a last token starting with `HTTP/` closes the connection.
fn parse_unknown(tokens: &[Bytes]) -> Parsed {
    let in_family = matches!(
        tokens[0][0],
        b'g' | b's' | b'a' | b'c' | b'i' | b'd' | b't' | b'm'
    );
    let known_admin = matches!(
        &tokens[0][..],
        b"lru_crawler" | b"watch" | b"lru" | b"extstore"
    );
    let http = tokens.last().is_some_and(|t| t.starts_with(b"HTTP/"));
    if !in_family && !known_admin && http {
        Parsed::Close
    } else {
        Parsed::Error(ErrorReply::ERROR)
    }
}

/// `get|gets <key>*`, `gat|gats <exptime> <key>*`.
fn parse_retrieve(
    tokens: &[Bytes],
    limits: &ProtocolLimits,
    make: fn(Retrieve) -> Request,
    touch: bool,
) -> Parsed {
    if tokens.len() < 2 {
        return Parsed::Error(ErrorReply::ERROR);
    }
    let mut keys = &tokens[1..];
    let mut exptime = None;
    if touch {
        let Some(value) = parse_i32(&keys[0]) else {
            return Parsed::Error(ErrorReply::INVALID_EXPTIME);
        };
        exptime = Some(Exptime(value));
        keys = &keys[1..];
    }
    if keys.iter().any(|k| k.len() > limits.max_key_len) {
        return Parsed::Error(ErrorReply::BAD_FORMAT);
    }
    Parsed::Request(make(Retrieve {
        keys: keys.to_vec(),
        touch: exptime,
    }))
}

/// `set|add|replace|append|prepend <key> <flags> <exptime> <bytes> [noreply]`, and `cas`
/// with `<cas unique>` before `noreply`.
fn parse_store(
    tokens: &[Bytes],
    limits: &ProtocolLimits,
    make: fn(Store) -> Request,
    with_cas: bool,
) -> Parsed {
    let base = if with_cas { 6 } else { 5 };
    if tokens.len() != base && tokens.len() != base + 1 {
        return Parsed::Error(ErrorReply::ERROR);
    }
    let quiet = noreply(tokens);
    if tokens[1].len() > limits.max_key_len {
        return fail(ErrorReply::BAD_FORMAT, quiet);
    }
    let numbers = (
        parse_u32(&tokens[2]),
        parse_i32(&tokens[3]),
        parse_i32(&tokens[4]),
    );
    let (Some(flags), Some(exptime), Some(len)) = numbers else {
        return fail(ErrorReply::BAD_FORMAT, quiet);
    };
    let cas_unique = if with_cas {
        parse_u64(&tokens[5])
    } else {
        Some(0)
    };
    let Some(cas_unique) = cas_unique else {
        return fail(ErrorReply::BAD_FORMAT, quiet);
    };
    if !(0..=i32::MAX - 2).contains(&len) {
        return fail(ErrorReply::BAD_FORMAT, quiet);
    }
    let store = Store {
        key: tokens[1].clone(),
        flags,
        exptime: Exptime(exptime),
        value: Bytes::new(),
        cas_unique,
        noreply: quiet,
    };
    Parsed::Data(DataHeader {
        request: make(store),
        len: len as usize,
    })
}

/// `delete <key> [0] [noreply]`.
fn parse_delete(tokens: &[Bytes], limits: &ProtocolLimits) -> Parsed {
    if !(2..=4).contains(&tokens.len()) {
        return Parsed::Error(ErrorReply::ERROR);
    }
    let quiet = noreply(tokens);
    if tokens.len() > 2 {
        let hold_is_zero = tokens[2][..] == b"0"[..];
        let valid = (tokens.len() == 3 && (hold_is_zero || quiet))
            || (tokens.len() == 4 && hold_is_zero && quiet);
        if !valid {
            return fail(ErrorReply::DELETE_USAGE, quiet);
        }
    }
    if tokens[1].len() > limits.max_key_len {
        return fail(ErrorReply::BAD_FORMAT, quiet);
    }
    Parsed::Request(Request::Delete(Delete {
        key: tokens[1].clone(),
        noreply: quiet,
    }))
}

/// `incr|decr <key> <delta> [noreply]`.
fn parse_delta(tokens: &[Bytes], limits: &ProtocolLimits, make: fn(Delta) -> Request) -> Parsed {
    if tokens.len() != 3 && tokens.len() != 4 {
        return Parsed::Error(ErrorReply::ERROR);
    }
    let quiet = noreply(tokens);
    if tokens[1].len() > limits.max_key_len {
        return fail(ErrorReply::BAD_FORMAT, quiet);
    }
    let Some(delta) = parse_u64(&tokens[2]) else {
        return fail(ErrorReply::INVALID_DELTA, quiet);
    };
    Parsed::Request(make(Delta {
        key: tokens[1].clone(),
        delta,
        noreply: quiet,
    }))
}

/// `touch <key> <exptime> [noreply]`.
fn parse_touch(tokens: &[Bytes], limits: &ProtocolLimits) -> Parsed {
    if tokens.len() != 3 && tokens.len() != 4 {
        return Parsed::Error(ErrorReply::ERROR);
    }
    let quiet = noreply(tokens);
    if tokens[1].len() > limits.max_key_len {
        return fail(ErrorReply::BAD_FORMAT, quiet);
    }
    let Some(exptime) = parse_i32(&tokens[2]) else {
        return fail(ErrorReply::INVALID_EXPTIME, quiet);
    };
    let touch = Touch {
        key: tokens[1].clone(),
        exptime: Exptime(exptime),
        noreply: quiet,
    };
    Parsed::Request(Request::Touch(touch))
}

/// `flush_all [delay] [noreply]`.
fn parse_flush_all(tokens: &[Bytes]) -> Parsed {
    if tokens.len() > 3 {
        return Parsed::Error(ErrorReply::ERROR);
    }
    let quiet = noreply(tokens);
    let mut delay = 0;
    if tokens.len() != if quiet { 2 } else { 1 } {
        match parse_i32(&tokens[1]) {
            Some(value) => delay = value,
            None => return fail(ErrorReply::INVALID_EXPTIME, quiet),
        }
    }
    Parsed::Request(Request::FlushAll(FlushAll {
        delay: Exptime(delay),
        noreply: quiet,
    }))
}

/// `stats [group …]`.
fn parse_stats(tokens: &[Bytes]) -> Parsed {
    let group = match tokens.get(1).map(|t| &t[..]) {
        None => StatsGroup::General,
        Some(b"reset") => StatsGroup::Reset,
        Some(b"detail") => StatsGroup::Detail(tokens.get(2).cloned().unwrap_or_default()),
        Some(b"cachedump") => StatsGroup::CacheDump,
        Some(_) => StatsGroup::Named(tokens[1].clone()),
    };
    Parsed::Request(Request::Stats(Stats { group }))
}

/// `verbosity <level> [noreply]`.
fn parse_verbosity(tokens: &[Bytes]) -> Parsed {
    if tokens.len() != 2 && tokens.len() != 3 {
        return Parsed::Error(ErrorReply::ERROR);
    }
    let quiet = noreply(tokens);
    match parse_u32(&tokens[1]) {
        Some(level) => Parsed::Request(Request::Verbosity(Verbosity {
            level,
            noreply: quiet,
        })),
        None => fail(ErrorReply::BAD_FORMAT, quiet),
    }
}

/// `VALUE <key> <flags> <bytes> [<cas>]\r\n<data>\r\n`.
pub fn compose_value(out: &mut BytesMut, key: &[u8], flags: u32, value: &[u8], cas: Option<u64>) {
    out.reserve(key.len() + value.len() + 48);
    out.put_slice(b"VALUE ");
    out.put_slice(key);
    let _ = write!(out, " {} {}", flags, value.len());
    if let Some(cas) = cas {
        let _ = write!(out, " {cas}");
    }
    out.put_slice(b"\r\n");
    out.put_slice(value);
    out.put_slice(b"\r\n");
}

/// `END\r\n`.
pub fn compose_end(out: &mut BytesMut) {
    out.put_slice(b"END\r\n");
}

/// The reply to a storage command.
pub fn compose_store(out: &mut BytesMut, outcome: StoreOutcome) {
    let line: &[u8] = match outcome {
        StoreOutcome::Stored(_) => b"STORED\r\n",
        StoreOutcome::NotStored => b"NOT_STORED\r\n",
        StoreOutcome::Exists => b"EXISTS\r\n",
        StoreOutcome::NotFound => b"NOT_FOUND\r\n",
        StoreOutcome::TooLarge => return ErrorReply::TOO_LARGE.compose(out),
        StoreOutcome::OutOfMemory => return ErrorReply::OUT_OF_MEMORY_STORING.compose(out),
    };
    out.put_slice(line);
}

/// The reply to `delete` (`DELETED`) or `touch` (`TOUCHED`), given the success word.
pub fn compose_key_outcome(out: &mut BytesMut, outcome: KeyOutcome, done: &'static [u8]) {
    match outcome {
        KeyOutcome::Done => out.put_slice(done),
        KeyOutcome::NotFound => out.put_slice(b"NOT_FOUND"),
    }
    out.put_slice(b"\r\n");
}

/// The reply to `incr` / `decr`.
pub fn compose_delta(out: &mut BytesMut, outcome: DeltaOutcome) {
    match outcome {
        DeltaOutcome::Value(value) => {
            let _ = write!(out, "{value}\r\n");
        }
        DeltaOutcome::NotFound => out.put_slice(b"NOT_FOUND\r\n"),
        DeltaOutcome::NonNumeric => ErrorReply::NON_NUMERIC.compose(out),
        DeltaOutcome::OutOfMemory => ErrorReply::OUT_OF_MEMORY.compose(out),
    }
}

/// `STAT <name> <value>\r\n` lines, then `END\r\n`.
pub fn compose_stats(out: &mut BytesMut, lines: &[(String, String)]) {
    for (name, value) in lines {
        let _ = write!(out, "STAT {name} {value}\r\n");
    }
    compose_end(out);
}

/// A bare status line such as `OK`, `RESET`, `VERSION 1.6.0`.
pub fn compose_line(out: &mut BytesMut, line: &str) {
    out.put_slice(line.as_bytes());
    out.put_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &[u8]) -> Parsed {
        parse_line(&Bytes::copy_from_slice(line), &ProtocolLimits::default())
    }

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    fn keys(list: &[&str]) -> Vec<Bytes> {
        list.iter().map(|k| b(k)).collect()
    }

    fn composed(f: impl FnOnce(&mut BytesMut)) -> Vec<u8> {
        let mut out = BytesMut::new();
        f(&mut out);
        out.to_vec()
    }

    #[test]
    fn tokenizer_splits_on_spaces_only_and_stops_at_nul() {
        assert_eq!(tokenize(&b("  get  a\tb  c ")), keys(&["get", "a\tb", "c"]));
        assert_eq!(
            tokenize(&Bytes::from_static(b"get a\0b c")),
            keys(&["get", "a"])
        );
        assert!(tokenize(&b("   ")).is_empty());
    }

    #[test]
    fn get_family() {
        let get = Request::Get(Retrieve {
            keys: keys(&["a", "b"]),
            touch: None,
        });
        assert_eq!(parse(b"get a b"), Parsed::Request(get.clone()));
        assert_eq!(parse(b"bget a b"), Parsed::Request(get));
        let gets = Request::Gets(Retrieve {
            keys: keys(&["k"]),
            touch: None,
        });
        assert_eq!(parse(b"gets k"), Parsed::Request(gets));
        let gat = Request::Gat(Retrieve {
            keys: keys(&["k"]),
            touch: Some(Exptime(-1)),
        });
        assert_eq!(parse(b"gat -1 k"), Parsed::Request(gat));
        let gats = Request::Gats(Retrieve {
            keys: vec![],
            touch: Some(Exptime(10)),
        });
        assert_eq!(parse(b"gats 10"), Parsed::Request(gats));
        assert_eq!(parse(b"get"), Parsed::Error(ErrorReply::ERROR));
        assert_eq!(
            parse(b"gat x k"),
            Parsed::Error(ErrorReply::INVALID_EXPTIME)
        );
        assert_eq!(parse(b"gex k"), Parsed::Error(ErrorReply::ERROR));
    }

    #[test]
    fn get_refuses_a_key_over_250_bytes() {
        let line = format!("get a {}", "k".repeat(251));
        assert_eq!(
            parse(line.as_bytes()),
            Parsed::Error(ErrorReply::BAD_FORMAT)
        );
        let line = format!("get {}", "k".repeat(250));
        assert!(matches!(
            parse(line.as_bytes()),
            Parsed::Request(Request::Get(_))
        ));
    }

    fn store(key: &str, flags: u32, exptime: i32, cas_unique: u64, noreply: bool) -> Store {
        Store {
            key: b(key),
            flags,
            exptime: Exptime(exptime),
            value: Bytes::new(),
            cas_unique,
            noreply,
        }
    }

    #[test]
    fn storage_headers() {
        let set = Request::Set(store("k", 5, 0, 0, false));
        assert_eq!(
            parse(b"set k 5 0 3"),
            Parsed::Data(DataHeader {
                request: set,
                len: 3
            })
        );
        let add = Request::Add(store("k", 0, -1, 0, true));
        assert_eq!(
            parse(b"add k 0 -1 0 noreply"),
            Parsed::Data(DataHeader {
                request: add,
                len: 0
            })
        );
        let cas = Request::Cas(store("k", 1, 2, 99, false));
        assert_eq!(
            parse(b"cas k 1 2 4 99"),
            Parsed::Data(DataHeader {
                request: cas,
                len: 4
            })
        );
        let append = Request::Append(store("k", 0, 0, 0, false));
        assert_eq!(
            parse(b"append k 0 0 1 junk"),
            Parsed::Data(DataHeader {
                request: append,
                len: 1
            })
        );
        assert!(matches!(parse(b"replace k 0 0 1"), Parsed::Data(_)));
        assert!(matches!(parse(b"prepend k 0 0 1"), Parsed::Data(_)));
    }

    #[test]
    fn storage_errors() {
        assert_eq!(parse(b"set k 0 0"), Parsed::Error(ErrorReply::ERROR));
        assert_eq!(
            parse(b"set k 0 0 1 noreply x"),
            Parsed::Error(ErrorReply::ERROR)
        );
        assert_eq!(parse(b"set k x 0 1"), Parsed::Error(ErrorReply::BAD_FORMAT));
        assert_eq!(
            parse(b"set k 0 0 -1"),
            Parsed::Error(ErrorReply::BAD_FORMAT)
        );
        assert_eq!(
            parse(b"set k -1 0 1"),
            Parsed::Error(ErrorReply::BAD_FORMAT)
        );
        assert_eq!(
            parse(b"set k 0 0 2147483646"),
            Parsed::Error(ErrorReply::BAD_FORMAT)
        );
        assert_eq!(parse(b"set k 0 0 noreply"), Parsed::Silent);
        assert_eq!(parse(b"cas k 0 0 1 noreply"), Parsed::Silent);
        assert_eq!(
            parse(b"cas k 0 0 1 -3"),
            Parsed::Error(ErrorReply::BAD_FORMAT)
        );
        let long = format!("set {} 0 0 1", "k".repeat(251));
        assert_eq!(
            parse(long.as_bytes()),
            Parsed::Error(ErrorReply::BAD_FORMAT)
        );
    }

    #[test]
    fn delete_forms() {
        let delete = |noreply| {
            Parsed::Request(Request::Delete(Delete {
                key: b("k"),
                noreply,
            }))
        };
        assert_eq!(parse(b"delete k"), delete(false));
        assert_eq!(parse(b"delete k 0"), delete(false));
        assert_eq!(parse(b"delete k noreply"), delete(true));
        assert_eq!(parse(b"delete k 0 noreply"), delete(true));
        assert_eq!(
            parse(b"delete k 5"),
            Parsed::Error(ErrorReply::DELETE_USAGE)
        );
        assert_eq!(parse(b"delete k 5 noreply"), Parsed::Silent);
        assert_eq!(parse(b"delete"), Parsed::Error(ErrorReply::ERROR));
        assert_eq!(
            parse(b"delete k 0 noreply x"),
            Parsed::Error(ErrorReply::ERROR)
        );
    }

    #[test]
    fn incr_decr_touch() {
        let incr = Request::Incr(Delta {
            key: b("n"),
            delta: 5,
            noreply: false,
        });
        assert_eq!(parse(b"incr n 5"), Parsed::Request(incr));
        let decr = Request::Decr(Delta {
            key: b("n"),
            delta: u64::MAX,
            noreply: true,
        });
        assert_eq!(
            parse(b"decr n 18446744073709551615 noreply"),
            Parsed::Request(decr)
        );
        assert_eq!(
            parse(b"incr n -1"),
            Parsed::Error(ErrorReply::INVALID_DELTA)
        );
        assert_eq!(parse(b"incr n x noreply"), Parsed::Silent);
        assert_eq!(parse(b"incr n"), Parsed::Error(ErrorReply::ERROR));
        let touch = Request::Touch(Touch {
            key: b("k"),
            exptime: Exptime(10),
            noreply: false,
        });
        assert_eq!(parse(b"touch k 10"), Parsed::Request(touch));
        assert_eq!(
            parse(b"touch k soon"),
            Parsed::Error(ErrorReply::INVALID_EXPTIME)
        );
    }

    #[test]
    fn flush_all_forms() {
        let flush = |delay, noreply| {
            Parsed::Request(Request::FlushAll(FlushAll {
                delay: Exptime(delay),
                noreply,
            }))
        };
        assert_eq!(parse(b"flush_all"), flush(0, false));
        assert_eq!(parse(b"flush_all 10"), flush(10, false));
        assert_eq!(parse(b"flush_all noreply"), flush(0, true));
        assert_eq!(parse(b"flush_all 10 noreply"), flush(10, true));
        assert_eq!(
            parse(b"flush_all soon"),
            Parsed::Error(ErrorReply::INVALID_EXPTIME)
        );
        assert_eq!(parse(b"flush_all 1 2 3"), Parsed::Error(ErrorReply::ERROR));
    }

    #[test]
    fn misc_commands() {
        assert_eq!(parse(b"version"), Parsed::Request(Request::Version));
        assert_eq!(parse(b"quit"), Parsed::Request(Request::Quit));
        assert_eq!(
            parse(b"shutdown graceful"),
            Parsed::Request(Request::Shutdown)
        );
        let verbosity = Request::Verbosity(Verbosity {
            level: 1,
            noreply: true,
        });
        assert_eq!(parse(b"verbosity 1 noreply"), Parsed::Request(verbosity));
        assert_eq!(parse(b"verbosity"), Parsed::Error(ErrorReply::ERROR));
        assert_eq!(parse(b"verbosity x"), Parsed::Error(ErrorReply::BAD_FORMAT));
        assert_eq!(parse(b"verbosity noreply"), Parsed::Silent);
        let stats = |group| Parsed::Request(Request::Stats(Stats { group }));
        assert_eq!(parse(b"stats"), stats(StatsGroup::General));
        assert_eq!(parse(b"stats items"), stats(StatsGroup::Named(b("items"))));
        assert_eq!(parse(b"stats reset"), stats(StatsGroup::Reset));
        assert_eq!(
            parse(b"stats detail on"),
            stats(StatsGroup::Detail(b("on")))
        );
        assert_eq!(parse(b"stats cachedump 1 1"), stats(StatsGroup::CacheDump));
    }

    #[test]
    fn unknown_commands_and_http() {
        assert_eq!(parse(b""), Parsed::Error(ErrorReply::ERROR));
        assert_eq!(parse(b"x"), Parsed::Error(ErrorReply::ERROR));
        assert_eq!(parse(b"bogus"), Parsed::Error(ErrorReply::ERROR));
        assert_eq!(parse(b"GET / HTTP/1.0"), Parsed::Close);
        assert_eq!(parse(b"DELETE HTTP/1.1"), Parsed::Close);
        assert_eq!(parse(b"sets / HTTP/1.0"), Parsed::Error(ErrorReply::ERROR));
        assert_eq!(
            parse(b"lru_crawler HTTP/1.0"),
            Parsed::Error(ErrorReply::ERROR)
        );
        assert_eq!(
            parse(b"slabs reassign 1 2"),
            Parsed::Error(ErrorReply::ERROR)
        );
    }

    #[test]
    fn compose_replies() {
        let value = composed(|o| compose_value(o, b"k", 7, b"a\r\nb", None));
        assert_eq!(value, b"VALUE k 7 4\r\na\r\nb\r\n");
        let value = composed(|o| compose_value(o, b"k", 0, b"", Some(42)));
        assert_eq!(value, b"VALUE k 0 0 42\r\n\r\n");
        assert_eq!(composed(compose_end), b"END\r\n");
        assert_eq!(
            composed(|o| compose_store(o, StoreOutcome::Stored(1))),
            b"STORED\r\n"
        );
        assert_eq!(
            composed(|o| compose_store(o, StoreOutcome::NotStored)),
            b"NOT_STORED\r\n"
        );
        assert_eq!(
            composed(|o| compose_store(o, StoreOutcome::Exists)),
            b"EXISTS\r\n"
        );
        assert_eq!(
            composed(|o| compose_store(o, StoreOutcome::NotFound)),
            b"NOT_FOUND\r\n"
        );
        let too_large = composed(|o| compose_store(o, StoreOutcome::TooLarge));
        assert_eq!(too_large, b"SERVER_ERROR object too large for cache\r\n");
        let oom = composed(|o| compose_store(o, StoreOutcome::OutOfMemory));
        assert_eq!(oom, b"SERVER_ERROR out of memory storing object\r\n");
        let deleted = composed(|o| compose_key_outcome(o, KeyOutcome::Done, b"DELETED"));
        assert_eq!(deleted, b"DELETED\r\n");
        assert_eq!(
            composed(|o| compose_delta(o, DeltaOutcome::Value(0))),
            b"0\r\n"
        );
        let non_numeric = composed(|o| compose_delta(o, DeltaOutcome::NonNumeric));
        assert_eq!(
            non_numeric,
            b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
        );
        let stats = composed(|o| compose_stats(o, &[("pid".into(), "1".into())]));
        assert_eq!(stats, b"STAT pid 1\r\nEND\r\n");
    }
}
