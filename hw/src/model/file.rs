//! A modelled cache's file (see `cache`, # The cache file, and a process that dies): its
//! name and size, the marks of pages being filled, the pages that hold data, and the name
//! of the cache domain it is.

use crate::sync::mapped::{AtomicU64, AtomicUsize, Ordering};
use std::io;
use std::path::{Path, PathBuf};

/// Bytes of a page: what a first touch loads at once.
pub(super) const SIZE_PAGE: usize = 4096;

/// A name for a new cache that no other cache, of this process or another, now or later
/// (while start times do not wrap), has: bit 63 (host ids are 16 bits), then the pid, the
/// process's start time (low 24 bits) and a count of the caches this process made.
pub(super) fn new_domain() -> u64 {
    static MADE: AtomicU64 = AtomicU64::new(0);
    let pid = std::process::id();
    let start = crate::process::start_time(pid).unwrap_or(0) & 0xFF_FFFF;
    let made = MADE.fetch_add(1, Ordering::Relaxed) & 0xFFFF;
    1 << 63 | u64::from(pid & 0x7F_FFFF) << 40 | start << 16 | made
}

/// Makes this process's cache file beside the heap file `heap` (see the module docs), or an
/// anonymous memfd where that is not possible.
pub(super) fn create_file(heap: Option<&Path>) -> io::Result<(libc::c_int, Option<PathBuf>)> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let pid = std::process::id();
    let start = crate::process::start_time(pid).unwrap_or(0) & 0xFF_FFFF;
    if let Some(heap) = heap.filter(|h| h.is_absolute() && !h.starts_with("/dev/dax")) {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let mut name = heap.as_os_str().to_owned();
        name.push(format!(".model-{pid}-{start}-{n}"));
        let path = PathBuf::from(name);
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path);
        if let Ok(file) = opened {
            return Ok((std::os::fd::IntoRawFd::into_raw_fd(file), Some(path)));
        }
    }
    // SAFETY: a fresh memfd; the name is a NUL-terminated literal.
    let memfd = unsafe { libc::memfd_create(c"podkv-model".as_ptr(), libc::MFD_CLOEXEC) };
    if memfd < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((memfd, None))
}

/// Bytes of a cache file of `span` bytes of heap: the cache, the snapshots, then one byte
/// per page that is 1 while the page is being filled ([`HeapCache::fill`]).
pub(super) fn size_file(span: usize) -> usize {
    2 * span + span / SIZE_PAGE
}

/// Marks page `page` of the cache file as being filled (or not).
pub(super) fn set_filling(fd: libc::c_int, span: usize, page: usize, on: bool) {
    let byte = u8::from(on);
    // SAFETY: our own descriptor and a one-byte buffer; the offset lies inside the file.
    unsafe {
        libc::pwrite(
            fd,
            (&byte as *const u8).cast(),
            1,
            (2 * span + page) as libc::off_t,
        )
    };
}

/// Whether a dead process was killed while it filled page `page`: its cache and snapshot
/// then hold part of the page's load, the rest of a line still zero, which would read as
/// dirty lines it never stored; it stored nothing in the page (a page is writable only once
/// filled), so it has nothing there to settle.
pub(super) fn filling(fd: libc::c_int, span: usize, page: usize) -> bool {
    let mut byte = 0u8;
    // SAFETY: as `set_filling`.
    let read = unsafe {
        libc::pread(
            fd,
            (&mut byte as *mut u8).cast(),
            1,
            (2 * span + page) as libc::off_t,
        )
    };
    read == 1 && byte == 1
}

/// The pages of `[0, span)` of file `fd` that hold data (holes read as zeros: clean).
pub(super) fn data_pages(fd: libc::c_int, span: usize) -> Vec<usize> {
    let mut pages = Vec::new();
    let mut at = 0;
    while at < span {
        // SAFETY: our own descriptor; lseek only moves its offset.
        let data = unsafe { libc::lseek(fd, at as libc::off_t, libc::SEEK_DATA) };
        if data < 0 || data as usize >= span {
            break;
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
        let end = if hole < 0 {
            span
        } else {
            (hole as usize).min(span)
        };
        pages.extend(data as usize / SIZE_PAGE..end.div_ceil(SIZE_PAGE));
        at = end;
    }
    pages
}
