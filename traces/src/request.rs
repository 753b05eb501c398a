//! The replay op model: one typed command per trace line, and a stream of them from any file.
//!
//! A replayer matches on [`Command`] and calls the matching method of its target (the store,
//! an in-process baseline or a memcached client). What the trace does not record is fixed
//! here: `incr`/`decr` deltas are [`DELTA_ARITHMETIC`]; a `cas` carries no token, so a replayer
//! uses the token its last `gets` of the key returned (or lets the `cas` miss).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::file::{self, TraceReader};
use crate::{Op, Record, TraceError};

/// The delta of replayed `incr` and `decr` requests, which the traces do not record.
pub const DELTA_ARITHMETIC: u64 = 1;

/// What a request asks the store to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "op")]
pub enum Command {
    /// Read.
    Get,
    /// Read with CAS token.
    Gets,
    /// Store unconditionally, expiring after `ttl` seconds (0: never).
    Set {
        /// Seconds to live.
        ttl: u32,
    },
    /// Store if absent.
    Add {
        /// Seconds to live.
        ttl: u32,
    },
    /// Store if present.
    Replace {
        /// Seconds to live.
        ttl: u32,
    },
    /// Store if the CAS token still matches.
    Cas {
        /// Seconds to live.
        ttl: u32,
    },
    /// Append `value_size` bytes (memcached ignores the TTL; the trace's is kept).
    Append {
        /// TTL as recorded.
        ttl: u32,
    },
    /// Prepend `value_size` bytes (memcached ignores the TTL; the trace's is kept).
    Prepend {
        /// TTL as recorded.
        ttl: u32,
    },
    /// Remove.
    Delete,
    /// Add `delta` to a numeric value.
    Incr {
        /// Amount added.
        delta: u64,
    },
    /// Subtract `delta` from a numeric value.
    Decr {
        /// Amount subtracted.
        delta: u64,
    },
}

impl Command {
    /// The trace operation of this command.
    pub fn op(&self) -> Op {
        match self {
            Command::Get => Op::Get,
            Command::Gets => Op::Gets,
            Command::Set { .. } => Op::Set,
            Command::Add { .. } => Op::Add,
            Command::Replace { .. } => Op::Replace,
            Command::Cas { .. } => Op::Cas,
            Command::Append { .. } => Op::Append,
            Command::Prepend { .. } => Op::Prepend,
            Command::Delete => Op::Delete,
            Command::Incr { .. } => Op::Incr,
            Command::Decr { .. } => Op::Decr,
        }
    }

    /// Seconds to live for commands that store a value; 0 for the others.
    pub fn ttl(&self) -> u32 {
        match *self {
            Command::Set { ttl }
            | Command::Add { ttl }
            | Command::Replace { ttl }
            | Command::Cas { ttl }
            | Command::Append { ttl }
            | Command::Prepend { ttl } => ttl,
            _ => 0,
        }
    }

    fn from_op(op: Op, ttl: u32) -> Self {
        match op {
            Op::Get => Command::Get,
            Op::Gets => Command::Gets,
            Op::Set => Command::Set { ttl },
            Op::Add => Command::Add { ttl },
            Op::Replace => Command::Replace { ttl },
            Op::Cas => Command::Cas { ttl },
            Op::Append => Command::Append { ttl },
            Op::Prepend => Command::Prepend { ttl },
            Op::Delete => Command::Delete,
            Op::Incr => Command::Incr {
                delta: DELTA_ARITHMETIC,
            },
            Op::Decr => Command::Decr {
                delta: DELTA_ARITHMETIC,
            },
        }
    }
}

/// One request to replay.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Request {
    /// Seconds since the start of the trace, for paced replay.
    pub timestamp: u64,
    /// The key.
    pub key: String,
    /// The client that sent it; replayers may map clients to connections.
    pub client_id: u32,
    /// Value bytes: written by storage commands, expected back by reads (a replayer that
    /// fills on miss stores this many).
    pub value_size: u32,
    /// What to do.
    pub command: Command,
}

impl Request {
    /// The trace operation.
    pub fn op(&self) -> Op {
        self.command.op()
    }

    /// Seconds to live (0 for commands that store nothing).
    pub fn ttl(&self) -> u32 {
        self.command.ttl()
    }
}

impl From<Record> for Request {
    fn from(r: Record) -> Self {
        Request {
            timestamp: r.timestamp,
            command: Command::from_op(r.op, if r.op.stores_value() { r.ttl } else { 0 }),
            key: r.key,
            client_id: r.client_id,
            value_size: r.value_size,
        }
    }
}

/// Requests streamed from a trace file of any format (chosen by extension, see [`file`]).
pub struct Requests {
    reader: TraceReader,
}

/// Opens `path` for replay.
pub fn requests(path: impl AsRef<Path>) -> Result<Requests, TraceError> {
    Ok(Requests {
        reader: file::open(path)?,
    })
}

impl Requests {
    /// How far through the file the stream is.
    pub fn position(&self) -> file::Position {
        self.reader.position()
    }
}

impl Iterator for Requests {
    type Item = Result<Request, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.reader.next().map(|r| r.map(Request::from))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_maps_to_its_command_and_back() {
        for op in Op::ALL {
            let record = Record {
                timestamp: 3,
                key: "k".into(),
                key_size: 1,
                value_size: 10,
                client_id: 2,
                op,
                ttl: 60,
            };
            let request = Request::from(record);
            assert_eq!(request.op(), op);
            assert_eq!(request.ttl(), if op.stores_value() { 60 } else { 0 });
            assert_eq!(request.value_size, 10);
        }
    }
}
