//! Conversation tables: (request bytes, exact reply bytes), run through codec + dispatch
//! against `ModelStorage`. Each table is one connection; each row is one client write.

use bytes::BytesMut;

use super::connection::drain;
use super::dispatch::Flow;
use super::model::ModelStorage;
use super::{MemcacheCodec, ProtocolLimits};

/// The Unix time the model's clock starts at.
const NOW: u64 = 1_700_000_000;

/// One client write and the exact bytes the server must answer.
type Row<'a> = (&'a [u8], &'a [u8]);

/// Plays `rows` on one connection and checks every reply; returns the last flow.
fn converse_flow(model: &ModelStorage, limits: ProtocolLimits, rows: &[Row<'_>]) -> Flow {
    let mut codec = MemcacheCodec::new(limits);
    let mut input = BytesMut::new();
    let mut flow = Flow::Continue;
    for (n, (request, expected)) in rows.iter().enumerate() {
        let mut output = BytesMut::new();
        input.extend_from_slice(request);
        flow = drain(model, &mut codec, &mut input, &mut output, false).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&output),
            String::from_utf8_lossy(expected),
            "row {n}: {:?}",
            String::from_utf8_lossy(request)
        );
    }
    flow
}

/// Plays `rows` against `model` with `limits`; the connection must stay open.
fn converse_with(model: &ModelStorage, limits: ProtocolLimits, rows: &[Row<'_>]) {
    assert_eq!(
        converse_flow(model, limits, rows),
        Flow::Continue,
        "connection closed"
    );
}

/// Plays `rows` against a fresh model with default limits.
fn converse(rows: &[Row<'_>]) {
    converse_with(&ModelStorage::at(NOW), ProtocolLimits::default(), rows)
}

/// Plays `rows` against a fresh model; returns whether the connection closes.
fn closes(rows: &[Row<'_>]) -> Flow {
    converse_flow(&ModelStorage::at(NOW), ProtocolLimits::default(), rows)
}

#[test]
fn storage_commands() {
    converse(&[
        (b"set k 5 0 3\r\nabc\r\n", b"STORED\r\n"),
        (b"get k\r\n", b"VALUE k 5 3\r\nabc\r\nEND\r\n"),
        (b"add k 0 0 1\r\nx\r\n", b"NOT_STORED\r\n"),
        (b"add n 0 0 1\r\nx\r\n", b"STORED\r\n"),
        (b"replace z 0 0 1\r\nx\r\n", b"NOT_STORED\r\n"),
        (b"replace k 7 0 2\r\nxy\r\n", b"STORED\r\n"),
        (b"append k 0 0 2\r\n12\r\n", b"STORED\r\n"),
        (b"prepend k 0 0 2\r\n00\r\n", b"STORED\r\n"),
        (b"get k\r\n", b"VALUE k 7 6\r\n00xy12\r\nEND\r\n"),
        (b"append z 0 0 1\r\nx\r\n", b"NOT_STORED\r\n"),
        (
            b"get k n z\r\n",
            b"VALUE k 7 6\r\n00xy12\r\nVALUE n 0 1\r\nx\r\nEND\r\n",
        ),
    ]);
}

#[test]
fn cas_conversation() {
    converse(&[
        (b"set k 0 0 1\r\na\r\n", b"STORED\r\n"),
        (b"gets k\r\n", b"VALUE k 0 1 1\r\na\r\nEND\r\n"),
        (b"cas k 0 0 1 2\r\nb\r\n", b"EXISTS\r\n"),
        (b"cas k 0 0 1 1\r\nb\r\n", b"STORED\r\n"),
        (b"cas k 0 0 1 1\r\nc\r\n", b"EXISTS\r\n"),
        (b"cas gone 0 0 1 1\r\nc\r\n", b"NOT_FOUND\r\n"),
        (b"gets k\r\n", b"VALUE k 0 1 2\r\nb\r\nEND\r\n"),
    ]);
}

#[test]
fn binary_safe_values_and_keys() {
    converse(&[
        (
            b"set bin\x01\x7f 0 0 6\r\n\r\n\0\xff\r\n\r\n",
            b"STORED\r\n",
        ),
        (
            b"get bin\x01\x7f\r\n",
            b"VALUE bin\x01\x7f 0 6\r\n\r\n\0\xff\r\n\r\nEND\r\n",
        ),
        (b"set empty 0 0 0\r\n\r\n", b"STORED\r\n"),
        (b"get empty\r\n", b"VALUE empty 0 0\r\n\r\nEND\r\n"),
    ]);
}

#[test]
fn noreply_everywhere() {
    converse(&[
        (b"set k 0 0 1 noreply\r\n1\r\n", b""),
        (b"add k 0 0 1 noreply\r\n2\r\n", b""),
        (b"replace k 0 0 1 noreply\r\n3\r\n", b""),
        (b"append k 0 0 1 noreply\r\n4\r\n", b""),
        (b"prepend k 0 0 1 noreply\r\n5\r\n", b""),
        (b"gets k\r\n", b"VALUE k 0 3 4\r\n534\r\nEND\r\n"),
        (b"cas k 0 0 1 4 noreply\r\n6\r\n", b""),
        (b"incr k 3 noreply\r\n", b""),
        (b"decr k 2 noreply\r\n", b""),
        (b"get k\r\n", b"VALUE k 0 1\r\n7\r\nEND\r\n"),
        (b"touch k 10 noreply\r\n", b""),
        (b"delete k noreply\r\n", b""),
        (b"delete k noreply\r\n", b""),
        (b"flush_all noreply\r\n", b""),
        (b"flush_all 0 noreply\r\n", b""),
        (b"verbosity 0 noreply\r\n", b""),
        (b"incr k x noreply\r\n", b""),
        (b"set k 0 0 1 noreply\r\nab\r\n", b"ERROR\r\n"),
        (b"get k\r\n", b"END\r\n"),
    ]);
}

#[test]
fn incr_decr() {
    converse(&[
        (b"incr n 1\r\n", b"NOT_FOUND\r\n"),
        (b"set n 0 0 2\r\n10\r\n", b"STORED\r\n"),
        (b"incr n 5\r\n", b"15\r\n"),
        (b"decr n 100\r\n", b"0\r\n"),
        (b"set n 0 0 3\r\n100\r\n", b"STORED\r\n"),
        (b"decr n 1\r\n", b"99\r\n"),
        (b"get n\r\n", b"VALUE n 0 3\r\n99 \r\nEND\r\n"),
        (b"set n 0 0 20\r\n18446744073709551615\r\n", b"STORED\r\n"),
        (b"incr n 2\r\n", b"1\r\n"),
        (
            b"incr n -1\r\n",
            b"CLIENT_ERROR invalid numeric delta argument\r\n",
        ),
        (
            b"incr n abc\r\n",
            b"CLIENT_ERROR invalid numeric delta argument\r\n",
        ),
        (b"set t 0 0 2\r\nhi\r\n", b"STORED\r\n"),
        (
            b"incr t 1\r\n",
            b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
        ),
        (b"set e 0 0 0\r\n\r\n", b"STORED\r\n"),
        (
            b"decr e 1\r\n",
            b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
        ),
    ]);
}

#[test]
fn touch_gat_and_expiry() {
    let model = ModelStorage::at(NOW);
    let limits = ProtocolLimits::default();
    converse_with(
        &model,
        limits,
        &[
            (b"set k 0 10 1\r\na\r\n", b"STORED\r\n"),
            (b"set dead 0 -1 1\r\na\r\n", b"STORED\r\n"),
            (b"get dead\r\n", b"END\r\n"),
            (b"touch k 100\r\n", b"TOUCHED\r\n"),
            (b"touch nope 100\r\n", b"NOT_FOUND\r\n"),
            (
                b"touch k x\r\n",
                b"CLIENT_ERROR invalid exptime argument\r\n",
            ),
            (b"gat 200 k nope\r\n", b"VALUE k 0 1\r\na\r\nEND\r\n"),
            (b"gats 300 k\r\n", b"VALUE k 0 1 1\r\na\r\nEND\r\n"),
            (b"gat 10\r\n", b"END\r\n"),
            (
                b"gat soon k\r\n",
                b"CLIENT_ERROR invalid exptime argument\r\n",
            ),
        ],
    );
    model.advance(299);
    converse_with(
        &model,
        limits,
        &[(b"get k\r\n", b"VALUE k 0 1\r\na\r\nEND\r\n")],
    );
    model.advance(1);
    converse_with(&model, limits, &[(b"get k\r\n", b"END\r\n")]);
}

#[test]
fn delete_forms() {
    converse(&[
        (b"set k 0 0 1\r\na\r\n", b"STORED\r\n"),
        (b"delete k 0\r\n", b"DELETED\r\n"),
        (b"delete k\r\n", b"NOT_FOUND\r\n"),
        (
            b"delete k 10\r\n",
            b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n",
        ),
        (b"delete\r\n", b"ERROR\r\n"),
    ]);
}

#[test]
fn flush_all_with_delay() {
    let model = ModelStorage::at(NOW);
    let limits = ProtocolLimits::default();
    converse_with(
        &model,
        limits,
        &[
            (b"set a 0 0 1\r\na\r\n", b"STORED\r\n"),
            (b"flush_all 10\r\n", b"OK\r\n"),
            (b"get a\r\n", b"VALUE a 0 1\r\na\r\nEND\r\n"),
            (
                b"flush_all x\r\n",
                b"CLIENT_ERROR invalid exptime argument\r\n",
            ),
        ],
    );
    model.advance(10);
    converse_with(
        &model,
        limits,
        &[
            (b"get a\r\n", b"END\r\n"),
            (b"set b 0 0 1\r\nb\r\n", b"STORED\r\n"),
            (b"flush_all\r\n", b"OK\r\n"),
            (b"get b\r\n", b"END\r\n"),
        ],
    );
}

#[test]
fn bad_lines() {
    converse(&[
        (b"\r\n", b"ERROR\r\n"),
        (b"bogus\r\n", b"ERROR\r\n"),
        (b"get\r\n", b"ERROR\r\n"),
        (b"set k 0 0\r\n", b"ERROR\r\n"),
        (
            b"set k abc 0 1\r\n",
            b"CLIENT_ERROR bad command line format\r\n",
        ),
        (
            b"set k 0 0 -1\r\n",
            b"CLIENT_ERROR bad command line format\r\n",
        ),
        (
            b"set k 0 0 1\r\nab\r\n",
            b"CLIENT_ERROR bad data chunk\r\nERROR\r\n",
        ),
        (
            b"set k 0 0 4\r\nerror\r\n",
            b"CLIENT_ERROR bad data chunk\r\nERROR\r\n",
        ),
        (b"verbosity\r\n", b"ERROR\r\n"),
        (b"verbosity 1\r\n", b"OK\r\n"),
        (b"shutdown\r\n", b"ERROR: shutdown not enabled\r\n"),
        (b"version\r\n", b"VERSION 1.6.0-model\r\n"),
    ]);
}

#[test]
fn over_long_key_does_not_swallow_the_block() {
    let key = "k".repeat(251);
    let set = format!("set {key} 0 0 5\r\nhello\r\n");
    let get = format!("get {key}\r\n");
    converse(&[
        (
            set.as_bytes(),
            b"CLIENT_ERROR bad command line format\r\nERROR\r\n",
        ),
        (get.as_bytes(), b"CLIENT_ERROR bad command line format\r\n"),
    ]);
    let ok = format!("set {} 0 0 1\r\na\r\n", "k".repeat(250));
    converse(&[(ok.as_bytes(), b"STORED\r\n")]);
}

#[test]
fn over_size_value_is_swallowed_and_old_item_dropped() {
    let limits = ProtocolLimits {
        max_item_size: 8,
        ..ProtocolLimits::default()
    };
    let model = ModelStorage::at(NOW);
    converse_with(
        &model,
        limits,
        &[
            (b"set k 0 0 3\r\nold\r\n", b"STORED\r\n"),
            (
                b"add k 0 0 9\r\n123456789\r\n",
                b"SERVER_ERROR object too large for cache\r\n",
            ),
            (b"get k\r\n", b"VALUE k 0 3\r\nold\r\nEND\r\n"),
            (
                b"set k 0 0 9\r\n1234",
                b"SERVER_ERROR object too large for cache\r\n",
            ),
            (b"56789\r\nget k\r\n", b"END\r\n"),
            (b"set k 0 0 9 noreply\r\nget k\r\nget\r\n", b"ERROR\r\n"),
            (b"set k 0 0 9 noreply\r\n123456789\r\nget k\r\n", b"END\r\n"),
            (
                b"ms k 9 T0\r\n123456789\r\nmn\r\n",
                b"SERVER_ERROR object too large for cache\r\nMN\r\n",
            ),
        ],
    );
}

#[test]
fn out_of_memory() {
    let model = ModelStorage::at(NOW);
    let limits = ProtocolLimits::default();
    converse_with(&model, limits, &[(b"set k 0 0 1\r\na\r\n", b"STORED\r\n")]);
    model.set_out_of_memory(true);
    converse_with(
        &model,
        limits,
        &[
            (
                b"set k 0 0 1\r\nb\r\n",
                b"SERVER_ERROR out of memory storing object\r\n",
            ),
            (b"get k\r\n", b"END\r\n"),
            (
                b"ms k 1\r\nb\r\n",
                b"SERVER_ERROR out of memory storing object\r\n",
            ),
        ],
    );
}

#[test]
fn pipelined_requests_in_one_buffer() {
    converse(&[(
        b"set a 0 0 1\r\n1\r\nset b 0 0 1\r\n2\r\nget a b\r\ndelete a\r\nget a\r\nmn\r\n",
        b"STORED\r\nSTORED\r\nVALUE a 0 1\r\n1\r\nVALUE b 0 1\r\n2\r\nEND\r\nDELETED\r\nEND\r\nMN\r\n",
    )]);
}

#[test]
fn partial_requests_across_writes() {
    converse(&[
        (b"se", b""),
        (b"t k 0 0 5\r", b""),
        (b"\nhel", b""),
        (b"lo\r", b""),
        (
            b"\nget k\r\nge",
            b"STORED\r\nVALUE k 0 5\r\nhello\r\nEND\r\n",
        ),
        (b"t k\r\n", b"VALUE k 0 5\r\nhello\r\nEND\r\n"),
    ]);
}

#[test]
fn closing_conversations() {
    let quit: Row<'_> = (
        b"version\r\nquit\r\nversion\r\n",
        b"VERSION 1.6.0-model\r\n",
    );
    assert_eq!(closes(&[quit]), Flow::Close);
    assert_eq!(closes(&[(b"GET / HTTP/1.1\r\n", b"")]), Flow::Close);
    assert_eq!(closes(&[(&[b'a'; 3000], b"")]), Flow::Close);
    assert_eq!(
        closes(&[
            (b"version\r\n", b"VERSION 1.6.0-model\r\n"),
            (&[b' '; 2100], b"")
        ]),
        Flow::Close
    );
    let long_get = format!("get {}\r\n", vec!["k"; 2000].join(" "));
    converse(&[(long_get.as_bytes(), b"END\r\n")]);
}

#[test]
fn stats_groups() {
    converse(&[
        (b"set a 0 0 1\r\na\r\n", b"STORED\r\n"),
        (
            b"stats\r\n",
            b"STAT curr_items 1\r\nSTAT total_items 1\r\nEND\r\n",
        ),
        (
            b"stats settings\r\n",
            b"STAT item_size_max 1048576\r\nEND\r\n",
        ),
        (b"stats items\r\n", b"END\r\n"),
        (b"stats slabs\r\n", b"END\r\n"),
        (b"stats bogus\r\n", b"ERROR\r\n"),
        (b"stats reset\r\n", b"RESET\r\n"),
        (b"stats detail on\r\n", b"OK\r\n"),
        (
            b"stats detail\r\n",
            b"CLIENT_ERROR usage: stats detail on|off|dump\r\n",
        ),
        (
            b"stats cachedump 1 0\r\n",
            b"CLIENT_ERROR stats cachedump not allowed\r\n",
        ),
    ]);
}

#[test]
fn meta_get_and_set() {
    converse(&[
        (b"mg foo v\r\n", b"EN\r\n"),
        (b"mg foo v q\r\nmn\r\n", b"MN\r\n"),
        (b"mg foo v k O123\r\n", b"EN kfoo O123\r\n"),
        (b"ms foo 2 T0 F30\r\nhi\r\n", b"HD\r\n"),
        (
            b"mg foo s v t f c h\r\n",
            b"VA 2 s2 t-1 f30 c1 h0\r\nhi\r\n",
        ),
        (b"mg foo h k\r\n", b"HD h1 kfoo\r\n"),
        (b"mg foo\r\n", b"HD\r\n"),
        (b"ms foo 2 c O7 k\r\nyo\r\n", b"HD c2 O7 kfoo\r\n"),
        (b"ms foo 2 q\r\nyo\r\nmn\r\n", b"MN\r\n"),
        (b"ms foo 2 ME\r\nyo\r\n", b"NS\r\n"),
        (b"ms bar 2 MR\r\nyo\r\n", b"NS\r\n"),
        (b"ms foo 1 MA\r\n!\r\n", b"HD\r\n"),
        (b"ms foo 1 MP\r\n<\r\n", b"HD\r\n"),
        (b"mg foo v\r\n", b"VA 4\r\n<yo!\r\n"),
        (b"ms foo 1 C1\r\nx\r\n", b"EX\r\n"),
        (b"ms nope 1 C1\r\nx\r\n", b"NF\r\n"),
        (
            b"ms foo 1 MX\r\nx\r\n",
            b"CLIENT_ERROR invalid mode for ms M token\r\n",
        ),
        (
            b"ms foo 1 q MX\r\nx\r\n",
            b"CLIENT_ERROR invalid mode for ms M token\r\n",
        ),
        // memcached 1.6.18 takes modes in upper case only.
        (
            b"ms foo 1 Ms\r\nx\r\n",
            b"CLIENT_ERROR invalid mode for ms M token\r\n",
        ),
        (
            b"ms foo 1 Me\r\nx\r\n",
            b"CLIENT_ERROR invalid mode for ms M token\r\n",
        ),
        (
            b"ms foo 1\r\nxy\r\n",
            b"CLIENT_ERROR bad data chunk\r\nERROR\r\n",
        ),
        (b"ms foo x\r\n", b"CLIENT_ERROR bad command line format\r\n"),
        (b"mg foo v v\r\n", b"CLIENT_ERROR duplicate flag\r\n"),
        (b"mg foo !\r\n", b"CLIENT_ERROR invalid flag\r\n"),
        (b"mg\r\n", b"ERROR\r\n"),
    ]);
}

#[test]
fn meta_ttl_touch_and_base64() {
    converse(&[
        (b"ms Zm9v 3 b T100\r\nbar\r\n", b"HD\r\n"),
        (b"mg foo v t\r\n", b"VA 3 t100\r\nbar\r\n"),
        (b"mg Zm9v b k v T50 t\r\n", b"VA 3 kZm9v b t50\r\nbar\r\n"),
        (b"ms Zm9v 1 b k T100\r\nx\r\n", b"HD kZm9v b\r\n"),
        (b"mg AAEC b k v\r\n", b"EN kAAEC b\r\n"),
        (b"mg Zm9 b v\r\n", b"CLIENT_ERROR error decoding key\r\n"),
        (
            b"me Zm9v b\r\n",
            b"ME Zm9v exp=-100 la=0 cas=2 fetch=no cls=1 size=54\r\n",
        ),
        (b"me nope\r\n", b"EN\r\n"),
        (b"me\r\n", b"CLIENT_ERROR bad command line format\r\n"),
    ]);
}

#[test]
fn meta_delete_and_stale_while_revalidate() {
    converse(&[
        (b"md foo\r\n", b"NF\r\n"),
        (b"md foo q O1 k\r\n", b"NF O1 kfoo\r\n"),
        (b"ms foo 1\r\na\r\n", b"HD\r\n"),
        (b"md foo C99\r\n", b"EX\r\n"),
        (b"md foo I T30\r\n", b"HD\r\n"),
        (b"mg foo v c\r\n", b"VA 1 c2 X W\r\na\r\n"),
        (b"mg foo v c\r\n", b"VA 1 c2 Z X\r\na\r\n"),
        (b"ms foo 1 C1 I\r\nb\r\n", b"HD\r\n"),
        (b"md foo q\r\nmn\r\n", b"MN\r\n"),
        (b"mg foo\r\n", b"EN\r\n"),
        (
            b"md foo z\r\n",
            b"CLIENT_ERROR invalid or duplicate flag\r\n",
        ),
    ]);
}

#[test]
fn meta_vivify_and_recache() {
    converse(&[
        (b"mg foo s c v N30 t\r\n", b"VA 0 s0 c1 t30 W\r\n\r\n"),
        (b"mg foo s v N30\r\n", b"VA 0 s0 Z\r\n\r\n"),
        (b"ms bar 1 T10\r\nx\r\n", b"HD\r\n"),
        (b"mg bar v R30\r\n", b"VA 1 W\r\nx\r\n"),
        (b"mg bar v R30\r\n", b"VA 1 Z\r\nx\r\n"),
    ]);
}

/// memcached applies `T`, `N`, `R` and prints `t` in flag order; `ms I` with an older CAS
/// stores a stale item keeping its TTL and sent token; `ms` has no append autovivify.
#[test]
fn meta_flag_order_and_stale_stores() {
    converse(&[
        (b"mg t5 t N30\r\nmg t5 t\r\n", b"HD t-1 W\r\nHD t30 Z\r\n"),
        (b"mg t6 N30 T60 t\r\n", b"HD t60 W\r\n"),
        (b"mg t7 T60 N30 t\r\n", b"HD t30 W\r\n"),
        (b"ms t4 1 T100\r\na\r\n", b"HD\r\n"),
        (b"mg t4 t T30\r\n", b"HD t100\r\n"),
        (b"mg t4 T10 R20 t c\r\n", b"HD t10 c4 W\r\n"),
        (b"ms t4 1 C1 I T5 c\r\nb\r\n", b"HD c5\r\n"),
        (b"mg t4 v t\r\n", b"VA 1 t10 Z X\r\nb\r\n"),
        (b"ms t4 1 C6 I\r\nc\r\n", b"EX\r\n"),
        (b"ms t4 1 C5\r\nc\r\nmg t4 v\r\n", b"HD\r\nVA 1\r\nc\r\n"),
        (b"ms t8 1 MA N30\r\nx\r\n", b"NS\r\n"),
        (b"ma a1 N30 t\r\nma a2 t N30\r\n", b"HD t30\r\nHD t-1\r\n"),
        (
            b"ma a3 N30 T60 t\r\nma a4 T60 N30 t\r\n",
            b"HD t60\r\nHD t30\r\n",
        ),
        (b"ma a1 t T90\r\nma a1 t\r\n", b"HD t30\r\nHD t90\r\n"),
    ]);
}

#[test]
fn meta_arithmetic() {
    converse(&[
        (b"ma n\r\n", b"NF\r\n"),
        (b"ma n q O5 k\r\n", b"NF O5 kn\r\n"),
        (b"ma n N0 J13 v\r\n", b"VA 2\r\n13\r\n"),
        (b"ma n v\r\n", b"VA 2\r\n14\r\n"),
        (b"ma n MD D20 v t\r\n", b"VA 1 t-1\r\n0\r\n"),
        (b"ma n D5 c\r\n", b"HD c4\r\n"),
        (b"ma n q D5\r\nmn\r\n", b"MN\r\n"),
        (b"ma n C1 v\r\n", b"EX\r\n"),
        (b"ma n M+ T100 v t\r\n", b"VA 2 t100\r\n11\r\n"),
        (b"ms s 1\r\nx\r\n", b"HD\r\n"),
        (
            b"ma s\r\n",
            b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
        ),
        (
            b"ma n MX\r\n",
            b"CLIENT_ERROR invalid mode for ma M token\r\n",
        ),
        (
            b"ma n Md\r\n",
            b"CLIENT_ERROR invalid mode for ma M token\r\n",
        ),
        (
            b"ma n Mi\r\n",
            b"CLIENT_ERROR invalid mode for ma M token\r\n",
        ),
        (
            b"ma n Dx\r\n",
            b"CLIENT_ERROR invalid or duplicate flag\r\n",
        ),
    ]);
}

#[tokio::test]
async fn serve_over_a_stream_with_small_reads() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let model = ModelStorage::at(NOW);
    let (client, server) = tokio::io::duplex(7);
    let served = super::connection::serve(&model, server, ProtocolLimits::default());
    let (mut rx, mut tx) = tokio::io::split(client);
    let write = tx.write_all(b"set k 0 0 2\r\nhi\r\nget k\r\nmn\r\nquit\r\n");
    let mut reply = Vec::new();
    let read = rx.read_to_end(&mut reply);
    let (served, written, read) = tokio::join!(served, write, read);
    served.unwrap();
    written.unwrap();
    read.unwrap();
    assert_eq!(reply, b"STORED\r\nVALUE k 0 2\r\nhi\r\nEND\r\nMN\r\n");
}

#[test]
fn one_read_of_many_gets_is_answered_in_bounded_batches() {
    use super::connection::SIZE_OUTPUT_MAX;
    let model = ModelStorage::at(NOW);
    let mut codec = MemcacheCodec::new(ProtocolLimits::default());
    let value = vec![b'v'; 100_000];
    let mut input = BytesMut::from(&b"set big 0 0 100000\r\n"[..]);
    input.extend_from_slice(&value);
    input.extend_from_slice(b"\r\n");
    let mut output = BytesMut::new();
    assert_eq!(
        drain(&model, &mut codec, &mut input, &mut output, false).unwrap(),
        Flow::Continue
    );
    assert_eq!(&output[..], b"STORED\r\n");
    // 100 gets of 100 kB in one read: 10 MB of replies, answered a batch at a time.
    input.extend_from_slice(&b"get big\r\n".repeat(100));
    input.extend_from_slice(b"version\r\n");
    let mut one = b"VALUE big 0 100000\r\n".to_vec();
    one.extend_from_slice(&value);
    one.extend_from_slice(b"\r\nEND\r\n");
    let mut all = Vec::new();
    let mut batches = 0;
    loop {
        output.clear();
        let flow = drain(&model, &mut codec, &mut input, &mut output, false).unwrap();
        assert!(
            output.len() < SIZE_OUTPUT_MAX + one.len(),
            "a batch of {}",
            output.len()
        );
        all.extend_from_slice(&output);
        batches += 1;
        if flow != Flow::Full {
            assert_eq!(flow, Flow::Continue);
            break;
        }
    }
    assert!(batches > 10, "{batches} batches");
    let mut expected = one.repeat(100);
    expected.extend_from_slice(b"VERSION 1.6.0-model\r\n");
    assert!(all == expected, "the batches are not the replies in order");
    assert!(input.is_empty());
}
