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
//! A heap records its mode at creation (2 bits of its header, [`Coherence::to_bits`]). The
//! allocator asks the mode what an ownership move costs: [`Coherence::write_back`],
//! [`Coherence::invalidate`], [`Coherence::reload_edges`], [`Coherence::read_fresh`] and
//! [`Coherence::write_back_batch`] do nothing under `Hardware` and apply the SWcc rules
//! ([`crate::swcc`], which knows no modes) under `Limited` and `Mcas`.

use crate::swcc::{self, Batching, WriteBackBatch};

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
    /// [`swcc::write_back`]. The range must be mapped. A no-op under `Hardware`.
    #[inline]
    pub fn write_back(self, ptr: *const u8, len: usize) {
        if self.is_swcc() {
            swcc::write_back(ptr, len);
        }
    }

    /// [`Coherence::write_back`] for `len` bytes at `ptr` that the caller has just stored, every
    /// byte (a new block or object, written whole before it is handed over). Under the model
    /// of non-coherent caches the lines are marked dirty first ([`crate::model::stored`]), as
    /// the stores made them on real hardware: the model tells dirty lines by comparing them with
    /// what this cache loaded, so a block refilled with the bytes it held when this cache last
    /// loaded it would look clean, and memory would keep what another host wrote there since.
    #[inline]
    pub fn write_back_new(self, ptr: *const u8, len: usize) {
        if self.is_swcc() && len != 0 {
            self.write_back_new_unfenced(ptr, len);
            swcc::fence();
        }
    }

    /// [`Coherence::write_back_new`] without its fence ([`swcc::write_back_unfenced`]): the
    /// caller calls [`Coherence::fence`] before the write-back must be complete (before the
    /// CAS that publishes the range). A no-op under `Hardware`.
    #[inline]
    pub fn write_back_new_unfenced(self, ptr: *const u8, len: usize) {
        if self.is_swcc() {
            crate::model::stored(ptr, len);
            swcc::write_back_unfenced(ptr, len);
        }
    }

    /// Waits for the write-backs this thread started ([`Coherence::write_back_new_unfenced`]).
    /// A no-op under `Hardware`.
    #[inline]
    pub fn fence(self) {
        if self.is_swcc() {
            swcc::fence();
        }
    }

    /// Drops any stale cached copy of `len` bytes at `ptr` before reading data another host
    /// owns: the SWcc reader rule. See [`swcc::invalidate`]. The range must be mapped. A no-op
    /// under `Hardware`.
    #[inline]
    pub fn invalidate(self, ptr: *const u8, len: usize) {
        if self.is_swcc() {
            swcc::invalidate(ptr, len);
        }
    }

    /// Reloads the first and last lines of `len` bytes at `ptr` where the range covers them only
    /// in part, before the caller writes the range: the SWcc edge rule ([`swcc::reload_edges`]).
    /// A block that is not 64-byte aligned and sized shares lines with its neighbours, which
    /// other hosts may own; written back whole, a stale copy of their bytes would clobber them.
    /// The range must be mapped. A no-op under `Hardware`.
    #[inline]
    pub fn reload_edges(self, ptr: *const u8, len: usize) {
        if self.is_swcc() {
            swcc::reload_edges(ptr, len);
        }
    }

    /// Invalidates (under SWcc) then re-reads a `T` this thread does not own: the reader rule in
    /// one call.
    ///
    /// # Safety
    /// - `src` is valid for reads of a `T` and aligned for it;
    /// - any bit pattern the owner may have stored there is a valid `T` (a torn or stale value is
    ///   possible in principle; callers validate it with the CAS that consumes it).
    pub unsafe fn read_fresh<T: Copy>(self, src: *const T) -> T {
        self.invalidate(src.cast(), std::mem::size_of::<T>());
        // SAFETY: the caller guarantees `src` is valid, aligned and holds a valid `T`; volatile so
        // the load is issued after the fence rather than reused from an earlier read.
        unsafe { std::ptr::read_volatile(src) }
    }

    /// An empty [`WriteBackBatch`] for a heap in this mode: one that ignores every push under
    /// `Hardware`.
    pub fn write_back_batch(self) -> WriteBackBatch {
        WriteBackBatch::new(if self.is_swcc() {
            Batching::On
        } else {
            Batching::Off
        })
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
    use crate::swcc::{counts, Counts};

    #[derive(Clone, Copy)]
    #[repr(C, align(64))]
    struct Line([u64; 8]);

    /// A buffer of `count` whole cache lines.
    fn lines(count: usize) -> Vec<Line> {
        vec![Line([0; 8]); count]
    }

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

    #[test]
    fn write_back_counts_lines_and_one_fence_only_when_swcc() {
        let buf = lines(4);
        for mode in COHERENCE_ALL {
            let before = counts();
            // Two bytes straddling the first line boundary: two lines.
            mode.write_back(buf.as_ptr().cast::<u8>().wrapping_add(63), 2);
            let did = counts().since(before);
            match mode {
                Coherence::Hardware => assert_eq!(did, Counts::default()),
                Coherence::Limited | Coherence::Mcas => {
                    assert_eq!(did.lines_written_back, 2);
                    assert_eq!(did.fences, 1);
                    assert_eq!(did.lines_invalidated, 0);
                }
            }
        }
    }

    #[test]
    fn invalidate_and_read_fresh_count_only_when_swcc() {
        let mut buf = lines(2);
        buf[1].0[3] = 0xfeed;
        for mode in COHERENCE_ALL {
            let before = counts();
            mode.invalidate(buf.as_ptr().cast(), 128);
            // SAFETY: the pointer is into `buf`, aligned for u64, and any u64 is valid.
            let value = unsafe { mode.read_fresh(&buf[1].0[3] as *const u64) };
            assert_eq!(value, 0xfeed);
            let did = counts().since(before);
            match mode {
                Coherence::Hardware => assert_eq!(did, Counts::default()),
                Coherence::Limited | Coherence::Mcas => {
                    assert_eq!(did.lines_invalidated, 2 + 1);
                    assert_eq!(did.fences, 2);
                    assert_eq!(did.lines_written_back, 0);
                }
            }
        }
    }

    #[test]
    fn batch_under_hardware_coherence_does_nothing() {
        let buf = lines(4);
        let before = counts();
        let mut batch = Coherence::Hardware.write_back_batch();
        batch.push(buf.as_ptr().cast(), 256);
        assert_eq!(batch.pending(), 0);
        batch.finish();
        assert_eq!(counts().since(before), Counts::default());
    }
}
