//! Byte-literal tests of the text protocol ([`super::text`]): parse and compose.

use super::parsed::*;
use super::request::*;
use super::text::*;
use super::ProtocolLimits;
use bytes::{Bytes, BytesMut};
use podkv_store::{Count, Counted, Mode, Outcome, StoreError};

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
        refused: false,
    });
    assert_eq!(parse(b"get a b"), Parsed::Request(get.clone()));
    assert_eq!(parse(b"bget a b"), Parsed::Request(get));
    let gets = Request::Gets(Retrieve {
        keys: keys(&["k"]),
        touch: None,
        refused: false,
    });
    assert_eq!(parse(b"gets k"), Parsed::Request(gets));
    let gat = Request::Gat(Retrieve {
        keys: keys(&["k"]),
        touch: Some(-1),
        refused: false,
    });
    assert_eq!(parse(b"gat -1 k"), Parsed::Request(gat));
    let gats = Request::Gats(Retrieve {
        keys: vec![],
        touch: Some(10),
        refused: false,
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

fn store(mode: Mode, key: &str, flags: u32, exptime: i64, noreply: bool) -> Request {
    Request::Store(Store {
        mode,
        key: b(key),
        flags,
        exptime,
        value: Bytes::new(),
        noreply,
    })
}

#[test]
fn storage_headers() {
    let set = store(Mode::Set, "k", 5, 0, false);
    assert_eq!(
        parse(b"set k 5 0 3"),
        Parsed::Data(DataHeader {
            request: set,
            len: 3
        })
    );
    let add = store(Mode::Add, "k", 0, -1, true);
    assert_eq!(
        parse(b"add k 0 -1 0 noreply"),
        Parsed::Data(DataHeader {
            request: add,
            len: 0
        })
    );
    let cas = store(Mode::Cas(99), "k", 1, 2, false);
    assert_eq!(
        parse(b"cas k 1 2 4 99"),
        Parsed::Data(DataHeader {
            request: cas,
            len: 4
        })
    );
    let append = store(Mode::Append, "k", 0, 0, false);
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
    let incr = Request::Delta(Delta {
        key: b("n"),
        count: Count {
            delta: 5,
            ..Count::default()
        },
        noreply: false,
    });
    assert_eq!(parse(b"incr n 5"), Parsed::Request(incr));
    let decr = Request::Delta(Delta {
        key: b("n"),
        count: Count {
            decrement: true,
            delta: u64::MAX,
            ..Count::default()
        },
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
        exptime: 10,
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
    let flush = |delay, noreply| Parsed::Request(Request::FlushAll(FlushAll { delay, noreply }));
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
    let stored = |outcome| composed(|o| compose_store(o, &Ok((outcome, 1))));
    assert_eq!(stored(Outcome::Stored), b"STORED\r\n");
    assert_eq!(stored(Outcome::NotStored), b"NOT_STORED\r\n");
    assert_eq!(stored(Outcome::Exists), b"EXISTS\r\n");
    assert_eq!(stored(Outcome::NotFound), b"NOT_FOUND\r\n");
    let refused = |error| composed(|o| compose_store(o, &Err(error)));
    let too_large = refused(StoreError::TooLarge { len: 2, max: 1 });
    assert_eq!(too_large, b"SERVER_ERROR object too large for cache\r\n");
    let oom = refused(StoreError::OutOfMemory);
    assert_eq!(oom, b"SERVER_ERROR out of memory storing object\r\n");
    let deleted = composed(|o| compose_key_outcome(o, &Ok(Outcome::Deleted)));
    assert_eq!(deleted, b"DELETED\r\n");
    let touched = composed(|o| compose_key_outcome(o, &Ok(Outcome::Touched)));
    assert_eq!(touched, b"TOUCHED\r\n");
    let missed = composed(|o| compose_key_outcome(o, &Ok(Outcome::NotFound)));
    assert_eq!(missed, b"NOT_FOUND\r\n");
    let zero = Counted::Value {
        value: 0,
        cas: 1,
        expiry: 0,
        shown_expiry: 0,
        created: false,
    };
    assert_eq!(composed(|o| compose_delta(o, &Ok(zero))), b"0\r\n");
    let non_numeric = composed(|o| compose_delta(o, &Err(StoreError::NonNumeric)));
    assert_eq!(
        non_numeric,
        b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
    );
    let stats = composed(|o| compose_stats(o, &[("pid".into(), "1".into())]));
    assert_eq!(stats, b"STAT pid 1\r\nEND\r\n");
}
