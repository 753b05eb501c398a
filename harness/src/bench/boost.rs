//! The boost.interprocess baseline: a `managed_shared_memory` segment (CXLALLOC's
//! cross-process "Boost" row), driven through the C shim in `shim/boost_interprocess.cpp`
//! (feature `baselines`, built when boost's headers are installed: `cfg(podkv_boost)`).
//!
//! The launcher creates the segment (its name travels in the job's `heap`), puts the xmalloc
//! rings in it, and every worker process opens it by name; blocks are named by boost's
//! handles (offsets from the segment's base), so a block allocated in one process is freed in
//! another. Every allocation and free takes the segment's one mutex.

use super::alloc::BenchAlloc;
use std::alloc::Layout;

/// Why the boost baseline cannot run in this binary, if it cannot.
pub fn unavailable() -> Option<&'static str> {
    if cfg!(podkv_boost) {
        None
    } else if cfg!(feature = "baselines") {
        Some("boost.interprocess is not in this binary: its headers were missing at build time (apt-get install libboost-dev, then rebuild)")
    } else {
        Some("boost.interprocess is not in this binary: build podkv with `--features baselines`")
    }
}

#[cfg(podkv_boost)]
mod ffi {
    use std::ffi::{c_char, c_void};

    extern "C" {
        pub fn podkv_boost_create(name: *const c_char, bytes: u64) -> *mut c_void;
        pub fn podkv_boost_open(name: *const c_char) -> *mut c_void;
        pub fn podkv_boost_open_or_create(name: *const c_char, bytes: u64) -> *mut c_void;
        pub fn podkv_boost_named(segment: *mut c_void, name: *const c_char, words: u64) -> u64;
        pub fn podkv_boost_close(segment: *mut c_void);
        pub fn podkv_boost_remove(name: *const c_char);
        pub fn podkv_boost_alloc(segment: *mut c_void, bytes: u64, align: u64) -> u64;
        pub fn podkv_boost_free(segment: *mut c_void, handle: u64);
        pub fn podkv_boost_addr(segment: *mut c_void, handle: u64) -> *mut u8;
    }
}

/// One process's mapping of a segment.
pub struct Segment {
    #[cfg(podkv_boost)]
    raw: *mut std::ffi::c_void,
    /// Removes the name when dropped (the creator's).
    #[cfg(podkv_boost)]
    owned: Option<std::ffi::CString>,
}

// SAFETY: boost's segment manager serialises its allocator on a mutex in the segment, so
// the mapping may be used from every thread of the process.
unsafe impl Sync for Segment {}
// SAFETY: as for Sync; the mapping is not tied to the thread that opened it.
unsafe impl Send for Segment {}

impl Segment {
    /// Creates the segment `name` of `bytes` (removed again when this is dropped).
    pub fn create(name: &str, bytes: u64) -> anyhow::Result<Self> {
        if let Some(why) = unavailable() {
            anyhow::bail!(why);
        }
        #[cfg(podkv_boost)]
        {
            let c = std::ffi::CString::new(name)?;
            // SAFETY: a valid C string; the shim returns null on any failure.
            let raw = unsafe { ffi::podkv_boost_create(c.as_ptr(), bytes) };
            anyhow::ensure!(
                !raw.is_null(),
                "cannot create boost segment {name} of {bytes} bytes"
            );
            Ok(Self {
                raw,
                owned: Some(c),
            })
        }
        #[cfg(not(podkv_boost))]
        unreachable!("{name} {bytes}: unavailable() said why")
    }

    /// Opens the existing segment `name`.
    pub fn open(name: &str) -> anyhow::Result<Self> {
        if let Some(why) = unavailable() {
            anyhow::bail!(why);
        }
        #[cfg(podkv_boost)]
        {
            let c = std::ffi::CString::new(name)?;
            // SAFETY: a valid C string; the shim returns null on any failure.
            let raw = unsafe { ffi::podkv_boost_open(c.as_ptr()) };
            anyhow::ensure!(!raw.is_null(), "cannot open boost segment {name}");
            Ok(Self { raw, owned: None })
        }
        #[cfg(not(podkv_boost))]
        unreachable!("{name}: unavailable() said why")
    }

    /// The segment `name`, created with `bytes` if no process has made it yet; it is not
    /// removed when dropped ([`Segment::remove`] removes its name).
    pub fn open_or_create(name: &str, bytes: u64) -> anyhow::Result<Self> {
        if let Some(why) = unavailable() {
            anyhow::bail!(why);
        }
        #[cfg(podkv_boost)]
        {
            let c = std::ffi::CString::new(name)?;
            // SAFETY: a valid C string; the shim returns null on any failure.
            let raw = unsafe { ffi::podkv_boost_open_or_create(c.as_ptr(), bytes) };
            anyhow::ensure!(
                !raw.is_null(),
                "cannot open or create boost segment {name} of {bytes} bytes"
            );
            Ok(Self { raw, owned: None })
        }
        #[cfg(not(podkv_boost))]
        unreachable!("{name} {bytes}: unavailable() said why")
    }

    /// Removes the name of segment `name` (processes that mapped it keep their mapping).
    pub fn remove(name: &str) {
        #[cfg(podkv_boost)]
        if let Ok(c) = std::ffi::CString::new(name) {
            // SAFETY: a valid C string; boost ignores a name that does not exist.
            unsafe { ffi::podkv_boost_remove(c.as_ptr()) };
        }
        #[cfg(not(podkv_boost))]
        let _ = name;
    }

    /// The handle of the segment's named block `name` of `words` zeroed words, made by the
    /// first process that asks for it.
    pub fn named_words(&self, name: &str, words: u64) -> anyhow::Result<u64> {
        #[cfg(podkv_boost)]
        {
            let c = std::ffi::CString::new(name)?;
            // SAFETY: a live mapping and a valid C string; u64::MAX on failure.
            let h = unsafe { ffi::podkv_boost_named(self.raw, c.as_ptr(), words) };
            anyhow::ensure!(h != u64::MAX, "cannot make {name} in the boost segment");
            Ok(h)
        }
        #[cfg(not(podkv_boost))]
        unreachable!("{name} {words}: a segment cannot exist without boost")
    }

    /// A block of `bytes` aligned to `align` (a power of two), as its handle; `None` when the
    /// segment is full.
    #[inline]
    pub fn try_alloc(&self, bytes: usize, align: usize) -> Option<u64> {
        #[cfg(podkv_boost)]
        {
            // SAFETY: a live mapping; the shim returns u64::MAX when the segment is full.
            let h = unsafe { ffi::podkv_boost_alloc(self.raw, bytes as u64, align as u64) };
            (h != u64::MAX).then_some(h)
        }
        #[cfg(not(podkv_boost))]
        unreachable!("{bytes} {align}: a segment cannot exist without boost")
    }

    /// Frees the block of `handle`, allocated by any process.
    #[inline]
    pub fn free(&self, handle: u64) {
        #[cfg(podkv_boost)]
        // SAFETY: `handle` is a live block of this segment (the caller's contract, as for
        // every allocator's free).
        unsafe {
            ffi::podkv_boost_free(self.raw, handle)
        };
        #[cfg(not(podkv_boost))]
        unreachable!("{handle}: a segment cannot exist without boost")
    }

    /// This process's address of handle 0: a handle is an offset from it.
    pub fn base(&self) -> *mut u8 {
        #[cfg(podkv_boost)]
        // SAFETY: a live mapping; the shim only adds the handle to the segment's base.
        return unsafe { ffi::podkv_boost_addr(self.raw, 0) };
        #[cfg(not(podkv_boost))]
        unreachable!("a segment cannot exist without boost")
    }

    /// A zeroed block of `bytes` aligned to 64 (a cache line), as its handle.
    pub fn alloc_zeroed(&self, bytes: usize) -> anyhow::Result<u64> {
        let layout = Layout::from_size_align(bytes, 64)?;
        let handle = self.handle().alloc(layout);
        // SAFETY: a fresh block of `bytes` in this mapping.
        unsafe { std::ptr::write_bytes(self.handle().addr(handle), 0, bytes) };
        Ok(handle)
    }

    /// A thread's view of the segment, for the benchmark loops.
    pub fn handle(&self) -> Handle<'_> {
        Handle(self)
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        #[cfg(podkv_boost)]
        // SAFETY: `raw` came from create/open and is closed once, here; `owned` is the
        // segment's name.
        unsafe {
            ffi::podkv_boost_close(self.raw);
            if let Some(name) = &self.owned {
                ffi::podkv_boost_remove(name.as_ptr());
            }
        }
    }
}

/// A worker's handle on a [`Segment`].
pub struct Handle<'s>(&'s Segment);

impl BenchAlloc for Handle<'_> {
    #[inline]
    fn alloc(&self, layout: Layout) -> u64 {
        self.0
            .try_alloc(layout.size(), layout.align())
            .expect("boost segment out of memory")
    }

    #[inline]
    fn free(&self, block: u64, _layout: Layout) {
        self.0.free(block);
    }

    #[inline]
    fn addr(&self, block: u64) -> *mut u8 {
        #[cfg(podkv_boost)]
        // SAFETY: `block` is a handle on this segment; the shim only adds it to the base.
        return unsafe { ffi::podkv_boost_addr(self.0.raw, block) };
        #[cfg(not(podkv_boost))]
        unreachable!("{block}: a segment cannot exist without boost")
    }
}
