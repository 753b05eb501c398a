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

use super::base64;
use super::numeric::{parse_i32, parse_u32, parse_u64};
use super::request::{
    ArithmeticMode, Exptime, GetOrder, MetaArithmetic, MetaDebug, MetaDelete, MetaGet, MetaKey,
    MetaSet, Request, ReturnFlag, SetMode,
};
use super::storage::{Item, ItemDebug, Lease, StoreOutcome};
use super::text::{DataHeader, ErrorReply, Parsed};
use super::ProtocolLimits;

/// memcached's `MFLAG_MAX_OPT_LENGTH`: at most this many tokens, counting its end marker.
const COUNT_TOKENS_MAX: usize = 20;
/// memcached's `MFLAG_MAX_OPAQUE_LENGTH`: longest `O` token, including the `O`.
const SIZE_OPAQUE_MAX: usize = 32;

/// Meta error lines.
impl ErrorReply {
    /// `mg` with 20 or more tokens.
    pub const MG_OPTIONS_TOO_LONG: Self = Self("CLIENT_ERROR options flags are too long");
    /// `ms`, `md`, `ma` with 20 or more tokens.
    pub const OPTIONS_TOO_LONG: Self = Self("CLIENT_ERROR options flags too long");
    /// A flag given twice (or a byte ≥ 127).
    pub const DUPLICATE_FLAG: Self = Self("CLIENT_ERROR duplicate flag");
    /// An unknown flag.
    pub const INVALID_FLAG: Self = Self("CLIENT_ERROR invalid flag");
    /// `md`/`ma`: any pre-parse failure.
    pub const INVALID_OR_DUPLICATE_FLAG: Self = Self("CLIENT_ERROR invalid or duplicate flag");
    /// A numeric token that does not parse (`N T R C E`).
    pub const BAD_TOKEN: Self = Self("CLIENT_ERROR bad token in command line format");
    /// `J` does not parse.
    pub const BAD_INITIAL: Self = Self("CLIENT_ERROR invalid numeric initial value");
    /// `D` does not parse.
    pub const BAD_DELTA: Self = Self("CLIENT_ERROR invalid numeric delta value");
    /// A `b` key that is not valid base64.
    pub const BAD_KEY_ENCODING: Self = Self("CLIENT_ERROR error decoding key");
    /// An `M` token that is not exactly two bytes.
    pub const MODE_LENGTH: Self = Self("CLIENT_ERROR incorrect length for M token");
    /// An unknown `ms` mode.
    pub const MS_MODE: Self = Self("CLIENT_ERROR invalid mode for ms M token");
    /// An unknown `ma` mode.
    pub const MA_MODE: Self = Self("CLIENT_ERROR invalid mode for ma M token");
    /// An `O` token over 32 bytes.
    pub const OPAQUE_TOO_LONG: Self = Self("CLIENT_ERROR opaque token too long");
}

/// Every flag memcached's pre-parser understands, for any meta command.
#[derive(Clone, Debug, Default)]
pub struct MetaFlags {
    /// The key, decoded when `b` was given.
    pub key: Bytes,
    /// `b`.
    pub base64: bool,
    /// `N<exptime>`.
    pub vivify: Option<Exptime>,
    /// `T<exptime>`.
    pub touch: Option<Exptime>,
    /// `R<exptime>`.
    pub recache: Option<Exptime>,
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
    /// memcached's `_meta_flag_preparse` over `flags`; the last numeric error wins, while a
    /// duplicate or unknown flag stops at once.
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
            of.note_order(flag, rank as u8);
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
        let exptime = |a: &[u8]| parse_i32(a).map(|e| Some(Exptime(e)));
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
            b'F' => number(
                parse_u32(arg),
                &mut self.client_flags,
                ErrorReply::BAD_TOKEN,
                failed,
            ),
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
    fn note_order(&mut self, flag: u8, rank: u8) {
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
        touch: of.touch,
        vivify: of.vivify,
        recache: of.recache,
        no_bump: of.no_bump,
        new_cas: of.new_cas,
        order: of.order,
    }))
}

/// The `ms` mode for an `M` byte.
fn set_mode(mode: Option<u8>) -> Option<SetMode> {
    Some(match mode {
        None | Some(b'S') => SetMode::Set,
        Some(b'E') => SetMode::Add,
        Some(b'A') => SetMode::Append,
        Some(b'P') => SetMode::Prepend,
        Some(b'R') => SetMode::Replace,
        Some(_) => return None,
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
    let Some(mode) = set_mode(of.mode) else {
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
        cas: of.cas,
        new_cas: of.new_cas,
        invalidate: of.invalidate,
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
        cas: of.cas,
        new_cas: of.new_cas,
        invalidate: of.invalidate,
        exptime: of.touch,
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
    let mode = match of.mode {
        None | Some(b'I' | b'+') => ArithmeticMode::Increment,
        Some(b'D' | b'-') => ArithmeticMode::Decrement,
        Some(_) => return Parsed::Error(ErrorReply::MA_MODE),
    };
    let returns = of.returns_only(|r| {
        matches!(
            r,
            ReturnFlag::Opaque(_) | ReturnFlag::Key | ReturnFlag::Cas | ReturnFlag::Ttl
        )
    });
    Parsed::Request(Request::MetaArithmetic(MetaArithmetic {
        key: of.meta_key(),
        mode,
        delta: of.delta,
        initial: of.initial,
        vivify: of.vivify,
        touch: of.touch,
        cas: of.cas,
        new_cas: of.new_cas,
        value: of.value,
        quiet: of.quiet,
        returns,
        order: of.order,
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
    let _ = match (flag, item) {
        (ReturnFlag::Size, Some(item)) => write!(out, " s{}", item.value.len()),
        (ReturnFlag::Flags, Some(item)) => write!(out, " f{}", item.flags),
        (ReturnFlag::LastAccess, Some(item)) => write!(out, " l{}", item.last_access),
        (ReturnFlag::Hit, Some(item)) => write!(out, " h{}", u8::from(item.fetched)),
        (ReturnFlag::Cas, _) => match facts.cas {
            Some(cas) => write!(out, " c{cas}"),
            None => Ok(()),
        },
        (ReturnFlag::Ttl, _) => match facts.ttl {
            Some(Some(secs)) => write!(out, " t{secs}"),
            Some(None) => write!(out, " t-1"),
            None => Ok(()),
        },
        (ReturnFlag::Opaque(token), _) => {
            out.put_u8(b' ');
            out.put_slice(token);
            Ok(())
        }
        (ReturnFlag::Key, _) => {
            compose_key(out, facts.key);
            Ok(())
        }
        _ => Ok(()),
    };
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
        let _ = write!(out, "VA {}", item.value.len());
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

/// The `ms` reply for a store outcome (errors are composed by the caller).
pub fn compose_set(out: &mut BytesMut, ms: &MetaSet, outcome: StoreOutcome) {
    let (code, cas): (&[u8], u64) = match outcome {
        StoreOutcome::Stored(cas) => (b"HD", cas),
        StoreOutcome::NotStored => (b"NS", 0),
        StoreOutcome::Exists => (b"EX", 0),
        StoreOutcome::NotFound => (b"NF", 0),
        StoreOutcome::TooLarge => return ErrorReply::TOO_LARGE.compose(out),
        StoreOutcome::OutOfMemory => return ErrorReply::OUT_OF_MEMORY_STORING.compose(out),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::text::parse_line;

    fn parse(line: &[u8]) -> Parsed {
        parse_line(&Bytes::copy_from_slice(line), &ProtocolLimits::default())
    }

    fn key(k: &str) -> MetaKey {
        MetaKey {
            bytes: Bytes::copy_from_slice(k.as_bytes()),
            base64: false,
        }
    }

    fn opaque(o: &str) -> ReturnFlag {
        ReturnFlag::Opaque(Bytes::copy_from_slice(o.as_bytes()))
    }

    fn mg(line: &[u8]) -> MetaGet {
        match parse(line) {
            Parsed::Request(Request::MetaGet(get)) => get,
            other => panic!("not an mg: {other:?}"),
        }
    }

    fn composed(f: impl FnOnce(&mut BytesMut)) -> Vec<u8> {
        let mut out = BytesMut::new();
        f(&mut out);
        out.to_vec()
    }

    #[test]
    fn mg_flags_in_order() {
        let get = mg(b"mg foo s v t c f k O123 q T30 N5 R10 u E77 l h");
        assert_eq!(get.key, key("foo"));
        use ReturnFlag::*;
        let expected = vec![Size, Ttl, Cas, Flags, Key, opaque("O123"), LastAccess, Hit];
        assert_eq!(get.returns, expected);
        assert!(get.value && get.quiet && get.no_bump);
        assert_eq!(
            (get.touch, get.vivify, get.recache),
            (Some(Exptime(30)), Some(Exptime(5)), Some(Exptime(10)))
        );
        assert_eq!(get.new_cas, Some(77));
    }

    #[test]
    fn mg_keeps_the_order_of_t_n_r_and_ttl() {
        let get = mg(b"mg foo t T30 v R10 N5");
        let order = GetOrder {
            ttl: 0,
            touch: 1,
            recache: 3,
            vivify: 4,
        };
        assert_eq!(get.order, order);
        let get = mg(b"mg foo v");
        assert_eq!(get.order, GetOrder::default());
        assert_eq!(get.order.touch, GetOrder::ABSENT);
    }

    #[test]
    fn mg_base64_key() {
        let get = mg(b"mg Zm9v b k v");
        assert_eq!(
            get.key,
            MetaKey {
                bytes: Bytes::from_static(b"foo"),
                base64: true
            }
        );
        assert_eq!(
            parse(b"mg Zm9 b"),
            Parsed::Error(ErrorReply::BAD_KEY_ENCODING)
        );
    }

    #[test]
    fn mg_errors() {
        assert_eq!(parse(b"mg"), Parsed::Error(ErrorReply::ERROR));
        assert_eq!(
            parse(b"mg k v v"),
            Parsed::Error(ErrorReply::DUPLICATE_FLAG)
        );
        assert_eq!(parse(b"mg k z"), Parsed::Error(ErrorReply::INVALID_FLAG));
        assert_eq!(parse(b"mg k Tx"), Parsed::Error(ErrorReply::BAD_TOKEN));
        assert_eq!(parse(b"mg k Tx z"), Parsed::Error(ErrorReply::INVALID_FLAG));
        assert_eq!(parse(b"mg k MSS"), Parsed::Error(ErrorReply::MODE_LENGTH));
        let long_opaque = format!("mg k O{}", "1".repeat(32));
        assert_eq!(
            parse(long_opaque.as_bytes()),
            Parsed::Error(ErrorReply::OPAQUE_TOO_LONG)
        );
        let long_key = format!("mg {} v", "k".repeat(251));
        assert_eq!(
            parse(long_key.as_bytes()),
            Parsed::Error(ErrorReply::BAD_FORMAT)
        );
        let many = format!("mg k{}", " O1 v s t c f k l h q u".repeat(2));
        assert_eq!(
            parse(many.as_bytes()),
            Parsed::Error(ErrorReply::MG_OPTIONS_TOO_LONG)
        );
        assert_eq!(parse(b"mz k"), Parsed::Error(ErrorReply::ERROR));
    }

    #[test]
    fn ms_header() {
        let Parsed::Data(header) = parse(b"ms foo 2 T90 F1 MA C5 I q O9 k c N3 E8") else {
            panic!("not data");
        };
        assert_eq!(header.len, 2);
        let Request::MetaSet(set) = header.request else {
            panic!("not ms")
        };
        assert_eq!(set.key, key("foo"));
        assert_eq!(
            (set.flags, set.exptime, set.mode),
            (1, Exptime(90), SetMode::Append)
        );
        assert_eq!(
            (set.cas, set.new_cas, set.vivify),
            (Some(5), Some(8), Some(Exptime(3)))
        );
        assert!(set.invalidate && set.quiet);
        assert_eq!(
            set.returns,
            vec![opaque("O9"), ReturnFlag::Key, ReturnFlag::Cas]
        );
    }

    #[test]
    fn ms_errors_swallow_only_after_the_length() {
        assert_eq!(parse(b"ms"), Parsed::Error(ErrorReply::ERROR));
        assert_eq!(parse(b"ms k"), Parsed::Error(ErrorReply::BAD_FORMAT));
        assert_eq!(parse(b"ms k x"), Parsed::Error(ErrorReply::BAD_FORMAT));
        assert_eq!(parse(b"ms k -1"), Parsed::Error(ErrorReply::BAD_FORMAT));
        assert_eq!(parse(b"ms k 3 MX"), Parsed::Swallow(ErrorReply::MS_MODE, 3));
        assert_eq!(
            parse(b"ms k 3 Fx"),
            Parsed::Swallow(ErrorReply::BAD_TOKEN, 3)
        );
        assert_eq!(
            parse(b"ms k 3 z"),
            Parsed::Swallow(ErrorReply::INVALID_FLAG, 3)
        );
        assert_eq!(
            parse(b"ms k 3 T1 T2"),
            Parsed::Swallow(ErrorReply::DUPLICATE_FLAG, 3)
        );
        let many = format!("ms k 1{}", " O1 v s t c f k l h".repeat(2));
        assert_eq!(
            parse(many.as_bytes()),
            Parsed::Error(ErrorReply::OPTIONS_TOO_LONG)
        );
    }

    #[test]
    fn md_and_ma() {
        let Parsed::Request(Request::MetaDelete(md)) = parse(b"md foo q I T30 C4 O1 k") else {
            panic!("not md");
        };
        assert!(md.quiet && md.invalidate);
        assert_eq!((md.exptime, md.cas), (Some(Exptime(30)), Some(4)));
        assert_eq!(md.returns, vec![opaque("O1"), ReturnFlag::Key]);
        assert_eq!(
            parse(b"md foo z"),
            Parsed::Error(ErrorReply::INVALID_OR_DUPLICATE_FLAG)
        );
        let Parsed::Request(Request::MetaArithmetic(ma)) = parse(b"ma n N0 J10 D5 MD v t c") else {
            panic!("not ma");
        };
        assert_eq!(
            (ma.mode, ma.delta, ma.initial),
            (ArithmeticMode::Decrement, 5, 10)
        );
        assert_eq!(ma.vivify, Some(Exptime(0)));
        assert_eq!(ma.returns, vec![ReturnFlag::Ttl, ReturnFlag::Cas]);
        let Parsed::Request(Request::MetaArithmetic(ma)) = parse(b"ma n") else {
            panic!()
        };
        assert_eq!((ma.mode, ma.delta), (ArithmeticMode::Increment, 1));
        assert_eq!(parse(b"ma n MX"), Parsed::Error(ErrorReply::MA_MODE));
        assert_eq!(
            parse(b"ma n Dx"),
            Parsed::Error(ErrorReply::INVALID_OR_DUPLICATE_FLAG)
        );
    }

    #[test]
    fn mn_and_me() {
        assert_eq!(parse(b"mn"), Parsed::Request(Request::MetaNoop));
        assert_eq!(parse(b"me"), Parsed::Error(ErrorReply::BAD_FORMAT));
        let me = Request::MetaDebug(MetaDebug { key: key("foo") });
        assert_eq!(parse(b"me foo"), Parsed::Request(me));
        let me = Request::MetaDebug(MetaDebug {
            key: MetaKey {
                bytes: Bytes::from_static(b"foo"),
                base64: true,
            },
        });
        assert_eq!(parse(b"me Zm9v b"), Parsed::Request(me));
    }

    fn item() -> Item {
        Item {
            value: Bytes::from_static(b"hi"),
            flags: 30,
            cas: 9,
            ttl: Some(78),
            last_access: 2,
            fetched: true,
        }
    }

    #[test]
    fn compose_mg_replies() {
        let get = mg(b"mg foo s v t c f l h k O99");
        let out = composed(|o| compose_get_hit(o, &get, &item(), Lease::default()));
        assert_eq!(out, b"VA 2 s2 t78 c9 f30 l2 h1 kfoo O99\r\nhi\r\n");
        let get = mg(b"mg foo");
        let lease = Lease {
            won: true,
            token_sent: true,
            stale: true,
        };
        assert_eq!(
            composed(|o| compose_get_hit(o, &get, &item(), lease)),
            b"HD Z X W\r\n"
        );
        // What memcached sends for each state: a winner never also sees `Z`.
        for (won, token_sent, stale, reply) in [
            (true, false, false, &b"HD W\r\n"[..]),
            (false, true, false, b"HD Z\r\n"),
            (true, false, true, b"HD X W\r\n"),
            (false, true, true, b"HD Z X\r\n"),
        ] {
            let lease = Lease {
                won,
                token_sent,
                stale,
            };
            assert_eq!(
                composed(|o| compose_get_hit(o, &get, &item(), lease)),
                reply
            );
        }
        let get = mg(b"mg Zm9v b k t");
        let no_ttl = Item {
            ttl: None,
            ..item()
        };
        let out = composed(|o| compose_get_hit(o, &get, &no_ttl, Lease::default()));
        assert_eq!(out, b"HD kZm9v b t-1\r\n");
        let miss = Facts {
            key: &get.key,
            item: None,
            cas: None,
            ttl: None,
        };
        assert_eq!(
            composed(|o| compose_status(o, b"EN", &get.returns, &miss)),
            b"EN kZm9v b\r\n"
        );
    }

    #[test]
    fn compose_ms_md_ma_me() {
        let Parsed::Data(header) = parse(b"ms foo 2 c O5 k") else {
            panic!()
        };
        let Request::MetaSet(set) = header.request else {
            panic!()
        };
        assert_eq!(
            composed(|o| compose_set(o, &set, StoreOutcome::Stored(12))),
            b"HD c12 O5 kfoo\r\n"
        );
        assert_eq!(
            composed(|o| compose_set(o, &set, StoreOutcome::NotStored)),
            b"NS c0 O5 kfoo\r\n"
        );
        let too_large = composed(|o| compose_set(o, &set, StoreOutcome::TooLarge));
        assert_eq!(too_large, b"SERVER_ERROR object too large for cache\r\n");
        let Parsed::Request(Request::MetaArithmetic(ma)) = parse(b"ma n v c t") else {
            panic!()
        };
        let facts = Facts {
            key: &ma.key,
            item: None,
            cas: Some(3),
            ttl: Some(None),
        };
        assert_eq!(
            composed(|o| compose_arithmetic(o, &ma, 10, &facts)),
            b"VA 2 c3 t-1\r\n10\r\n"
        );
        let debug = ItemDebug {
            exp: -1,
            last_access: 4,
            cas: 2,
            fetched: false,
            class: 1,
            size: 66,
        };
        let out = composed(|o| compose_debug(o, &key("foo"), &debug));
        assert_eq!(out, b"ME foo exp=-1 la=4 cas=2 fetch=no cls=1 size=66\r\n");
    }
}
