//! The generator's edges for `serve_vs_memcached`: every command in its valid and invalid
//! spellings ([`spelling`]) and every size limit approached from both sides ([`boundary`]).

use super::{Rng, Step, KEYS};

/// Flags that the generator never sends alone: `b` (base64 keys: the keys here are not
/// base64; `boundary` sends base64 keys), `t` (a TTL read from each server in turn may cross
/// a second: `t1000` against `t999`) and what `podkv::serve::backend` lists as different
/// (`E`, `l`, `h`).
const FLAGS_NOT_SPELLED: &[u8] = b"Ebtlh";

/// Numbers as memcached's parsers meet them: valid, at and past the 32-bit, 63-bit and 64-bit
/// limits (memcached's `safe_strtol` keeps 32 of a 64-bit `long`'s bits, `safe_strtoul` 32 of
/// 64, `safe_strtoull` refuses past 64), signed, padded and malformed.
const NUMBERS: &[&str] = &[
    "0",
    "50000",
    "-0",
    "+50000",
    "050000",
    "-1",
    "2147483647",
    "2147483648",
    "-2147483648",
    "-2147483649",
    "4294967295",
    "4294967296",
    "4295017296",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "x",
    "50000x",
    "0x5",
    "1e3",
    "",
];

/// `number` as C's `strtol` reads it whole, if it does (no garbage, within 64 bits).
fn c_long(number: &str) -> Option<i64> {
    number.parse::<i128>().ok()?.try_into().ok()
}

/// Whether `number`, read as memcached reads an exptime (`safe_strtol`: 32 of 64 bits), may be
/// a vivify (`N`) TTL: a negative one makes memcached 1.6.18 report a TTL of its clock wrapped
/// around (`t4294967173`), which no other server can reproduce.
fn vivify_safe(number: &str) -> bool {
    c_long(number).is_none_or(|n| n as i32 >= 0)
}

/// Whether `flush_all <number>` flushes now or fails: a positive delay flushes later, at a
/// moment each server's clock decides.
fn flushes_now(number: &str) -> bool {
    c_long(number).is_none_or(|n| n as i32 <= 0)
}

/// Data lengths whose 32-bit wrap is at most 1 or refused: the data block sent is one byte,
/// so no length may make a server wait for a larger one.
const LENGTHS: &[&str] = &[
    "1",
    "01",
    "+1",
    "-0",
    "0",
    "-1",
    "4294967297",
    "-4294967295",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "1x",
    "x",
];

/// A command in one of its valid or invalid spellings: every `M` mode of `ms` and `ma` in
/// upper and lower case and unknown, every flag letter bare and with a token on every meta
/// command, every numeric token of the meta and text commands as every kind of number,
/// `noreply` misspelt, and text commands in the wrong case.
pub fn spelling(rng: &mut Rng, key: &str) -> Step {
    let text = Step::text;
    match rng.below(8) {
        0 => {
            let mode = *rng.pick(&[
                "MS", "ME", "MA", "MP", "MR", "Ms", "Me", "Ma", "Mp", "Mr", "MX", "Mx", "M+", "M",
                "MSS",
            ]);
            Step {
                before: format!("ms {key} 1 {mode}\r\n5\r\n").into_bytes(),
                cas: None,
                after: Vec::new(),
            }
        }
        1 => {
            let mode = *rng.pick(&[
                "MI", "MD", "M+", "M-", "Mi", "Md", "MX", "Mx", "M", "MII", "MDD",
            ]);
            text(format!("ma {key} {mode} v\r\n"))
        }
        2 => {
            let letters: Vec<u8> = (b'A'..=b'Z')
                .chain(b'a'..=b'z')
                .filter(|c| !FLAGS_NOT_SPELLED.contains(c))
                .collect();
            let flag = *rng.pick(&letters) as char;
            // (Never a TTL of a few seconds: it would run out during the run, at a moment
            // each server's clock decides.)
            let token = *rng.pick(&["", "", "50000", "-1", "x", "Q"]);
            let token = if flag == 'N' && !vivify_safe(token) {
                ""
            } else {
                token
            };
            // (`mn` takes no flags and answers `MN` to any: the harness's own end marker.
            // `me` answers with sizes and CAS values of each server's own.)
            match *rng.pick(&["mg", "md", "ma", "ms"]) {
                "ms" => Step {
                    before: format!("ms {key} 1 {flag}{token}\r\n5\r\n").into_bytes(),
                    cas: None,
                    after: Vec::new(),
                },
                cmd => text(format!("{cmd} {key} {flag}{token}\r\n")),
            }
        }
        3 => meta_number(rng, key),
        4 => text_number(rng, key),
        5 => {
            let word = *rng.pick(&["noreply", "NOREPLY", "Noreply", "noreply2", "norepl", "0"]);
            text(match rng.below(6) {
                0 => format!("set {key} 0 0 1 {word}\r\n5\r\n"),
                1 => format!("delete {key} {word}\r\n"),
                2 => format!("incr {key} 1 {word}\r\n"),
                3 => format!("touch {key} 0 {word}\r\n"),
                4 => format!("verbosity 1 {word}\r\n"),
                _ => format!("get {key} {word}\r\n"),
            })
        }
        6 => {
            // Flag pairs whose error messages compete: the last message set wins, `F` and
            // a duplicate set none of their own.
            let pair = *rng.pick(&[
                "Tx Fx", "Fx Tx", "Fx Nx", "Fx C5x", "T1 T2", "v v", "q q", "Fx Fx", "Fx k",
                "Rx Tx",
            ]);
            match *rng.pick(&["mg", "md", "ma", "ms"]) {
                "ms" => text(format!("ms {key} 1 {pair}\r\n5\r\n")),
                cmd => text(format!("{cmd} {key} {pair}\r\n")),
            }
        }
        _ => {
            let cmd = *rng.pick(&["GET", "Get", "SET", "MG", "Mg", "gET", "DELETE", "INCR"]);
            text(format!("{cmd} {key}\r\n"))
        }
    }
}

/// A meta command with one numeric flag spelt as any of [`NUMBERS`].
fn meta_number(rng: &mut Rng, key: &str) -> Step {
    let number = *rng.pick(NUMBERS);
    let (cmd, flag) = *rng.pick(&[
        ("mg", 'T'),
        ("mg", 'N'),
        ("mg", 'R'),
        ("ms", 'T'),
        ("ms", 'F'),
        ("ms", 'C'),
        ("ms", 'N'),
        ("md", 'C'),
        ("md", 'T'),
        ("ma", 'N'),
        ("ma", 'J'),
        ("ma", 'D'),
        ("ma", 'C'),
        ("ma", 'T'),
    ]);
    let number = if flag == 'N' && !vivify_safe(number) {
        "30"
    } else {
        number
    };
    // `v` shows what a counter became; `c`/`t` would show CAS values and clock-dependent TTLs.
    match cmd {
        "ms" => {
            let len = *rng.pick(LENGTHS);
            Step::text(format!("ms {key} {len} {flag}{number}\r\n5\r\n"))
        }
        "ma" => Step::text(format!("ma {key} {flag}{number} v\r\n")),
        _ => Step::text(format!("{cmd} {key} {flag}{number}\r\n")),
    }
}

/// A text command with one numeric argument spelt as any of [`NUMBERS`] (a data length as any
/// of [`LENGTHS`]).
fn text_number(rng: &mut Rng, key: &str) -> Step {
    let n = *rng.pick(NUMBERS);
    Step::text(match rng.below(10) {
        0 => format!("set {key} {n} 0 1\r\n5\r\n"),
        1 => format!("set {key} 0 {n} 1\r\n5\r\n"),
        2 => format!(
            "{} {key} 0 0 {}\r\n5\r\n",
            rng.pick(&["set", "add", "append"]),
            rng.pick(LENGTHS)
        ),
        3 => format!("cas {key} 0 0 1 {n}\r\n5\r\n"),
        4 => format!("{} {key} {n}\r\n", rng.pick(&["incr", "decr"])),
        5 => format!("touch {key} {n}\r\n"),
        6 => format!("{} {n} {key}\r\n", rng.pick(&["gat", "gats"])),
        7 => format!("delete {key} {n}\r\n"),
        8 => format!("verbosity {n}\r\n"),
        // A positive delay flushes later, at a moment each server's clock decides.
        _ => format!("flush_all {}\r\n", if flushes_now(n) { n } else { "-1" }),
    })
}

/// Longest key memcached takes.
const SIZE_KEY_MAX: usize = 250;
/// memcached's and podkv's default item size limit (`-I 1m`, `--max-item-size 1MiB`).
const SIZE_ITEM_MAX: usize = 1 << 20;
/// How far from the item size limit the generator's sizes stay: memcached counts its item
/// header and key against the limit, podkv only the value, so the two thresholds lie a few
/// dozen bytes apart (`podkv::protocol`'s choice 2); sizes this far either side are answered
/// alike.
const SIZE_LIMIT_MARGIN: usize = 4096;

/// A request at a size limit, from below and from above: keys of 249, 250 and 251 bytes on
/// every command, base64 keys whose encoding is about that long, opaques of 31 to 33 bytes,
/// meta commands of 18 to 21 tokens, `get` lines of many keys and past 2048 bytes, values
/// just under and over the item size limit, and appends and prepends whose joined value stays
/// under or passes it.
pub fn boundary(rng: &mut Rng) -> Step {
    // Appends of `SIZE_LIMIT_MARGIN / 2` from here reach 1000 bytes under the limit, then
    // 1048 over it: never the few dozen bytes where the two servers' thresholds differ.
    let below = SIZE_ITEM_MAX - 2 * SIZE_LIMIT_MARGIN - 1000;
    let value = |len: usize| vec![b'v'; len];
    let data = |head: String, v: Vec<u8>| Step {
        before: [head.into_bytes(), v, b"\r\n".to_vec()].concat(),
        cas: None,
        after: Vec::new(),
    };
    match rng.below(10) {
        0 | 1 => long_key(rng),
        2 => base64_key(rng),
        3 => {
            let opaque = format!(
                "O{}",
                "9".repeat(SIZE_OPAQUE_MAX - 2 + rng.below(3) as usize)
            );
            let key = *rng.pick(KEYS);
            // Only where memcached checks the length before it changes anything (see
            // `podkv::protocol::meta`: `mg` with `N T R` and `ma` change the item first).
            match rng.below(3) {
                0 => Step::text(format!("mg {key} v {opaque}\r\n")),
                1 => Step::text(format!("md {key} q {opaque}\r\n")),
                _ => data(format!("ms {key} 1 {opaque}\r\n"), value(1)),
            }
        }
        4 => many_tokens(rng),
        5 => {
            let count = *rng.pick(&[23, 24, 25, 100]);
            let keys: Vec<&str> = (0..count).map(|_| *rng.pick(KEYS)).collect();
            let cmd = *rng.pick(&["get", "gets", "bogus"]);
            Step::text(format!("{cmd} {}\r\n", keys.join(" ")))
        }
        6 => {
            let len = *rng.pick(&[below, SIZE_ITEM_MAX + 1, SIZE_ITEM_MAX + SIZE_LIMIT_MARGIN]);
            if rng.chance(50) {
                data(format!("set big 0 0 {len}\r\n"), value(len))
            } else {
                data(format!("ms big {len} T0\r\n"), value(len))
            }
        }
        7 | 8 => {
            // After a `set big` of `below` bytes, a short one stays under and a long one
            // passes the limit.
            let len = *rng.pick(&[SIZE_LIMIT_MARGIN / 2, 3 * SIZE_LIMIT_MARGIN]);
            match rng.below(4) {
                0 => data(format!("append big 0 0 {len}\r\n"), value(len)),
                1 => data(format!("prepend big 0 0 {len}\r\n"), value(len)),
                2 => data(format!("ms big {len} MA\r\n"), value(len)),
                _ => data(format!("ms big {len} MP\r\n"), value(len)),
            }
        }
        _ => Step::text("mg big s f t\r\n".into()),
    }
}

/// Longest opaque (`O` token, the `O` included) memcached takes.
const SIZE_OPAQUE_MAX: usize = 32;
/// memcached's `MFLAG_MAX_OPT_LENGTH`: a meta command of this many tokens is refused.
const COUNT_META_TOKENS_MAX: usize = 20;

/// Every command with a key of 249, 250 or 251 bytes (one of two such keys).
fn long_key(rng: &mut Rng) -> Step {
    let len = SIZE_KEY_MAX - 1 + rng.below(3) as usize;
    let key = [b'k', b'j'][rng.below(2) as usize] as char;
    let key = key.to_string().repeat(len);
    let head = |cmd: &str| format!("{cmd} {key} 0 0 1\r\n5\r\n");
    Step::text(match rng.below(20) {
        0 => format!("get {key}\r\n"),
        1 => format!("gets a {key}\r\n"),
        2 => format!("gat 0 {key}\r\n"),
        3 => format!("gats 0 b {key}\r\n"),
        4 => format!("delete {key}\r\n"),
        5 => format!("incr {key} 1\r\n"),
        6 => format!("decr {key} 1 noreply\r\n"),
        7 => format!("touch {key} 0\r\n"),
        8 => head("set"),
        9 => head("add"),
        10 => head("replace"),
        11 => head("append"),
        12 => head("prepend"),
        13 => format!("cas {key} 0 0 1 999999999999\r\n5\r\n"),
        14 => format!("mg {key} v k\r\n"),
        15 => format!("md {key} q\r\n"),
        16 => format!("ma {key} N0 v\r\n"),
        17 => format!("ms {key} 1 T0\r\n5\r\n"),
        // `me` on a key it finds shows each server's own sizes and CAS: only the refusal.
        18 => format!("me {}\r\n", "k".repeat(SIZE_KEY_MAX + 1)),
        _ => format!("set {key} 0 0 2 noreply\r\n10\r\n"),
    })
}

/// A base64 key (`b`) of 186 to 190 bytes: 248 to 256 bytes encoded.
fn base64_key(rng: &mut Rng) -> Step {
    let raw = vec![0xF1u8; 186 + rng.below(5) as usize];
    let key = base64(&raw);
    // `k` only right after an `ms b`: memcached 1.6.18 returns an item's key encoded only if
    // the item was made by `ms b` and not copied since (see `podkv::serve::backend`).
    Step::text(match rng.below(4) {
        0 => format!("ms {key} 1 b T0\r\n5\r\nmg {key} b k v\r\n"),
        1 => format!("mg {key} b v s\r\n"),
        2 => format!("ma {key} b N0 v\r\n"),
        _ => format!("md {key} b q\r\n"),
    })
}

/// Standard base64 with padding, as memcached's `b` keys.
fn base64(raw: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in raw.chunks(3) {
        let word = chunk
            .iter()
            .enumerate()
            .fold(0u32, |w, (i, b)| w | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(word >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A meta command of 18 to 21 tokens, around memcached's limit: distinct flags that change
/// nothing, then repeats (so a command under the limit is refused as a duplicate).
fn many_tokens(rng: &mut Rng) -> Step {
    let tokens = COUNT_META_TOKENS_MAX - 2 + rng.below(4) as usize;
    let key = *rng.pick(KEYS);
    let filler = [
        "k", "O1", "s", "f", "v", "c", "P", "L", "u", "q", "k", "k", "k",
    ];
    match rng.below(3) {
        0 => {
            let flags: Vec<&str> = filler.iter().cycle().take(tokens - 2).copied().collect();
            Step::text(format!("mg {key} {}\r\n", flags.join(" ")))
        }
        1 => {
            let flags: Vec<&str> = ["q", "k", "O1", "P", "L"]
                .iter()
                .cycle()
                .take(tokens - 2)
                .copied()
                .collect();
            Step::text(format!("md nope {}\r\n", flags.join(" ")))
        }
        _ => {
            let flags: Vec<&str> = ["T0", "F1", "k", "O1", "q", "P", "L", "c"]
                .iter()
                .cycle()
                .take(tokens - 3)
                .copied()
                .collect();
            Step::text(format!("ms {key} 1 {}\r\n5\r\n", flags.join(" ")))
        }
    }
}
