//! Byte search eight bytes at a time: the newline that ends a command line and the spaces
//! between its tokens. A command line of a 64-byte key costs about 70 steps byte by byte,
//! about 10 this way (no `memchr` in the workspace's dependencies).

/// One in every byte.
const ONES: u64 = 0x0101_0101_0101_0101;
/// The high bit of every byte.
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// A word with the high bit set in the lowest zero byte of `word` (and maybe in higher ones,
/// which the callers never read).
#[inline]
fn zero_bytes(word: u64) -> u64 {
    word.wrapping_sub(ONES) & !word & HIGHS
}

/// The first position in `haystack` of the byte `a` or the byte `b`.
#[inline]
pub fn find_either(haystack: &[u8], a: u8, b: u8) -> Option<usize> {
    let (all_a, all_b) = (ONES * u64::from(a), ONES * u64::from(b));
    let mut chunks = haystack.chunks_exact(8);
    let mut at = 0;
    for chunk in &mut chunks {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(chunk);
        let word = u64::from_le_bytes(bytes);
        let hits = zero_bytes(word ^ all_a) | zero_bytes(word ^ all_b);
        if hits != 0 {
            return Some(at + (hits.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    let rest = chunks.remainder();
    rest.iter().position(|&c| c == a || c == b).map(|p| at + p)
}

/// The first position of `byte` in `haystack`.
#[inline]
pub fn find(haystack: &[u8], byte: u8) -> Option<usize> {
    find_either(haystack, byte, byte)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_what_a_byte_loop_finds() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        for len in 0..70 {
            for _ in 0..40 {
                let hay: Vec<u8> = (0..len)
                    .map(|_| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        [b'a', b' ', b'\n', 0, 0x80, 0xff, 0x01, b'\r'][(seed % 8) as usize]
                    })
                    .collect();
                for (a, b) in [(b' ', 0), (b'\n', b'\n'), (0x80, 0x01), (0xff, 0xff)] {
                    let slow = hay.iter().position(|&c| c == a || c == b);
                    assert_eq!(find_either(&hay, a, b), slow, "{hay:?} {a} {b}");
                }
            }
        }
        assert_eq!(find(b"get key\r\n", b'\n'), Some(8));
    }
}
