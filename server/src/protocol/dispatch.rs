//! Executes decoded [`Frame`]s against any [`Storage`] and writes memcached's exact replies.
//!
//! # Map
//! - [`dispatch`]: a frame → reply bytes appended to `out`, and whether to keep going.
//! - [`execute`]: one `match` over [`Request`], one small function per command family.
//! - Quiet modes: text `noreply` composes the reply and then cuts it off (so errors vanish
//!   too, as in memcached); meta `q` hides only the nominal status (`EN` for `mg`, `HD` for
//!   `ms`/`md`, success for `ma`), never errors.

use bytes::BytesMut;
use podkv_store::{ttl_of, Counted, Outcome, StoreError};

use super::codec::Frame;
use super::meta::{self, Facts};
use super::request::{
    MetaArithmetic, MetaDelete, MetaGet, MetaSet, Request, Retrieve, ReturnFlag, Stats, StatsGroup,
    Store, TooLarge,
};
use super::storage::Storage;
use super::text::{self, ErrorReply};

/// Whether the connection goes on after a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Flow {
    /// Keep reading requests.
    Continue,
    /// Write what is in `out`, then close (`quit`, over-long line, HTTP probe).
    Close,
    /// Write what is in `out`, then answer the rest of the input before reading more: the
    /// replies reached [`SIZE_OUTPUT_MAX`](super::connection::SIZE_OUTPUT_MAX) (only
    /// `drain` says this).
    Full,
}

/// Runs one decoded frame, appending its reply (if any) to `out`.
pub fn dispatch<S: Storage + ?Sized>(storage: &S, frame: Frame, out: &mut BytesMut) -> Flow {
    match frame {
        Frame::Request(request) => execute(storage, request, out),
        Frame::Error(error) => {
            error.compose(out);
            Flow::Continue
        }
        Frame::Close => Flow::Close,
    }
}

/// Runs `compose`, then drops what it wrote when `quiet`.
fn quietly(out: &mut BytesMut, quiet: bool, compose: impl FnOnce(&mut BytesMut)) {
    let mark = out.len();
    compose(out);
    if quiet {
        out.truncate(mark);
    }
}

/// A storage command, run by the store in its mode (append and prepend keep the item's
/// flags and exptime there); the reply is hidden by `noreply`.
#[inline]
fn store<S: Storage + ?Sized>(storage: &S, s: &Store, out: &mut BytesMut) {
    let stored = storage.store(s.mode, &s.key, &s.value, s.flags, s.exptime);
    quietly(out, s.noreply, |o| text::compose_store(o, &stored));
}

/// Runs one request, appending its reply to `out`.
///
/// This is the command table, one arm per command, so it stays whole.
pub fn execute<S: Storage + ?Sized>(storage: &S, request: Request, out: &mut BytesMut) -> Flow {
    match request {
        Request::Get(r) | Request::Gat(r) => retrieve(storage, &r, false, out),
        Request::Gets(r) | Request::Gats(r) => retrieve(storage, &r, true, out),
        Request::Store(s) => store(storage, &s, out),
        Request::TooLarge(refused) => too_large(storage, &refused, out),
        Request::Delete(d) => quietly(out, d.noreply, |o| {
            text::compose_key_outcome(o, &storage.delete(&d.key))
        }),
        Request::Delta(d) => quietly(out, d.noreply, |o| {
            text::compose_delta(o, &storage.arithmetic(&d.key, d.count))
        }),
        Request::Touch(t) => quietly(out, t.noreply, |o| {
            text::compose_key_outcome(o, &storage.touch(&t.key, t.exptime))
        }),
        Request::FlushAll(f) => quietly(out, f.noreply, |o| {
            storage.flush_all(f.delay);
            text::compose_line(o, "OK")
        }),
        Request::Verbosity(v) => quietly(out, v.noreply, |o| {
            storage.verbosity(v.level);
            text::compose_line(o, "OK")
        }),
        Request::Stats(s) => stats(storage, &s, out),
        Request::Version => text::compose_line(out, &format!("VERSION {}", storage.version())),
        Request::Quit => return Flow::Close,
        Request::Shutdown => ErrorReply::SHUTDOWN_DISABLED.compose(out),
        Request::MetaNoop => text::compose_line(out, "MN"),
        Request::MetaDebug(me) => match storage.meta_debug(&me.key.bytes) {
            Some(debug) => meta::compose_debug(out, &me.key, &debug),
            None => text::compose_line(out, "EN"),
        },
        Request::MetaGet(mg) => meta_get(storage, &mg, out),
        Request::MetaSet(ms) => meta_set(storage, &ms, out),
        Request::MetaDelete(md) => meta_delete(storage, &md, out),
        Request::MetaArithmetic(ma) => meta_arithmetic(storage, &ma, out),
    }
    Flow::Continue
}

/// `get`, `gets`, `gat`, `gats`: one `VALUE` per hit, in key order, then `END`.
fn retrieve<S: Storage + ?Sized>(storage: &S, r: &Retrieve, with_cas: bool, out: &mut BytesMut) {
    if r.refused {
        if let Some(exptime) = r.touch {
            for key in &r.keys {
                let _ = storage.gat(key, exptime);
            }
        }
        return ErrorReply::BAD_FORMAT.compose(out);
    }
    for key in &r.keys {
        let Some(exptime) = r.touch else {
            let _ = storage.get_with(key, &mut |flags, cas, value| {
                text::compose_value(out, key, flags, value, with_cas.then_some(cas))
            });
            continue;
        };
        if let Some(item) = storage.gat(key, exptime) {
            text::compose_value(
                out,
                key,
                item.flags,
                &item.value,
                with_cas.then_some(item.cas),
            );
        }
    }
    text::compose_end(out);
}

/// A store the codec refused as over-size before its data arrived: the store's rule for an
/// item that cannot be made decides whether the old one goes (`set`, every `ms`).
fn too_large<S: Storage + ?Sized>(storage: &S, refused: &TooLarge, out: &mut BytesMut) {
    if refused.mode.removes_old_when_unmade(refused.meta) {
        let _ = storage.delete(&refused.key);
    }
    quietly(out, refused.noreply, |o| ErrorReply::TOO_LARGE.compose(o));
}

/// `stats …`.
fn stats<S: Storage + ?Sized>(storage: &S, s: &Stats, out: &mut BytesMut) {
    let lines = match &s.group {
        StatsGroup::General => storage.stats(b""),
        StatsGroup::Named(group) => storage.stats(group),
        StatsGroup::Reset => {
            storage.stats_reset();
            return text::compose_line(out, "RESET");
        }
        StatsGroup::Detail(arg) => return stats_detail(arg, out),
        StatsGroup::CacheDump => return ErrorReply::CACHEDUMP_DISABLED.compose(out),
    };
    match lines {
        Some(lines) => text::compose_stats(out, &lines),
        None => ErrorReply::ERROR.compose(out),
    }
}

/// `stats detail on|off|dump`: podkv keeps no per-prefix detail, so `dump` is empty.
fn stats_detail(arg: &[u8], out: &mut BytesMut) {
    match arg {
        b"on" | b"off" => text::compose_line(out, "OK"),
        b"dump" => text::compose_end(out),
        _ => ErrorReply::DETAIL_USAGE.compose(out),
    }
}

/// The facts a miss or a failed meta command can still report: `O` and `k`.
fn key_facts(key: &super::request::MetaKey) -> Facts<'_> {
    Facts {
        key,
        item: None,
        cas: None,
        ttl: None,
    }
}

/// `mg`.
fn meta_get<S: Storage + ?Sized>(storage: &S, mg: &MetaGet, out: &mut BytesMut) {
    match storage.meta_get(&mg.key.bytes, mg.read, mg.no_bump) {
        Some(hit) => meta::compose_get_hit(out, mg, &hit.item, hit.lease),
        None if mg.quiet => {}
        None => meta::compose_status(out, b"EN", &mg.returns, &key_facts(&mg.key)),
    }
}

/// `ms`.
fn meta_set<S: Storage + ?Sized>(storage: &S, ms: &MetaSet, out: &mut BytesMut) {
    let stored = storage.meta_set(
        ms.mode,
        &ms.key.bytes,
        &ms.value,
        ms.flags,
        ms.exptime,
        ms.extra,
    );
    if !(ms.quiet && matches!(stored, Ok((Outcome::Stored, _)))) {
        meta::compose_set(out, ms, &stored);
    }
}

/// `md`.
fn meta_delete<S: Storage + ?Sized>(storage: &S, md: &MetaDelete, out: &mut BytesMut) {
    let code: &[u8] = match storage.meta_delete(&md.key.bytes, md.delete) {
        Ok(Outcome::Deleted) if md.quiet => return,
        Ok(Outcome::Deleted) => b"HD",
        Ok(Outcome::Exists) => b"EX",
        Ok(_) | Err(StoreError::KeyLength { .. }) => b"NF",
        // No room for the stale copy `I` makes, even after eviction.
        Err(_) => return ErrorReply::OUT_OF_MEMORY.compose(out),
    };
    meta::compose_status(out, code, &md.returns, &key_facts(&md.key));
}

/// `ma`.
fn meta_arithmetic<S: Storage + ?Sized>(storage: &S, ma: &MetaArithmetic, out: &mut BytesMut) {
    let code: &[u8] = match storage.meta_arithmetic(&ma.key.bytes, ma.count) {
        // `q` hides success, but not the creation of an item by `N`.
        Ok(Counted::Value { created: false, .. }) if ma.quiet => return,
        Ok(Counted::Value {
            value,
            cas,
            shown_expiry,
            ..
        }) => {
            let facts = Facts {
                key: &ma.key,
                item: None,
                cas: Some(cas),
                ttl: Some(ttl_of(shown_expiry, storage.now())),
            };
            return meta::compose_arithmetic(out, ma, value, &facts);
        }
        Ok(Counted::NotFound) | Err(StoreError::KeyLength { .. }) => b"NF",
        Ok(Counted::Exists) => b"EX",
        Err(StoreError::NonNumeric) => return ErrorReply::NON_NUMERIC.compose(out),
        Err(_) => return ErrorReply::OUT_OF_MEMORY.compose(out),
    };
    let keys_only: Vec<ReturnFlag> = ma
        .returns
        .iter()
        .filter(|r| matches!(r, ReturnFlag::Opaque(_) | ReturnFlag::Key))
        .cloned()
        .collect();
    meta::compose_status(out, code, &keys_only, &key_facts(&ma.key));
}
