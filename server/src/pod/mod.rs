//! `podkv pod up|status|down|shard`: run a pod of N member servers on one machine, each playing one
//! host, all mapping one pod heap, watched by a monitor that restarts any that dies.
//!
//! # Map
//! - [`net`]: how each member gets its own address — a network namespace per member when root
//!   and `ip netns` work here, else a loopback port per member; chosen at run time;
//! - [`member`]: starting one `podkv serve` member and waiting until it listens;
//! - [`monitor`]: the loop that notices a dead member, recovers its thread slots and restarts
//!   it, and stops the pod on SIGTERM;
//! - [`recover`]: [`recover_member`], the one door to the heap's recovery of a dead process;
//! - [`state`]: the state file and pidfiles in the state directory, stale state;
//! - [`shard`]: beyond one pod — a nutcracker (twemproxy) pool with one server per pod;
//! - [`signals`]: the monitor's stop flag (the only process-global state);
//! - [`cmd`]: the command line, [`args`]: its shared flags; [`up`], [`status`], [`down`]: the
//!   subcommands.
//!
//! The launcher knows members only by the `podkv serve` command line, never by its internals.

pub mod args;
pub mod cmd;
pub mod down;
pub mod error;
pub mod member;
pub mod monitor;
pub mod net;
pub mod recover;
pub mod shard;
pub mod signals;
pub mod state;
pub mod status;
pub mod up;

pub use cmd::{run, PodCommand};
pub use error::PodError;
pub use recover::recover_member;
