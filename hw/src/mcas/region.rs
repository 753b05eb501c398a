//! The mCAS region: the bytes a near-memory processor and its clients share.
//!
//! A region is a run of cache lines inside a shared mapping (a standalone [`RegionFile`] now;
//! the heap file later). Its layout, from the region's first byte:
//!
//! | line | name | words | written by |
//! | --- | --- | --- | --- |
//! | 0 | header | `magic, version, count_clients, targets_start, targets_len` | [`Region::format`], once |
//! | 1 | liveness | `claim` (epoch << 32 \| pid; 0 = none), `heartbeat`, `parked`, `doorbell` | the processor (claim: by CAS, any starter; doorbell: clients) |
//! | 2 | journal | `inflight_client + 1`, `inflight_seq` | the processor, around each request |
//! | 3 .. 3 + C | `spwr[c]` | `seq, op, target, expected, new` | client `c` only |
//! | 3 + C .. 3 + 2C | `sprd[c]` | `seq, status, previous` (the processor), `waiting` (client `c`) | as listed |
//!
//! `parked`, `doorbell` and `waiting` are not part of the FPGA protocol: they let a software
//! processor and its clients sleep instead of spin ([`super::park`]).
//!
//! Targets (the words that may be mCASed, CXLALLOC's device-biased memory) are the byte range
//! `targets_start .. targets_start + targets_len` of the *mapping*, named by mapping offset —
//! offsets, never addresses — so the allocator can put them wherever its HWcc words live.
//! Every line is uncachable on real hardware; here every access is an atomic on shared memory.

use super::McasError;
use crate::persist::SIZE_CACHE_LINE;
use crate::sync::mapped::{AtomicU64, Ordering};
use std::any::Any;
use std::ptr::NonNull;
use std::sync::Arc;

/// "podkvMCA" + layout version in the next word.
const MAGIC: u64 = u64::from_le_bytes(*b"podkvMCA");
const VERSION: u64 = 1;
/// Lines before the first `spwr` line: header, liveness, journal.
const LINES_FIXED: u64 = 3;
/// Most clients a region may have: one per thread slot of the largest heap.
pub const COUNT_CLIENTS_MAX: u32 = 1 << 16;

/// Word indices within the lines above.
pub(crate) mod word {
    pub const CLAIM: usize = 0;
    pub const HEARTBEAT: usize = 1;
    pub const PARKED: usize = 2;
    pub const DOORBELL: usize = 3;
    pub const INFLIGHT_CLIENT: usize = 0;
    pub const INFLIGHT_SEQ: usize = 1;
    pub const SEQ: usize = 0;
    pub const OP: usize = 1;
    pub const TARGET: usize = 2;
    pub const EXPECTED: usize = 3;
    pub const NEW: usize = 4;
    pub const STATUS: usize = 1;
    pub const PREVIOUS: usize = 2;
    pub const WAITING: usize = 3;
}

/// Bytes of a region serving `count_clients` clients.
pub const fn region_bytes(count_clients: u32) -> u64 {
    (LINES_FIXED + 2 * count_clients as u64) * SIZE_CACHE_LINE as u64
}

/// A byte range of a shared mapping, addressed by offset.
///
/// Holds the mapping's owner (if it has one) so the bytes outlive every view.
#[derive(Clone)]
pub struct Window {
    base: NonNull<u8>,
    len: usize,
    _owner: Option<Arc<dyn Any + Send + Sync>>,
}

// SAFETY: a `Window` only hands out `&AtomicU64`s into its mapping, which are Send and Sync;
// the mapping stays valid while the window exists (the invariant `Window::new` demands).
unsafe impl Send for Window {}
// SAFETY: as above: every access through a shared `Window` is atomic.
unsafe impl Sync for Window {}

impl std::fmt::Debug for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Window").field("len", &self.len).finish()
    }
}

impl Window {
    /// A view of `len` bytes at `base`, kept valid by `owner` (or by the caller when `None`).
    ///
    /// # Safety
    /// - `base` is 64-byte aligned and `[base, base + len)` is mapped readable and writable,
    ///   shared with the other processes of the pod, for as long as this window or any clone
    ///   of it exists (dropping `owner` last must be what unmaps it, if it does);
    /// - every access by anyone to the words of the range that this module touches is atomic.
    pub unsafe fn new(
        base: *mut u8,
        len: usize,
        owner: Option<Arc<dyn Any + Send + Sync>>,
    ) -> Window {
        let base = NonNull::new(base).expect("a mapping is never at address zero");
        assert_eq!(
            base.as_ptr() as usize % SIZE_CACHE_LINE,
            0,
            "window base is line aligned"
        );
        Window {
            base,
            len,
            _owner: owner,
        }
    }

    /// Bytes in the window.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the window is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The word at byte `offset`, or `None` when it is misaligned or outside the window.
    #[inline]
    pub fn word(&self, offset: u64) -> Option<&AtomicU64> {
        if offset % 8 != 0 || offset.checked_add(8)? > self.len as u64 {
            return None;
        }
        // SAFETY: the word lies inside the window (checked above), which is mapped for the
        // window's life and aligned (base is line aligned, offset a multiple of 8); all
        // accesses to it are atomic (`Window::new`'s contract).
        Some(unsafe { &*self.base.as_ptr().add(offset as usize).cast::<AtomicU64>() })
    }

    /// The address of byte `offset` (for flushes), which the caller checked is in the window.
    pub(crate) fn addr(&self, offset: u64) -> *const u8 {
        debug_assert!(offset < self.len as u64);
        self.base.as_ptr().wrapping_add(offset as usize)
    }
}

/// A formatted mCAS region inside a [`Window`]: where its lines and targets are.
#[derive(Clone, Debug)]
pub struct Region {
    window: Window,
    /// Window offset of line 0.
    at: u64,
    count_clients: u32,
    targets: std::ops::Range<u64>,
}

impl Region {
    /// Writes a region header at window offset `at` serving `count_clients` clients, with
    /// targets at window offsets `targets`, and returns the region. The region's lines must be
    /// zero (a fresh file, or a region no processor or client uses).
    pub fn format(
        window: Window,
        at: u64,
        count_clients: u32,
        targets: std::ops::Range<u64>,
    ) -> Result<Region, McasError> {
        let region = Region::check(window, at, count_clients, targets)?;
        let header = [
            MAGIC,
            VERSION,
            u64::from(count_clients),
            region.targets.start,
            region.targets.end - region.targets.start,
        ];
        for (i, value) in header.into_iter().enumerate().skip(1) {
            region.line_word(0, i).store(value, Ordering::Relaxed);
        }
        // The magic last, released: a reader that sees it sees the whole header.
        region.line_word(0, 0).store(header[0], Ordering::Release);
        Ok(region)
    }

    /// Reads the region header at window offset `at`, refusing anything that is not a region
    /// this build wrote or that does not fit the window (bad input never corrupts).
    pub fn open(window: Window, at: u64) -> Result<Region, McasError> {
        let read = |i: u64| {
            window
                .word(at + 8 * i)
                .map(|w| w.load(Ordering::Acquire))
                .ok_or_else(|| McasError::BadRegion(format!("offset {at} is outside the mapping")))
        };
        let magic = read(0)?;
        if magic != MAGIC {
            return Err(McasError::BadRegion(format!(
                "no mCAS region at offset {at} (magic {magic:#x})"
            )));
        }
        let version = read(1)?;
        if version != VERSION {
            return Err(McasError::BadRegion(format!(
                "mCAS region version {version}, this build reads {VERSION}"
            )));
        }
        let count = u32::try_from(read(2)?)
            .map_err(|_| McasError::BadRegion("client count out of range".into()))?;
        let start = read(3)?;
        let end = start
            .checked_add(read(4)?)
            .ok_or_else(|| McasError::BadRegion("targets overflow".into()))?;
        Region::check(window, at, count, start..end)
    }

    fn check(
        window: Window,
        at: u64,
        count_clients: u32,
        targets: std::ops::Range<u64>,
    ) -> Result<Region, McasError> {
        let bad = |why: String| Err(McasError::BadRegion(why));
        if at % SIZE_CACHE_LINE as u64 != 0 {
            return bad(format!("region offset {at} is not line aligned"));
        }
        if count_clients == 0 || count_clients > COUNT_CLIENTS_MAX {
            return bad(format!("{count_clients} clients (1..={COUNT_CLIENTS_MAX})"));
        }
        let end = at + region_bytes(count_clients);
        if end > window.len() as u64 {
            return bad(format!(
                "region end {end} beyond the mapping's {} bytes",
                window.len()
            ));
        }
        if targets.start % 8 != 0 || targets.end % 8 != 0 || targets.end > window.len() as u64 {
            return bad(format!(
                "targets {targets:?} misaligned or beyond the mapping"
            ));
        }
        if targets.start < end && at < targets.end {
            return bad(format!(
                "targets {targets:?} overlap the region {at}..{end}"
            ));
        }
        Ok(Region {
            window,
            at,
            count_clients,
            targets,
        })
    }

    /// Clients the region has lines for (client ids `0..count_clients`).
    pub fn count_clients(&self) -> u32 {
        self.count_clients
    }

    /// Window offsets that may be mCASed.
    pub fn targets(&self) -> std::ops::Range<u64> {
        self.targets.clone()
    }

    /// The window the region lives in.
    pub fn window(&self) -> &Window {
        &self.window
    }

    /// The target word at window `offset`, if `offset` is an aligned offset in the targets.
    #[inline]
    pub fn target(&self, offset: u64) -> Option<&AtomicU64> {
        if !self.targets.contains(&offset) {
            return None;
        }
        self.window.word(offset)
    }

    /// Word `i` of region line `line` (which `check` proved is inside the window).
    #[inline]
    pub(crate) fn line_word(&self, line: u64, i: usize) -> &AtomicU64 {
        debug_assert!(i < 8);
        let offset = self.at + line * SIZE_CACHE_LINE as u64 + 8 * i as u64;
        self.window
            .word(offset)
            .expect("region lines lie in the window (Region::check)")
    }

    pub(crate) fn liveness(&self, i: usize) -> &AtomicU64 {
        self.line_word(1, i)
    }

    pub(crate) fn journal(&self, i: usize) -> &AtomicU64 {
        self.line_word(2, i)
    }

    pub(crate) fn spwr(&self, client: u32, i: usize) -> &AtomicU64 {
        self.line_word(LINES_FIXED + u64::from(client), i)
    }

    pub(crate) fn sprd(&self, client: u32, i: usize) -> &AtomicU64 {
        self.line_word(LINES_FIXED + u64::from(self.count_clients + client), i)
    }
}

/// A standalone region file: the region at offset 0, then its targets — what
/// `podkv mcas-nmp --heap PATH` serves until the heap carries its own region.
#[derive(Debug)]
pub struct RegionFile {
    region: Region,
}

impl RegionFile {
    /// Creates `path` (which must not exist: a heap is never overwritten by mistake) as a
    /// region for `count_clients` clients and `count_targets` target words, all zero.
    pub fn create(
        path: &std::path::Path,
        count_clients: u32,
        count_targets: u64,
    ) -> Result<RegionFile, McasError> {
        let head = region_bytes(count_clients.clamp(1, COUNT_CLIENTS_MAX));
        let len = head + (count_targets * 8).next_multiple_of(SIZE_CACHE_LINE as u64);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        file.set_len(len)?;
        let window = map(&file)?;
        let region = Region::format(window, 0, count_clients, head..head + count_targets * 8)?;
        Ok(RegionFile { region })
    }

    /// Opens an existing region file, checking its header.
    pub fn open(path: &std::path::Path) -> Result<RegionFile, McasError> {
        RegionFile::open_at(path, 0)
    }

    /// Opens the region at byte `offset` of any file (a heap file whose mCAS region starts
    /// there), checking its header.
    pub fn open_at(path: &std::path::Path, offset: u64) -> Result<RegionFile, McasError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)?;
        let window = map(&file)?;
        Ok(RegionFile {
            region: Region::open(window, offset)?,
        })
    }

    /// The region (cheap to clone; keeps the mapping alive).
    pub fn region(&self) -> &Region {
        &self.region
    }
}

/// Maps all of `file` shared, as a window that owns the mapping.
pub fn map(file: &std::fs::File) -> Result<Window, McasError> {
    let len = file.metadata()?.len();
    if len == 0 {
        return Err(McasError::BadRegion("empty file".into()));
    }
    // SAFETY: a shared mapping of a file we opened read-write; other processes may change its
    // bytes at any time, which is why this module touches them only through atomics.
    let mut mmap = unsafe { memmap2::MmapOptions::new().map_mut(file)? };
    let base = mmap.as_mut_ptr();
    let len = mmap.len();
    let owner: Arc<dyn Any + Send + Sync> = Arc::new(mmap);
    // SAFETY: `base..base + len` is the mapping `owner` holds (page aligned, so line aligned)
    // and unmaps only when the last window clone drops it; the bytes are accessed atomically.
    Ok(unsafe { Window::new(base, len, Some(owner)) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_window(len: u64) -> (tempfile::NamedTempFile, Window) {
        let file = tempfile::NamedTempFile::new().unwrap();
        file.as_file().set_len(len).unwrap();
        let window = map(file.as_file()).unwrap();
        (file, window)
    }

    #[test]
    fn format_then_open_reads_the_same_layout() {
        let (_file, window) = file_window(1 << 16);
        let head = region_bytes(4);
        let made = Region::format(window.clone(), 0, 4, head..head + 800).unwrap();
        let read = Region::open(window, 0).unwrap();
        assert_eq!(read.count_clients(), 4);
        assert_eq!(read.targets(), made.targets());
        assert!(read.target(head).is_some());
        assert!(read.target(head + 4).is_none(), "misaligned");
        assert!(read.target(head + 800).is_none(), "past the targets");
        assert!(read.target(0).is_none(), "the header is no target");
    }

    #[test]
    fn bad_regions_are_refused_not_trusted() {
        let (_file, window) = file_window(4096);
        assert!(matches!(
            Region::open(window.clone(), 0),
            Err(McasError::BadRegion(_))
        ));
        assert!(Region::open(window.clone(), 1 << 20).is_err());
        assert!(Region::format(window.clone(), 0, 0, 0..0).is_err());
        assert!(
            Region::format(window.clone(), 0, 1000, 0..0).is_err(),
            "too big"
        );
        assert!(
            Region::format(window.clone(), 0, 2, 64..128).is_err(),
            "overlap"
        );
        assert!(
            Region::format(window.clone(), 32, 2, 3000..3008).is_err(),
            "unaligned"
        );
        assert!(Region::format(window, 0, 2, 4000..4104).is_err(), "beyond");
    }
}
