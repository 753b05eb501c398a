//! The generators one worker draws from, as the workload asks: CoreWorkload's
//! `keychooser` (for operations on an existing record) and its field and scan length
//! generators. Built once per phase by [`OpStream::streams_part`](super::OpStream::streams_part)
//! and cloned into each worker.

use std::sync::Arc;

use crate::error::YcsbError;
use crate::generator::{
    AcknowledgedCounter, Constant, Exponential, Hotspot, ScrambledZipfian, Sequential,
    SkewedLatest, UniformLong, Zipfian,
};
use crate::rng::WorkerRng;
use crate::workload::{LengthDistribution, Lengths, RequestDistribution, Workload};

/// The key chooser (`keychooser`) of one worker.
#[derive(Clone, Debug)]
pub(super) enum KeyChooser {
    /// No operation of the mix chooses an existing key.
    Unused,
    Uniform(UniformLong),
    Zipfian(ScrambledZipfian),
    Latest(SkewedLatest<AcknowledgedCounter>),
    Hotspot(Hotspot),
    Exponential(Exponential),
    Sequential(Sequential),
}

/// A length generator (field lengths, scan lengths).
#[derive(Clone, Debug)]
pub(super) enum LengthGen {
    Constant(Constant),
    Uniform(UniformLong),
    Zipfian(Zipfian),
}

/// The key chooser `w` asks for (CoreWorkload's `requestdistribution` switch in `init`);
/// `acked` is the run phase's insert sequence, which `latest` follows.
pub(super) fn key_chooser(
    w: &Workload,
    acked: &Arc<AcknowledgedCounter>,
) -> Result<KeyChooser, YcsbError> {
    let first = w.insert_start;
    let last = (w.insert_start + w.insert_count).checked_sub(1);
    let empty = || YcsbError::Inconsistent("no record to choose keys from".into());
    Ok(match w.request {
        RequestDistribution::Uniform => {
            KeyChooser::Uniform(UniformLong::new(first, last.ok_or_else(empty)?).ok_or_else(empty)?)
        }
        RequestDistribution::Zipfian => {
            let expected_new_keys = (w.operation_count as f64 * w.mix.insert * 2.0) as i32 as u64;
            let max = w.insert_start + w.insert_count + expected_new_keys;
            KeyChooser::Zipfian(ScrambledZipfian::new(first, max).ok_or_else(empty)?)
        }
        RequestDistribution::Latest => KeyChooser::Latest(SkewedLatest::new(Arc::clone(acked))),
        RequestDistribution::Hotspot {
            data_fraction,
            opn_fraction,
        } => KeyChooser::Hotspot(Hotspot::new(
            first,
            last.ok_or_else(empty)?,
            data_fraction,
            opn_fraction,
        )?),
        RequestDistribution::Exponential { percentile, frac } => KeyChooser::Exponential(
            Exponential::with_percentile(percentile, w.record_count as f64 * frac),
        ),
        RequestDistribution::Sequential => KeyChooser::Sequential(
            Sequential::new(first, last.ok_or_else(empty)?).ok_or_else(empty)?,
        ),
    })
}

/// The generator for `lengths` (CoreWorkload's `getFieldLengthGenerator`).
pub(super) fn length_gen(lengths: Lengths) -> LengthGen {
    // `Workload::check` guarantees min <= max for the ranged distributions; `min(max)`
    // only keeps an unchecked caller from an empty range.
    let min = lengths.min.min(lengths.max);
    match lengths.distribution {
        LengthDistribution::Constant => LengthGen::Constant(Constant::new(lengths.max)),
        LengthDistribution::Uniform => UniformLong::new(min, lengths.max).map_or(
            LengthGen::Constant(Constant::new(lengths.max)),
            LengthGen::Uniform,
        ),
        LengthDistribution::Zipfian => LengthGen::Zipfian(Zipfian::with_range(min, lengths.max)),
    }
}

impl LengthGen {
    #[inline]
    pub(super) fn next_value(&mut self, rng: &mut WorkerRng) -> u64 {
        match self {
            LengthGen::Constant(c) => c.next_value(),
            LengthGen::Uniform(u) => u.next_value(rng),
            LengthGen::Zipfian(z) => z.next_value(rng),
        }
    }
}
