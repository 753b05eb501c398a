//! One line of a trace, and the stable key hash every consumer shares.

use serde::{Deserialize, Serialize};

use crate::Op;

/// One request as recorded in the trace: the seven columns
/// `timestamp,anonymized key,key size,value size,client id,operation,TTL`.
///
/// `key_size` is the size of the *original* key; anonymisation changes the key's bytes, so
/// `key_size` need not equal `key.len()` in production traces (generated traces keep them equal).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Record {
    /// Seconds since the start of the trace.
    pub timestamp: u64,
    /// The anonymised key, namespaces preserved (`nz:u:eeW511W3dcH3de3d15ec`).
    pub key: String,
    /// Size of the original key in bytes.
    pub key_size: u32,
    /// Size of the value in bytes.
    pub value_size: u32,
    /// The anonymised client (front-end service) that sent the request.
    pub client_id: u32,
    /// The operation.
    pub op: Op,
    /// Time to live in seconds; 0 when the request stores no value.
    pub ttl: u32,
}

/// A 64-bit hash of a key that never changes: FNV-1a over the bytes, then the SplitMix64
/// finaliser so that the low bits (used by `hash % workers`) are well mixed.
///
/// Unlike `std`'s `DefaultHasher`, it is the same in every process, build and Rust release, so
/// processes of a multi-process replay agree on which worker owns a key.
pub fn key_hash(key: &[u8]) -> u64 {
    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
    let fnv = key.iter().fold(FNV_OFFSET, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(FNV_PRIME)
    });
    mix64(fnv)
}

/// The SplitMix64 finaliser: a bijection on `u64` whose output bits each depend on every input
/// bit. Also the generator's per-key "random" function (`mix64(seed ^ id)`).
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_hash_is_pinned() {
        // Pinned values: changing the hash silently reshuffles every partitioned replay.
        assert_eq!(key_hash(b""), mix64(0xcbf2_9ce4_8422_2325));
        assert_eq!(key_hash(b"a"), mix64(0xaf63_dc4c_8601_ec8c));
        assert_ne!(key_hash(b"ab"), key_hash(b"ba"));
    }

    #[test]
    fn mix64_spreads_neighbours() {
        let a = mix64(1);
        let b = mix64(2);
        assert!((a ^ b).count_ones() > 16);
    }
}
