//! Operation streams: CoreWorkload's `doInsert` (load phase) and `doTransaction` (run
//! phase), one [`OpStream`] per worker thread, made from a [`Workload`] by
//! [`OpStream::streams`] (or [`OpStream::streams_part`] for one process of several). The key
//! and length generators each worker draws from are built in `choose`.
//!
//! # Splitting work across workers
//!
//! As YCSB's client does with threads:
//! - **Operation budget**: worker `w` of `n` gets `count / n` operations, plus one if
//!   `w < count % n` (`count` is `load_count` or `operation_count`).
//! - **Shared state** (one per phase, behind an `Arc`): the load-phase key sequence
//!   (YCSB's `keysequence`, a [`Counter`] starting at `insertstart`), the run-phase insert
//!   sequence (`transactioninsertkeysequence`, an [`AcknowledgedCounter`] starting at
//!   `recordcount`), and the cursor of the `sequential` distribution. Workers take
//!   numbers from these with single atomic operations and never wait for each other (a
//!   lone worker, the only taker, with plain loads and stores: [`Takers::One`]).
//! - **Per worker**: its RNG, seeded from `(seed, phase, worker)` (see [`crate::rng`]), and
//!   its own copy of every other generator. The zipfian generators' cached zeta is the
//!   only other mutable state; YCSB shares it under a lock, here each worker extends its
//!   own copy (same values, no lock). The initial zeta is computed once per phase.
//!
//! A single-worker stream is a pure function of the workload and its seed. With several
//! workers each worker's draws are too, but which numbers a worker takes from the shared
//! counters depends on how the threads interleave, as in YCSB.
//!
//! # Inserts and acknowledgements
//!
//! A run-phase insert takes the next number from the insert sequence; the number becomes
//! readable (the `limit` of [`AcknowledgedCounter`]) once acknowledged. A stream
//! acknowledges its insert when it is asked for its next operation (or dropped), i.e.
//! when the caller has performed the insert, which is where YCSB acknowledges (in the
//! `finally` after `db.insert`).
//!
//! # Choosing an existing key (`nextKeynum`)
//!
//! Draws above the acknowledged limit are thrown away and redrawn; `exponential` draws a
//! distance back from the limit and redraws negative results. YCSB narrows each drawn
//! key number to a Java `int`; this port keeps 64 bits.

use std::sync::Arc;

use crate::error::YcsbError;
use crate::generator::{AcknowledgedCounter, Basis, Counter, OperationChooser, Takers};
use crate::key::{Key, KeyFormat};
use crate::op::{Op, OpKind};
use crate::rng::{worker_rng, WorkerRng};
use crate::workload::{Fields, Workload};
use choose::{key_chooser, length_gen, KeyChooser, LengthGen};

mod choose;

/// Which half of a YCSB benchmark a stream generates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// `-load`: insert the records, in key-sequence order.
    Load,
    /// `-t`: the operation mix.
    Run,
}

impl Phase {
    /// `load` or `run`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Phase::Load => "load",
            Phase::Run => "run",
        }
    }

    fn index(&self) -> u32 {
        match self {
            Phase::Load => 0,
            Phase::Run => 1,
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The counters every worker of one phase shares.
#[derive(Debug)]
struct Shared {
    /// YCSB's `keysequence`: load-phase record numbers.
    load_keys: Counter,
    /// YCSB's `transactioninsertkeysequence`: run-phase inserts, and the read limit.
    insert_keys: Arc<AcknowledgedCounter>,
    /// Record numbers that no part of this process inserts: the run-phase inserts of the
    /// workers before this part (empty for a whole run). Reads redraw them.
    gap: std::ops::Range<i64>,
}

/// The slot's content before the first operation.
const EMPTY: Op = Op::Read { key: Key::EMPTY };

/// The operations of one worker in one phase.
///
/// Iterate it, or call [`OpStream::try_next`] to see the one error a stream can meet
/// (the insert acknowledgement window overflowing); the iterator stops at that error and
/// keeps it for [`OpStream::finish`].
#[derive(Debug)]
pub struct OpStream {
    phase: Phase,
    worker: usize,
    remaining: u64,
    rng: WorkerRng,
    shared: Arc<Shared>,
    chooser: Option<OperationChooser>,
    keys: KeyChooser,
    field_length: LengthGen,
    scan_length: LengthGen,
    fields: Fields,
    key_format: KeyFormat,
    /// The run-phase insert number handed out last and not yet acknowledged.
    pending_ack: Option<i64>,
    error: Option<YcsbError>,
    /// The operation [`OpStream::next_ref`] lends: each is built here, key in place.
    slot: Op,
}

/// YCSB's per-thread operation count.
fn share(total: u64, worker: usize, workers: usize) -> u64 {
    let workers = workers as u64;
    total / workers + u64::from((worker as u64) < total % workers)
}

impl OpStream {
    /// One stream per worker for the load phase of `workload`.
    pub fn load(workload: &Workload, workers: usize) -> Result<Vec<OpStream>, YcsbError> {
        OpStream::streams(workload, Phase::Load, workers)
    }

    /// One stream per worker for the run phase of `workload`.
    pub fn run(workload: &Workload, workers: usize) -> Result<Vec<OpStream>, YcsbError> {
        OpStream::streams(workload, Phase::Run, workers)
    }

    /// One stream per worker of `workload` for `phase`, sharing that phase's counters.
    pub fn streams(
        workload: &Workload,
        phase: Phase,
        workers: usize,
    ) -> Result<Vec<OpStream>, YcsbError> {
        OpStream::streams_part(workload, phase, workers, 0..workers)
    }

    /// The streams of workers `part` out of `workers`, for one process of a multi-process
    /// run: the same budgets and RNG seeds as [`OpStream::streams`] gives those workers, so
    /// the parts of all processes together make the same operation mix.
    ///
    /// Counters cannot be shared across processes, so each part gets its own, over disjoint
    /// numbers: the load phase's key sequence starts after the records of the workers
    /// before `part` (so the parts load exactly the records one process would), and the
    /// run phase's inserts start at `recordcount` plus the run budget of the workers
    /// before `part`. A part's reads see the loaded records and its own acknowledged
    /// inserts: numbers between `recordcount` and the start of the part's inserts are
    /// redrawn, as numbers above the acknowledged limit are.
    pub fn streams_part(
        workload: &Workload,
        phase: Phase,
        workers: usize,
        part: std::ops::Range<usize>,
    ) -> Result<Vec<OpStream>, YcsbError> {
        if workers == 0 || workers > u32::MAX as usize || part.end > workers {
            return Err(YcsbError::Inconsistent(format!(
                "{workers} workers (part {part:?}): need between 1 and 2^32 - 1, part inside"
            )));
        }
        let before =
            |total: u64| -> u64 { (0..part.start).map(|w| share(total, w, workers)).sum() };
        let inserts_from = (workload.record_count + before(workload.operation_count)) as i64;
        // A part of one worker is its counters' only taker.
        let takers = if part.len() == 1 {
            Takers::One
        } else {
            Takers::Many
        };
        let load_from = (workload.insert_start + before(workload.load_count)) as i64;
        let shared = Arc::new(Shared {
            load_keys: Counter::with_takers(load_from, takers),
            insert_keys: Arc::new(AcknowledgedCounter::with_takers(inserts_from, takers)),
            gap: workload.record_count as i64..inserts_from,
        });
        let keys = match phase {
            Phase::Run if workload.operation_count > 0 => {
                key_chooser(workload, &shared.insert_keys)?
            }
            _ => KeyChooser::Unused,
        };
        let prototype = OpStream {
            phase,
            worker: 0,
            remaining: 0,
            rng: worker_rng(workload.seed, phase.index(), 0),
            shared,
            chooser: OperationChooser::new(&workload.mix_pairs()),
            keys,
            field_length: length_gen(workload.fields.length),
            scan_length: length_gen(workload.scan_length),
            fields: workload.fields,
            key_format: workload.key_format,
            pending_ack: None,
            error: None,
            slot: EMPTY,
        };
        let total = match phase {
            Phase::Load => workload.load_count,
            Phase::Run => workload.operation_count,
        };
        Ok(part
            .map(|w| prototype.for_worker(workload.seed, w, share(total, w, workers)))
            .collect())
    }

    fn for_worker(&self, seed: u64, worker: usize, remaining: u64) -> Self {
        Self {
            phase: self.phase,
            worker,
            remaining,
            rng: worker_rng(seed, self.phase.index(), worker as u32),
            shared: Arc::clone(&self.shared),
            chooser: self.chooser,
            keys: self.keys.clone(),
            field_length: self.field_length.clone(),
            scan_length: self.scan_length.clone(),
            fields: self.fields,
            key_format: self.key_format,
            pending_ack: None,
            error: None,
            slot: EMPTY,
        }
    }

    /// The phase this stream generates.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// This stream's worker number.
    pub fn worker(&self) -> usize {
        self.worker
    }

    /// Operations left.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// The highest record number that run-phase operations may choose now
    /// (the acknowledged insert limit).
    pub fn read_limit(&self) -> i64 {
        self.shared.insert_keys.last_value()
    }

    /// The next operation, `Ok(None)` at the end; acknowledges the previous insert first.
    pub fn try_next(&mut self) -> Result<Option<Op>, YcsbError> {
        Ok(self.next_ref()?.copied())
    }

    /// [`OpStream::try_next`] without the copy: the operation is built inside the
    /// stream and lent until the next call. The runner's timed loop takes this path, with
    /// all of it inlined (a call cost ~17 instructions of register saves per operation).
    #[inline(always)]
    pub fn next_ref(&mut self) -> Result<Option<&Op>, YcsbError> {
        self.acknowledge_pending()?;
        if self.remaining == 0 {
            return Ok(None);
        }
        self.remaining -= 1;
        match self.phase {
            Phase::Load => self.next_load(),
            Phase::Run => self.next_run(),
        }
        Ok(Some(&self.slot))
    }

    /// Acknowledges any pending insert and reports the error that stopped iteration, if
    /// any.
    pub fn finish(mut self) -> Result<(), YcsbError> {
        self.acknowledge_pending()?;
        self.error.take().map_or(Ok(()), Err)
    }

    #[inline]
    fn acknowledge_pending(&mut self) -> Result<(), YcsbError> {
        match self.pending_ack.take() {
            Some(n) => self.shared.insert_keys.acknowledge(n),
            None => Ok(()),
        }
    }

    /// Puts `op` (its key empty) in the slot and builds its key there. Keys are built
    /// last, after every draw of the operation, which keeps YCSB's order of draws: the
    /// key number, then the lengths.
    #[inline(always)]
    fn put(&mut self, op: Op) {
        self.slot = op;
        self.key_format.build_into(self.slot.key_mut());
    }

    /// `doInsert`: the next number of the shared key sequence, all fields.
    fn next_load(&mut self) {
        let keynum = self.shared.load_keys.next_value() as u64;
        let value_len = self.record_len();
        self.put(Op::Insert {
            key: Key::empty(keynum),
            value_len,
        });
    }

    /// `doTransaction`: choose the kind, then its operands.
    #[inline(always)]
    fn next_run(&mut self) {
        // By reference: the chooser is 100 bytes, and copying it was a tenth of an op.
        let Some(chooser) = &self.chooser else {
            unreachable!("Workload::check refuses a run phase without operations")
        };
        let kind = chooser.next_value(&mut self.rng);
        if kind == OpKind::Insert {
            return self.next_insert();
        }
        // Every other kind starts by choosing an existing key: one call site, inlined.
        let key = Key::empty(self.next_keynum());
        match kind {
            OpKind::Read => self.put(Op::Read { key }),
            OpKind::Update => {
                let value_len = self.update_len();
                self.put(Op::Update { key, value_len });
            }
            OpKind::Scan => {
                let len = self.scan_length.next_value(&mut self.rng) as usize;
                self.put(Op::Scan { key, len });
            }
            OpKind::ReadModifyWrite => {
                let value_len = self.update_len();
                self.put(Op::ReadModifyWrite { key, value_len });
            }
            OpKind::Delete => self.put(Op::Delete { key }),
            OpKind::Insert => unreachable!("handled above"),
        }
    }

    /// `doTransactionInsert`: take a number; it is acknowledged on the next call.
    fn next_insert(&mut self) {
        let keynum = self.shared.insert_keys.next_value();
        self.pending_ack = Some(keynum);
        let value_len = self.record_len();
        self.put(Op::Insert {
            key: Key::empty(keynum as u64),
            value_len,
        });
    }

    /// `nextKeynum`: redraw until the record exists.
    #[inline(always)]
    fn next_keynum(&mut self) -> u64 {
        let limit = self.shared.insert_keys.last_value();
        loop {
            let keynum = self.draw_keynum(limit);
            if (0..=limit).contains(&keynum) && !self.shared.gap.contains(&keynum) {
                return keynum as u64;
            }
        }
    }

    #[inline(always)]
    fn draw_keynum(&mut self, limit: i64) -> i64 {
        let rng = &mut self.rng;
        match &mut self.keys {
            KeyChooser::Uniform(g) => g.next_value(rng) as i64,
            KeyChooser::Zipfian(g) => g.next_value(rng) as i64,
            KeyChooser::Latest(g) => g.next_value(rng),
            KeyChooser::Hotspot(g) => g.next_value(rng) as i64,
            KeyChooser::Exponential(g) => limit.saturating_sub(g.next_value(rng) as i64),
            KeyChooser::Sequential(g) => g.next_value() as i64,
            KeyChooser::Unused => unreachable!("a key chooser exists whenever operations do"),
        }
    }

    /// `buildValues`: every field.
    fn record_len(&mut self) -> usize {
        let count = self.fields.count;
        match &mut self.field_length {
            LengthGen::Constant(c) => (count * c.next_value()) as usize,
            gen => (0..count)
                .map(|_| gen.next_value(&mut self.rng))
                .sum::<u64>() as usize,
        }
    }

    /// `writeallfields` ? `buildValues` : `buildSingleValue`.
    #[inline(always)]
    fn update_len(&mut self) -> usize {
        if self.fields.write_all {
            return self.record_len();
        }
        self.field_length.next_value(&mut self.rng) as usize
    }
}

impl Iterator for OpStream {
    type Item = Op;

    fn next(&mut self) -> Option<Op> {
        match self.try_next() {
            Ok(op) => op,
            Err(e) => {
                self.error = Some(e);
                self.remaining = 0;
                None
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.remaining).unwrap_or(usize::MAX);
        (0, Some(n))
    }
}

impl Drop for OpStream {
    fn drop(&mut self) {
        // The caller performed the last insert; make it readable. A full window cannot
        // be reported from here, and only delays readers (YCSB would throw).
        let _ = self.acknowledge_pending();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::properties::Properties;

    fn workload(name: &str, extra: &str) -> Workload {
        let mut props = Properties::named(name).unwrap();
        props.merge_text("extra", extra).unwrap();
        Workload::from_properties(&props).unwrap()
    }

    #[test]
    fn budget_is_split_like_ycsb_threads() {
        let shares: Vec<u64> = (0..4).map(|w| share(10, w, 4)).collect();
        assert_eq!(shares, [3, 3, 2, 2]);
        let w = workload("a", "operationcount=10");
        let lens: Vec<usize> = OpStream::run(&w, 4)
            .unwrap()
            .into_iter()
            .map(Iterator::count)
            .collect();
        assert_eq!(lens, [3, 3, 2, 2]);
    }

    #[test]
    fn load_inserts_each_key_once_across_threads() {
        let w = workload("a", "recordcount=20000\ninsertorder=ordered");
        let streams = OpStream::load(&w, 4).unwrap();
        let mut nums: Vec<u64> = std::thread::scope(|s| {
            let handles: Vec<_> = streams
                .into_iter()
                .map(|st| s.spawn(move || st.map(|op| op.key().num()).collect::<Vec<_>>()))
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        });
        nums.sort_unstable();
        assert!(nums.iter().copied().eq(0..20_000));
    }

    #[test]
    fn inserts_become_readable_after_the_next_call() {
        let w = workload(
            "d",
            "recordcount=100\noperationcount=1000\ninsertproportion=1\nreadproportion=0",
        );
        let mut stream = OpStream::run(&w, 1).unwrap().remove(0);
        assert_eq!(stream.read_limit(), 99);
        let first = stream.next().unwrap();
        assert_eq!(first.key().num(), 100);
        assert_eq!(stream.read_limit(), 99);
        stream.next().unwrap();
        assert_eq!(stream.read_limit(), 100);
        stream.finish().unwrap();
    }

    #[test]
    fn reads_never_pass_the_limit() {
        for dist in [
            "uniform",
            "zipfian",
            "latest",
            "hotspot",
            "exponential",
            "sequential",
        ] {
            let extra = format!(
                "recordcount=500\noperationcount=3000\ninsertproportion=0.3\nreadproportion=0.7\nupdateproportion=0\nrequestdistribution={dist}"
            );
            let mut stream = OpStream::run(&workload("a", &extra), 1).unwrap().remove(0);
            while let Some(op) = stream.try_next().unwrap() {
                let limit = stream.read_limit();
                if let Op::Read { key } = op {
                    assert!(key.num() as i64 <= limit, "{dist}: {} > {limit}", key.num());
                }
            }
        }
    }

    #[test]
    fn value_lengths_follow_fields() {
        let w = workload("a", "recordcount=10\nfieldcount=3\nfieldlength=7");
        let op = OpStream::load(&w, 1).unwrap().remove(0).next().unwrap();
        assert!(matches!(op, Op::Insert { value_len: 21, .. }));
        let w = workload(
            "a",
            "recordcount=10\noperationcount=50\nreadproportion=0\nfieldcount=3\nfieldlength=7",
        );
        assert!(OpStream::run(&w, 1)
            .unwrap()
            .remove(0)
            .all(|op| matches!(op, Op::Update { value_len: 7, .. })));
        let w = workload("a", "recordcount=10\noperationcount=50\nreadproportion=0\nwriteallfields=true\nfieldcount=3\nfieldlength=7");
        assert!(OpStream::run(&w, 1)
            .unwrap()
            .remove(0)
            .all(|op| matches!(op, Op::Update { value_len: 21, .. })));
        let w = workload("a", "recordcount=10\nfieldlengthdistribution=uniform\nminfieldlength=5\nfieldlength=9\nfieldcount=1");
        assert!(OpStream::load(&w, 1).unwrap().remove(0).all(|op| matches!(
            op,
            Op::Insert {
                value_len: 5..=9,
                ..
            }
        )));
    }

    #[test]
    fn parts_load_the_records_of_a_whole_run_and_read_no_gap() {
        let w = workload("a", "recordcount=1001\noperationcount=4000");
        let nums = |streams: Vec<OpStream>| -> Vec<u64> {
            streams
                .into_iter()
                .flat_map(|s| s.map(|op| op.key().num()).collect::<Vec<_>>())
                .collect()
        };
        let mut whole = nums(OpStream::load(&w, 4).unwrap());
        let mut parts = nums(OpStream::streams_part(&w, Phase::Load, 4, 0..2).unwrap());
        parts.extend(nums(
            OpStream::streams_part(&w, Phase::Load, 4, 2..4).unwrap(),
        ));
        whole.sort_unstable();
        parts.sort_unstable();
        assert_eq!(whole, parts);
        assert_eq!(parts, (0..1001).collect::<Vec<u64>>());
        let reads = nums(OpStream::streams_part(&w, Phase::Run, 4, 2..4).unwrap());
        assert_eq!(reads.len(), 2000);
        assert!(
            reads.iter().all(|&n| n < 1001),
            "a later part reads only records"
        );
        assert!(OpStream::streams_part(&w, Phase::Run, 4, 3..5).is_err());
    }

    #[test]
    fn zero_workers_is_an_error() {
        assert!(OpStream::run(&workload("a", ""), 0).is_err());
    }
}
