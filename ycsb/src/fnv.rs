//! YCSB's `Utils.fnvhash64`: 64-bit FNV-1a over the eight bytes of a Java `long`, low
//! byte first, made non-negative with `Math.abs`.
//!
//! Java's `Math.abs(Long.MIN_VALUE)` is `Long.MIN_VALUE`, so the result is negative for
//! exactly one hash value; [`fnvhash64`] keeps that (it is `i64::wrapping_abs`).
//!
//! Worked vector (checked by hand and by an independent Python implementation):
//! for key number 0 every octet is 0, so each round is `h = h * PRIME` and the result is
//! `BASIS * PRIME^8 mod 2^64` = 6284781860667377211 (positive as a signed long), which is
//! why YCSB's first hashed key is `user6284781860667377211`.

/// FNV-1a 64-bit offset basis, as YCSB spells it (`FNV_OFFSET_BASIS_64`).
pub const FNV_OFFSET_BASIS_64: u64 = 0xCBF2_9CE4_8422_2325;

/// FNV 64-bit prime (`FNV_PRIME_64` = 1099511628211).
pub const FNV_PRIME_64: u64 = 1_099_511_628_211;

/// YCSB's `Utils.fnvhash64(long)`, bit for bit.
///
/// `val >> 8` is Java's arithmetic shift, so a negative input feeds `0xff` octets.
///
/// Speed (both key names and the scrambled zipfian hash on every operation): a zero
/// octet turns a round into `hash * PRIME`, and wrapping multiplication is associative,
/// so once the remaining octets of a non-negative `val` are all zero the rounds left
/// collapse into one multiply by a power of the prime. Key numbers and zipfian ranks are
/// almost always below 2^32: four rounds and one multiply instead of eight rounds, half
/// the chain of dependent multiplies. The result is the same for every input (see the
/// `matches_eight_rounds` property).
#[inline(always)]
pub fn fnvhash64(val: i64) -> i64 {
    let mut hash = rounds(FNV_OFFSET_BASIS_64, val, 4);
    if (val as u64) >> 32 == 0 {
        hash = hash.wrapping_mul(FNV_PRIME_64_POW_4);
    } else {
        hash = rounds(hash, val >> 32, 4);
    }
    (hash as i64).wrapping_abs()
}

/// `FNV_PRIME_64^4 mod 2^64`: four rounds over zero octets.
const FNV_PRIME_64_POW_4: u64 = FNV_PRIME_64
    .wrapping_mul(FNV_PRIME_64)
    .wrapping_mul(FNV_PRIME_64)
    .wrapping_mul(FNV_PRIME_64);

/// `count` FNV-1a rounds over the low octets of `val`, low first.
#[inline(always)]
fn rounds(mut hash: u64, mut val: i64, count: u32) -> u64 {
    for _ in 0..count {
        hash ^= (val & 0xff) as u64;
        hash = hash.wrapping_mul(FNV_PRIME_64);
        val >>= 8;
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Vectors computed independently (Python, arbitrary-precision integers reduced
    /// mod 2^64, then Java's signed `Math.abs`).
    #[test]
    fn known_vectors() {
        let vectors: [(i64, i64); 7] = [
            (0, 6_284_781_860_667_377_211),
            (1, 8_517_097_267_634_966_620),
            (2, 1_820_151_046_732_198_393),
            (3, 4_052_466_453_699_787_802),
            (999, 2_071_219_101_098_386_137),
            (1000, 5_952_875_239_596_136_740),
            (12_345, 1_792_800_413_050_876_852),
        ];
        for (input, expected) in vectors {
            assert_eq!(fnvhash64(input), expected, "fnvhash64({input})");
        }
    }

    #[test]
    fn zero_is_basis_times_prime_to_the_eighth() {
        let mut expected = FNV_OFFSET_BASIS_64;
        for _ in 0..8 {
            expected = expected.wrapping_mul(FNV_PRIME_64);
        }
        assert_eq!(fnvhash64(0), (expected as i64).wrapping_abs());
    }

    /// YCSB's loop as written: eight rounds, every octet.
    fn eight_rounds(val: i64) -> i64 {
        let mut val = val;
        let mut hash = FNV_OFFSET_BASIS_64;
        for _ in 0..8 {
            hash ^= (val & 0xff) as u64;
            hash = hash.wrapping_mul(FNV_PRIME_64);
            val >>= 8;
        }
        (hash as i64).wrapping_abs()
    }

    #[test]
    fn matches_eight_rounds_at_the_edges() {
        for val in [
            0,
            1,
            255,
            256,
            u32::MAX as i64,
            1 << 32,
            i64::MAX,
            -1,
            i64::MIN,
        ] {
            assert_eq!(fnvhash64(val), eight_rounds(val), "{val}");
        }
    }

    proptest::proptest! {
        #[test]
        fn matches_eight_rounds(val in proptest::num::i64::ANY, small in 0i64..1 << 32) {
            proptest::prop_assert_eq!(fnvhash64(val), eight_rounds(val));
            proptest::prop_assert_eq!(fnvhash64(small), eight_rounds(small));
        }

        #[test]
        fn non_negative_except_min(val in proptest::num::i64::ANY) {
            let h = fnvhash64(val);
            proptest::prop_assert!(h >= 0 || h == i64::MIN);
        }
    }
}
