//! The same index over process-local memory from mimalloc (feature `baselines`): the
//! `mimalloc` target of the drivers, which shows what the pod heap costs against a
//! process-local allocator. Evaluation only; an embedder never needs it.

use crate::arena::Arena;
use crate::StoreError;
use podkv_alloc::AllocError;
use podkv_hw::sync::mapped::{AtomicBool, AtomicU64, Ordering};
use std::alloc::{GlobalAlloc, Layout};
use std::sync::Arc;

/// Process-local memory from mimalloc: the same index without the pod heap (evaluation only).
#[derive(Clone, Debug, Default)]
pub struct LocalArena {
    shared: Arc<LocalShared>,
}

#[derive(Debug)]
struct LocalShared {
    root: AtomicU64,
    /// Slot `i` is claimed while `claimed[i]` is true.
    claimed: Vec<AtomicBool>,
}

impl Default for LocalShared {
    fn default() -> Self {
        LocalShared {
            root: AtomicU64::new(0),
            claimed: (0..COUNT_LOCAL_SLOTS)
                .map(|_| AtomicBool::new(false))
                .collect(),
        }
    }
}

/// Slots of a local arena.
const COUNT_LOCAL_SLOTS: usize = 256;

/// A thread's claim on a [`LocalArena`] slot, released on drop.
#[derive(Debug)]
pub struct LocalThread {
    shared: Arc<LocalShared>,
    slot: u32,
}

impl Drop for LocalThread {
    fn drop(&mut self) {
        self.shared.claimed[self.slot as usize].store(false, Ordering::Release);
    }
}

impl Arena for LocalArena {
    type Thread = LocalThread;
    const NAME: &'static str = "local-mimalloc";

    fn thread(&self) -> Result<LocalThread, StoreError> {
        let free = self.shared.claimed.iter().position(|c| {
            c.compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        });
        let slot = free.ok_or(StoreError::Heap(podkv_alloc::HeapError::NoSlot {
            count: COUNT_LOCAL_SLOTS as u64,
        }))?;
        Ok(LocalThread {
            shared: self.shared.clone(),
            slot: slot as u32,
        })
    }

    #[inline]
    fn slot_index(thread: &LocalThread) -> u32 {
        thread.slot
    }

    fn slots(&self) -> u32 {
        COUNT_LOCAL_SLOTS as u32
    }

    #[inline]
    fn base(&self) -> *mut u8 {
        std::ptr::null_mut()
    }

    #[inline]
    fn allocate(_: &LocalThread, size: usize) -> Result<u64, AllocError> {
        let layout = Layout::from_size_align(size, 8)
            .map_err(|_| AllocError::Unsupported { size, align: 8 })?;
        // SAFETY: `layout` has a non-zero size (every node has a header).
        let ptr = unsafe { mimalloc::MiMalloc.alloc(layout) };
        if ptr.is_null() {
            return Err(AllocError::OutOfMemory);
        }
        Ok(ptr.expose_provenance() as u64)
    }

    #[inline]
    fn free(_: &LocalThread, at: u64) {
        // `at` came from `allocate` above (contract of `Arena::free`), which exposed it.
        let ptr = std::ptr::with_exposed_provenance_mut(at as usize);
        // SAFETY: `ptr` is a live mimalloc block (contract of `Arena::free`); mimalloc's
        // `dealloc` ignores the layout.
        unsafe { mimalloc::MiMalloc.dealloc(ptr, Layout::new::<u64>()) };
    }

    fn root(&self) -> &AtomicU64 {
        &self.shared.root
    }

    fn block_max(&self) -> usize {
        usize::MAX >> 1
    }
}
