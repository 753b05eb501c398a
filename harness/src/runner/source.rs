//! Where a worker's operations come from: a YCSB [`OpStream`] or its share of a trace,
//! and how each operation becomes target commands.
//!
//! # YCSB operations as memcached commands
//! `read` → `get`; `update` and `insert` → `set`; `delete` → `delete`; `scan K N` → `get K`
//! (a hash store has no order to scan; the scan length is ignored); read-modify-write →
//! `get` then `set`, timed as one operation. Values are `value_len` ASCII zeros.
//!
//! # Trace requests
//! Each request's command runs as recorded, with `value_size` ASCII zeros as its value
//! (zeros so that `incr`/`decr` find a number).

use super::targets::{Outcome, Session};
use podkv_traces::{Command, Request};
use podkv_ycsb::{Op, OpKind, OpStream};

/// Names of the YCSB kinds, indexed by `OpKind as usize`.
pub const NAMES_YCSB: [&str; 6] = ["read", "update", "insert", "scan", "rmw", "delete"];

/// A worker's operations.
pub trait Source {
    /// One operation (copied only by a paired target's catching up, `--ab-heap`).
    type Op: Clone;
    /// The next operation, `None` at the end; lent until the next call, so the timed
    /// loop copies nothing.
    fn next_op(&mut self) -> anyhow::Result<Option<&Self::Op>>;
    /// Runs `op` on `session`; returns its kind index and outcome.
    fn perform<S: Session>(
        op: &Self::Op,
        session: &mut S,
        values: &mut Values,
    ) -> anyhow::Result<(usize, Outcome)>;
    /// Reports an error that ended the source early.
    fn finish(self) -> anyhow::Result<()>;
    /// When the operation the next [`next_op`](Self::next_op) returns is due, in ns after
    /// the source's start, if the source records one (a paced trace share).
    fn next_due_ns(&self) -> Option<f64> {
        None
    }
}

/// A buffer of ASCII zeros that value slices are cut from; grows on demand.
#[derive(Default)]
pub struct Values {
    zeros: Vec<u8>,
}

impl Values {
    /// `len` zero digits.
    #[inline]
    pub fn get(&mut self, len: usize) -> &[u8] {
        if self.zeros.len() < len {
            self.grow(len);
        }
        &self.zeros[..len]
    }

    #[cold]
    fn grow(&mut self, len: usize) {
        self.zeros.resize(len.next_power_of_two(), b'0');
    }
}

impl Source for OpStream {
    type Op = Op;

    /// Inlined whole into the timed loop: a call here cost ~17 instructions an operation
    /// in saved and restored registers.
    #[inline(always)]
    fn next_op(&mut self) -> anyhow::Result<Option<&Op>> {
        Ok(self.next_ref()?)
    }

    #[inline]
    fn perform<S: Session>(
        op: &Op,
        session: &mut S,
        values: &mut Values,
    ) -> anyhow::Result<(usize, Outcome)> {
        let set = Command::Set { ttl: 0 };
        let outcome = match *op {
            Op::Read { ref key } | Op::Scan { ref key, .. } => {
                session.execute(Command::Get, key.as_bytes(), &[])?
            }
            Op::Update { ref key, value_len } | Op::Insert { ref key, value_len } => {
                session.execute(set, key.as_bytes(), values.get(value_len))?
            }
            Op::Delete { ref key } => session.execute(Command::Delete, key.as_bytes(), &[])?,
            Op::ReadModifyWrite { ref key, value_len } => {
                let read = session.execute(Command::Get, key.as_bytes(), &[])?;
                session.execute(set, key.as_bytes(), values.get(value_len))?;
                read
            }
        };
        Ok((op.kind() as usize, outcome))
    }

    fn finish(self) -> anyhow::Result<()> {
        Ok(OpStream::finish(self)?)
    }
}

/// A worker's share of a trace, read into memory before the timed run.
pub struct TraceShare {
    requests: Vec<Request>,
    next: usize,
    /// Each request's intended offset from the trace's first second, when paced by timestamps
    /// ([`super::pacing::spread_seconds`]); empty otherwise.
    due_ns: Vec<f64>,
}

impl TraceShare {
    /// Replays `requests` in order; paced by timestamps from second `origin` (the trace's
    /// first), it records when each is due.
    pub fn new(requests: Vec<Request>, origin: Option<u64>) -> Self {
        let due_ns = match origin {
            Some(origin) => {
                super::pacing::spread_seconds(origin, requests.iter().map(|r| r.timestamp))
            }
            None => Vec::new(),
        };
        Self {
            requests,
            next: 0,
            due_ns,
        }
    }
}

impl Source for TraceShare {
    type Op = Request;

    #[inline]
    fn next_op(&mut self) -> anyhow::Result<Option<&Request>> {
        let request = self.requests.get(self.next);
        self.next += 1;
        Ok(request)
    }

    #[inline]
    fn perform<S: Session>(
        r: &Request,
        session: &mut S,
        values: &mut Values,
    ) -> anyhow::Result<(usize, Outcome)> {
        let value = if r.command.op().stores_value() {
            values.get(r.value_size as usize)
        } else {
            &[]
        };
        let outcome = session.execute(r.command, r.key.as_bytes(), value)?;
        Ok((r.command.op().index(), outcome))
    }

    fn finish(self) -> anyhow::Result<()> {
        Ok(())
    }

    fn next_due_ns(&self) -> Option<f64> {
        self.due_ns.get(self.next).copied()
    }
}

/// The kind index of a YCSB kind.
pub fn ycsb_index(kind: OpKind) -> usize {
    kind as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ycsb_names_follow_op_kind_order() {
        assert_eq!(NAMES_YCSB[ycsb_index(OpKind::ReadModifyWrite)], "rmw");
        assert_eq!(NAMES_YCSB[ycsb_index(OpKind::Delete)], "delete");
        assert_eq!(NAMES_YCSB[ycsb_index(OpKind::Scan)], "scan");
        let mut v = Values::default();
        assert_eq!(v.get(3), b"000");
        assert_eq!(v.get(1000).len(), 1000);
    }
}
