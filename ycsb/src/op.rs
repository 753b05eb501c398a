//! What a stream yields: one [`Op`] per YCSB operation, and [`OpCounts`] to tally them.
//!
//! `value_len` is the number of value bytes YCSB would write: the sum of the field
//! lengths written (all `fieldcount` fields for an insert, or with `writeallfields=true`;
//! one field otherwise). Field names are not counted.

use serde::Serialize;

use crate::key::Key;

/// One operation against the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Read one record (`doTransactionRead`).
    Read {
        /// The record.
        key: Key,
    },
    /// Overwrite a record (`doTransactionUpdate`).
    Update {
        /// The record.
        key: Key,
        /// Bytes written.
        value_len: usize,
    },
    /// Create a record (`doInsert`, `doTransactionInsert`).
    Insert {
        /// The new record.
        key: Key,
        /// Bytes written.
        value_len: usize,
    },
    /// Remove a record (podkv extension, the CXLALLOC paper's YCSB-A). Later reads of the
    /// key miss until it is inserted again.
    Delete {
        /// The record.
        key: Key,
    },
    /// Read `len` records starting at `key` (`doTransactionScan`).
    Scan {
        /// The first record.
        key: Key,
        /// Number of records.
        len: usize,
    },
    /// Read a record, then update it (`doTransactionReadModifyWrite`).
    ReadModifyWrite {
        /// The record.
        key: Key,
        /// Bytes written by the update half.
        value_len: usize,
    },
}

/// The kind of an [`Op`], without its operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// [`Op::Read`].
    Read,
    /// [`Op::Update`].
    Update,
    /// [`Op::Insert`].
    Insert,
    /// [`Op::Scan`].
    Scan,
    /// [`Op::ReadModifyWrite`].
    ReadModifyWrite,
    /// [`Op::Delete`].
    Delete,
}

impl Op {
    /// The operation's kind.
    pub fn kind(&self) -> OpKind {
        match self {
            Op::Read { .. } => OpKind::Read,
            Op::Update { .. } => OpKind::Update,
            Op::Insert { .. } => OpKind::Insert,
            Op::Delete { .. } => OpKind::Delete,
            Op::Scan { .. } => OpKind::Scan,
            Op::ReadModifyWrite { .. } => OpKind::ReadModifyWrite,
        }
    }

    /// The key the operation names (a scan's first key).
    pub fn key(&self) -> &Key {
        match self {
            Op::Read { key }
            | Op::Update { key, .. }
            | Op::Insert { key, .. }
            | Op::Delete { key }
            | Op::Scan { key, .. }
            | Op::ReadModifyWrite { key, .. } => key,
        }
    }

    /// The key, to build in place.
    #[inline(always)]
    pub(crate) fn key_mut(&mut self) -> &mut Key {
        match self {
            Op::Read { key }
            | Op::Update { key, .. }
            | Op::Insert { key, .. }
            | Op::Delete { key }
            | Op::Scan { key, .. }
            | Op::ReadModifyWrite { key, .. } => key,
        }
    }
}

/// Operations counted by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct OpCounts {
    /// Reads.
    pub read: u64,
    /// Updates.
    pub update: u64,
    /// Inserts.
    pub insert: u64,
    /// Deletes.
    pub delete: u64,
    /// Scans.
    pub scan: u64,
    /// Read-modify-writes (each counted once).
    pub read_modify_write: u64,
}

impl OpCounts {
    /// Counts one more `op`.
    pub fn record(&mut self, op: &Op) {
        *self.slot(op.kind()) += 1;
    }

    /// The count of `kind`.
    pub fn get(&self, kind: OpKind) -> u64 {
        let mut copy = *self;
        *copy.slot(kind)
    }

    /// All operations.
    pub fn total(&self) -> u64 {
        self.read + self.update + self.insert + self.delete + self.scan + self.read_modify_write
    }

    fn slot(&mut self, kind: OpKind) -> &mut u64 {
        match kind {
            OpKind::Read => &mut self.read,
            OpKind::Update => &mut self.update,
            OpKind::Insert => &mut self.insert,
            OpKind::Delete => &mut self.delete,
            OpKind::Scan => &mut self.scan,
            OpKind::ReadModifyWrite => &mut self.read_modify_write,
        }
    }
}

impl std::fmt::Display for OpCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "total={} read={} update={} insert={} delete={} scan={} rmw={}",
            self.total(),
            self.read,
            self.update,
            self.insert,
            self.delete,
            self.scan,
            self.read_modify_write
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::KeyFormat;

    #[test]
    fn counts_by_kind() {
        let key = KeyFormat::Fixed8 { hashed: false }.build(1);
        let mut counts = OpCounts::default();
        counts.record(&Op::Read { key });
        counts.record(&Op::Read { key });
        counts.record(&Op::Scan { key, len: 3 });
        assert_eq!(counts.get(OpKind::Read), 2);
        assert_eq!(counts.get(OpKind::Scan), 1);
        assert_eq!(counts.total(), 3);
        assert_eq!(Op::Delete { key }.key(), &key);
    }
}
