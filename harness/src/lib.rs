//! podkv's evaluation harness: everything that measures podkv rather than serves it. The
//! `podkv` binary's command line (in the server crate) dispatches its measuring subcommands
//! here; nothing here knows the server crate.
//!
//! # Map
//! - [`helpers`]: byte sizes, medians and NDJSON record files, shared by every command;
//! - [`process_stats`]: what a measured process reports besides time (PSS, page faults, the
//!   build's commit);
//! - [`runner`]: the shared workload runner behind `podkv ycsb`, `podkv replay`, `podkv suite`
//!   and `podkv plot` (processes, targets, metrics, NDJSON, plots);
//! - [`bench`](mod@bench): `podkv bench threadtest|xmalloc|huge` (allocator microbenchmarks on the
//!   runner's processes) and `podkv bench mcas` (nanoseconds per mCAS);
//! - [`chaos`]: `podkv heap chaos` (kill -9 rounds on a shared heap, each checked);
//! - [`evaluation`]: `podkv report` (the paper's figures from the records: pages, plots,
//!   manifest).

pub mod bench;
pub mod chaos;
pub mod evaluation;
pub mod helpers;
pub mod process_stats;
pub mod runner;
