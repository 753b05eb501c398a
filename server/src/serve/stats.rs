//! Statistics: what every worker of a process shares ([`Shared`]: the store, the settings,
//! connection counts and per-worker counters), the `stats` groups, and the same as
//! Prometheus text.
//!
//! # Counters
//! Each worker owns one [`Counters`] (its own cache lines) and is its only writer, so a bump is
//! a plain load and store, no locked instruction. Readers (`stats`, `--metrics`) sum every
//! worker's counters and subtract the snapshot taken at the last `stats reset`.
//!
//! # What is per process and what is per store
//! Command counters, connections and `bytes_read`/`bytes_written` count this process, as a
//! memcached server counts itself. `curr_items`, `bytes` and `hash_power_level` are the
//! store's, shared by every process on the heap; they lag by at most one second (each worker
//! publishes its batched item counts every second). `evictions` is the store's too, summed
//! from per-slot counters in the heap: every process's evictions, a dead one's included;
//! `stats reset` restarts this process's view of it from zero, as memcached's does.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::protocol::storage::StatLines;

use super::{heap_capacity, region_capacity, Settings};
use podkv_store::Store;
use std::sync::Arc;
use std::time::Instant;

/// The memcached release whose protocol podkv speaks; `version` answers
/// `<MEMCACHED_COMPATIBLE>-podkv-<version>` so clients that gate features on the version (as
/// libmemcached's `memccapable` does) treat podkv as that memcached.
pub const MEMCACHED_COMPATIBLE: &str = "1.6.18";

/// What every worker of one process shares.
pub struct Shared {
    /// The store.
    pub store: Store,
    /// Settings in force.
    pub settings: Settings,
    /// Per-worker counters, index = worker.
    pub workers: Vec<Arc<Counters>>,
    /// Open client connections.
    pub curr_conns: AtomicU64,
    /// Connections accepted since start.
    pub total_conns: AtomicU64,
    /// Connections refused for `--max-conns`.
    pub rejected_conns: AtomicU64,
    /// Connections closed by the idle timeout.
    pub idle_kicks: AtomicU64,
    /// Counter values at the last `stats reset`.
    pub baseline: Baseline,
    /// When the server started.
    pub started: Instant,
    /// Unix second of start.
    pub started_unix: u64,
}

impl Shared {
    /// Counts a connection that opened; whether it is within `--max-conns`.
    pub fn admit(&self) -> bool {
        let prev = self.curr_conns.fetch_add(1, Ordering::Relaxed);
        if prev >= self.settings.max_conns {
            self.curr_conns.fetch_sub(1, Ordering::Relaxed);
            self.rejected_conns.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.total_conns.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Counts a connection that closed.
    pub fn leave(&self) {
        self.curr_conns.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One counter of a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Counter {
    /// Keys fetched (`get`, `gets`, `gat`, `mg`), counted per key.
    CmdGet,
    /// Storage commands executed.
    CmdSet,
    /// `flush_all`.
    CmdFlush,
    /// `touch`, `gat`, `gats`.
    CmdTouch,
    /// Meta commands.
    CmdMeta,
    /// Keys found.
    GetHits,
    /// Keys not found.
    GetMisses,
    /// `delete` of a missing key.
    DeleteMisses,
    /// `delete` that removed an item.
    DeleteHits,
    /// `incr` of a missing key.
    IncrMisses,
    /// `incr` that changed a value.
    IncrHits,
    /// `decr` of a missing key.
    DecrMisses,
    /// `decr` that changed a value.
    DecrHits,
    /// `cas` of a missing key.
    CasMisses,
    /// `cas` that stored.
    CasHits,
    /// `cas` with a stale token.
    CasBadval,
    /// `touch` that found its key.
    TouchHits,
    /// `touch` of a missing key.
    TouchMisses,
    /// Stores refused as too large.
    StoreTooLarge,
    /// Stores refused for memory.
    StoreNoMemory,
    /// Bytes read from clients.
    BytesRead,
    /// Bytes written to clients.
    BytesWritten,
    /// Items stored by this process.
    TotalItems,
    /// Sparse slabs this process's workers gave up to be drained (`--drain`): memcached's
    /// count of slab pages its mover took.
    SlabsMoved,
    /// Items moved out of sparse slabs by this process's workers (`--drain`).
    SlabReassignRescues,
    /// Bytes of those items.
    SlabReassignRescuedBytes,
    /// Items evicted from the sparsest slabs while the heap held more slab memory than
    /// `--memory`: memcached's count of items its mover evicted for want of memory.
    SlabReassignEvictionsNomem,
}

/// Counters, in `stats` order, with their memcached names.
pub const COUNTERS: [(Counter, &str); COUNT_COUNTERS] = [
    (Counter::CmdGet, "cmd_get"),
    (Counter::CmdSet, "cmd_set"),
    (Counter::CmdFlush, "cmd_flush"),
    (Counter::CmdTouch, "cmd_touch"),
    (Counter::CmdMeta, "cmd_meta"),
    (Counter::GetHits, "get_hits"),
    (Counter::GetMisses, "get_misses"),
    (Counter::DeleteMisses, "delete_misses"),
    (Counter::DeleteHits, "delete_hits"),
    (Counter::IncrMisses, "incr_misses"),
    (Counter::IncrHits, "incr_hits"),
    (Counter::DecrMisses, "decr_misses"),
    (Counter::DecrHits, "decr_hits"),
    (Counter::CasMisses, "cas_misses"),
    (Counter::CasHits, "cas_hits"),
    (Counter::CasBadval, "cas_badval"),
    (Counter::TouchHits, "touch_hits"),
    (Counter::TouchMisses, "touch_misses"),
    (Counter::StoreTooLarge, "store_too_large"),
    (Counter::StoreNoMemory, "store_no_memory"),
    (Counter::BytesRead, "bytes_read"),
    (Counter::BytesWritten, "bytes_written"),
    (Counter::TotalItems, "total_items"),
    (Counter::SlabsMoved, "slabs_moved"),
    (Counter::SlabReassignRescues, "slab_reassign_rescues"),
    (
        Counter::SlabReassignRescuedBytes,
        "podkv_slab_reassign_rescued_bytes",
    ),
    (
        Counter::SlabReassignEvictionsNomem,
        "slab_reassign_evictions_nomem",
    ),
];

/// Number of [`Counter`]s.
pub const COUNT_COUNTERS: usize = 27;

/// One worker's counters. Written only by that worker's thread; read by any.
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct Counters {
    values: [AtomicU64; COUNT_COUNTERS],
}

impl Counters {
    /// Adds `n` to `counter`. Only the owning worker calls this (single writer).
    #[inline]
    pub fn add(&self, counter: Counter, n: u64) {
        let cell = &self.values[counter as usize];
        cell.store(
            cell.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    /// Adds one.
    #[inline]
    pub fn bump(&self, counter: Counter) {
        self.add(counter, 1);
    }

    /// The current value.
    pub fn get(&self, counter: Counter) -> u64 {
        self.values[counter as usize].load(Ordering::Relaxed)
    }
}

/// The counter values at the last `stats reset`.
#[derive(Debug, Default)]
pub struct Baseline {
    at_reset: Mutex<[u64; COUNT_COUNTERS]>,
    /// The store's `evictions` at the last `stats reset` of this process.
    evictions_at_reset: AtomicU64,
}

impl Shared {
    /// Every worker's counters summed, minus the baseline.
    pub fn totals(&self) -> [u64; COUNT_COUNTERS] {
        let base = *self
            .baseline
            .at_reset
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let mut sum = [0u64; COUNT_COUNTERS];
        for (i, (counter, _)) in COUNTERS.iter().enumerate() {
            let all: u64 = self.workers.iter().map(|w| w.get(*counter)).sum();
            sum[i] = all.wrapping_sub(base[i]);
        }
        sum
    }

    /// `stats reset`: counters restart from zero (connections and items are not counters).
    pub fn reset(&self) {
        let mut base = self
            .baseline
            .at_reset
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        for (i, (counter, _)) in COUNTERS.iter().enumerate() {
            base[i] = self.workers.iter().map(|w| w.get(*counter)).sum();
        }
        let evictions = &self.baseline.evictions_at_reset;
        evictions.store(self.store.evictions(), Ordering::Relaxed);
    }

    /// The `stats` group `group` (empty: the general stats); `None` for an unknown group.
    pub fn stat_lines(&self, group: &[u8]) -> Option<StatLines> {
        let mut lines = Lines::default();
        match group {
            b"" => self.general(&mut lines),
            b"settings" => self.settings_group(&mut lines),
            b"items" => self.items(&mut lines),
            b"slabs" => self.slabs(&mut lines),
            b"sizes" => lines.push("sizes_status", "disabled"),
            b"conns" => {}
            _ => return None,
        }
        Some(lines.0)
    }

    fn general(&self, lines: &mut Lines) {
        let now = unix_now();
        let (user, system) = rusage();
        lines.push("pid", std::process::id());
        lines.push("uptime", self.started.elapsed().as_secs());
        lines.push("time", now);
        lines.push(
            "version",
            format!(
                "{}-podkv-{}",
                MEMCACHED_COMPATIBLE,
                env!("CARGO_PKG_VERSION")
            ),
        );
        lines.push("pointer_size", usize::BITS);
        lines.push("rusage_user", format!("{user:.6}"));
        lines.push("rusage_system", format!("{system:.6}"));
        lines.push("max_connections", self.settings.max_conns);
        lines.push("curr_connections", self.curr_conns.load(Ordering::Relaxed));
        lines.push(
            "total_connections",
            self.total_conns.load(Ordering::Relaxed),
        );
        lines.push(
            "rejected_connections",
            self.rejected_conns.load(Ordering::Relaxed),
        );
        let totals = self.totals();
        for (i, (counter, name)) in COUNTERS.iter().enumerate() {
            if *counter != Counter::TotalItems {
                lines.push(name, totals[i]);
            }
        }
        lines.push("idle_kicks", self.idle_kicks.load(Ordering::Relaxed));
        lines.push("limit_maxbytes", self.settings.limit_maxbytes);
        lines.push("accepting_conns", 1);
        lines.push("threads", self.settings.threads);
        lines.push("hash_power_level", self.store.buckets_log2());
        let (items, bytes) = self.store.usage();
        lines.push("bytes", bytes);
        lines.push("curr_items", items);
        lines.push("total_items", totals[Counter::TotalItems as usize]);
        let since_reset = self.baseline.evictions_at_reset.load(Ordering::Relaxed);
        lines.push(
            "evictions",
            self.store.evictions().saturating_sub(since_reset),
        );
        self.heap_lines(lines);
    }

    /// podkv's own: what the heap API reports today.
    fn heap_lines(&self, lines: &mut Lines) {
        let heap = self.store.heap();
        let slots = heap.geometry().slots();
        let owners: Vec<u32> = (0..slots)
            .map(|i| podkv_alloc::slot::owner_pid(heap.slot_owner_word(i).load(Ordering::Relaxed)))
            .filter(|&pid| pid != 0)
            .collect();
        let mut pids = owners.clone();
        pids.sort_unstable();
        pids.dedup();
        lines.push("podkv_heap_capacity", heap_capacity(&self.store));
        for kind in podkv_alloc::Kind::ALL {
            let name = format!("podkv_limit_{}_bytes", kind.name());
            lines.push(&name, region_capacity(&self.store, kind));
        }
        lines.push("podkv_heap_bytes", heap.file_allocated_bytes().unwrap_or(0));
        lines.push("podkv_hwcc_bytes", heap.hwcc_bytes());
        lines.push("podkv_thread_slots", slots);
        lines.push("podkv_thread_slots_in_use", owners.len());
        lines.push("podkv_processes", pids.len());
    }

    fn settings_group(&self, lines: &mut Lines) {
        let s = &self.settings;
        lines.push("maxbytes", s.limit_maxbytes);
        lines.push("maxconns", s.max_conns);
        lines.push("tcpport", s.listen.port());
        lines.push("udpport", 0);
        lines.push("inter", s.listen.ip());
        lines.push("verbosity", 0);
        lines.push("evictions", "on");
        lines.push("slab_reassign", if s.drain > 0 { "yes" } else { "no" });
        lines.push("podkv_drain_percent", s.drain);
        lines.push("podkv_drain_interval", s.drain_interval);
        lines.push("num_threads", s.threads);
        lines.push("cas_enabled", "yes");
        lines.push("item_size_max", s.limits.max_item_size);
        lines.push("idle_timeout", s.idle_timeout);
        lines.push("podkv_heap", s.heap.display());
        lines.push("podkv_reuseport", if s.reuseport { "yes" } else { "no" });
        lines.push("podkv_io", s.io.name());
    }

    /// One "class" for the whole store: podkv items are not kept in slab classes.
    fn items(&self, lines: &mut Lines) {
        let (items, _) = self.store.usage();
        if items > 0 {
            lines.push("items:1:number", items);
        }
    }

    /// The allocator's two slab heaps as classes 1 (small, 64 KiB slabs) and 2 (large,
    /// 512 KiB): their slabs that hold memory (`Heap::held_slabs`), as memcached's pages.
    fn slabs(&self, lines: &mut Lines) {
        let heap = self.store.heap();
        let mut active = 0;
        for (class, kind) in [(1, podkv_alloc::Kind::Small), (2, podkv_alloc::Kind::Large)] {
            let page = heap.slab_heap(kind).slab_bytes();
            let pages = u64::from(heap.held_slabs(heap.slab_heap(kind)));
            active += u64::from(pages > 0);
            lines.push(&format!("{class}:page_size"), page);
            lines.push(&format!("{class}:total_pages"), pages);
        }
        lines.push("active_slabs", active);
        lines.push("total_malloced", heap.held_bytes());
    }

    /// The general stats as Prometheus text (`podkv_<name>`; strings become labels).
    pub fn prometheus(&self) -> String {
        let mut text = String::new();
        let lines = self.stat_lines(b"").unwrap_or_default();
        for (name, value) in &lines {
            let metric = name.strip_prefix("podkv_").unwrap_or(name);
            if value.parse::<f64>().is_ok() {
                let kind = if name == "evictions" || COUNTERS.iter().any(|(_, n)| n == name) {
                    "counter"
                } else {
                    "gauge"
                };
                let _ = writeln!(text, "# TYPE podkv_{metric} {kind}");
                let _ = writeln!(text, "podkv_{metric} {value}");
            } else {
                let _ = writeln!(text, "podkv_{metric}_info{{{metric}=\"{value}\"}} 1");
            }
        }
        text
    }
}

/// `STAT` lines under construction.
#[derive(Default)]
struct Lines(StatLines);

impl Lines {
    fn push(&mut self, name: &str, value: impl std::fmt::Display) {
        self.0.push((name.to_owned(), value.to_string()));
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// User and system CPU seconds of this process.
fn rusage() -> (f64, f64) {
    // SAFETY: `rusage` is plain data; all-zero is a valid value for getrusage to overwrite.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage; RUSAGE_SELF always exists.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return (0.0, 0.0);
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(usage.ru_utime), secs(usage.ru_stime))
}
