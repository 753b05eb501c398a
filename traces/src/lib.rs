//! Twitter's production cache traces (Yang, Yue, Rashmi, OSDI '20) for podkv: read and write
//! them, summarise them like the published table, generate look-alikes, and feed them to a
//! replayer.
//!
//! A trace is one request per line, `timestamp,anonymized key,key size,value size,client id,
//! operation,TTL`, published as zstd-compressed CSV files of 10⁹ lines (hundreds of GB
//! uncompressed), so everything here streams.
//!
//! ```text
//!  .csv ─┐                     ┌─ stats ──── Stats (table, JSON) ── compare with cluster row
//!  .zst ─┼─ file::open ─ Record┼─ file::create ─ .csv / .zst / .parquet        (convert)
//!  .parquet┘                   └─ Request ─ Partitioner ─ W workers             (replay)
//!  published table ─ cluster ─ Popularity + Generator ─ Record ─ file::create    (generate)
//! ```
//!
//! # Reading order
//!
//! - **Data model**: [`Op`] (the eleven operations), [`Record`] (one line), [`key_hash`].
//! - **Formats**: [`text`] (CSV: quoting, bad-line policy, line numbers), [`columnar`]
//!   (Parquet schema, row groups), [`file`](mod@file) (format by extension, streaming
//!   readers/writers).
//! - **Statistics**: [`stats`](mod@stats) (definitions of every figure), [`cluster`] (the
//!   published table, embedded and parsed).
//! - **Synthesis**: [`popularity`] (exact per-key counts fitted to the table),
//!   [`generate`](mod@generate).
//! - **Replay**: [`request`] (typed commands), [`partition`] (per-key order across workers).
//! - **Front door**: [`run`](mod@run) (library calls `convert`, `stats`, `generate`), [`cli`]
//!   (clap structs and `run_*` for `podkv trace …`).
//!
//! # Where a change goes
//!
//! - a new column or a change to one line's meaning: [`Record`] (`record.rs`), then the
//!   formats that carry it ([`text`], [`columnar`]); a new operation: `op.rs` and [`request`];
//! - a new file format or extension: its module beside [`text`] / [`columnar`], chosen in
//!   [`file`](mod@file);
//! - a new statistic: [`stats`](mod@stats) (its definition there), and [`cluster`] if the
//!   published table has it;
//! - how synthetic traces are shaped: [`popularity`] (per-key counts),
//!   [`generate`](mod@generate) (request order, operations, sizes, TTLs, timestamps);
//! - how replay spreads keys over workers: [`partition`]; how a line becomes a store call:
//!   [`request`]; a new `podkv trace` flag: [`cli`], with the work in [`run`](mod@run).

pub mod cli;
pub mod cluster;
pub mod columnar;
mod error;
pub mod file;
pub mod generate;
mod op;
pub mod partition;
pub mod popularity;
mod progress;
mod record;
pub mod request;
pub mod run;
pub mod stats;
pub mod text;

pub use cli::{
    run_convert, run_generate, run_stats, ConvertArgs, GenerateArgs, StatsArgs, TraceCommand,
};
pub use error::TraceError;
pub use op::Op;
pub use partition::Partitioner;
pub use record::{key_hash, mix64, Record};
pub use request::{requests, Command, Request};
pub use run::{convert, generate, stats};
pub use stats::{Stats, StatsOptions};
