//! A worker's provided-buffer ring ([`BufRing`]).

use std::alloc::Layout;
use std::io;
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::{types, IoUring};

use crate::serve::io::SIZE_READ_CHUNK;

/// Buffers in a worker's provided-buffer ring (a power of two). A `recv` completing while
/// all are taken fails with `ENOBUFS` and is posted again once the batch gave them back.
pub(super) const COUNT_BUFFERS: u16 = 128;
/// The buffer group id of a worker's ring (each ring has its own groups).
pub(super) const BUFFER_GROUP: u16 = 0;

/// The worker's provided-buffer ring: [`COUNT_BUFFERS`] buffers of [`SIZE_READ_CHUNK`] bytes
/// that the kernel fills for `recv`s posted without a buffer, each given back as soon as its
/// bytes are copied out.
pub(super) struct BufRing {
    /// The ring's entries (page-aligned, shared with the kernel).
    entries: *mut types::BufRingEntry,
    /// The buffers, one after another.
    memory: Box<[u8]>,
    /// The next tail to publish.
    tail: u16,
}

impl BufRing {
    fn layout() -> Layout {
        let bytes = usize::from(COUNT_BUFFERS) * std::mem::size_of::<types::BufRingEntry>();
        Layout::from_size_align(bytes.max(4096), 4096).expect("a page-aligned layout")
    }

    /// Registers a ring with every buffer in it.
    pub(super) fn new(ring: &IoUring) -> io::Result<BufRing> {
        // SAFETY: a non-zero size; the memory is freed in `drop` with the same layout.
        let entries: *mut types::BufRingEntry =
            unsafe { std::alloc::alloc_zeroed(Self::layout()) }.cast();
        if entries.is_null() {
            return Err(io::ErrorKind::OutOfMemory.into());
        }
        let mut bufs = BufRing {
            entries,
            memory: vec![0; usize::from(COUNT_BUFFERS) * SIZE_READ_CHUNK].into_boxed_slice(),
            tail: 0,
        };
        // SAFETY: the entries are page-aligned, hold COUNT_BUFFERS entries, and live until
        // `drop`, which the worker runs only after unregistering them (or if this fails).
        unsafe {
            ring.submitter().register_buf_ring_with_flags(
                entries as u64,
                COUNT_BUFFERS,
                BUFFER_GROUP,
                0,
            )?;
        }
        for id in 0..COUNT_BUFFERS {
            bufs.push(id);
        }
        bufs.publish();
        Ok(bufs)
    }

    /// The first `len` bytes of buffer `id`.
    pub(super) fn bytes(&self, id: u16, len: usize) -> &[u8] {
        let start = usize::from(id) * SIZE_READ_CHUNK;
        &self.memory[start..start + len.min(SIZE_READ_CHUNK)]
    }

    /// Puts buffer `id` back at the tail (seen by the kernel at the next `publish`).
    pub(super) fn push(&mut self, id: u16) {
        let mask = COUNT_BUFFERS - 1;
        // SAFETY: `tail & mask` is below COUNT_BUFFERS; the kernel reads only entries
        // between its head and the published tail, and this one is past the tail.
        let entry = unsafe { &mut *self.entries.add(usize::from(self.tail & mask)) };
        let at = usize::from(id) * SIZE_READ_CHUNK;
        entry.set_addr(self.memory[at..].as_ptr() as u64);
        entry.set_len(SIZE_READ_CHUNK as u32);
        entry.set_bid(id);
        self.tail = self.tail.wrapping_add(1);
    }

    /// Gives the buffers up without freeing them (the kernel may still write into them).
    pub(super) fn leak_memory(&mut self) {
        std::mem::forget(std::mem::take(&mut self.memory));
    }

    /// Hands the buffers pushed since the last call to the kernel.
    pub(super) fn publish(&self) {
        // SAFETY: the tail is a 16-bit word inside the ring's first entry, which the kernel
        // reads; the release store orders the entries' contents before it.
        unsafe {
            let tail = types::BufRingEntry::tail(self.entries) as *const AtomicU16;
            (*tail).store(self.tail, Ordering::Release);
        }
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.entries.cast(), Self::layout()) };
    }
}
