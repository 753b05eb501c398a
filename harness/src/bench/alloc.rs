//! The allocators a benchmark can drive (the pod heap; mimalloc, jemalloc and the system
//! allocator as process-local baselines), behind one small trait so each worker loop is
//! monomorphised per allocator (no dispatch in the timed loop).

use podkv_alloc::{Offset, ThreadHandle};
use std::alloc::{GlobalAlloc, Layout, System};

/// One thread's view of an allocator: blocks are named by a `u64` (a podkv offset, or an
/// address for process-local allocators).
pub trait BenchAlloc {
    /// Allocates a block; panics on exhaustion (a benchmark sized past its heap is a usage error).
    fn alloc(&self, layout: Layout) -> u64;
    /// Frees a block from `alloc` (possibly another thread's).
    fn free(&self, block: u64, layout: Layout);
    /// This process's address of a block, to write to it.
    fn addr(&self, block: u64) -> *mut u8;
}

impl BenchAlloc for ThreadHandle {
    #[inline]
    fn alloc(&self, layout: Layout) -> u64 {
        match self.allocate(layout) {
            Ok(offset) => offset.0,
            Err(e) => panic!("podkv heap: {e} (give the benchmark a larger heap)"),
        }
    }

    #[inline]
    fn free(&self, block: u64, _layout: Layout) {
        ThreadHandle::free(self, Offset(block));
    }

    #[inline]
    fn addr(&self, block: u64) -> *mut u8 {
        self.resolve(Offset(block))
    }
}

/// A process-local allocator used through `GlobalAlloc` (mimalloc, the system allocator).
pub struct Local<A: GlobalAlloc>(pub A);

impl<A: GlobalAlloc> BenchAlloc for Local<A> {
    #[inline]
    fn alloc(&self, layout: Layout) -> u64 {
        // SAFETY: `layout` has a non-zero size (benchmarks allocate at least one byte).
        let p = unsafe { self.0.alloc(layout) };
        assert!(!p.is_null(), "allocator out of memory");
        p as u64
    }

    #[inline]
    fn free(&self, block: u64, layout: Layout) {
        // SAFETY: `block` came from `alloc` on the same allocator with the same layout.
        unsafe { self.0.dealloc(block as *mut u8, layout) }
    }

    #[inline]
    fn addr(&self, block: u64) -> *mut u8 {
        block as *mut u8
    }
}

/// mimalloc, linked into this binary as a baseline.
pub fn mimalloc() -> Local<mimalloc::MiMalloc> {
    Local(mimalloc::MiMalloc)
}

/// jemalloc, linked into this binary as a baseline (feature `baselines`; its symbols are
/// prefixed, so it lives beside glibc's malloc).
#[cfg(feature = "baselines")]
pub fn jemalloc() -> Local<tikv_jemallocator::Jemalloc> {
    Local(tikv_jemallocator::Jemalloc)
}

/// The system allocator (glibc malloc).
pub fn system() -> Local<System> {
    Local(System)
}
