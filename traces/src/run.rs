//! The three whole-file jobs — convert, stats, generate — as library calls.
//!
//! Each streams: memory does not grow with the file, except `stats`' per-key counts and
//! `generate`'s shuffled list (see their modules).

use std::path::Path;

use crate::cluster::cluster;
use crate::file::{self, TraceReader};
use crate::generate::{Drift, Generator};
use crate::progress::{Progress, COUNT_RECORDS_PER_TICK};
use crate::stats::{Accumulator, Stats, StatsOptions};
use crate::{Record, TraceError};

/// What to do with a malformed line or row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadLines {
    /// Stop with the line's error.
    Fail,
    /// Count it, report the first few on stderr, and go on.
    Skip,
}

/// Bad lines reported on stderr before only counting them.
const COUNT_BAD_LINES_SHOWN: u64 = 10;

/// Outcome of reading a whole file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drained {
    /// Records read and handled.
    pub records: u64,
    /// Bad lines skipped under [`BadLines::Skip`].
    pub skipped: u64,
}

/// Feeds every record of `reader` to `each`, applying the bad-line policy and reporting
/// progress.
pub(crate) fn drain(
    mut reader: TraceReader,
    bad: BadLines,
    progress: &Progress,
    mut each: impl FnMut(Record) -> Result<(), TraceError>,
) -> Result<Drained, TraceError> {
    let mut done = Drained::default();
    while let Some(item) = reader.next() {
        match item {
            Ok(record) => {
                each(record)?;
                done.records += 1;
                if done.records % COUNT_RECORDS_PER_TICK == 0 {
                    progress.read(reader.position(), done.records);
                }
            }
            Err(e) if bad == BadLines::Skip && e.is_bad_line() => {
                done.skipped += 1;
                if done.skipped <= COUNT_BAD_LINES_SHOWN {
                    eprintln!("skipping: {e}");
                }
            }
            Err(e) => return Err(e),
        }
    }
    progress.finish();
    Ok(done)
}

/// Refuses to write a file onto the one being read.
fn distinct(input: &Path, output: &Path) -> Result<(), TraceError> {
    let same = match (input.canonicalize(), output.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if same {
        return Err(TraceError::InvalidArgument(format!(
            "{} is both input and output",
            input.display()
        )));
    }
    Ok(())
}

pub(crate) fn convert_with(
    input: &Path,
    output: &Path,
    bad: BadLines,
    progress: impl FnOnce(&TraceReader) -> Progress,
) -> Result<Drained, TraceError> {
    distinct(input, output)?;
    let reader = file::open(input)?;
    let progress = progress(&reader);
    let mut writer = file::create(output)?;
    let done = drain(reader, bad, &progress, |r| writer.write(&r))?;
    writer.finish()?;
    Ok(done)
}

pub(crate) fn stats_with(
    input: &Path,
    options: StatsOptions,
    bad: BadLines,
    progress: impl FnOnce(&TraceReader) -> Progress,
) -> Result<(Stats, Drained), TraceError> {
    let reader = file::open(input)?;
    let progress = progress(&reader);
    let mut acc = Accumulator::new(options);
    let done = drain(reader, bad, &progress, |r| {
        acc.add(&r);
        Ok(())
    })?;
    Ok((acc.finish(), done))
}

pub(crate) fn generate_with(
    cluster_id: u32,
    ops: u64,
    seed: u64,
    output: &Path,
    drift: Option<Drift>,
    progress: &Progress,
) -> Result<u64, TraceError> {
    let ops = u32::try_from(ops).map_err(|_| {
        TraceError::InvalidArgument(format!("--ops {ops} exceeds {} requests", u32::MAX))
    })?;
    let mut generator = Generator::new(&cluster(cluster_id)?, ops, seed);
    if let Some(drift) = drift {
        generator = generator.with_value_drift(drift);
    }
    let mut writer = file::create(output)?;
    for (i, record) in generator.enumerate() {
        writer.write(&record)?;
        if (i as u64 + 1) % COUNT_RECORDS_PER_TICK == 0 {
            progress.count(i as u64 + 1);
        }
    }
    progress.finish();
    writer.finish()
}

/// Rewrites a trace in another format (by extension); returns the requests written. Stops at
/// the first malformed line.
pub fn convert(input: impl AsRef<Path>, output: impl AsRef<Path>) -> Result<u64, TraceError> {
    convert_with(input.as_ref(), output.as_ref(), BadLines::Fail, |_| {
        Progress::hidden()
    })
    .map(|d| d.records)
}

/// The statistics of a trace file of any format. Stops at the first malformed line.
pub fn stats(input: impl AsRef<Path>, options: StatsOptions) -> Result<Stats, TraceError> {
    stats_with(input.as_ref(), options, BadLines::Fail, |_| {
        Progress::hidden()
    })
    .map(|s| s.0)
}

/// Writes `ops` synthetic requests shaped like cluster `cluster_id` (see
/// [`crate::generate`]) to `output`, in the format its extension names; returns the requests
/// written. The same seed gives the same trace.
pub fn generate(
    cluster_id: u32,
    ops: u64,
    seed: u64,
    output: impl AsRef<Path>,
) -> Result<u64, TraceError> {
    generate_with(
        cluster_id,
        ops,
        seed,
        output.as_ref(),
        None,
        &Progress::hidden(),
    )
}
