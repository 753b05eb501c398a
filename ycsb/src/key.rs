//! Key names: YCSB's `CoreWorkload.buildKeyName`, and the CXLALLOC paper's 8-byte keys.
//!
//! # YCSB names
//!
//! `"user"`, then zeros up to `zeropadding` digits, then the decimal key number, hashed
//! with [`fnvhash64`] first unless `insertorder=ordered`. Key 0 hashed is
//! `user6284781860667377211`; key 5 ordered with `zeropadding=8` is `user00000005`.
//!
//! # 8-byte keys (`podkv.keybytes=8`)
//!
//! Eight printable ASCII bytes, each carrying six bits of a 48-bit number written most
//! significant first in the alphabet [`ALPHABET_8B`], whose bytes are in ASCII order, so
//! ordered keys sort as their numbers do. The number is the key number itself
//! (`insertorder=ordered`) or [`permute48`] of it (`hashed`): a bijection, so distinct
//! records never share a key, unlike a truncated hash. Key numbers must be below 2^48.

use std::fmt;

use crate::fnv::fnvhash64;

/// Longest key this crate builds, in bytes (`"user"` + 60 digits).
pub const KEY_CAPACITY: usize = 64;

/// `"user"`, YCSB's key prefix.
const PREFIX: &[u8; 4] = b"user";

/// Largest `zeropadding` that fits in [`KEY_CAPACITY`].
pub const ZERO_PADDING_MAX: usize = KEY_CAPACITY - PREFIX.len();

/// Key numbers of 8-byte keys are below 2^48 (8 characters of 6 bits).
pub const COUNT_8B_KEYS: u64 = 1 << 48;

/// The 64 characters of 8-byte keys, in ASCII order.
pub const ALPHABET_8B: &[u8; 64] =
    b"-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz";

const MASK_48: u64 = COUNT_8B_KEYS - 1;

/// How record numbers become key bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyFormat {
    /// YCSB's `user…` names.
    Ycsb {
        /// Minimum number of digits (`zeropadding`), at most [`ZERO_PADDING_MAX`].
        zero_padding: usize,
        /// `insertorder=hashed` (true) or `ordered` (false).
        hashed: bool,
    },
    /// The CXLALLOC paper's fixed 8-byte keys.
    Fixed8 {
        /// `insertorder=hashed` (true) or `ordered` (false).
        hashed: bool,
    },
}

/// A key, stored inline so that generating one allocates nothing.
///
/// Invariant: `len as usize <= KEY_CAPACITY` and `bytes[..len]` is printable ASCII.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    num: u64,
    len: u8,
    bytes: [u8; KEY_CAPACITY],
}

impl KeyFormat {
    /// The key of record number `keynum`.
    #[inline]
    pub fn build(&self, keynum: u64) -> Key {
        let mut key = Key::empty(keynum);
        self.build_into(&mut key);
        key
    }

    /// Writes the key of record number `key.num()` into `key`, which must be empty
    /// ([`Key::empty`]): the streams build each key where the operation lives, so it is
    /// never copied (and never read back right after its bytes were stored piecewise,
    /// which stalls the CPU's store forwarding).
    #[inline(always)]
    pub(crate) fn build_into(&self, key: &mut Key) {
        debug_assert_eq!(key.len, 0);
        match *self {
            KeyFormat::Ycsb {
                zero_padding,
                hashed,
            } => build_ycsb(key, zero_padding, hashed),
            KeyFormat::Fixed8 { hashed } => build_8b(key, hashed),
        }
    }
}

impl Key {
    /// The key's bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// The key as text (keys are ASCII).
    pub fn as_str(&self) -> &str {
        // Every byte written by `build_ycsb` / `build_8b` is ASCII, so this never fails.
        std::str::from_utf8(self.as_bytes()).unwrap_or("")
    }

    /// The record number the key was built from.
    #[inline]
    pub fn num(&self) -> u64 {
        self.num
    }

    /// The empty key of record 0.
    pub(crate) const EMPTY: Key = Key {
        num: 0,
        len: 0,
        bytes: [0; KEY_CAPACITY],
    };

    /// The empty key of record number `num`, to be filled by [`KeyFormat::build_into`].
    #[inline(always)]
    pub(crate) fn empty(num: u64) -> Self {
        Self { num, ..Self::EMPTY }
    }

    fn extend(&mut self, bytes: &[u8]) {
        let at = usize::from(self.len);
        self.bytes[at..at + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len() as u8;
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({:?}, #{})", self.as_str(), self.num)
    }
}

/// `buildKeyName(keynum, zeropadding, !hashed)`: `Long.toString` of the (hashed) number,
/// which is negative for the one hash Java's `Math.abs` cannot fix.
///
/// Fast path: a non-negative number of 17 to 19 digits (all but ~0.1% of hashed keys)
/// and no padding beyond its digits. It is cut into `top` (1-3 digits), `mid` and `low`
/// (8 each) by [`split_e8`], and each part goes into the key as stores of table digits ([`DIGITS4`]): `top`'s four digits end where `mid` begins
/// (the prefix, stored after, covers what `top`'s store wrote before byte 4).
#[inline(always)]
fn build_ycsb(key: &mut Key, zero_padding: usize, hashed: bool) {
    let keynum = key.num;
    let value = if hashed {
        fnvhash64(keynum as i64)
    } else {
        keynum as i64
    };
    if value >= (E8 * E8) as i64 {
        let (top, mid, low) = split_e8(value as u64);
        // `value < 2^63` makes `top <= 922`: one to three digits, two compares.
        let top_digits = 1 + usize::from(top >= 10) + usize::from(top >= 100);
        if zero_padding <= top_digits + 16 {
            let start = PREFIX.len() + top_digits;
            key.bytes[start - 4..start].copy_from_slice(&chunk4(top));
            key.bytes[..PREFIX.len()].copy_from_slice(PREFIX);
            key.bytes[start..start + 8].copy_from_slice(&chunk8(mid));
            key.bytes[start + 8..start + 16].copy_from_slice(&chunk8(low));
            key.len = (start + 16) as u8;
            return;
        }
    }
    let mut buf = [b'0'; 20];
    let start = write_decimal(value.unsigned_abs(), &mut buf);
    let digits = &buf[start..];
    let negative = value < 0;
    let fill = zero_padding
        .saturating_sub(digits.len() + usize::from(negative))
        .min(ZERO_PADDING_MAX);
    key.extend(PREFIX);
    key.bytes[key.len as usize..][..fill].fill(b'0');
    key.len += fill as u8;
    if negative {
        key.extend(b"-");
    }
    key.extend(digits);
}

/// 10^8: decimal numbers are cut into chunks of eight digits.
const E8: u64 = 100_000_000;

/// `n` as `(top, mid, low)` with `n = (top * 10^8 + mid) * 10^8 + low`, `mid` and `low`
/// below 10^8 and `top <= 1844` (`n < 2^64`): two divisions by 10^8 (each a multiply),
/// the remainders by multiply-subtract.
#[inline(always)]
fn split_e8(n: u64) -> (u32, u32, u32) {
    let high = n / E8;
    let top = high / E8;
    (top as u32, (high - top * E8) as u32, (n - high * E8) as u32)
}

/// Writes `n` in decimal at the end of `buf`, zeros before it; returns where its
/// significant digits start. All twenty bytes are table digits ([`DIGITS4`]) stored whole.
/// (Keys take this path only when `build_ycsb`'s fast path does not apply.)
#[inline]
fn write_decimal(n: u64, buf: &mut [u8; 20]) -> usize {
    let (top, mid, low) = split_e8(n);
    buf[..4].copy_from_slice(&chunk4(top));
    buf[4..12].copy_from_slice(&chunk8(mid));
    buf[12..].copy_from_slice(&chunk8(low));
    buf.len() - digit_count(n)
}

/// Decimal digits of `n` (1 for 0).
#[inline]
fn digit_count(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// The four ASCII digits (leading zeros kept) of every number below 10^4, built at
/// compile time: 40 KB, small enough to stay in the L1/L2 caches of a worker, and four
/// digits per independent load is several times faster than dividing them out
/// (measured: 6 ns against 21 ns for 19 digits with SWAR arithmetic, which LLVM
/// vectorises badly).
static DIGITS4: [[u8; 4]; 10_000] = digits4();

const fn digits4() -> [[u8; 4]; 10_000] {
    let mut table = [[0u8; 4]; 10_000];
    let mut v = 0;
    while v < 10_000 {
        table[v] = [
            b'0' + (v / 1000) as u8,
            b'0' + (v / 100 % 10) as u8,
            b'0' + (v / 10 % 10) as u8,
            b'0' + (v % 10) as u8,
        ];
        v += 1;
    }
    table
}

/// The four ASCII digits of `v < 10^4`.
#[inline(always)]
fn chunk4(v: u32) -> [u8; 4] {
    DIGITS4[v as usize]
}

/// The eight ASCII digits of `v < 10^8`, most significant first.
#[inline(always)]
fn chunk8(v: u32) -> [u8; 8] {
    debug_assert!(v < 100_000_000);
    let (high, low) = (chunk4(v / 10_000), chunk4(v % 10_000));
    [
        high[0], high[1], high[2], high[3], low[0], low[1], low[2], low[3],
    ]
}

#[inline(always)]
fn build_8b(key: &mut Key, hashed: bool) {
    let keynum = key.num;
    let value = if hashed {
        permute48(keynum)
    } else {
        keynum & MASK_48
    };
    key.bytes[..8].copy_from_slice(&chars_8b(value));
    key.len = 8;
}

/// Every byte of a word.
const BYTES_ONES: u64 = 0x0101_0101_0101_0101;

/// The eight characters of `value < 2^48`, six bits each, most significant first:
/// [`ALPHABET_8B`] computed in one word (SWAR) rather than looked up eight times.
///
/// The six-bit groups are spread into the eight bytes (24 bits per half, 12 per quarter,
/// 6 per byte), then each group `b` becomes `ALPHABET_8B[b]` by adding the alphabet's
/// steps: `'-' = 45 + b` for 0, then +2 from 1 (`'0'`), +7 from 11 (`'A'`), +4 from 37
/// (`'_'`), +1 from 38 (`'a'`). `b >= k` is the top bit of `b + 128 - k` (no byte
/// carries: every sum stays below 256, the final bytes below 128).
#[inline(always)]
fn chars_8b(value: u64) -> [u8; 8] {
    let v = value & MASK_48;
    let halves = (v & 0xFF_FFFF) | (v >> 24) << 32;
    let quarters = (halves & 0x0000_0FFF_0000_0FFF) | (halves >> 12 & 0x0000_0FFF_0000_0FFF) << 16;
    let groups = (quarters & 0x003F_003F_003F_003F) | (quarters >> 6 & 0x003F_003F_003F_003F) << 8;
    let at_least = |k: u64| (groups + (128 - k) * BYTES_ONES) >> 7 & BYTES_ONES;
    let ascii = groups
        + 45 * BYTES_ONES
        + 2 * at_least(1)
        + 7 * at_least(11)
        + 4 * at_least(37)
        + at_least(38);
    ascii.swap_bytes().to_le_bytes()
}

/// A bijection of `[0, 2^48)` that scatters neighbouring numbers: two rounds of an odd
/// multiply (invertible mod 2^48) and a right xor-shift (invertible).
pub fn permute48(x: u64) -> u64 {
    const MUL_A: u64 = 0x9E37_79B9_7F4B & MASK_48 | 1;
    const MUL_B: u64 = 0xC2B2_AE3D_27D5 & MASK_48 | 1;
    let mut x = x & MASK_48;
    x = x.wrapping_mul(MUL_A) & MASK_48;
    x ^= x >> 23;
    x = x.wrapping_mul(MUL_B) & MASK_48;
    x ^= x >> 25;
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ycsb(keynum: u64, zero_padding: usize, hashed: bool) -> String {
        KeyFormat::Ycsb {
            zero_padding,
            hashed,
        }
        .build(keynum)
        .to_string()
    }

    /// Key 0 hashed: every octet of 0L is 0, so the hash is BASIS * PRIME^8 mod 2^64
    /// = 6284781860667377211 (see `fnv`); YCSB prints it after "user".
    #[test]
    fn ycsb_key_names() {
        assert_eq!(ycsb(0, 1, true), "user6284781860667377211");
        assert_eq!(ycsb(1, 1, true), "user8517097267634966620");
        assert_eq!(ycsb(2, 1, true), "user1820151046732198393");
        assert_eq!(ycsb(5, 1, false), "user5");
        assert_eq!(ycsb(0, 1, false), "user0");
        assert_eq!(ycsb(5, 8, false), "user00000005");
        assert_eq!(ycsb(123_456_789, 8, false), "user123456789");
        assert_eq!(ycsb(2, 22, true), "user0001820151046732198393");
        assert_eq!(
            KeyFormat::Ycsb {
                zero_padding: 1,
                hashed: true
            }
            .build(7)
            .num(),
            7
        );
    }

    #[test]
    fn padding_is_capped_by_capacity() {
        let key = ycsb(5, ZERO_PADDING_MAX, false);
        assert_eq!(key.len(), KEY_CAPACITY);
        assert!(key.ends_with("05"));
    }

    #[test]
    fn alphabet_is_sorted_and_unique() {
        assert!(ALPHABET_8B.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn fixed_keys_are_eight_bytes_and_ordered_keys_sort() {
        let ordered = KeyFormat::Fixed8 { hashed: false };
        let keys: Vec<Key> = (0..5_000u64).map(|n| ordered.build(n * 977)).collect();
        assert!(keys.iter().all(|k| k.as_bytes().len() == 8));
        assert!(keys.windows(2).all(|w| w[0].as_bytes() < w[1].as_bytes()));
        assert_eq!(ordered.build(0).as_str(), "--------");
        assert_eq!(ordered.build(1).as_str(), "-------0");
    }

    /// The alphabet looked up per character, as the keys were first built.
    fn chars_8b_by_table(value: u64) -> [u8; 8] {
        let mut chars = [0u8; 8];
        for (i, c) in chars.iter_mut().enumerate() {
            *c = ALPHABET_8B[((value >> ((7 - i) * 6)) & 63) as usize];
        }
        chars
    }

    #[test]
    fn every_character_of_eight_byte_keys_matches_the_alphabet() {
        for b in 0..64u64 {
            let repeated = (0..8).fold(0, |v, _| (v << 6) | b);
            assert_eq!(chars_8b(repeated), [ALPHABET_8B[b as usize]; 8], "{b}");
            let mixed = (b << 42) | (63 - b);
            assert_eq!(chars_8b(mixed), chars_8b_by_table(mixed));
        }
    }

    #[test]
    fn hashed_fixed_keys_are_distinct() {
        let hashed = KeyFormat::Fixed8 { hashed: true };
        let mut seen = std::collections::HashSet::new();
        for n in 0..100_000u64 {
            assert!(seen.insert(hashed.build(n).as_bytes().to_vec()), "{n}");
        }
    }

    #[test]
    fn every_chunk_of_eight_digits_matches_std() {
        for v in (0..100_000_000u32).step_by(997).chain([0, 9, 99_999_999]) {
            assert_eq!(chunk8(v), *format!("{v:08}").as_bytes(), "{v}");
            assert_eq!(digit_count(u64::from(v)), v.to_string().len(), "{v}");
        }
        for v in 0..10_000u32 {
            assert_eq!(chunk4(v), *format!("{v:04}").as_bytes(), "{v}");
        }
    }

    #[test]
    fn decimal_edges_match_std() {
        let mut edges = vec![0, 9, 10, 99, 100, u64::MAX, u64::MAX - 1];
        for p in 1..20 {
            let t = 10u64.pow(p);
            edges.extend([t - 1, t, t + 1]);
        }
        for n in edges {
            let mut buf = [0u8; 20];
            let start = write_decimal(n, &mut buf);
            assert_eq!(&buf[start..], n.to_string().as_bytes());
        }
    }

    proptest::proptest! {
        #[test]
        fn decimal_matches_std(n in proptest::num::u64::ANY) {
            let mut buf = [0u8; 20];
            let start = write_decimal(n, &mut buf);
            let expected = n.to_string();
            proptest::prop_assert_eq!(&buf[start..], expected.as_bytes());
        }

        #[test]
        fn ycsb_names_match_java_build_key_name(
            keynum in proptest::num::u64::ANY,
            padding in 0usize..30,
            hashed in proptest::bool::ANY,
        ) {
            let value = if hashed { fnvhash64(keynum as i64) } else { keynum as i64 };
            let text = value.to_string();
            let fill = padding.saturating_sub(text.len()).min(ZERO_PADDING_MAX);
            let expected = format!("user{}{text}", "0".repeat(fill));
            let key = KeyFormat::Ycsb { zero_padding: padding, hashed }.build(keynum);
            proptest::prop_assert_eq!(key.as_str(), expected.as_str());
            proptest::prop_assert!(key.bytes[usize::from(key.len)..].iter().all(|&b| b == 0));
        }

        #[test]
        fn eight_byte_chars_match_the_table(value in 0u64..COUNT_8B_KEYS) {
            proptest::prop_assert_eq!(chars_8b(value), chars_8b_by_table(value));
        }

        #[test]
        fn permute48_stays_below_2_48(x in 0u64..COUNT_8B_KEYS) {
            proptest::prop_assert!(permute48(x) < COUNT_8B_KEYS);
        }

        #[test]
        fn permute48_is_injective(a in 0u64..COUNT_8B_KEYS, b in 0u64..COUNT_8B_KEYS) {
            proptest::prop_assert_eq!(a == b, permute48(a) == permute48(b));
        }
    }
}
