//! The `podkv` binary's library half: every subcommand lives here so integration tests can
//! reach it.
//!
//! # Map
//! - [`cli`]: the command line (clap), one variant per subcommand;
//! - [`heap_cmd`]: `podkv heap create|info|check`;
//! - [`store_cmd`]: `podkv store check|stats` (the store's walker, `podkv_store::check_path`);
//! - [`pod`]: `podkv pod up|status|down` (the pod launcher and monitor);
//! - [`bench`]: `podkv bench threadtest|xmalloc` (allocator microbenchmarks);
//! - [`mcas_cmd`]: `podkv mcas-nmp` (the software mCAS processor) and `podkv bench mcas`;
//! - [`protocol`]: the memcached text and meta protocol (request types, parse/compose, codec);
//! - [`serve`]: `podkv serve`, the memcached-protocol server on the shared store;
//! - [`runner`]: the shared workload runner behind `podkv ycsb`, `podkv replay`, `podkv suite`
//!   and `podkv plot` (processes, targets, metrics, NDJSON, plots).

pub mod bench;
pub mod chaos;
pub mod cli;
pub mod heap_cmd;
pub mod mcas_cmd;
pub mod pod;
pub mod protocol;
pub mod runner;
pub mod serve;
pub mod store_cmd;
