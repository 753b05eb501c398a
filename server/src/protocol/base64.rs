//! Base64 (RFC 4648, standard alphabet, `=` padding) for meta keys sent with the `b` flag.
//!
//! memcached decodes such keys before lookup and re-encodes them when it echoes a key (`k`).
//! A key that does not decode — bad length, bad byte, misplaced padding — or decodes to
//! nothing is refused, as memcached's `base64_decode` returning 0 is.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Encodes `input` with padding.
pub fn encode(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let word = chunk
            .iter()
            .enumerate()
            .fold(0u32, |w, (i, b)| w | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            let sextet = (word >> (18 - 6 * i)) & 0x3f;
            out.push(if i <= chunk.len() {
                ALPHABET[sextet as usize]
            } else {
                b'='
            });
        }
    }
    out
}

/// The 6-bit value of one base64 byte.
fn sextet(byte: u8) -> Option<u32> {
    ALPHABET.iter().position(|a| *a == byte).map(|p| p as u32)
}

/// Decodes padded base64; `None` when malformed or empty.
pub fn decode(input: &[u8]) -> Option<Vec<u8>> {
    if input.is_empty() || !input.chunks_exact(4).remainder().is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(input.len() / 4 * 3);
    let last = input.len() / 4 - 1;
    for (n, quad) in input.chunks(4).enumerate() {
        let pad = quad.iter().rev().take_while(|b| **b == b'=').count();
        if pad > 2 || (pad > 0 && n != last) {
            return None;
        }
        let mut word = 0u32;
        for byte in &quad[..4 - pad] {
            word = word << 6 | sextet(*byte)?;
        }
        word <<= 6 * pad as u32;
        out.extend_from_slice(&word.to_be_bytes()[1..4 - pad]);
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_rfc4648_vectors() {
        let vectors: [(&[u8], &[u8]); 6] = [
            (b"f", b"Zg=="),
            (b"fo", b"Zm8="),
            (b"foo", b"Zm9v"),
            (b"foob", b"Zm9vYg=="),
            (b"fooba", b"Zm9vYmE="),
            (b"foobar", b"Zm9vYmFy"),
        ];
        for (plain, coded) in vectors {
            assert_eq!(encode(plain), coded);
            assert_eq!(decode(coded).as_deref(), Some(plain));
        }
        assert_eq!(
            decode(&encode(&[0, 255, 10, 13, 32])).unwrap(),
            [0, 255, 10, 13, 32]
        );
    }

    #[test]
    fn refuses_malformed() {
        for bad in [
            &b""[..],
            b"Zg",
            b"Zg=",
            b"Z===",
            b"Zg==Zg==",
            b"Zm9*",
            b"====",
        ] {
            assert_eq!(decode(bad), None, "{:?}", bad);
        }
    }
}
