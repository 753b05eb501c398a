//! `ConstantIntegerGenerator`: always the same value (YCSB's default field length).

/// A generator that returns one value forever.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Constant {
    value: u64,
}

impl Constant {
    /// A generator of `value`.
    pub fn new(value: u64) -> Self {
        Self { value }
    }

    /// The value; needs no RNG.
    #[inline]
    pub fn next_value(&self) -> u64 {
        self.value
    }

    /// The mean, which is the value.
    pub fn mean(&self) -> f64 {
        self.value as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn always_the_same() {
        let c = Constant::new(960);
        assert!((0..5).all(|_| c.next_value() == 960));
        assert_eq!(c.mean(), 960.0);
    }
}
