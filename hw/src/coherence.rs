//! Coherence modes: how much of the pod's memory the hardware keeps coherent across hosts.
//!
//! CXLALLOC §2.1 (Figure 1) distinguishes memory that is fully coherent, memory coherent only
//! in a small HWcc region, and memory with no inter-host coherence at all. A heap records its
//! mode at creation; the allocator asks the mode whether an ownership move must write back.

/// How the pod keeps caches coherent across hosts.
///
/// A closed enum: later modes (limited HWcc, memory-side CAS) are added as variants, and every
/// `match` on it is exhaustive so each caller decides what the new mode means for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Coherence {
    /// All pod memory is hardware coherent: today's single-host machines. Write-back is a no-op.
    #[default]
    Hardware,
}

impl Coherence {
    /// The mode's number as stored in a heap header.
    pub const fn to_bits(self) -> u64 {
        match self {
            Coherence::Hardware => 0,
        }
    }

    /// The mode a header number names, or `None` for a number this build does not know.
    pub const fn from_bits(bits: u64) -> Option<Coherence> {
        match bits {
            0 => Some(Coherence::Hardware),
            _ => None,
        }
    }

    /// The mode's name, as `podkv heap info` prints it.
    pub const fn name(self) -> &'static str {
        match self {
            Coherence::Hardware => "hardware",
        }
    }

    /// Makes `len` bytes at `ptr` visible to other hosts before ownership of them moves (the
    /// SWcc writer rule, CXLALLOC §3.2.2). Under hardware coherence the caches already agree.
    #[inline]
    pub fn write_back(self, ptr: *const u8, len: usize) {
        match self {
            Coherence::Hardware => {
                let _ = (ptr, len);
            }
        }
    }

    /// Drops any stale cached copy of `len` bytes at `ptr` before reading data another host
    /// owns (the SWcc reader rule). Under hardware coherence there is nothing stale.
    #[inline]
    pub fn invalidate(self, ptr: *const u8, len: usize) {
        match self {
            Coherence::Hardware => {
                let _ = (ptr, len);
            }
        }
    }
}

impl std::str::FromStr for Coherence {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "hardware" => Ok(Coherence::Hardware),
            other => Err(format!(
                "unknown coherence mode `{other}` (known: hardware)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_round_trip_and_unknown_bits_are_refused() {
        assert_eq!(
            Coherence::from_bits(Coherence::Hardware.to_bits()),
            Some(Coherence::Hardware)
        );
        assert_eq!(Coherence::from_bits(3), None);
        assert_eq!("hardware".parse::<Coherence>(), Ok(Coherence::Hardware));
        assert!("bogus".parse::<Coherence>().is_err());
    }
}
