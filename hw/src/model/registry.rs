//! The process-global part of the model: whether it is active, the registry of modelled
//! heaps (cache address → memory address), the seeded random evictions, and the public calls
//! that find a heap's region by address or by file.
//!
//! Lookups take no lock and allocate nothing (they run in the SIGSEGV handler): an entry's
//! `busy` count holds its region while a caller uses it, and unregistering waits for it to
//! drain, as `alloc::fault` does for huge views.

use super::cache::{HeapCache, SIZE_PAGE};
use crate::sync::mapped::{AtomicPtr, AtomicU64, AtomicU8, Ordering};
use std::io;
use std::sync::Once;
use std::time::Duration;

const COUNT_REGIONS: usize = 32;

struct Entry {
    region: AtomicPtr<HeapCache>,
    /// Callers using `region` now.
    busy: AtomicU64,
}

static REGISTRY: [Entry; COUNT_REGIONS] = [const {
    Entry {
        region: AtomicPtr::new(std::ptr::null_mut()),
        busy: AtomicU64::new(0),
    }
}; COUNT_REGIONS];

// 0: not yet read from the environment; 1: off; 2: on.
static ACTIVE: AtomicU8 = AtomicU8::new(0);
static RANDOM: AtomicU64 = AtomicU64::new(0);
static SEED: AtomicU64 = AtomicU64::new(0);
static EVICT_ONE_IN: AtomicU64 = AtomicU64::new(4);
static START: Once = Once::new();

/// Whether heaps opened from now on are modelled: `PODKV_COHERENCE_MODEL` set (and not `0`),
/// or [`set_active`].
pub fn active() -> bool {
    match ACTIVE.load(Ordering::Relaxed) {
        0 => {
            let on = std::env::var_os("PODKV_COHERENCE_MODEL").is_some_and(|v| v != "0");
            ACTIVE.store(if on { 2 } else { 1 }, Ordering::Relaxed);
            on
        }
        state => state == 2,
    }
}

/// Turns the model on or off for heaps opened from now on in this process.
pub fn set_active(on: bool) {
    ACTIVE.store(if on { 2 } else { 1 }, Ordering::Relaxed);
}

/// This process's eviction seed (`PODKV_COHERENCE_SEED`, else drawn from the clock and pid).
pub fn seed() -> u64 {
    start_once();
    SEED.load(Ordering::Relaxed)
}

fn start_once() {
    START.call_once(|| {
        let drawn = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ u64::from(std::process::id()) << 32;
        let seed = std::env::var("PODKV_COHERENCE_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(drawn);
        if let Some(n) = std::env::var("PODKV_COHERENCE_EVICT")
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
        {
            EVICT_ONE_IN.store(n, Ordering::Relaxed);
        }
        SEED.store(seed, Ordering::Relaxed);
        RANDOM.store(seed, Ordering::Relaxed);
        eprintln!(
            "podkv coherence model: seed {seed} (pid {})",
            std::process::id()
        );
        let _ = super::site::off_sites();
        super::fault::install();
        // `PODKV_COHERENCE_EVICT=0`: no random evictions at all (property tests).
        if EVICT_ONE_IN.load(Ordering::Relaxed) != 0 {
            let _ = std::thread::Builder::new()
                .name("podkv-model-evict".into())
                .spawn(evictor);
        }
    });
}

/// The next random number (splitmix64 over a shared counter).
fn random() -> u64 {
    let mut z = RANDOM
        .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Evicts at random moments that no SWcc call marks, as a busy cache does.
fn evictor() {
    loop {
        // One in `EVICT_ONE_IN` SWcc calls evicts; the thread's pace follows the same knob.
        let pace = 125 * EVICT_ONE_IN.load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_micros(50 + random() % pace.max(1)));
        for i in 0..COUNT_REGIONS {
            use_entry(i, |region| region.evict_some(random()));
        }
        super::plain::evict_some(random(), EVICT_ONE_IN.load(Ordering::Relaxed));
    }
}

/// Runs `f` on entry `i`'s region if it has one.
fn use_entry<R>(i: usize, f: impl FnOnce(&HeapCache) -> R) -> Option<R> {
    let entry = &REGISTRY[i];
    entry.busy.fetch_add(1, Ordering::SeqCst);
    let region = entry.region.load(Ordering::SeqCst);
    // SAFETY: a non-null region stays alive while `busy` counts this caller (see `Cache`'s
    // drop).
    let out = (!region.is_null()).then(|| f(unsafe { &*region }));
    entry.busy.fetch_sub(1, Ordering::SeqCst);
    out
}

/// Runs `f` on the region that `matches`, if any.
fn find<R>(matches: impl Fn(&HeapCache) -> bool, f: impl FnOnce(&HeapCache) -> R) -> Option<R> {
    let mut f = Some(f);
    (0..COUNT_REGIONS).find_map(|i| {
        use_entry(i, |region| {
            matches(region).then(|| f.take().map(|f| f(region)))
        })
        .flatten()
        .flatten()
    })
}

fn at<R>(addr: usize, f: impl FnOnce(&HeapCache) -> R) -> Option<R> {
    find(|region| region.contains(addr), f)
}

fn maybe_evict(region: &HeapCache) {
    let one_in = EVICT_ONE_IN.load(Ordering::Relaxed);
    let r = random();
    if one_in != 0 && r % one_in == 0 {
        region.evict_some(r);
    }
}

/// The writer rule under the model: every dirty line overlapping the range goes to memory
/// whole. Ranges outside any modelled heap are left alone.
pub fn write_back(ptr: *const u8, len: usize) {
    super::plain::write_back(ptr, len);
    at(ptr as usize, |region| {
        maybe_evict(region);
        region.write_back(ptr as usize, len);
    });
}

/// The reader rule under the model: dirty lines are written back, then every line overlapping
/// the range is reloaded from memory.
pub fn invalidate(ptr: *const u8, len: usize) {
    super::plain::write_back(ptr, len);
    at(ptr as usize, |region| {
        maybe_evict(region);
        region.invalidate(ptr as usize, len);
    });
}

/// The caller just stored into every line overlapping `[ptr, ptr + len)` (a new object,
/// written whole): they are dirty now, as any store makes a line on real hardware. The model
/// tells dirty lines by comparing them with what was loaded, so without this a line whose
/// stores put back the very bytes this cache loaded long ago (a block reused for equal
/// contents) would look clean, and its write-back would leave memory holding what another
/// host wrote there since.
pub fn stored(ptr: *const u8, len: usize) {
    at(ptr as usize, |region| region.stored(ptr as usize, len));
}

/// The name of the modelled cache that holds `ptr` (`None`: no modelled heap holds it): one
/// per cache, never the same for two caches of this or another process, and never a 16-bit
/// host id. What a cache may trust as "written through me" (the store's item writer tags).
pub fn cache_domain(ptr: *const u8) -> Option<u64> {
    at(ptr as usize, |region| region.domain)
}

/// Loads every page of the range into this process's cache, so a system call may read or
/// write it.
pub fn touch(ptr: *const u8, len: usize) {
    let mut page = ptr as usize & !(SIZE_PAGE - 1);
    while page < ptr as usize + len {
        at(page, |region| region.serve_fault(page));
        page += SIZE_PAGE;
    }
}

/// Before the heap file's `[offset, offset + len)` is released (hole punched): this
/// process's cached lines of it are evicted and dropped, so the pages' memory goes back.
pub fn forget_file(fd: libc::c_int, offset: u64, len: u64) {
    find(
        |region| region.fd == fd,
        |region| {
            let start = (offset as usize).max(region.start);
            let end = (offset + len) as usize;
            if start < end {
                region.forget(region.base + start, end - start, true);
            }
        },
    );
}

/// Process `pid` (start time `start`, low 24 bits) is known dead to this process (on its
/// host): the dirty lines it left in its caches of every heap modelled here reach memory now,
/// as its host's cache would let a process of that host see them. Returns the lines written
/// back. Callers still invalidate before they read what the dead process owned.
pub fn settle_dead(pid: u32, start: u32) -> usize {
    (0..COUNT_REGIONS)
        .filter_map(|i| use_entry(i, |region| region.settle_dead(pid, start)))
        .sum()
}

/// Maps a huge block's `[addr, addr + len)` as cache if it lies in a modelled heap:
/// `Some(mapped)`, or `None` when the caller should map the file itself.
pub fn attach(addr: *mut u8, len: usize) -> Option<bool> {
    at(addr as usize, |region| region.attach(addr as usize, len))
}

/// Unmaps a huge block's range from the cache: its dirty lines are evicted, its pages leave
/// the cache, and the reservation (`PROT_NONE`, anonymous) is put back over it while its pages
/// are held, so a thread attaching the range at once maps after it, never under it. Returns
/// whether the range was the model's (the caller maps its reservation back itself otherwise).
pub fn detach(addr: *mut u8, len: usize) -> bool {
    at(addr as usize, |region| region.detach(addr as usize, len)).is_some()
}

/// The SIGSEGV handler's question (also asked by `alloc::fault`'s handler first): is `addr`
/// an untouched cache page? If so it is filled and the access may run again.
pub fn serve_fault(addr: usize) -> bool {
    at(addr, |region| region.serve_fault(addr)).unwrap_or(false)
}

/// One heap modelled in this process: its cache, registered while this value lives.
#[derive(Debug)]
pub struct Cache {
    index: usize,
}

impl Cache {
    /// Models the heap mapped at `base` from file `fd`: offsets below `start` stay as mapped
    /// (shared, coherent); `[start, eager_end)` becomes this process's cache, filled on first
    /// touch; `[eager_end, total)` is left to the caller's reservation, where huge blocks are
    /// [`attach`]ed.
    ///
    /// # Safety
    /// `[base, base + total)` is the caller's reservation of the heap, with `[0, eager_end)`
    /// of the file mapped at `base`; the caller keeps it while the returned value lives and
    /// maps nothing into `[base + start, base + eager_end)` meanwhile.
    pub unsafe fn map(
        base: *mut u8,
        fd: libc::c_int,
        start: usize,
        eager_end: usize,
        total: usize,
    ) -> io::Result<Cache> {
        start_once();
        // SAFETY: the caller's contract.
        let region = unsafe { HeapCache::map(base as usize, fd, start, eager_end, total)? };
        let region = Box::into_raw(Box::new(region));
        let index = REGISTRY.iter().position(|entry| {
            entry
                .region
                .compare_exchange(
                    std::ptr::null_mut(),
                    region,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                )
                .is_ok()
        });
        match index {
            Some(index) => Ok(Cache { index }),
            None => {
                // SAFETY: never published: this is the only pointer to the box.
                drop(unsafe { Box::from_raw(region) });
                Err(io::Error::other("too many heaps modelled in one process"))
            }
        }
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        let entry = &REGISTRY[self.index];
        let region = entry.region.swap(std::ptr::null_mut(), Ordering::SeqCst);
        while entry.busy.load(Ordering::SeqCst) != 0 {
            std::hint::spin_loop();
        }
        // SAFETY: unpublished, and no caller holds it any more (`busy` drained).
        let region = unsafe { Box::from_raw(region) };
        super::plain::forget(region.base, region.start);
        drop(region);
    }
}
