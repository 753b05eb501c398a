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
///
/// Both allocations are raw: the kernel writes the buffers and reads the entries behind the
/// program's back, so no Rust reference covers them except a buffer's bytes between its
/// completion and its return ([`bytes`](Self::bytes), [`push`](Self::push)).
pub(super) struct BufRing {
    /// The ring's entries (page-aligned, shared with the kernel).
    entries: *mut types::BufRingEntry,
    /// The buffers, one after another (written by the kernel).
    memory: *mut u8,
    /// The next tail to publish.
    tail: u16,
    /// Whether `memory` is given up rather than freed (the kernel may still write it).
    leaked: bool,
}

impl BufRing {
    /// The entries' allocation.
    fn layout_entries() -> Layout {
        let bytes = usize::from(COUNT_BUFFERS) * std::mem::size_of::<types::BufRingEntry>();
        Layout::from_size_align(bytes.max(4096), 4096).expect("a page-aligned layout")
    }

    /// The buffers' allocation.
    fn layout_memory() -> Layout {
        let bytes = usize::from(COUNT_BUFFERS) * SIZE_READ_CHUNK;
        Layout::from_size_align(bytes, 4096).expect("a page-aligned layout")
    }

    /// Registers a ring with every buffer in it.
    pub(super) fn new(ring: &IoUring) -> io::Result<BufRing> {
        // SAFETY: non-zero sizes; each is freed in `drop` with its own layout. The buffers
        // are left uninitialized (and so untouched, not resident, until used): only bytes
        // the kernel wrote are ever read.
        let (entries, memory) = unsafe {
            (
                std::alloc::alloc_zeroed(Self::layout_entries()),
                std::alloc::alloc(Self::layout_memory()),
            )
        };
        let mut bufs = BufRing {
            entries: entries.cast(),
            memory,
            tail: 0,
            leaked: false,
        };
        if entries.is_null() || memory.is_null() {
            return Err(io::ErrorKind::OutOfMemory.into());
        }
        // SAFETY: the entries are page-aligned, hold COUNT_BUFFERS entries, and live until
        // `drop`, which the worker runs only after unregistering them (or if this fails).
        unsafe {
            ring.submitter().register_buf_ring_with_flags(
                bufs.entries as u64,
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

    /// The first `len` bytes of buffer `id`, which a completion just handed over (the kernel
    /// writes it no more until [`push`](Self::push) gives it back).
    pub(super) fn bytes(&self, id: u16, len: usize) -> &[u8] {
        assert!(
            id < COUNT_BUFFERS && len <= SIZE_READ_CHUNK,
            "buffer {id}, {len} bytes"
        );
        // SAFETY: inside the buffers' allocation (checked above); the kernel is done with
        // this buffer, so nothing writes these bytes while the slice lives.
        unsafe {
            std::slice::from_raw_parts(self.memory.add(usize::from(id) * SIZE_READ_CHUNK), len)
        }
    }

    /// Puts buffer `id` back at the tail (seen by the kernel at the next `publish`).
    pub(super) fn push(&mut self, id: u16) {
        let mask = COUNT_BUFFERS - 1;
        // SAFETY: `tail & mask` is below COUNT_BUFFERS; the kernel reads only entries
        // between its head and the published tail, and this one is past the tail.
        let entry = unsafe { &mut *self.entries.add(usize::from(self.tail & mask)) };
        let at = usize::from(id) * SIZE_READ_CHUNK;
        entry.set_addr(self.memory.wrapping_add(at) as u64);
        entry.set_len(SIZE_READ_CHUNK as u32);
        entry.set_bid(id);
        self.tail = self.tail.wrapping_add(1);
    }

    /// Gives the buffers up without freeing them (the kernel may still write into them).
    pub(super) fn leak_memory(&mut self) {
        self.leaked = true;
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
        // SAFETY: allocated in `new` with these layouts (a null one was never allocated).
        unsafe {
            if !self.entries.is_null() {
                std::alloc::dealloc(self.entries.cast(), Self::layout_entries());
            }
            if !self.memory.is_null() && !self.leaked {
                std::alloc::dealloc(self.memory, Self::layout_memory());
            }
        }
    }
}
