//! Property tests of the decoder's limits and of pipelining, against `ModelStorage`.
//!
//! - `decoder_holds_its_limits`: random, split, oversized and garbage input never panics,
//!   never leaves more than [`ProtocolLimits::max_buffered`] bytes buffered, consumes bytes
//!   for every frame it yields, and only yields requests within the key and value limits.
//! - `pipelining_is_split_invariant`: N requests in one buffer give the same reply bytes
//!   whether fed whole, split in two at every byte boundary, or byte by byte.

use bytes::BytesMut;
use proptest::prelude::*;
use tokio_util::codec::Decoder;

use super::connection::drain;
use super::model::ModelStorage;
use super::request::Request;
use super::{Frame, MemcacheCodec, ProtocolLimits};

/// Small limits, so random input reaches every boundary.
const LIMITS: ProtocolLimits = ProtocolLimits {
    max_key_len: 8,
    max_item_size: 24,
    max_line_len: 40,
    max_multiget_line_len: 80,
};

/// Asserts that a decoded request is within `limits`.
fn assert_within(request: &Request, limits: &ProtocolLimits) {
    let key_ok = |k: &[u8]| assert!(k.len() <= limits.max_key_len, "key {} bytes", k.len());
    let value_ok = |v: &[u8]| assert!(v.len() <= limits.max_item_size, "value {} bytes", v.len());
    match request {
        Request::Get(r) | Request::Gets(r) | Request::Gat(r) | Request::Gats(r) => {
            r.keys.iter().for_each(|k| key_ok(k))
        }
        Request::Store(s) => {
            key_ok(&s.key);
            value_ok(&s.value);
        }
        Request::TooLarge(t) => key_ok(&t.key),
        Request::Delete(d) => key_ok(&d.key),
        Request::Delta(d) => key_ok(&d.key),
        Request::Touch(t) => key_ok(&t.key),
        Request::MetaGet(m) => key_ok(&m.key.bytes),
        Request::MetaSet(m) => {
            key_ok(&m.key.bytes);
            value_ok(&m.value);
        }
        Request::MetaDelete(m) => key_ok(&m.key.bytes),
        Request::MetaArithmetic(m) => key_ok(&m.key.bytes),
        Request::MetaDebug(m) => key_ok(&m.key.bytes),
        _ => {}
    }
}

/// A key: usually short, sometimes over the limit.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![4 => "[a-d]{1,3}", 1 => "[a-d]{7,10}"]
}

/// A data block: arbitrary bytes, sometimes over the item limit.
fn block() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![4 => prop::collection::vec(any::<u8>(), 0..10), 1 => prop::collection::vec(any::<u8>(), 20..30)]
}

/// A storage command with its data block (sometimes with a bad terminator).
fn storage_command() -> impl Strategy<Value = Vec<u8>> {
    let verb = prop::sample::select(vec![
        "set", "add", "replace", "append", "prepend", "cas", "ms",
    ]);
    (verb, key(), block(), any::<bool>(), any::<bool>()).prop_map(
        |(verb, key, data, noreply, bad)| {
            let tail = if noreply { " noreply" } else { "" };
            let mut line = match verb {
                "cas" => format!("cas {key} 1 0 {} 2{tail}\r\n", data.len()),
                "ms" => format!(
                    "ms {key} {} c k{}\r\n",
                    data.len(),
                    if noreply { " q" } else { "" }
                ),
                _ => format!("{verb} {key} 3 0 {}{tail}\r\n", data.len()),
            }
            .into_bytes();
            line.extend_from_slice(&data);
            line.extend_from_slice(if bad { b"xy" } else { b"\r\n" });
            line
        },
    )
}

/// A command without a data block, valid or not.
fn line_command() -> impl Strategy<Value = Vec<u8>> {
    let template = prop::sample::select(vec![
        "get {k}",
        "gets {k} {k}",
        "gat 10 {k}",
        "delete {k}",
        "delete {k} noreply",
        "incr {k} 3",
        "decr {k} 1",
        "touch {k} 5",
        "mg {k} v c f s t k O1",
        "mg {k} q v",
        "md {k} q",
        "md {k} I",
        "ma {k} N0 J5 v",
        "ma {k} MD D2 c",
        "mn",
        "me {k}",
        "flush_all",
        "version",
        "stats",
        "verbosity 1",
        "bogus {k}",
        "mg {k} v v",
        "",
    ]);
    (template, key()).prop_map(|(t, k)| format!("{}\r\n", t.replace("{k}", &k)).into_bytes())
}

/// Anything: commands, garbage bytes, long runs without a newline.
fn chunk() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => storage_command(),
        3 => line_command(),
        2 => prop::collection::vec(any::<u8>(), 0..20),
        1 => (1usize..120).prop_map(|n| vec![b'x'; n]),
        1 => (1usize..120).prop_map(|n| { let mut v = b"get ".to_vec(); v.resize(n + 4, b'k'); v }),
        1 => Just(b"set k 0 0 100000\r\n".to_vec()),
    ]
}

/// Feeds `pieces` through one codec, checking the limits after every call.
fn check_decoder(pieces: &[Vec<u8>]) {
    let mut codec = MemcacheCodec::new(LIMITS);
    let mut buf = BytesMut::new();
    for piece in pieces {
        buf.extend_from_slice(piece);
        loop {
            let before = buf.len();
            match codec.decode(&mut buf).expect("decoding never fails") {
                Some(frame) => {
                    assert!(buf.len() < before, "a frame consumes bytes");
                    if let Frame::Request(request) = &frame {
                        assert_within(request, &LIMITS);
                    }
                }
                None => {
                    assert!(
                        buf.len() <= LIMITS.max_buffered(),
                        "{} bytes buffered",
                        buf.len()
                    );
                    break;
                }
            }
        }
    }
}

/// Splits `input` at the given fractions.
fn split(input: &[u8], cuts: &[prop::sample::Index]) -> Vec<Vec<u8>> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c.index(input.len() + 1)).collect();
    points.sort_unstable();
    let mut pieces = Vec::new();
    let mut start = 0;
    for point in points.into_iter().chain([input.len()]) {
        pieces.push(input[start..point].to_vec());
        start = point;
    }
    pieces
}

/// The reply bytes for `pieces` fed one after another on one fresh connection.
fn replies(pieces: &[&[u8]]) -> Vec<u8> {
    let model = ModelStorage::at(1_700_000_000);
    let mut codec = MemcacheCodec::new(LIMITS);
    let (mut input, mut output) = (BytesMut::new(), BytesMut::new());
    for piece in pieces {
        input.extend_from_slice(piece);
        let _ = drain(&model, &mut codec, &mut input, &mut output, false).unwrap();
    }
    output.to_vec()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn decoder_holds_its_limits(
        chunks in prop::collection::vec(chunk(), 1..12),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let input = chunks.concat();
        check_decoder(&split(&input, &cuts));
        check_decoder(&input.chunks(1).map(<[u8]>::to_vec).collect::<Vec<_>>());
    }

    #[test]
    fn pipelining_is_split_invariant(
        commands in prop::collection::vec(prop_oneof![storage_command(), line_command()], 1..8),
    ) {
        let input = commands.concat();
        // A line over the limit is answered or refused depending on whether its newline came
        // in the same read, as in memcached (see `codec::MemcacheCodec::next_line`).
        prop_assume!(input.split(|&b| b == b'\n').all(|line| line.len() <= LIMITS.max_line_len));
        let whole = replies(&[&input]);
        for at in 0..=input.len() {
            prop_assert_eq!(&replies(&[&input[..at], &input[at..]]), &whole, "split at {}", at);
        }
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        prop_assert_eq!(&replies(&bytes), &whole);
    }
}
