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
use super::numeric::{parse_i32, parse_u32, parse_u64, put_decimal};
pub use super::parsed::{DataHeader, ErrorReply, Parsed};
use super::scan::find_either;
use podkv_store::{Count, Counted, Mode, Outcome, StoreError};

use super::request::{
    Delete, Delta, FlushAll, Request, Retrieve, Stats, StatsGroup, Store, Touch, Verbosity,
};
use super::ProtocolLimits;

/// Splits a line into tokens at spaces, as memcached's `tokenize_command`: only `' '`
/// separates, runs of spaces count once, and a NUL byte ends the line.
///
/// Spaces are found eight bytes at a time, and the vector has room for memcached's usual
/// token count up front (growing it from empty cost two allocations per request).
pub fn tokenize(line: &Bytes) -> Vec<Bytes> {
    let mut tokens = Vec::with_capacity(COUNT_TOKENS_USUAL);
    let mut start = 0;
    loop {
        let (end, last) = match find_either(&line[start..], b' ', 0) {
            Some(at) => (start + at, line[start + at] == 0),
            None => (line.len(), true),
        };
        if end > start {
            tokens.push(line.slice(start..end));
        }
        if last {
            return tokens;
        }
        start = end + 1;
    }
}

/// Tokens of every command but a multi-key `get`, `noreply` included (memcached's
/// `MAX_TOKENS` is 24, the longest fixed command, `cas`, has 7).
const COUNT_TOKENS_USUAL: usize = 8;

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
        b"get" | b"bget" => parse_retrieve(tokens, limits, Request::Get, false),
        b"gets" => parse_retrieve(tokens, limits, Request::Gets, false),
        b"gat" => parse_retrieve(tokens, limits, Request::Gat, true),
        b"gats" => parse_retrieve(tokens, limits, Request::Gats, true),
        b"set" => parse_store(&tokens, limits, Mode::Set),
        b"add" => parse_store(&tokens, limits, Mode::Add),
        b"replace" => parse_store(&tokens, limits, Mode::Replace),
        b"append" => parse_store(&tokens, limits, Mode::Append),
        b"prepend" => parse_store(&tokens, limits, Mode::Prepend),
        b"cas" => parse_store(&tokens, limits, Mode::Cas(0)),
        b"delete" => parse_delete(&tokens, limits),
        b"incr" => parse_delta(&tokens, limits, false),
        b"decr" => parse_delta(&tokens, limits, true),
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

/// `get|gets <key>*`, `gat|gats <exptime> <key>*`. The keys keep the tokens' vector.
fn parse_retrieve(
    mut tokens: Vec<Bytes>,
    limits: &ProtocolLimits,
    make: fn(Retrieve) -> Request,
    touch: bool,
) -> Parsed {
    if tokens.len() < 2 {
        return Parsed::Error(ErrorReply::ERROR);
    }
    let mut exptime = None;
    if touch {
        let Some(value) = parse_i32(&tokens[1]) else {
            return Parsed::Error(ErrorReply::INVALID_EXPTIME);
        };
        exptime = Some(i64::from(value));
    }
    tokens.drain(..if touch { 2 } else { 1 });
    let long = tokens.iter().position(|k| k.len() > limits.max_key_len);
    if let Some(long) = long {
        // Keys before the long one are read (and for gat touched) all the same; only a
        // touch leaves a trace.
        if !touch || long == 0 {
            return Parsed::Error(ErrorReply::BAD_FORMAT);
        }
        tokens.truncate(long);
    }
    Parsed::Request(make(Retrieve {
        keys: tokens,
        touch: exptime,
        refused: long.is_some(),
    }))
}

/// `set|add|replace|append|prepend <key> <flags> <exptime> <bytes> [noreply]`, and `cas`
/// with `<cas unique>` before `noreply` (`mode` is `Mode::Cas(0)` until it is read).
fn parse_store(tokens: &[Bytes], limits: &ProtocolLimits, mode: Mode) -> Parsed {
    let with_cas = matches!(mode, Mode::Cas(_));
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
    let mode = match with_cas {
        true => parse_u64(&tokens[5]).map(Mode::Cas),
        false => Some(mode),
    };
    let Some(mode) = mode else {
        return fail(ErrorReply::BAD_FORMAT, quiet);
    };
    if !(0..=i32::MAX - 2).contains(&len) {
        return fail(ErrorReply::BAD_FORMAT, quiet);
    }
    let store = Store {
        mode,
        key: tokens[1].clone(),
        flags,
        exptime: i64::from(exptime),
        value: Bytes::new(),
        noreply: quiet,
    };
    Parsed::Data(DataHeader {
        request: Request::Store(store),
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
fn parse_delta(tokens: &[Bytes], limits: &ProtocolLimits, decrement: bool) -> Parsed {
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
    let count = Count {
        decrement,
        delta,
        ..Count::default()
    };
    Parsed::Request(Request::Delta(Delta {
        key: tokens[1].clone(),
        count,
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
        exptime: i64::from(exptime),
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
        delay: i64::from(delay),
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
    out.reserve(key.len() + value.len() + 64);
    out.put_slice(b"VALUE ");
    out.put_slice(key);
    out.put_u8(b' ');
    put_decimal(out, u64::from(flags));
    out.put_u8(b' ');
    put_decimal(out, value.len() as u64);
    if let Some(cas) = cas {
        out.put_u8(b' ');
        put_decimal(out, cas);
    }
    out.put_slice(b"\r\n");
    out.put_slice(value);
    out.put_slice(b"\r\n");
}

/// `END\r\n`.
pub fn compose_end(out: &mut BytesMut) {
    out.put_slice(b"END\r\n");
}

/// The reply to a storage command: the store's outcome, or why it refused the store.
pub fn compose_store(out: &mut BytesMut, stored: &Result<(Outcome, u64), StoreError>) {
    let line: &[u8] = match stored {
        Ok((Outcome::Stored, _)) => b"STORED\r\n",
        Ok((Outcome::Exists, _)) => b"EXISTS\r\n",
        Ok((Outcome::NotFound, _)) => b"NOT_FOUND\r\n",
        // A key the store's own limit refuses was never stored either.
        Ok(_) | Err(StoreError::KeyLength { .. }) => b"NOT_STORED\r\n",
        Err(StoreError::TooLarge { .. }) => return ErrorReply::TOO_LARGE.compose(out),
        Err(_) => return ErrorReply::OUT_OF_MEMORY_STORING.compose(out),
    };
    out.put_slice(line);
}

/// The reply to `delete` (`DELETED`) or `touch` (`TOUCHED`); anything else is `NOT_FOUND`.
pub fn compose_key_outcome(out: &mut BytesMut, outcome: &Result<Outcome, StoreError>) {
    out.put_slice(match outcome {
        Ok(Outcome::Deleted) => b"DELETED\r\n",
        Ok(Outcome::Touched) => b"TOUCHED\r\n",
        _ => b"NOT_FOUND\r\n",
    });
}

/// The reply to `incr` / `decr`.
pub fn compose_delta(out: &mut BytesMut, counted: &Result<Counted, StoreError>) {
    match counted {
        Ok(Counted::Value { value, .. }) => {
            let _ = write!(out, "{value}\r\n");
        }
        Ok(_) | Err(StoreError::KeyLength { .. }) => out.put_slice(b"NOT_FOUND\r\n"),
        Err(StoreError::NonNumeric) => ErrorReply::NON_NUMERIC.compose(out),
        Err(_) => ErrorReply::OUT_OF_MEMORY.compose(out),
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
