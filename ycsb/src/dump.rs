//! The operation dump: one line per operation, for diffing runs and feeding other tools.
//!
//! ```text
//! # phase load
//! insert user6284781860667377211
//! # phase run
//! read K
//! update K
//! insert K
//! delete K
//! scan K N
//! read K rmw
//! update K rmw
//! ```
//!
//! A read-modify-write is written as its two halves, each tagged `rmw`. Value sizes are
//! not written. With several workers the streams are interleaved round-robin (one
//! operation from each in turn), which makes the dump of a seeded workload repeatable.

use std::io::{self, Write};

use crate::error::YcsbError;
use crate::op::{Op, OpCounts};
use crate::stream::{OpStream, Phase};

/// Writes `# phase load` or `# phase run`.
pub fn write_phase_marker<W: Write + ?Sized>(out: &mut W, phase: Phase) -> io::Result<()> {
    writeln!(out, "# phase {phase}")
}

/// Writes the line(s) of one operation.
pub fn write_op<W: Write + ?Sized>(out: &mut W, op: &Op) -> io::Result<()> {
    match op {
        Op::Read { key } => line(out, b"read ", key.as_bytes(), b""),
        Op::Update { key, .. } => line(out, b"update ", key.as_bytes(), b""),
        Op::Insert { key, .. } => line(out, b"insert ", key.as_bytes(), b""),
        Op::Delete { key } => line(out, b"delete ", key.as_bytes(), b""),
        Op::Scan { key, len } => writeln!(out, "scan {key} {len}"),
        Op::ReadModifyWrite { key, .. } => {
            line(out, b"read ", key.as_bytes(), b" rmw")?;
            line(out, b"update ", key.as_bytes(), b" rmw")
        }
    }
}

fn line<W: Write + ?Sized>(out: &mut W, verb: &[u8], key: &[u8], tag: &[u8]) -> io::Result<()> {
    out.write_all(verb)?;
    out.write_all(key)?;
    out.write_all(tag)?;
    out.write_all(b"\n")
}

/// Writes the marker of `phase` and every operation of `streams`, round-robin; returns
/// the counts. `target` names the output in errors.
pub fn dump_phase<W: Write + ?Sized>(
    out: &mut W,
    phase: Phase,
    mut streams: Vec<OpStream>,
    target: &str,
) -> Result<OpCounts, YcsbError> {
    let io_err = |source| YcsbError::Dump {
        target: target.into(),
        source,
    };
    write_phase_marker(out, phase).map_err(io_err)?;
    let mut counts = OpCounts::default();
    while !streams.is_empty() {
        let mut index = 0;
        while index < streams.len() {
            match streams[index].try_next()? {
                Some(op) => {
                    counts.record(&op);
                    write_op(out, &op).map_err(io_err)?;
                    index += 1;
                }
                None => {
                    streams.remove(index).finish()?;
                }
            }
        }
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::KeyFormat;

    fn text(op: &Op) -> String {
        let mut out = Vec::new();
        write_op(&mut out, op).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn golden_lines() {
        let key = KeyFormat::Ycsb {
            zero_padding: 1,
            hashed: true,
        }
        .build(0);
        let k = "user6284781860667377211";
        assert_eq!(text(&Op::Read { key }), format!("read {k}\n"));
        assert_eq!(
            text(&Op::Update {
                key,
                value_len: 100
            }),
            format!("update {k}\n")
        );
        assert_eq!(
            text(&Op::Insert {
                key,
                value_len: 1000
            }),
            format!("insert {k}\n")
        );
        assert_eq!(text(&Op::Delete { key }), format!("delete {k}\n"));
        assert_eq!(text(&Op::Scan { key, len: 42 }), format!("scan {k} 42\n"));
        assert_eq!(
            text(&Op::ReadModifyWrite {
                key,
                value_len: 100
            }),
            format!("read {k} rmw\nupdate {k} rmw\n")
        );
        let mut out = Vec::new();
        write_phase_marker(&mut out, Phase::Load).unwrap();
        write_phase_marker(&mut out, Phase::Run).unwrap();
        assert_eq!(out, b"# phase load\n# phase run\n");
    }
}
