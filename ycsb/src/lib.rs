//! # podkv-ycsb — YCSB 0.17's CoreWorkload, ported and seedable
//!
//! Map: a workload is a set of YCSB properties (`-P` files, then `-p` overrides) →
//! resolved into a typed [`Workload`] ([`Workload::from_properties`]) → split into one
//! [`OpStream`] per worker for the load phase and for the run phase
//! ([`OpStream::streams`]) → each stream yields [`Op`]s (`read`, `update`,
//! `insert`, `delete`, `scan`, `read-modify-write`) whose keys are YCSB's `user…` names
//! (or the CXLALLOC paper's 8-byte keys) and whose values are sized by YCSB's field
//! count and field length distribution. The [`dump`] format writes a stream as text,
//! and [`cli`] is the `podkv ycsb` front door ([`YcsbArgs`], [`dry_run`]).
//!
//! Sizes: a [`Key`] is at most [`KEY_CAPACITY`] bytes, inline; generating one operation
//! costs about 40-110 ns in a release build, a third of it libm's `pow` for zipfian
//! workloads (`examples/gen_cost.rs`; the runner's figures are in `podkv_harness::runner`, # Cost).
//!
//! # Reading order
//!
//! 1. [`fnv`] — YCSB's `Utils.fnvhash64`, the hash behind key names and the scramble.
//! 2. [`rng`] — how a seed becomes one ChaCha8 stream per (phase, worker), and
//!    Java's `nextDouble` / `Math.abs(nextLong())` on top of it.
//! 3. [`generator`] — the YCSB number generators, one file each, every one taking an
//!    explicit RNG.
//! 4. [`properties`] — the property-file format and the precedence of sources.
//! 5. [`workload`] — CoreWorkload's properties resolved and checked; the shipped
//!    workload files (`a`–`f`, `load`, `cxlalloc-a`, `cxlalloc-d`).
//! 6. [`key`] and [`op`] — what a stream yields.
//! 7. [`stream`] — CoreWorkload's `doInsert` / `doTransaction`, split across workers (the
//!    per-worker key and length generators in `stream/choose.rs`).
//! 8. [`dump`] and [`cli`] — text output and the command line.
//!
//! Facts flow down that list: `properties` knows only the shipped files
//! (`workload/named.rs`), `workload` reads properties and knows nothing of streams, and
//! `stream` reads a finished `Workload`.
//!
//! # Where a change goes
//!
//! - a new generator or a fix to one: its file in `generator/`;
//! - a new CoreWorkload property: read and checked in `workload/mod.rs` (a field of
//!   [`Workload`]), used in `stream/` (`choose.rs` if it picks a generator);
//! - a new shipped workload: a file in `ycsb/workloads/` and a line in `workload/named.rs`;
//! - property-file syntax or the precedence of `-P` / `-p`: `properties.rs`;
//! - how work is split across workers or processes, or what an operation carries:
//!   `stream/mod.rs`, `op.rs`, `key.rs`;
//! - output formats and the `podkv ycsb` command line: `dump.rs`, `cli.rs`.
//!
//! # Faithfulness
//!
//! Each generator follows the YCSB 0.17 Java source line by line, including its quirks
//! (each quirk is named where it is kept). What cannot be the same: YCSB draws from
//! `ThreadLocalRandom`, which cannot be seeded, so the exact sequence of values differs;
//! every distribution, constant and key name is the same.

#![warn(missing_docs)]

pub mod cli;
pub mod dump;
pub mod error;
pub mod fnv;
pub mod generator;
pub mod key;
pub mod op;
pub mod properties;
pub mod rng;
pub mod stream;
pub mod workload;

pub use cli::{dry_run, DryRunSummary, PhaseArg, YcsbArgs};
pub use error::YcsbError;
pub use key::{Key, KeyFormat, KEY_CAPACITY};
pub use op::{Op, OpCounts, OpKind};
pub use properties::Properties;
pub use stream::{OpStream, Phase};
pub use workload::Workload;
