//! The `podkv` binary's library half: the server, the pod, the heap and store tools, and the
//! command line's front door. The measuring subcommands (`ycsb`, `replay`, `suite`, `plot`,
//! `bench`, `heap chaos`) live in the `podkv-harness` crate; [`cli`] dispatches into it.
//!
//! # Map
//! - [`cli`]: the command line (clap), one variant per subcommand;
//! - [`heap_cmd`]: `podkv heap create|info|check`;
//! - [`store_cmd`]: `podkv store check|stats` (the store's walker, `podkv_store::check_path`);
//! - [`transfer_cmd`]: `podkv store dump|load` (the stream is `podkv_store::transfer`'s);
//! - [`pod`]: `podkv pod up|status|down` (the pod launcher and monitor);
//! - [`mcas_cmd`]: `podkv mcas-nmp` (the software mCAS processor);
//! - [`protocol`]: the memcached text and meta protocol (request types, parse/compose, codec);
//! - [`serve`]: `podkv serve`, the memcached-protocol server on the shared store.

pub mod cli;
pub mod heap_cmd;
pub mod mcas_cmd;
pub mod pod;
pub mod protocol;
pub mod serve;
pub mod store_cmd;
pub mod transfer_cmd;
