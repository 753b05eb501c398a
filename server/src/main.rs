//! `podkv`: see `podkv --help`.
//!
//! What the commands log (members starting, exiting and restarting, slot recoveries, server
//! errors) are `tracing` events on stderr, filtered by `RUST_LOG` as usual (e.g.
//! `RUST_LOG=warn`, `RUST_LOG=podkv::pod=debug`); without it, podkv's own crates log at `info`
//! and everything else at `warn`. Command output (`pod status`, `pod up`'s member list) stays
//! on stdout, and a failed command ends with one line, `podkv: ERROR`, on stderr.

use clap::Parser;
use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

/// The filter when `RUST_LOG` is unset, empty or unreadable.
const FILTER_DEFAULT: &str = "warn,podkv=info,podkv_alloc=info,podkv_store=info,podkv_hw=info,\
                              podkv_harness=info,podkv_ycsb=info,podkv_traces=info";

fn main() {
    init_logging();
    let cli = podkv::cli::Cli::parse();
    if cli.command.only_reads_and_prints() {
        die_quietly_on_closed_stdout();
    }
    if let Err(err) = podkv::cli::run(cli) {
        eprintln!("podkv: {err}");
        std::process::exit(1);
    }
}

/// Restores `SIGPIPE`'s default action, which Rust's runtime ignores, so that `podkv heap
/// check | head` ends quietly when `head` has read enough, as Unix tools do, instead of
/// panicking at the next `println!`. Only for commands whose output is a report: a server or
/// a client would then die on a peer's closed socket or pipe instead of seeing an error.
fn die_quietly_on_closed_stdout() {
    // SAFETY: called once at start, before any thread is spawned; SIG_DFL is a valid action.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Sends `tracing` events to stderr under `RUST_LOG` (see the crate documentation).
fn init_logging() {
    let (filter, unread) = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => match EnvFilter::try_new(&spec) {
            Ok(filter) => (filter, None),
            Err(e) => (
                EnvFilter::new(FILTER_DEFAULT),
                Some(format!("{spec:?}: {e}")),
            ),
        },
        _ => (EnvFilter::new(FILTER_DEFAULT), None),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    if let Some(why) = unread {
        tracing::warn!("RUST_LOG ignored, default filter used: {why}");
    }
}
