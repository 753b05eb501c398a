//! Coherence modes: how much of the pod's memory the hardware keeps coherent across hosts.
//!
//! CXLALLOC §2.1 (Figure 1) distinguishes three pods:
//!
//! | mode | coherent across hosts | multi-writer words change by | everything else |
//! | --- | --- | --- | --- |
//! | [`Hardware`](Coherence::Hardware) | all memory | CPU CAS | cached freely |
//! | [`Limited`](Coherence::Limited) | only the small HWcc region (Fig. 1A) | CPU CAS in the HWcc region | SWcc: written back before ownership moves, invalidated before a non-owner reads |
//! | [`Mcas`](Coherence::Mcas) | nothing (Fig. 1B) | memory-side CAS ([`crate::mcas`]) on a small uncachable region | SWcc, as in `Limited` |
//!
//! A heap records its mode at creation (2 bits of its header, [`Coherence::to_bits`]); the
//! allocator asks the mode what an ownership move costs, and [`crate::swcc`] does it.

/// How the pod keeps caches coherent across hosts.
///
/// A closed enum: every `match` on it is exhaustive so each caller decides what a mode means
/// for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Coherence {
    /// All pod memory is hardware coherent: today's single-host machines. SWcc operations are
    /// no-ops.
    #[default]
    Hardware,
    /// Only the heap's small, contiguous HWcc region is hardware coherent (CPU CAS works
    /// there); every other byte follows the SWcc protocol.
    Limited,
    /// No memory is hardware coherent. Every word more than one thread writes lives in a small
    /// uncachable region and changes only through memory-side CAS; everything else follows the
    /// SWcc protocol.
    Mcas,
}

/// Every mode, in header-bit order: for `--help` texts and exhaustive tests.
pub const COHERENCE_ALL: [Coherence; 3] =
    [Coherence::Hardware, Coherence::Limited, Coherence::Mcas];

impl Coherence {
    /// The mode's number as stored in a heap header (2 bits; 3 is unassigned).
    pub const fn to_bits(self) -> u64 {
        match self {
            Coherence::Hardware => 0,
            Coherence::Limited => 1,
            Coherence::Mcas => 2,
        }
    }

    /// The mode a header number names, or `None` for a number this build does not know.
    pub const fn from_bits(bits: u64) -> Option<Coherence> {
        match bits {
            0 => Some(Coherence::Hardware),
            1 => Some(Coherence::Limited),
            2 => Some(Coherence::Mcas),
            _ => None,
        }
    }

    /// The mode's name, as `podkv heap info` prints it and [`str::parse`] reads it.
    pub const fn name(self) -> &'static str {
        match self {
            Coherence::Hardware => "hardware",
            Coherence::Limited => "limited",
            Coherence::Mcas => "mcas",
        }
    }

    /// Whether memory outside the HWcc region needs the SWcc protocol (flushes and
    /// invalidations) in this mode.
    pub const fn is_swcc(self) -> bool {
        match self {
            Coherence::Hardware => false,
            Coherence::Limited | Coherence::Mcas => true,
        }
    }

    /// Whether multi-writer words must change through memory-side CAS ([`crate::mcas`]) rather
    /// than a CPU CAS.
    pub const fn needs_mcas(self) -> bool {
        match self {
            Coherence::Hardware | Coherence::Limited => false,
            Coherence::Mcas => true,
        }
    }

    /// Makes `len` bytes at `ptr` visible to other hosts before ownership of them moves: the
    /// SWcc writer rule, CXLALLOC §3.2.2 (write back every line, then fence). See
    /// [`crate::swcc::write_back`].
    #[inline]
    pub fn write_back(self, ptr: *const u8, len: usize) {
        crate::swcc::write_back(self, ptr, len);
    }

    /// Drops any stale cached copy of `len` bytes at `ptr` before reading data another host
    /// owns: the SWcc reader rule. See [`crate::swcc::invalidate`].
    #[inline]
    pub fn invalidate(self, ptr: *const u8, len: usize) {
        crate::swcc::invalidate(self, ptr, len);
    }
}

impl std::fmt::Display for Coherence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Coherence {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        COHERENCE_ALL
            .into_iter()
            .find(|mode| mode.name() == s)
            .ok_or_else(|| format!("unknown coherence mode `{s}` (known: hardware, limited, mcas)"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_and_names_round_trip_and_unknown_ones_are_refused() {
        for mode in COHERENCE_ALL {
            assert_eq!(Coherence::from_bits(mode.to_bits()), Some(mode));
            assert!(mode.to_bits() < 4, "the header holds 2 bits");
            assert_eq!(mode.name().parse::<Coherence>(), Ok(mode));
        }
        assert_eq!(
            Coherence::Hardware.to_bits(),
            0,
            "existing heaps keep their meaning"
        );
        assert_eq!(Coherence::from_bits(3), None);
        assert!("bogus".parse::<Coherence>().is_err());
        assert_eq!(Coherence::default(), Coherence::Hardware);
    }

    #[test]
    fn only_mcas_needs_mcas_and_only_hardware_skips_swcc() {
        assert!(!Coherence::Hardware.is_swcc());
        assert!(Coherence::Limited.is_swcc() && Coherence::Mcas.is_swcc());
        assert!(Coherence::Mcas.needs_mcas());
        assert!(!Coherence::Limited.needs_mcas() && !Coherence::Hardware.needs_mcas());
    }
}
