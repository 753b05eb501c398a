//! memcached's number rules: `safe_strtoul`, `safe_strtol` and `safe_strtoull` from `util.c`.
//!
//! A token is a number when C's `strtoul`/`strtol` accepts a prefix of it (leading white
//! space, an optional sign, at least one digit, no overflow) and the prefix is followed by the
//! end of the token or a white-space byte. Unsigned parsers then refuse negative input unless
//! the wrapped result looks positive — memcached's own quirk, kept here on purpose so that
//! `-0` is 0 and `-1` is refused.
//!
//! [`put_decimal`] writes numbers into replies without `core::fmt` (a `VALUE` line's two
//! numbers cost about 500 instructions through `write!`, a few dozen this way).

/// C's `isspace` in the "C" locale.
fn is_c_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// The accepted prefix of a token: sign, magnitude (`None` on overflow), and whether the
/// byte after the digits ends the number the way memcached demands.
struct Prefix {
    negative: bool,
    magnitude: Option<u64>,
}

/// Scans like `strtoull`; `None` when there are no digits or trailing garbage follows.
fn scan(token: &[u8]) -> Option<Prefix> {
    let mut at = token.iter().take_while(|b| is_c_space(**b)).count();
    let negative = token.get(at) == Some(&b'-');
    if matches!(token.get(at), Some(b'-' | b'+')) {
        at += 1;
    }
    let digits = token[at..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    if digits == 0 {
        return None;
    }
    let end = at + digits;
    if end < token.len() && !is_c_space(token[end]) {
        return None;
    }
    let magnitude = token[at..end].iter().try_fold(0u64, |acc, d| {
        acc.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    });
    Some(Prefix {
        negative,
        magnitude,
    })
}

/// `safe_strtoull`: an unsigned 64-bit number (delta, CAS unique, `J`, `D`, `C`, `E`).
pub fn parse_u64(token: &[u8]) -> Option<u64> {
    let prefix = scan(token)?;
    let magnitude = prefix.magnitude?;
    let value = if prefix.negative {
        magnitude.wrapping_neg()
    } else {
        magnitude
    };
    if prefix.negative && (value as i64) < 0 {
        return None;
    }
    Some(value)
}

/// `safe_strtoul` on a 64-bit host: parsed as 64 bits, then truncated to 32 (client flags).
pub fn parse_u32(token: &[u8]) -> Option<u32> {
    parse_u64(token).map(|value| value as u32)
}

/// `safe_strtol` on a 64-bit host: parsed as C's 64-bit `long` (refused only past its
/// range), then stored in an `int32_t`, so that larger values wrap as memcached 1.6.18 lets
/// them (exptimes, data lengths, the meta `T N R` tokens): 4294967296 is 0, 2147483648 is
/// -2147483648, -2147483649 is 2147483647.
pub fn parse_i32(token: &[u8]) -> Option<i32> {
    let prefix = scan(token)?;
    let magnitude = prefix.magnitude?;
    let value = if prefix.negative {
        if magnitude > 1 << 63 {
            return None;
        }
        // 2^63 itself is `i64::MIN`, which negation leaves as it is.
        (magnitude as i64).wrapping_neg()
    } else {
        i64::try_from(magnitude).ok()?
    };
    Some(value as i32)
}

/// Appends `value` in decimal, as `write!(out, "{value}")` would.
#[inline]
pub fn put_decimal(out: &mut bytes::BytesMut, mut value: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsigned_rules() {
        assert_eq!(parse_u64(b"0"), Some(0));
        assert_eq!(parse_u64(b"+7"), Some(7));
        assert_eq!(parse_u64(b"-0"), Some(0));
        assert_eq!(parse_u64(b"-1"), None);
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b"12abc"), None);
        assert_eq!(parse_u64(b"12\r"), Some(12));
        assert_eq!(parse_u64(b"\t3"), Some(3));
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_u64(b"-"), None);
    }

    #[test]
    fn flags_wrap_to_32_bits_like_memcached() {
        assert_eq!(parse_u32(b"4294967295"), Some(u32::MAX));
        assert_eq!(parse_u32(b"4294967296"), Some(0));
        assert_eq!(parse_u32(b"-5"), None);
    }

    #[test]
    fn signed_rules() {
        assert_eq!(parse_i32(b"-1"), Some(-1));
        assert_eq!(parse_i32(b"2147483647"), Some(i32::MAX));
        assert_eq!(parse_i32(b"-2147483648"), Some(i32::MIN));
        assert_eq!(parse_i32(b"1e3"), None);
    }

    #[test]
    fn signed_numbers_wrap_to_32_bits_like_memcached() {
        assert_eq!(parse_i32(b"2147483648"), Some(i32::MIN));
        assert_eq!(parse_i32(b"-2147483649"), Some(i32::MAX));
        assert_eq!(parse_i32(b"4294967296"), Some(0));
        assert_eq!(parse_i32(b"4294967297"), Some(1));
        assert_eq!(parse_i32(b"9223372036854775807"), Some(-1));
        assert_eq!(parse_i32(b"-9223372036854775808"), Some(0));
        assert_eq!(parse_i32(b"9223372036854775808"), None, "past C's long");
        assert_eq!(parse_i32(b"-9223372036854775809"), None, "past C's long");
    }

    #[test]
    fn decimals_are_fmts() {
        for value in [0, 1, 9, 10, 99, 100, 4_294_967_295, u64::MAX - 1, u64::MAX] {
            let mut out = bytes::BytesMut::new();
            super::put_decimal(&mut out, value);
            assert_eq!(&out[..], value.to_string().as_bytes());
        }
    }
}
