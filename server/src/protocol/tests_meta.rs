//! Byte-literal tests of the meta protocol ([`super::meta`]): flags, parse and compose.

use super::meta::*;
use super::parsed::*;
use super::request::*;
use super::storage::*;
use super::ProtocolLimits;
use crate::protocol::text::parse_line;
use bytes::{Bytes, BytesMut};
use podkv_store::{Mode, Outcome, Rank, Read, StoreError, StoreExtra};

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
    let exptime = |flag: Option<(i64, Rank)>| flag.map(|(seconds, _)| seconds);
    assert_eq!(
        (
            exptime(get.read.touch),
            exptime(get.read.vivify),
            exptime(get.read.recache)
        ),
        (Some(30), Some(5), Some(10))
    );
    assert_eq!(get.read.cas, Some(77));
}

#[test]
fn mg_keeps_the_order_of_t_n_r_and_ttl() {
    let get = mg(b"mg foo t T30 v R10 N5");
    let rank = |flag: Option<(i64, Rank)>| flag.map(|(_, rank)| rank);
    let order = (
        get.read.ttl_rank,
        rank(get.read.touch),
        rank(get.read.recache),
        rank(get.read.vivify),
    );
    assert_eq!(
        order,
        (Rank(0), Some(Rank(1)), Some(Rank(3)), Some(Rank(4)))
    );
    let get = mg(b"mg foo v");
    assert_eq!(get.read, Read::default());
    assert_eq!(get.read.ttl_rank, Rank::NONE);
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
    assert_eq!((set.flags, set.exptime, set.mode), (1, 90, Mode::Append));
    let extra = StoreExtra {
        compare: Some(5),
        invalidate: true,
        cas: Some(8),
    };
    assert_eq!((set.extra, set.vivify), (extra, Some(3)));
    assert!(set.quiet);
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
    // `F` sets no message of its own (memcached 1.6.18): the default, or another flag's.
    assert_eq!(
        parse(b"ms k 3 Fx"),
        Parsed::Swallow(ErrorReply::BAD_FORMAT, 3)
    );
    assert_eq!(
        parse(b"ms k 3 Tx Fx"),
        Parsed::Swallow(ErrorReply::BAD_TOKEN, 3)
    );
    assert_eq!(
        parse(b"ms k 3 Fx Tx"),
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
    assert!(md.quiet && md.delete.invalidate.is_some());
    assert_eq!(
        (md.delete.invalidate, md.delete.compare),
        (Some(Some(30)), Some(4))
    );
    assert_eq!(md.returns, vec![opaque("O1"), ReturnFlag::Key]);
    assert_eq!(
        parse(b"md foo z"),
        Parsed::Error(ErrorReply::INVALID_OR_DUPLICATE_FLAG)
    );
    let Parsed::Request(Request::MetaArithmetic(ma)) = parse(b"ma n N0 J10 D5 MD v t c") else {
        panic!("not ma");
    };
    assert_eq!(
        (ma.count.decrement, ma.count.delta, ma.count.initial),
        (true, 5, 10)
    );
    assert_eq!(ma.count.vivify.map(|(exptime, _)| exptime), Some(0));
    assert_eq!(ma.returns, vec![ReturnFlag::Ttl, ReturnFlag::Cas]);
    let Parsed::Request(Request::MetaArithmetic(ma)) = parse(b"ma n") else {
        panic!()
    };
    assert_eq!((ma.count.decrement, ma.count.delta), (false, 1));
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
        created: false,
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
            created: false,
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
        composed(|o| compose_set(o, &set, &Ok((Outcome::Stored, 12)))),
        b"HD c12 O5 kfoo\r\n"
    );
    assert_eq!(
        composed(|o| compose_set(o, &set, &Ok((Outcome::NotStored, 0)))),
        b"NS c0 O5 kfoo\r\n"
    );
    let refused = Err(StoreError::TooLarge { len: 2, max: 1 });
    let too_large = composed(|o| compose_set(o, &set, &refused));
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
