//! What the epoll and the io_uring workers share: the buffers a worker lends its
//! connections, how a connection's failure is told, the timed tasks' periods, and the choice
//! between the two ([`Io`]).

use std::cell::RefCell;
use std::io;

use bytes::BytesMut;

/// How a server's workers wait for their connections (`podkv serve --io`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Io {
    /// One io_uring ring per worker ([`super::uring`]).
    Uring,
    /// One tokio runtime (epoll) per worker ([`super::worker`]).
    Epoll,
}

impl Io {
    /// The name `stats settings` gives it.
    pub fn name(self) -> &'static str {
        match self {
            Io::Uring => "uring",
            Io::Epoll => "epoll",
        }
    }
}

/// Seconds between two compaction passes of a worker while the heap holds more slab memory
/// than `--memory`: a size shift can outgrow the limit within one `--drain-interval`.
pub(super) const SECONDS_OVER: u64 = 1;

/// Buckets a compaction pass walks between two turns of the worker's other tasks (a walk of
/// a whole index of millions of buckets would hold the worker's connections for seconds).
pub(super) const COUNT_DRAIN_SLICE: u64 = 4096;

/// Bytes a read buffer has free before each read (memcached's read buffer is 16 KiB).
pub(super) const SIZE_READ_CHUNK: usize = 16 * 1024;
/// How often a worker publishes its batched item counts.
pub(super) const SECONDS_PUBLISH: u64 = 1;

/// Gives the free pages of the process's own malloc heaps back to the OS, as compaction gives
/// back the store's: connection buffers and request parsing leave freed memory in glibc's
/// per-thread arenas, which glibc returns only from the top of each heap by itself.
pub(super) fn trim_malloc() {
    #[cfg(target_env = "gnu")]
    // SAFETY: `malloc_trim` only releases free memory of glibc's heaps; any thread may call it.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Resets and broken pipes are how clients leave; anything else is worth a line.
pub(super) fn log_connection_error(e: &io::Error) {
    use io::ErrorKind::*;
    if !matches!(e.kind(), ConnectionReset | BrokenPipe | UnexpectedEof) {
        tracing::warn!(error = %e, "connection failed");
    }
}

/// Buffers a worker lends its connections for one read and its replies: a connection holds
/// a read buffer only while part of a request waits in it, and a reply buffer only while its
/// replies are written. The free ones are reused last-in first-out, so the few in use stay in
/// the cache however many connections are open (as memcached's per-thread read buffers), and
/// an idle connection holds no buffer.
#[derive(Default)]
pub struct Buffers {
    /// Buffers not lent out. Only this worker's thread uses it (the worker is `!Send`).
    free: RefCell<Vec<BytesMut>>,
}

impl Buffers {
    /// A cleared buffer with room for one read.
    pub(super) fn take(&self) -> BytesMut {
        self.free
            .borrow_mut()
            .pop()
            .unwrap_or_else(|| BytesMut::with_capacity(SIZE_READ_CHUNK))
    }

    /// Takes `buffer` back, unless it grew for a large value (then it is freed).
    pub(super) fn give(&self, mut buffer: BytesMut) {
        buffer.clear();
        let mut free = self.free.borrow_mut();
        if buffer.capacity() <= SIZE_BUFFER_KEPT && free.len() < COUNT_BUFFERS_KEPT {
            free.push(buffer);
        }
    }
}

/// The largest buffer a worker keeps for reuse.
const SIZE_BUFFER_KEPT: usize = 4 * SIZE_READ_CHUNK;
/// How many free buffers a worker keeps at most.
const COUNT_BUFFERS_KEPT: usize = 64;

/// Keeps a read buffer holding part of a request for the next read; gives an empty one back.
pub(super) fn keep_or_give(buffers: &Buffers, pending: &mut Option<BytesMut>, input: BytesMut) {
    if input.is_empty() {
        buffers.give(input);
    } else {
        *pending = Some(input);
    }
}
