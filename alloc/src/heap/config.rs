//! How to open a heap ([`Config`]), the geometry a fresh heap gets from it, and where a named
//! heap lives by default.

use crate::class::{SHIFT_LARGE_SLAB, SHIFT_SMALL_SLAB};
use crate::error::HeapError;
use crate::huge::HugeBacking;
use crate::layout::Geometry;
use crate::process::Liveness;
use podkv_hw::mcas::McasKind;
use podkv_hw::topology::Placement;
use podkv_hw::Coherence;
use std::path::PathBuf;

/// How to open a heap, and the geometry a fresh heap gets.
#[derive(Clone, Debug)]
pub struct Config {
    /// Most bytes of small slabs (rounded up to a power of two of 64 KiB slabs).
    pub small_bytes: u64,
    /// Most bytes of large slabs (rounded up to a power of two of 512 KiB slabs).
    pub large_bytes: u64,
    /// Thread slots (rounded up to a power of two; at most 16384).
    pub slots: u64,
    /// Coherence mode of a fresh heap.
    pub coherence: Coherence,
    /// Liveness mode of a fresh heap: how a dead slot owner is recognised.
    pub liveness: Liveness,
    /// How long a lease-mode owner may stay silent before it is fenced (this process's
    /// choice; every process of a heap should use the same, [`crate::process::LEASE`] by
    /// default; tests shorten it).
    pub lease: std::time::Duration,
    /// Create the file if it does not exist.
    pub create: bool,
    /// Log every step in the recovery words and acknowledge detectable CAS (this process's
    /// choice, default on). Off only to measure what recoverability costs: a process that
    /// crashes with it off may leak the slabs it was moving.
    pub recoverable: bool,
    /// Address space of a fresh heap's huge heap (rounded up to a power of two, 2 GiB to
    /// 32 TiB; zero: no huge heap, blocks over 512 KiB are unsupported). 1 TiB by default: one
    /// reservation sized once for all growth, so no mapping ever moves.
    pub huge_bytes: u64,
    /// How this process backs the huge blocks it allocates.
    pub huge_backing: HugeBacking,
    /// The mCAS implementation of a fresh `mcas` heap: `flush-cas` (the default) or `nmp`.
    /// Ignored (left `flush-cas`) in other modes.
    pub mcas: McasKind,
    /// The memory policy of a fresh heap's pages (`local`, `node=N`, `interleave=N,M`,
    /// `preferred=N`; default: the kernel's). Recorded in the header, so every process that
    /// opens the heap applies the file's policy, not its own configuration's.
    pub placement: Placement,
    /// Bytes of a fresh heap's user HWcc area (`crate::HwccUser`: the store's multi-writer
    /// words), rounded up to a power of two, 4 KiB to 1 TiB; zero: none. Address space of a
    /// sparse file: only the prefix its user backs counts in `hwcc_bytes`. 256 MiB by
    /// default: 2^25 words, room for the store's largest table.
    pub hwcc_user_bytes: u64,
    /// Whether this process's threads morph sparse slabs of one class to serve another when
    /// they would otherwise take a new slab (`crate::morph`; this process's choice). On by
    /// default unless the environment says `PODKV_MORPH=0` ([`ENV_MORPH`]), so benchmarks
    /// compare with and without it.
    pub morph: bool,
    /// Whether this process's backer maps the slabs it backs as 2 MiB pages (`MADV_COLLAPSE`
    /// on a tmpfs heap, Linux 6.1; this process's choice; the user's HWcc area, the store's
    /// bucket words, it maps so always). A large store then misses the TLB far less: YCSB
    /// `a` over 8.4 M items of 1 KiB ran 1.17-1.21x as fast at one thread and 1.08x at two
    /// (`docs/history/2026-11-27-huge-pages.md`). The price is paid while the heap grows:
    /// each huge page costs the backer about a millisecond of kernel time, more when memory
    /// is fragmented, taken from the operations on busy cores (loading those items ran
    /// 0.98-1.14x as fast, but twice as slow with an earlier build; a 1 M-item `cxlalloc-a`
    /// run, which grows its heap, 0.70-1.06x). Off by default unless the environment says
    /// `PODKV_HUGE_PAGES=1` ([`ENV_HUGE_PAGES`]).
    pub huge_pages: bool,
}

/// The environment variable whose value `1`, `on` or `true` turns [`Config::huge_pages`]'s
/// default on.
pub const ENV_HUGE_PAGES: &str = "PODKV_HUGE_PAGES";

/// [`Config::huge_pages`]'s default: off, unless [`ENV_HUGE_PAGES`] turns it on.
pub fn huge_pages_default() -> bool {
    std::env::var(ENV_HUGE_PAGES).is_ok_and(|v| matches!(v.as_str(), "1" | "on" | "true"))
}

/// The environment variable whose value `0`, `off` or `false` turns [`Config::morph`]'s
/// default off.
pub const ENV_MORPH: &str = "PODKV_MORPH";

/// [`Config::morph`]'s default: on, unless [`ENV_MORPH`] turns it off.
pub fn morph_default() -> bool {
    !std::env::var(ENV_MORPH).is_ok_and(|v| matches!(v.as_str(), "0" | "off" | "false"))
}

impl Default for Config {
    fn default() -> Self {
        Config {
            small_bytes: 64 << 30,
            large_bytes: 64 << 30,
            slots: 1024,
            coherence: Coherence::Hardware,
            liveness: Liveness::Process,
            lease: crate::process::LEASE,
            create: true,
            recoverable: true,
            huge_bytes: 1 << 40,
            huge_backing: HugeBacking::Reserve,
            mcas: McasKind::FlushCas,
            placement: Placement::Default,
            hwcc_user_bytes: 256 << 20,
            morph: morph_default(),
            huge_pages: huge_pages_default(),
        }
    }
}

impl Config {
    /// The geometry a fresh heap opened with this configuration gets.
    pub fn geometry(&self) -> Result<Geometry, HeapError> {
        let log2 = |n: u64| n.max(1).next_power_of_two().trailing_zeros();
        let geometry = Geometry {
            small_slabs_log2: log2(self.small_bytes.div_ceil(1 << SHIFT_SMALL_SLAB)),
            large_slabs_log2: log2(self.large_bytes.div_ceil(1 << SHIFT_LARGE_SLAB)),
            slots_log2: log2(self.slots),
            coherence: self.coherence,
            liveness: self.liveness,
            huge_log2: if self.huge_bytes == 0 {
                0
            } else {
                log2(self.huge_bytes)
            },
            mcas: if self.coherence == Coherence::Mcas {
                self.mcas
            } else {
                McasKind::FlushCas
            },
            hwcc_user_log2: if self.hwcc_user_bytes == 0 {
                0
            } else {
                log2(self.hwcc_user_bytes)
            },
        };
        geometry
            .validate()
            .map_err(|why| HeapError::Config(why.to_owned()))?;
        Ok(geometry)
    }
}

/// The default heap path for a name: `/dev/shm/podkv-<name>`.
pub fn default_path(name: &str) -> PathBuf {
    PathBuf::from(format!("/dev/shm/podkv-{name}"))
}
