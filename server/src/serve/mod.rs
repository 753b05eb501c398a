//! `podkv serve`: the memcached-protocol server on the shared store.
//!
//! # Map
//!
//! ```text
//!  main thread ── signals (SIGTERM/SIGINT), --metrics HTTP ──────────────┐ stop
//!  accept loop ── limit --max-conns, hand each socket round-robin ─▶ worker i
//!                 (on worker 0 with epoll workers, on the main thread with io_uring ones)
//!  worker i    ── its own StoreHandle (one thread slot) and either
//!                 io_uring (--io uring, the default where allowed): one ring, a multishot
//!                   recv per connection, one system call per turn for all of them; or
//!                 epoll (--io epoll): a current_thread runtime + LocalSet, one task per
//!                   connection: readable → read → decode → dispatch → one write;
//!                 both answer a read a batch of replies at a time, into buffers lent by
//!                 the worker (none held while idle)
//! ```
//!
//! - [`io`]: what both kinds of workers share, and [`Io`].
//! - [`uring`]: the io_uring worker.
//! - [`backend`]: [`Backend`](backend::Backend), the protocol's `Storage` over one
//!   `StoreHandle`; the parser never touches the store, the store never sees wire bytes.
//! - [`stats`]: [`Shared`], what every worker of a process shares; per-worker counters
//!   (single writer each), `stats` groups and Prometheus text.
//! - [`worker`]: threads, the accept loop, connections, idle timeout.
//! - [`metrics`]: a minimal HTTP responder for `--metrics`.
//! - [`text`]: once ready, the start-up code leaves the resident set.
//!
//! # Output
//!
//! Once it listens, `podkv serve` writes one plain line on stderr, `podkv serve: listening on
//! ADDR (heap PATH, pid N)` (see [`worker`]): the pod monitor, the tests and scripts wait for
//! it, so it is part of the command line's contract and no `RUST_LOG` setting hides it.
//! Everything else it says (stopping, accept and connection errors) is a `tracing` event,
//! filtered by `RUST_LOG` (the binary's default shows podkv's `info` events).
//!
//! Several processes may serve one heap: each opens the store (they agree on one root) and
//! holds one thread slot per worker plus one for the expiry crawler. With `--reuseport` they
//! may also share one address (`SO_REUSEPORT`: the kernel spreads connections).

pub mod backend;
pub mod io;
pub mod metrics;
pub mod stats;
pub mod text;
pub mod uring;
pub mod worker;

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use podkv_store::{Crawler, Store, StoreConfig};

use crate::protocol::ProtocolLimits;
pub use io::Io;
use podkv_harness::helpers::parse_bytes;
use stats::Counters;
pub use stats::Shared;

/// How often each process's expiry crawler walks the store.
const SECONDS_CRAWL: u64 = 10;

/// `podkv serve`: serve the store in a pod heap over the memcached text and meta protocol.
///
/// Prints `podkv serve: listening on ADDR (heap PATH, pid N)` on stderr when ready and runs
/// until SIGTERM or SIGINT. Any number of processes may serve the same heap.
#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// The pod heap file (created, mode 0600, if missing), e.g. /dev/shm/podkv-main.
    #[arg(long, value_name = "PATH")]
    pub heap: PathBuf,
    /// Address to listen on (loopback unless told otherwise); port 0 picks a free port.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:11211")]
    pub listen: String,
    /// Worker threads, each with its own runtime and thread slot [default: the cores].
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// This server's host id in the heap's slot owners (1–65535) [default: `PODKV_HOST_ID`,
    /// else a hash of /etc/machine-id]. Give each host of a lease-mode pod its own; `pod up`
    /// gives each member one.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub host_id: Option<u16>,
    /// Memory for items (e.g. 64MiB), bounded twice, as memcached's `-m`: a write evicts
    /// before the items' bytes (48-byte header + key + value, all regions together) pass it,
    /// and while the heap holds more slab memory than this (blocks free or not: after a size
    /// shift old classes' slabs stay part empty), each worker's pass, every second until it
    /// fits, moves the items that fit in its other slabs and evicts those of its sparsest
    /// slabs. Only the process that creates the store sets it [default: the heap's
    /// capacity]. Each item also lives in the heap region of its size — up to 1 KiB the
    /// small region (`heap create --small-bytes`), up to 512 KiB the large one
    /// (`--large-bytes`), beyond the huge one — and a write whose region is full evicts
    /// items of that region (its size and class first) and stores. `stats` shows
    /// limit_maxbytes (this, or both slab regions' size if less or unset), each region's
    /// size (podkv_limit_small_bytes, podkv_limit_large_bytes), and `stats slabs` the slab
    /// memory held (total_malloced).
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    pub memory: Option<u64>,
    /// Move the items of slabs at most this percent full to other slabs, so that they empty
    /// and their memory goes back to the OS (0: never), as memcached's slab mover rescues
    /// the items of a page. Each worker does it every --drain-interval seconds, the sparsest
    /// slabs first, while their items fit in its other slabs of their class (over --memory,
    /// however full): after a size shift the old classes' slabs stay half full, and
    /// morphing cannot reuse them. `stats` counts the
    /// items moved (slab_reassign_rescues) and the slabs given up (slabs_moved).
    #[arg(long, value_name = "PERCENT", default_value_t = podkv_store::compact::PERCENT_DRAIN,
          value_parser = clap::value_parser!(u32).range(0..=100))]
    pub drain: u32,
    /// Seconds between two compaction passes of a worker (--drain).
    #[arg(long, value_name = "SECONDS", default_value_t = SECONDS_CRAWL,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub drain_interval: u64,
    /// Most client connections at once; one more is answered `ERROR Too many open
    /// connections` and closed, as memcached does.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    pub max_conns: u64,
    /// Largest value in bytes (memcached's -I); larger stores answer `SERVER_ERROR object too
    /// large for cache`. A heap created without a huge heap (`--huge-bytes 0`) also refuses
    /// values over its largest block, about 512 KiB, whatever this says.
    #[arg(long, value_name = "BYTES", default_value = "1MiB", value_parser = parse_bytes)]
    pub max_item_size: u64,
    /// Close a connection idle this many seconds (0: never), as memcached's idle_timeout.
    #[arg(long, value_name = "SECS", default_value_t = 0)]
    pub idle_timeout: u64,
    /// Also serve the statistics as Prometheus text over HTTP at this address.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// Set SO_REUSEPORT so several processes can listen on the same address.
    #[arg(long)]
    pub reuseport: bool,
    /// How workers wait for their connections: `uring` (one io_uring ring per worker: one
    /// system call per turn of its loop for all its connections' reads and writes), `epoll`
    /// (one tokio runtime per worker: a `recv` and a `send` per request, as memcached), or
    /// `auto`: `uring` where the kernel allows it (5.19 or later, and not disabled by
    /// `kernel.io_uring_disabled` or a seccomp filter, as in Docker's default profile),
    /// else `epoll`. `stats settings` shows the one in use (podkv_io).
    #[arg(long, value_enum, default_value_t = IoChoice::Auto)]
    pub io: IoChoice,
}

/// `podkv serve --io`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoChoice {
    /// io_uring where the kernel allows it, else epoll.
    Auto,
    /// io_uring, or refuse to start.
    Uring,
    /// epoll (tokio).
    Epoll,
}

impl IoChoice {
    /// The workers' kind this choice gives on this machine.
    pub fn resolve(self) -> Result<Io, ServeError> {
        match self {
            IoChoice::Epoll => Ok(Io::Epoll),
            IoChoice::Uring => match uring::probe() {
                Ok(()) => Ok(Io::Uring),
                Err(e) => Err(ServeError::Setting(format!(
                    "--io uring: this kernel does not allow io_uring here ({e}); use --io epoll"
                ))),
            },
            IoChoice::Auto => match uring::probe() {
                Ok(()) => Ok(Io::Uring),
                Err(e) => {
                    tracing::info!(error = %e, "io_uring not available; serving with epoll");
                    Ok(Io::Epoll)
                }
            },
        }
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The store could not be opened.
    #[error("cannot open the store in {path}: {source}")]
    Store {
        /// The heap file.
        path: PathBuf,
        /// Why.
        source: podkv_store::StoreError,
    },
    /// An address did not resolve.
    #[error("cannot resolve {0}")]
    Resolve(String),
    /// A socket could not be set up.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A thread or runtime could not be started.
    #[error("cannot start: {0}")]
    Start(std::io::Error),
    /// A worker could not claim a thread slot.
    #[error("no thread slot for a worker: {0}")]
    Slot(podkv_store::StoreError),
    /// A setting is out of range.
    #[error("{0}")]
    Setting(String),
    /// `--host-id` came after this process's host id was fixed to another.
    #[error("--host-id {asked}: this process's host id is already {found} (PODKV_HOST_ID?)")]
    HostId {
        /// The id asked for.
        asked: u16,
        /// The id in force.
        found: u16,
    },
}

/// The settings a running server reports (`stats settings`).
#[derive(Clone, Debug)]
pub struct Settings {
    /// The heap file.
    pub heap: PathBuf,
    /// The address actually bound.
    pub listen: SocketAddr,
    /// Worker threads.
    pub threads: usize,
    /// Store capacity in item bytes (the heap's when unlimited).
    pub limit_maxbytes: u64,
    /// Most connections.
    pub max_conns: u64,
    /// Idle timeout in seconds (0: none).
    pub idle_timeout: u64,
    /// Protocol limits.
    pub limits: ProtocolLimits,
    /// SO_REUSEPORT.
    pub reuseport: bool,
    /// `--drain`: percent in use at most of the slabs compacted (0: none).
    pub drain: u32,
    /// `--drain-interval`: seconds between a worker's compaction passes.
    pub drain_interval: u64,
    /// How workers wait for connections (`--io`, resolved).
    pub io: Io,
}

/// Runs `podkv serve` until SIGTERM/SIGINT.
pub fn run(args: &ServeArgs) -> anyhow::Result<()> {
    let listen = resolve(&args.listen)?;
    let metrics = args.metrics.as_deref().map(resolve).transpose()?;
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if threads == 0 || args.max_conns == 0 {
        return Err(
            ServeError::Setting("--threads and --max-conns must be at least 1".into()).into(),
        );
    }
    let io = args.io.resolve()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ServeError::Start)?;
    let listener = runtime.block_on(async { worker::bind(listen, args.reuseport) })?;
    let listen = listener.local_addr().map_err(ServeError::Start)?;
    let listener = listener.into_std().map_err(ServeError::Start)?;
    let metrics = match metrics {
        Some(addr) => Some(
            runtime
                .block_on(tokio::net::TcpListener::bind(addr))
                .map_err(|source| ServeError::Listen { addr, source })?,
        ),
        None => None,
    };
    let store = open_store(args)?;
    let crawler: Crawler = store.spawn_crawler(Duration::from_secs(SECONDS_CRAWL));
    let settings = Settings {
        heap: args.heap.clone(),
        listen,
        threads,
        limit_maxbytes: limit_maxbytes(&store),
        max_conns: args.max_conns,
        idle_timeout: args.idle_timeout,
        limits: ProtocolLimits {
            max_item_size: args.max_item_size as usize,
            ..ProtocolLimits::default()
        },
        reuseport: args.reuseport,
        drain: args.drain,
        drain_interval: args.drain_interval,
        io,
    };
    let shared = Arc::new(Shared {
        store,
        settings,
        workers: (0..threads)
            .map(|_| Arc::new(Counters::default()))
            .collect(),
        curr_conns: AtomicU64::new(0),
        total_conns: AtomicU64::new(0),
        rejected_conns: AtomicU64::new(0),
        idle_kicks: AtomicU64::new(0),
        baseline: stats::Baseline::default(),
        started: Instant::now(),
        started_unix: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    });
    let result = worker::run(&runtime, shared, listener, metrics);
    drop(crawler);
    result.map_err(Into::into)
}

/// Opens (creating if needed) the store with the command line's limits.
fn open_store(args: &ServeArgs) -> Result<Store, ServeError> {
    if let Some(id) = args.host_id {
        if !podkv_alloc::process::set_host_id(id) {
            return Err(ServeError::HostId {
                asked: id,
                found: podkv_alloc::process::host_id(),
            });
        }
    }
    let config = StoreConfig {
        value_max: args.max_item_size as usize,
        capacity: args.memory,
        ..StoreConfig::default()
    };
    Store::open(&args.heap, config).map_err(|source| ServeError::Store {
        path: args.heap.clone(),
        source,
    })
}

/// Bytes of slabs the heap can grow to (both slab heaps' most slabs times their slab size).
pub fn heap_capacity(store: &Store) -> u64 {
    podkv_alloc::Kind::ALL
        .iter()
        .map(|&kind| region_capacity(store, kind))
        .sum()
}

/// Bytes of slabs one slab heap (region) can grow to: what the items of its sizes can hold
/// at most, whatever `--memory` says (a write whose region is full evicts there).
pub fn region_capacity(store: &Store, kind: podkv_alloc::Kind) -> u64 {
    let slabs = store.heap().slab_heap(kind);
    slabs.max * slabs.slab_bytes()
}

/// `limit_maxbytes`: the store's `--memory`, or the slab regions' capacity if that is less
/// or none was given (a limit the regions cannot hold is not one).
pub fn limit_maxbytes(store: &Store) -> u64 {
    let regions = heap_capacity(store);
    store.capacity().map_or(regions, |c| c.min(regions))
}

/// The first address `text` resolves to.
pub fn resolve(text: &str) -> Result<SocketAddr, ServeError> {
    text.to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| ServeError::Resolve(text.to_owned()))
}
