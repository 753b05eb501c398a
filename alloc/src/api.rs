//! `allocator_api2::Allocator` for a thread handle, so `Vec<T, _>`, `Box<T, _>` and hashbrown
//! collections can live in the pod heap.
//!
//! The collections store *addresses* of this process, so they are for data one process keeps
//! in the heap (a scratch table, a builder); anything another process reads must hold
//! [`crate::Offset`]s instead (constitution rule 1).

use crate::thread::ThreadHandle;
use allocator_api2::alloc::{AllocError, Allocator};
use std::alloc::Layout;
use std::ptr::NonNull;

// SAFETY: blocks come from `allocate`, stay valid (mapped, unaliased) until `deallocate`, and
// `deallocate` takes back exactly those blocks; the handle is not `Send`, so it is used by the
// one thread that owns its slot.
unsafe impl Allocator for ThreadHandle {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        let offset = ThreadHandle::allocate(self, layout).map_err(|_| AllocError)?;
        let ptr = NonNull::new(self.resolve(offset)).ok_or(AllocError)?;
        Ok(NonNull::slice_from_raw_parts(ptr, layout.size()))
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, _layout: Layout) {
        let offset = self
            .offset_of(ptr.as_ptr())
            .expect("pointer from this heap");
        self.free(offset);
    }
}
