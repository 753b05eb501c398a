//! `podkv mcas-nmp`: the software near-memory processor as its own process (its benchmark,
//! `podkv bench mcas`, is the harness's `podkv_harness::bench::mcas`).
//!
//! The processor and the protocol live in `podkv_hw::mcas`; this file only parses flags,
//! handles signals and prints.

use anyhow::{anyhow, bail};
use podkv_hw::mcas::processor::{Stopped, TAKEOVER_AFTER};
use podkv_hw::mcas::{Processor, RegionFile};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// `podkv mcas-nmp`: serve a region until SIGTERM/SIGINT.
#[derive(clap::Args, Debug)]
pub struct NmpArgs {
    /// The file holding the mCAS region: a standalone region file, or a heap file whose region
    /// starts at --offset.
    #[arg(long)]
    pub heap: PathBuf,
    /// Byte offset of the region's header in the file.
    #[arg(long, default_value_t = 0)]
    pub offset: u64,
    /// Create --heap as a new standalone region file first (refused if the file exists).
    #[arg(long)]
    pub create: bool,
    /// With --create: request/response line pairs, one per client thread.
    #[arg(long, default_value_t = 64)]
    pub clients: u32,
    /// With --create: 8-byte target words that may be mCASed.
    #[arg(long, default_value_t = 4096)]
    pub targets: u64,
    /// Milliseconds a claimed region's heartbeat must stand still before this processor takes
    /// it over from a presumed-dead one.
    #[arg(long, default_value_t = TAKEOVER_AFTER.as_millis() as u64)]
    pub takeover_ms: u64,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    // An atomic store is async-signal-safe.
    STOP.store(true, Ordering::Relaxed);
}

/// Runs `podkv mcas-nmp`: claims the region (or fails naming the live processor) and serves
/// it until SIGTERM or SIGINT, then answers what is pending and releases the claim.
pub fn run_nmp(args: &NmpArgs) -> anyhow::Result<()> {
    let path = args.heap.display();
    let file = if args.create {
        RegionFile::create(&args.heap, args.clients, args.targets)
            .map_err(|e| anyhow!("creating {path}: {e}"))?
    } else {
        RegionFile::open_at(&args.heap, args.offset).map_err(|e| anyhow!("{path}: {e}"))?
    };
    let region = file.region();
    let takeover = Duration::from_millis(args.takeover_ms);
    let processor = Processor::claim(region, takeover).map_err(|e| anyhow!("{path}: {e}"))?;
    for signal in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: the handler only performs an atomic store, which is async-signal-safe.
        unsafe { libc::signal(signal, on_stop_signal as *const () as libc::sighandler_t) };
    }
    println!(
        "mcas-nmp: serving {path} at offset {}: {} clients, targets {:?} (pid {}, claim {:#x})",
        args.offset,
        region.count_clients(),
        region.targets(),
        std::process::id(),
        processor.claim_value()
    );
    match processor.run(&STOP) {
        Stopped::Asked => Ok(()),
        Stopped::Superseded => bail!("another processor took over {path}"),
    }
}
