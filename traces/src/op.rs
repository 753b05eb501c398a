//! The eleven operations of the trace format.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// One memcached operation as spelled in the trace's `operation` column.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// Read one item.
    Get,
    /// Read one item with its CAS token.
    Gets,
    /// Store unconditionally.
    Set,
    /// Store only if absent.
    Add,
    /// Store only if present.
    Replace,
    /// Store only if the CAS token still matches.
    Cas,
    /// Append bytes to an existing value.
    Append,
    /// Prepend bytes to an existing value.
    Prepend,
    /// Remove an item.
    Delete,
    /// Add to a numeric value.
    Incr,
    /// Subtract from a numeric value.
    Decr,
}

impl Op {
    /// Every operation, in the order the format's documentation lists them.
    pub const ALL: [Op; 11] = [
        Op::Get,
        Op::Gets,
        Op::Set,
        Op::Add,
        Op::Replace,
        Op::Cas,
        Op::Append,
        Op::Prepend,
        Op::Delete,
        Op::Incr,
        Op::Decr,
    ];

    /// The names as they appear in traces, in the order of [`Op::ALL`].
    pub const NAMES: [&'static str; 11] = [
        "get", "gets", "set", "add", "replace", "cas", "append", "prepend", "delete", "incr",
        "decr",
    ];

    /// The name as it appears in traces.
    pub fn as_str(self) -> &'static str {
        Self::NAMES[self.index()]
    }

    /// Position in [`Op::ALL`]; a dense index for per-op counters.
    pub fn index(self) -> usize {
        self as usize
    }

    /// Parses a trace spelling; exact lowercase match, as the traces are written.
    pub fn parse(name: &[u8]) -> Option<Op> {
        Self::NAMES
            .iter()
            .position(|n| n.as_bytes() == name)
            .map(|i| Self::ALL[i])
    }

    /// Whether the request stores a value and so carries the client's TTL: set, add, replace,
    /// cas, append and prepend. The trace's TTL is 0 for every other operation.
    pub fn stores_value(self) -> bool {
        matches!(
            self,
            Op::Set | Op::Add | Op::Replace | Op::Cas | Op::Append | Op::Prepend
        )
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Op {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Op::parse(s.as_bytes()).ok_or_else(|| format!("unknown operation {s:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_index_is_dense() {
        for (i, op) in Op::ALL.into_iter().enumerate() {
            assert_eq!(op.index(), i);
            assert_eq!(Op::parse(op.as_str().as_bytes()), Some(op));
            assert_eq!(op.to_string().parse::<Op>(), Ok(op));
        }
        assert_eq!(Op::parse(b"GET"), None);
        assert_eq!(Op::parse(b"touch"), None);
    }

    #[test]
    fn only_storage_commands_store_values() {
        let storing: Vec<_> = Op::ALL.into_iter().filter(|o| o.stores_value()).collect();
        assert_eq!(
            storing,
            [
                Op::Set,
                Op::Add,
                Op::Replace,
                Op::Cas,
                Op::Append,
                Op::Prepend
            ]
        );
    }
}
