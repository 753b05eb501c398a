//! The meta protocol: `mg`, `ms`, `md`, `ma`, `mn`, `me` — flag pre-parsing, one parser per
//! command, and the composers for `HD VA EN NF NS EX MN ME` replies.
//!
//! # Map
//! - [`MetaFlags`]: memcached's `_meta_flag_preparse` — one pass over the flag tokens,
//!   rejecting duplicates and unknown flags, decoding a base64 key (`b`), parsing tokens.
//! - [`parse`]: `m<x>` dispatch, then `parse_get`, `parse_set`, `parse_delete`,
//!   `parse_arithmetic`, `parse_debug`, each checking in memcached's order.
//! - Compose: [`compose_flags`] writes requested return flags in request order;
//!   [`compose_get_hit`], [`compose_status`], [`compose_arithmetic`], [`compose_debug`].
//!
//! Choices: the `O` length limit (32 bytes including the `O`) is checked while parsing, so an
//! over-long opaque refuses the command before it runs; memcached notices it while composing
//! the reply of `mg`/`ma`, after the item was read or changed. `M` modes are upper case only
//! (`MS`, not `Ms`), as in memcached 1.6.18; later releases also take lower case.

use std::fmt::Write as _;

use bytes::{BufMut, Bytes, BytesMut};
use podkv_store::{Count, Delete, Lease, Mode, Outcome, Rank, Read, StoreError, StoreExtra};

use super::base64;
use super::numeric::{parse_i32, parse_u32, parse_u64, put_decimal};
use super::parsed::{DataHeader, ErrorReply, Parsed};
use super::request::{
    ranked, GetOrder, MetaArithmetic, MetaDebug, MetaDelete, MetaGet, MetaKey, MetaSet, Request,
    ReturnFlag,
};
use super::storage::{Item, ItemDebug};
use super::ProtocolLimits;

/// memcached's `MFLAG_MAX_OPT_LENGTH`: at most this many tokens, counting its end marker.
const COUNT_TOKENS_MAX: usize = 20;
/// memcached's `MFLAG_MAX_OPAQUE_LENGTH`: longest `O` token, including the `O`.
const SIZE_OPAQUE_MAX: usize = 32;

/// Every flag memcached's pre-parser understands, for any meta command.
#[derive(Clone, Debug, Default)]
pub struct MetaFlags {
    /// The key, decoded when `b` was given.
    pub key: Bytes,
    /// `b`.
    pub base64: bool,
    /// `N<exptime>`.
    pub vivify: Option<i64>,
    /// `T<exptime>`.
    pub touch: Option<i64>,
    /// `R<exptime>`.
    pub recache: Option<i64>,
    /// `v`.
    pub value: bool,
    /// `u`.
    pub no_bump: bool,
    /// `q`.
    pub quiet: bool,
    /// `I`.
    pub invalidate: bool,
    /// `F<flags>`.
    pub client_flags: u32,
    /// `C<cas>`.
    pub cas: Option<u64>,
    /// `E<cas>`.
    pub new_cas: Option<u64>,
    /// `M<mode>`: the mode byte.
    pub mode: Option<u8>,
    /// `J<initial>`.
    pub initial: u64,
    /// `D<delta>`.
    pub delta: u64,
    /// Return flags in request order.
    pub returns: Vec<ReturnFlag>,
    /// Where `T`, `N`, `R`, `t` stand among the flags.
    pub order: GetOrder,
}

/// Parses the numeric part of a flag token into `slot`, or records `error`.
fn number<T>(parsed: Option<T>, slot: &mut T, error: ErrorReply, failed: &mut Option<ErrorReply>) {
    match parsed {
        Some(value) => *slot = value,
        None => *failed = Some(error),
    }
}

/// The return flag a token asks for, if any.
fn return_flag(token: &Bytes) -> Result<Option<ReturnFlag>, ErrorReply> {
    Ok(Some(match token[0] {
        b's' => ReturnFlag::Size,
        b't' => ReturnFlag::Ttl,
        b'c' => ReturnFlag::Cas,
        b'f' => ReturnFlag::Flags,
        b'l' => ReturnFlag::LastAccess,
        b'h' => ReturnFlag::Hit,
        b'k' => ReturnFlag::Key,
        b'O' if token.len() > SIZE_OPAQUE_MAX => return Err(ErrorReply::OPAQUE_TOO_LONG),
        b'O' => ReturnFlag::Opaque(token.clone()),
        _ => return Ok(None),
    }))
}

impl MetaFlags {
    /// memcached's `_meta_flag_preparse` over `flags`; the last error message set wins (`F`
    /// sets none), while a duplicate or unknown flag stops at once.
    pub fn parse(key: &Bytes, flags: &[Bytes]) -> Result<MetaFlags, ErrorReply> {
        let mut of = MetaFlags {
            key: key.clone(),
            delta: 1,
            ..MetaFlags::default()
        };
        let mut seen = [false; 127];
        let mut failed = None;
        for (rank, token) in flags.iter().enumerate() {
            let flag = token[0];
            if flag >= 127 || seen[flag as usize] {
                return Err(ErrorReply::DUPLICATE_FLAG);
            }
            seen[flag as usize] = true;
            of.note_order(flag, Rank(rank as u8));
            of.apply(token, &mut failed)?;
            if let Some(returned) = return_flag(token)? {
                of.returns.push(returned);
            }
        }
        failed.map_or(Ok(of), Err)
    }

    /// Applies one flag token.
    fn apply(&mut self, token: &Bytes, failed: &mut Option<ErrorReply>) -> Result<(), ErrorReply> {
        let arg = &token[1..];
        let exptime = |a: &[u8]| parse_i32(a).map(|e| Some(i64::from(e)));
        let cas = |a: &[u8]| parse_u64(a).map(Some);
        match token[0] {
            b'b' => self.decode_key(failed),
            b'N' => number(
                exptime(arg),
                &mut self.vivify,
                ErrorReply::BAD_TOKEN,
                failed,
            ),
            b'T' => number(exptime(arg), &mut self.touch, ErrorReply::BAD_TOKEN, failed),
            b'R' => number(
                exptime(arg),
                &mut self.recache,
                ErrorReply::BAD_TOKEN,
                failed,
            ),
            // memcached's `F` sets no message of its own: the command's default (`mg`, `ms`:
            // "bad command line format") stands unless another flag set one.
            b'F' => match parse_u32(arg) {
                Some(flags) => self.client_flags = flags,
                None => {
                    failed.get_or_insert(ErrorReply::BAD_FORMAT);
                }
            },
            b'C' => number(cas(arg), &mut self.cas, ErrorReply::BAD_TOKEN, failed),
            b'E' => number(cas(arg), &mut self.new_cas, ErrorReply::BAD_TOKEN, failed),
            b'J' => number(
                parse_u64(arg),
                &mut self.initial,
                ErrorReply::BAD_INITIAL,
                failed,
            ),
            b'D' => number(
                parse_u64(arg),
                &mut self.delta,
                ErrorReply::BAD_DELTA,
                failed,
            ),
            b'M' if token.len() != 2 => *failed = Some(ErrorReply::MODE_LENGTH),
            b'M' => self.mode = Some(token[1]),
            b'v' => self.value = true,
            b'u' => self.no_bump = true,
            b'q' => self.quiet = true,
            b'I' => self.invalidate = true,
            b'O' | b'P' | b'L' | b'k' | b's' | b't' | b'c' | b'f' | b'l' | b'h' => {}
            _ => return Err(ErrorReply::INVALID_FLAG),
        }
        Ok(())
    }

    /// Records where an order-sensitive flag stands (fewer than 20 tokens: fits a `u8`).
    fn note_order(&mut self, flag: u8, rank: Rank) {
        match flag {
            b'T' => self.order.touch = rank,
            b'N' => self.order.vivify = rank,
            b'R' => self.order.recache = rank,
            b't' => self.order.ttl = rank,
            _ => {}
        }
    }

    /// `b`: replace the key by its base64 decoding.
    fn decode_key(&mut self, failed: &mut Option<ErrorReply>) {
        self.base64 = true;
        match base64::decode(&self.key) {
            Some(decoded) => self.key = Bytes::from(decoded),
            None => *failed = Some(ErrorReply::BAD_KEY_ENCODING),
        }
    }

    /// The key with its encoding.
    fn meta_key(&self) -> MetaKey {
        MetaKey {
            bytes: self.key.clone(),
            base64: self.base64,
        }
    }

    /// The return flags this command can answer.
    fn returns_only(&self, allowed: impl Fn(&ReturnFlag) -> bool) -> Vec<ReturnFlag> {
        self.returns
            .iter()
            .filter(|r| allowed(r))
            .cloned()
            .collect()
    }
}

/// Parses `m<kind> …` (the command token is `tokens[0]`).
pub fn parse(kind: u8, tokens: &[Bytes], limits: &ProtocolLimits) -> Parsed {
    match kind {
        b'g' => parse_get(tokens, limits),
        b's' => parse_set(tokens, limits),
        b'd' => parse_delete(tokens, limits),
        b'a' => parse_arithmetic(tokens, limits),
        b'n' => Parsed::Request(Request::MetaNoop),
        b'e' => parse_debug(tokens, limits),
        _ => Parsed::Error(ErrorReply::ERROR),
    }
}

/// The checks `md` and `ma` share before pre-parsing; `Err` is the reply.
fn common_checks(tokens: &[Bytes], limits: &ProtocolLimits) -> Result<(), ErrorReply> {
    if tokens.len() < 2 {
        return Err(ErrorReply::ERROR);
    }
    if tokens[1].len() > limits.max_key_len {
        return Err(ErrorReply::BAD_FORMAT);
    }
    if tokens.len() + 1 > COUNT_TOKENS_MAX {
        return Err(ErrorReply::OPTIONS_TOO_LONG);
    }
    Ok(())
}

/// `mg <key> <flags>*`.
fn parse_get(tokens: &[Bytes], limits: &ProtocolLimits) -> Parsed {
    if tokens.len() < 2 {
        return Parsed::Error(ErrorReply::ERROR);
    }
    if tokens[1].len() > limits.max_key_len {
        return Parsed::Error(ErrorReply::BAD_FORMAT);
    }
    if tokens.len() + 1 > COUNT_TOKENS_MAX {
        return Parsed::Error(ErrorReply::MG_OPTIONS_TOO_LONG);
    }
    let of = match MetaFlags::parse(&tokens[1], &tokens[2..]) {
        Ok(of) => of,
        Err(error) => return Parsed::Error(error),
    };
    Parsed::Request(Request::MetaGet(MetaGet {
        key: of.meta_key(),
        returns: of.returns.clone(),
        value: of.value,
        quiet: of.quiet,
        read: Read {
            touch: ranked(of.touch, of.order.touch),
            vivify: ranked(of.vivify, of.order.vivify),
            recache: ranked(of.recache, of.order.recache),
            ttl_rank: of.order.ttl,
            cas: of.new_cas,
        },
        no_bump: of.no_bump,
    }))
}

/// The store's mode for `ms`'s `M` byte and `C` token: `C` turns set and replace into a CAS
/// store, add ignores it, append and prepend check it (in [`StoreExtra::compare`]).
fn set_mode(mode: Option<u8>, compare: Option<u64>) -> Option<Mode> {
    Some(match (mode, compare) {
        (None | Some(b'S' | b'R'), Some(cas)) => Mode::Cas(cas),
        (None | Some(b'S'), None) => Mode::Set,
        (Some(b'R'), None) => Mode::Replace,
        (Some(b'E'), _) => Mode::Add,
        (Some(b'A'), _) => Mode::Append,
        (Some(b'P'), _) => Mode::Prepend,
        (Some(_), _) => return None,
    })
}

/// `ms <key> <datalen> <flags>*`: errors after `<datalen>` swallow the data block.
fn parse_set(tokens: &[Bytes], limits: &ProtocolLimits) -> Parsed {
    if tokens.len() < 2 {
        return Parsed::Error(ErrorReply::ERROR);
    }
    if tokens[1].len() > limits.max_key_len || tokens.len() == 2 {
        return Parsed::Error(ErrorReply::BAD_FORMAT);
    }
    if tokens.len() + 1 > COUNT_TOKENS_MAX {
        return Parsed::Error(ErrorReply::OPTIONS_TOO_LONG);
    }
    let len = match parse_i32(&tokens[2]) {
        Some(len) if (0..=i32::MAX - 2).contains(&len) => len as usize,
        _ => return Parsed::Error(ErrorReply::BAD_FORMAT),
    };
    let of = match MetaFlags::parse(&tokens[1], &tokens[3..]) {
        Ok(of) => of,
        Err(error) => return Parsed::Swallow(error, len),
    };
    let Some(mode) = set_mode(of.mode, of.cas) else {
        return Parsed::Swallow(ErrorReply::MS_MODE, len);
    };
    let returns =
        of.returns_only(|r| matches!(r, ReturnFlag::Opaque(_) | ReturnFlag::Key | ReturnFlag::Cas));
    let set = MetaSet {
        key: of.meta_key(),
        value: Bytes::new(),
        flags: of.client_flags,
        exptime: of.touch.unwrap_or_default(),
        mode,
        extra: StoreExtra {
            compare: of.cas,
            invalidate: of.invalidate,
            cas: of.new_cas,
        },
        vivify: of.vivify,
        quiet: of.quiet,
        returns,
    };
    Parsed::Data(DataHeader {
        request: Request::MetaSet(set),
        len,
    })
}

/// `md <key> <flags>*`.
fn parse_delete(tokens: &[Bytes], limits: &ProtocolLimits) -> Parsed {
    if let Err(error) = common_checks(tokens, limits) {
        return Parsed::Error(error);
    }
    let of = match MetaFlags::parse(&tokens[1], &tokens[2..]) {
        Ok(of) => of,
        Err(ErrorReply::OPAQUE_TOO_LONG) => return Parsed::Error(ErrorReply::OPAQUE_TOO_LONG),
        Err(_) => return Parsed::Error(ErrorReply::INVALID_OR_DUPLICATE_FLAG),
    };
    Parsed::Request(Request::MetaDelete(MetaDelete {
        key: of.meta_key(),
        delete: Delete {
            compare: of.cas,
            invalidate: of.invalidate.then_some(of.touch),
            cas: of.new_cas,
        },
        quiet: of.quiet,
        returns: of.returns_only(|r| matches!(r, ReturnFlag::Opaque(_) | ReturnFlag::Key)),
    }))
}

/// `ma <key> <flags>*`.
fn parse_arithmetic(tokens: &[Bytes], limits: &ProtocolLimits) -> Parsed {
    if let Err(error) = common_checks(tokens, limits) {
        return Parsed::Error(error);
    }
    let of = match MetaFlags::parse(&tokens[1], &tokens[2..]) {
        Ok(of) => of,
        Err(ErrorReply::OPAQUE_TOO_LONG) => return Parsed::Error(ErrorReply::OPAQUE_TOO_LONG),
        Err(_) => return Parsed::Error(ErrorReply::INVALID_OR_DUPLICATE_FLAG),
    };
    let decrement = match of.mode {
        None | Some(b'I' | b'+') => false,
        Some(b'D' | b'-') => true,
        Some(_) => return Parsed::Error(ErrorReply::MA_MODE),
    };
    let returns = of.returns_only(|r| {
        matches!(
            r,
            ReturnFlag::Opaque(_) | ReturnFlag::Key | ReturnFlag::Cas | ReturnFlag::Ttl
        )
    });
    let count = Count {
        decrement,
        delta: of.delta,
        compare: of.cas,
        touch: ranked(of.touch, of.order.touch),
        vivify: ranked(of.vivify, of.order.vivify),
        initial: of.initial,
        ttl_rank: of.order.ttl,
        cas: of.new_cas,
    };
    Parsed::Request(Request::MetaArithmetic(MetaArithmetic {
        key: of.meta_key(),
        count,
        value: of.value,
        quiet: of.quiet,
        returns,
    }))
}

/// `me <key> [b]`.
fn parse_debug(tokens: &[Bytes], limits: &ProtocolLimits) -> Parsed {
    if tokens.len() < 2 || tokens[1].len() > limits.max_key_len {
        return Parsed::Error(ErrorReply::BAD_FORMAT);
    }
    let base64 = tokens.get(2).is_some_and(|t| t[..] == b"b"[..]);
    let bytes = if base64 {
        match base64::decode(&tokens[1]) {
            Some(decoded) => Bytes::from(decoded),
            None => return Parsed::Error(ErrorReply::BAD_FORMAT),
        }
    } else {
        tokens[1].clone()
    };
    Parsed::Request(Request::MetaDebug(MetaDebug {
        key: MetaKey { bytes, base64 },
    }))
}

/// What a reply can report for each return flag; flags without a fact are left out.
#[derive(Clone, Copy, Debug)]
pub struct Facts<'a> {
    /// The request's key.
    pub key: &'a MetaKey,
    /// The item, on a hit (`s f l h`).
    pub item: Option<&'a Item>,
    /// The CAS unique to print for `c`.
    pub cas: Option<u64>,
    /// The TTL to print for `t`: `Some(None)` prints `-1`.
    pub ttl: Option<Option<u32>>,
}

/// Writes ` k<key>`, base64-encoded and followed by ` b` for binary keys.
fn compose_key(out: &mut BytesMut, key: &MetaKey) {
    out.put_slice(b" k");
    if key.base64 {
        out.put_slice(&base64::encode(&key.bytes));
        out.put_slice(b" b");
    } else {
        out.put_slice(&key.bytes);
    }
}

/// Writes one return flag, if `facts` has what it reports.
fn compose_flag(out: &mut BytesMut, flag: &ReturnFlag, facts: &Facts<'_>) {
    let item = facts.item;
    let number = |out: &mut BytesMut, tag: &[u8], value: u64| {
        out.put_slice(tag);
        put_decimal(out, value);
    };
    match (flag, item) {
        (ReturnFlag::Size, Some(item)) => number(out, b" s", item.value.len() as u64),
        (ReturnFlag::Flags, Some(item)) => number(out, b" f", u64::from(item.flags)),
        (ReturnFlag::LastAccess, Some(item)) => number(out, b" l", u64::from(item.last_access)),
        (ReturnFlag::Hit, Some(item)) => number(out, b" h", u64::from(item.fetched)),
        (ReturnFlag::Cas, _) => {
            if let Some(cas) = facts.cas {
                number(out, b" c", cas);
            }
        }
        (ReturnFlag::Ttl, _) => match facts.ttl {
            Some(Some(secs)) => number(out, b" t", u64::from(secs)),
            Some(None) => out.put_slice(b" t-1"),
            None => {}
        },
        (ReturnFlag::Opaque(token), _) => {
            out.put_u8(b' ');
            out.put_slice(token);
        }
        (ReturnFlag::Key, _) => compose_key(out, facts.key),
        _ => {}
    }
}

/// Writes the requested return flags, in request order.
pub fn compose_flags(out: &mut BytesMut, returns: &[ReturnFlag], facts: &Facts<'_>) {
    for flag in returns {
        compose_flag(out, flag, facts);
    }
}

/// Writes a status line: `code`, the return flags, `\r\n` (`HD`, `NS`, `EX`, `NF`, `EN`).
pub fn compose_status(out: &mut BytesMut, code: &[u8], returns: &[ReturnFlag], facts: &Facts<'_>) {
    out.put_slice(code);
    compose_flags(out, returns, facts);
    out.put_slice(b"\r\n");
}

/// The `mg` hit: `VA <len> <flags>\r\n<data>\r\n` or `HD <flags>\r\n`, then `Z X W`.
pub fn compose_get_hit(out: &mut BytesMut, get: &MetaGet, item: &Item, lease: Lease) {
    if get.value {
        out.put_slice(b"VA ");
        put_decimal(out, item.value.len() as u64);
    } else {
        out.put_slice(b"HD");
    }
    let facts = Facts {
        key: &get.key,
        item: Some(item),
        cas: Some(item.cas),
        ttl: Some(item.ttl),
    };
    compose_flags(out, &get.returns, &facts);
    for (on, flag) in [
        (lease.token_sent, &b" Z"[..]),
        (lease.stale, b" X"),
        (lease.won, b" W"),
    ] {
        if on {
            out.put_slice(flag);
        }
    }
    out.put_slice(b"\r\n");
    if get.value {
        out.put_slice(&item.value);
        out.put_slice(b"\r\n");
    }
}

/// The `ma` success: `HD <flags>\r\n` or `VA <len> <flags>\r\n<number>\r\n`.
pub fn compose_arithmetic(out: &mut BytesMut, ma: &MetaArithmetic, value: u64, facts: &Facts<'_>) {
    let number = value.to_string();
    if ma.value {
        let _ = write!(out, "VA {}", number.len());
    } else {
        out.put_slice(b"HD");
    }
    compose_flags(out, &ma.returns, facts);
    out.put_slice(b"\r\n");
    if ma.value {
        out.put_slice(number.as_bytes());
        out.put_slice(b"\r\n");
    }
}

/// The `ms` reply: the store's outcome with the stored item's CAS, or why it refused.
pub fn compose_set(out: &mut BytesMut, ms: &MetaSet, stored: &Result<(Outcome, u64), StoreError>) {
    let (code, cas): (&[u8], u64) = match stored {
        Ok((Outcome::Stored, cas)) => (b"HD", *cas),
        Ok((Outcome::Exists, _)) => (b"EX", 0),
        Ok((Outcome::NotFound, _)) => (b"NF", 0),
        // A key the store's own limit refuses was never stored either.
        Ok(_) | Err(StoreError::KeyLength { .. }) => (b"NS", 0),
        Err(StoreError::TooLarge { .. }) => return ErrorReply::TOO_LARGE.compose(out),
        Err(_) => return ErrorReply::OUT_OF_MEMORY_STORING.compose(out),
    };
    let facts = Facts {
        key: &ms.key,
        item: None,
        cas: Some(cas),
        ttl: None,
    };
    compose_status(out, code, &ms.returns, &facts);
}

/// The `me` hit: `ME <key> exp=… la=… cas=… fetch=… cls=… size=…\r\n`.
pub fn compose_debug(out: &mut BytesMut, key: &MetaKey, debug: &ItemDebug) {
    out.put_slice(b"ME ");
    if key.base64 {
        out.put_slice(&base64::encode(&key.bytes));
    } else {
        out.put_slice(&key.bytes);
    }
    let fetch = if debug.fetched { "yes" } else { "no" };
    let _ = write!(
        out,
        " exp={} la={} cas={} fetch={} cls={} size={}\r\n",
        debug.exp, debug.last_access, debug.cas, fetch, debug.class, debug.size
    );
}
