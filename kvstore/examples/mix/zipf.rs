//! The key streams: YCSB's scrambled zipfian keys, and one thread's pre-generated operations.

/// YCSB's ZipfianGenerator (Gray et al.), scrambled with FNV like ScrambledZipfianGenerator.
pub struct Zipf {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

impl Zipf {
    /// Ranks over `n` keys with skew `theta`.
    pub fn new(n: u64, theta: f64) -> Zipf {
        let zeta = |m: u64| (1..=m).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zetan = zeta(n);
        let zeta2 = zeta(2);
        let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
        Zipf {
            n,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta,
        }
    }

    /// The key for a uniform `u` in [0, 1).
    pub fn next(&self, u: f64) -> u64 {
        let uz = u * self.zetan;
        let rank = if uz < 1.0 {
            0
        } else if uz < 1.0 + 0.5f64.powf(self.theta) {
            1
        } else {
            (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64
        };
        fnv(rank.min(self.n - 1)) % self.n
    }
}

fn fnv(x: u64) -> u64 {
    let mut h = 0xCBF2_9CE4_8422_2325u64;
    for b in x.to_le_bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01B3);
    }
    h
}

/// One operation: a key below 2^31, and bit 31 set for a set (4 bytes, so ten million
/// operations per thread take 40 MB).
#[derive(Clone, Copy, Debug)]
pub struct Op(u32);

/// Bit of an [`Op`] that makes it a set.
const BIT_SET: u32 = 1 << 31;

impl Op {
    /// The key.
    #[inline]
    pub fn key(self) -> u64 {
        u64::from(self.0 & !BIT_SET)
    }

    /// Whether it is a set (else a get).
    #[inline]
    pub fn is_set(self) -> bool {
        self.0 & BIT_SET != 0
    }

    /// The same operation on `key`.
    pub fn with_key(self, key: u64) -> Op {
        Op(key as u32 | (self.0 & BIT_SET))
    }
}

/// One thread's pre-generated operations: `set_percent` of them sets. Keys must be < 2^31.
pub fn stream(zipf: &Zipf, ops: usize, set_percent: u64, seed: u64) -> Vec<Op> {
    assert!(zipf.n <= u64::from(BIT_SET), "keys must fit in 31 bits");
    let mut x = seed | 1;
    let mut rand = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..ops)
        .map(|_| {
            let u = (rand() >> 11) as f64 / (1u64 << 53) as f64;
            let set = if rand() % 100 < set_percent {
                BIT_SET
            } else {
                0
            };
            Op(zipf.next(u) as u32 | set)
        })
        .collect()
}
