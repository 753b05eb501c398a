//! The `podkv` binary's library half: every subcommand lives here so integration tests can reach it.
//!
//! # Map
//! - [`protocol`]: the memcached text and meta protocol (request types, parse/compose, codec).

pub mod protocol;
