//! The heap file and this process's view of it: open, back, release, reserve, map.
//!
//! A heap is a file: `/dev/shm/podkv-<name>`, a file on a shared mount, or a DAX device. Regular
//! files are sparse; a range is *backed* (`fallocate`) before the heap first uses it, so running
//! out of file space or of `/dev/shm` is an error value at that moment, never a `SIGBUS` later
//! (constitution rule 8). A free slab's pages are released by punching a hole (rule 7).

use crate::error::HeapError;
use podkv_hw::sync::AtomicU64;
use std::cell::Cell;
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

thread_local! {
    /// `fallocate` calls this thread made: backing, and releasing.
    static CALLS: Cell<Calls> = const { Cell::new(Calls { backs: 0, releases: 0 }) };
}

/// System calls a thread made on heap files: the ones an allocation or free may make on its
/// own path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Calls {
    /// `fallocate` to back pages (a grow, a cold pop the backer had not reached).
    pub backs: u64,
    /// `fallocate` to punch pages out (a slab going cold, a huge block freed).
    pub releases: u64,
}

impl std::ops::Sub for Calls {
    type Output = Calls;

    /// The calls made since `earlier` (a reading of the same thread's).
    fn sub(self, earlier: Calls) -> Calls {
        Calls {
            backs: self.backs - earlier.backs,
            releases: self.releases - earlier.releases,
        }
    }
}

/// How many times this thread has backed and released pages of a heap file. Read it before
/// and after an operation to tell the operations that made a system call (a latency test's
/// outliers) from those that did not.
pub fn calls_on_this_thread() -> Calls {
    CALLS.with(Cell::get)
}

fn count_call(release: bool) {
    CALLS.with(|calls| {
        let mut c = calls.get();
        if release {
            c.releases += 1;
        } else {
            c.backs += 1;
        }
        calls.set(c);
    });
}

/// An open heap file.
#[derive(Debug)]
pub struct HeapFile {
    fd: libc::c_int,
    /// Where it lives.
    pub path: PathBuf,
    /// Whether it is a device (DAX): fixed size, no `fallocate`, no hole punching.
    pub is_device: bool,
}

impl Drop for HeapFile {
    fn drop(&mut self) {
        // SAFETY: `fd` was opened by `HeapFile::open` and is closed exactly once, here.
        unsafe { libc::close(self.fd) };
    }
}

fn cpath(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap_or_else(|_| CString::new("?").expect("no NUL"))
}

impl HeapFile {
    /// Opens `path` read-write, creating it (mode 0600) when `create` is set.
    pub fn open(path: &Path, create: bool) -> Result<HeapFile, HeapError> {
        let c = cpath(path);
        let flags = libc::O_RDWR | libc::O_CLOEXEC | if create { libc::O_CREAT } else { 0 };
        // SAFETY: `c` is a valid NUL-terminated path; the mode argument is read only with O_CREAT.
        let fd = unsafe { libc::open(c.as_ptr(), flags, 0o600 as libc::c_uint) };
        if fd < 0 {
            let err = io::Error::last_os_error();
            return Err(match err.raw_os_error() {
                Some(libc::EACCES) | Some(libc::EROFS) | Some(libc::EPERM) => HeapError::ReadOnly {
                    path: path.to_owned(),
                },
                _ => HeapError::Open {
                    path: path.to_owned(),
                    source: err,
                },
            });
        }
        let mut file = HeapFile {
            fd,
            path: path.to_owned(),
            is_device: false,
        };
        let st = file.stat()?;
        let kind = st.st_mode & libc::S_IFMT;
        if kind == libc::S_IFDIR {
            return Err(HeapError::Open {
                path: path.to_owned(),
                source: io::Error::other("is a directory"),
            });
        }
        // Root ignores permission bits; refuse a file nobody may write, for everyone alike.
        if st.st_mode & 0o222 == 0 {
            return Err(HeapError::ReadOnly {
                path: path.to_owned(),
            });
        }
        file.is_device = kind == libc::S_IFCHR || kind == libc::S_IFBLK;
        Ok(file)
    }

    fn stat(&self) -> Result<libc::stat, HeapError> {
        // SAFETY: `stat` is plain old data; fstat fills it in or fails.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `fd` is open and `st` is a valid out pointer.
        if unsafe { libc::fstat(self.fd, &mut st) } != 0 {
            return Err(self.io("fstat", io::Error::last_os_error()));
        }
        Ok(st)
    }

    /// The file's length in bytes (a device's size for DAX).
    #[allow(clippy::len_without_is_empty)] // a heap file is never empty once open
    pub fn len(&self) -> Result<u64, HeapError> {
        if self.is_device {
            // SAFETY: `fd` is open; SEEK_END on a device reports its size.
            let end = unsafe { libc::lseek(self.fd, 0, libc::SEEK_END) };
            return if end < 0 {
                Err(self.io("lseek", io::Error::last_os_error()))
            } else {
                Ok(end as u64)
            };
        }
        Ok(self.stat()?.st_size as u64)
    }

    /// Bytes of storage the file holds (`st_blocks`), which falls when slabs are released.
    pub fn allocated_bytes(&self) -> Result<u64, HeapError> {
        Ok(self.stat()?.st_blocks as u64 * 512)
    }

    /// Reads up to `buf.len()` bytes at `offset`; returns how many.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, HeapError> {
        // SAFETY: `buf` is valid for `buf.len()` bytes of writes.
        let n = unsafe {
            libc::pread(
                self.fd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                offset as libc::off_t,
            )
        };
        if n < 0 {
            return Err(self.io("pread", io::Error::last_os_error()));
        }
        Ok(n as usize)
    }

    /// Backs `[offset, offset + len)` with storage, growing the file if needed (never shrinking
    /// it, so concurrent growers cannot undo each other). Out of space is `OutOfMemory`.
    pub fn back(&self, offset: u64, len: u64) -> Result<(), HeapError> {
        if self.is_device || len == 0 {
            return Ok(());
        }
        count_call(false);
        // SAFETY: `fd` is open; mode 0 allocates and extends, it never discards data.
        let rc = unsafe { libc::fallocate(self.fd, 0, offset as libc::off_t, len as libc::off_t) };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::EFBIG) | Some(libc::EDQUOT) | Some(libc::ENOMEM) => {
                Err(HeapError::OutOfMemory {
                    what: format!("cannot back {len} bytes of {}: {err}", self.path.display()),
                })
            }
            Some(libc::EOPNOTSUPP) => self.back_by_writing(offset, len),
            _ => Err(self.io("fallocate", err)),
        }
    }

    /// Fallback for file systems without `fallocate`: extend the length only.
    fn back_by_writing(&self, offset: u64, len: u64) -> Result<(), HeapError> {
        let end = offset + len;
        if self.len()? < end {
            // SAFETY: `fd` is open; growing a file with ftruncate only adds zeros.
            if unsafe { libc::ftruncate(self.fd, end as libc::off_t) } != 0 {
                return Err(self.io("ftruncate", io::Error::last_os_error()));
            }
        }
        Ok(())
    }

    /// Releases the storage of `[offset, offset + len)`: the pages read back as zeros and stop
    /// counting toward any process's memory (punch hole; `MADV_REMOVE` does the same for tmpfs).
    pub fn release(&self, offset: u64, len: u64) {
        if self.is_device {
            return;
        }
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        count_call(true);
        // Under the coherence model this process's cached copy goes too (its dirty lines
        // evicted first), or the memory would stay in its cache.
        podkv_hw::model::forget_file(self.fd, offset, len);
        // SAFETY: `fd` is open; punching a hole only discards the range's contents, which the
        // caller owns and no longer needs. Failure (a file system without holes) only keeps pages.
        unsafe { libc::fallocate(self.fd, mode, offset as libc::off_t, len as libc::off_t) };
    }

    /// The raw descriptor, for mapping.
    pub fn fd(&self) -> libc::c_int {
        self.fd
    }

    fn io(&self, what: &'static str, source: io::Error) -> HeapError {
        HeapError::Io {
            path: self.path.clone(),
            what,
            source,
        }
    }
}

/// This process's reservation: `len` bytes of address space, the heap mapped at its start.
#[derive(Debug)]
pub struct Mapping {
    base: *mut u8,
    len: usize,
    /// Under the coherence model (a test mode): this process's cache of the SWcc range.
    model: Option<podkv_hw::model::Cache>,
}

// SAFETY: the mapping is shared memory that every thread may address; the heap's own protocols
// decide who may write which bytes.
unsafe impl Send for Mapping {}
// SAFETY: as above; `Mapping` itself is never mutated after creation.
unsafe impl Sync for Mapping {}

const ALIGN_RESERVATION: usize = 1 << 30;

impl Mapping {
    /// Reserves `len` bytes of address space aligned to 1 GiB (`PROT_NONE`), then maps `file`'s
    /// first `len` bytes over it with `MAP_FIXED`, so offset `o` is at `base + o` here and the
    /// same bytes are at offset `o` in every other process (spatial pointer consistency).
    pub fn new(file: &HeapFile, len: u64) -> Result<Mapping, HeapError> {
        Mapping::reserve(file, len, len)
    }

    /// Reserves `total` bytes of address space as [`Mapping::new`] does, but maps only the
    /// file's first `mapped` bytes; the rest stays `PROT_NONE` for the huge heap to map into.
    pub fn reserve(file: &HeapFile, mapped: u64, total: u64) -> Result<Mapping, HeapError> {
        let mapped = usize::try_from(mapped).map_err(|_| HeapError::Map {
            source: io::Error::other("heap too large"),
        })?;
        let len = usize::try_from(total).map_err(|_| HeapError::Map {
            source: io::Error::other("heap too large"),
        })?;
        let want = len + ALIGN_RESERVATION;
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
        // SAFETY: a fresh anonymous PROT_NONE mapping at an address the kernel picks.
        let raw = unsafe { libc::mmap(std::ptr::null_mut(), want, libc::PROT_NONE, flags, -1, 0) };
        if raw == libc::MAP_FAILED {
            return Err(HeapError::Map {
                source: io::Error::last_os_error(),
            });
        }
        let start = raw as usize;
        let base = start.next_multiple_of(ALIGN_RESERVATION);
        // SAFETY: both trims lie inside the reservation just made and nothing else uses them.
        unsafe {
            if base > start {
                libc::munmap(raw, base - start);
            }
            let tail = start + want - (base + len);
            if tail > 0 {
                libc::munmap((base + len) as *mut libc::c_void, tail);
            }
        }
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: `[base, base + mapped)` is inside our own reservation; MAP_FIXED replaces only it.
        let got = unsafe {
            libc::mmap(
                base as *mut libc::c_void,
                mapped,
                prot,
                libc::MAP_SHARED | libc::MAP_FIXED,
                file.fd(),
                0,
            )
        };
        if got == libc::MAP_FAILED {
            let source = io::Error::last_os_error();
            // SAFETY: releasing the reservation made above.
            unsafe { libc::munmap(base as *mut libc::c_void, len) };
            return Err(HeapError::Map { source });
        }
        Ok(Mapping {
            base: base as *mut u8,
            len,
            model: None,
        })
    }

    /// Under the coherence model ([`podkv_hw::model`], a test mode, when active): offsets
    /// `[swcc, mapped)` become this process's own cache of the file, and huge blocks mapped
    /// later in `[mapped, len)` too; below `swcc` the mapping stays shared (coherent). A
    /// no-op when the model is not active.
    pub fn model(&mut self, file: &HeapFile, swcc: u64, mapped: u64) -> Result<(), HeapError> {
        if !podkv_hw::model::active() || file.is_device || self.model.is_some() {
            return Ok(());
        }
        // SAFETY: the reservation is ours and stays mapped while `self` lives, which drops
        // the cache with it; nothing else maps into `[swcc, mapped)`.
        let cache = unsafe {
            podkv_hw::model::Cache::map(
                self.base,
                file.fd(),
                swcc as usize,
                mapped as usize,
                self.len,
            )
        };
        self.model = Some(cache.map_err(|source| HeapError::Map { source })?);
        Ok(())
    }

    /// The address of offset zero in this process.
    #[inline]
    pub fn base(&self) -> *mut u8 {
        self.base
    }

    /// The reservation's length.
    #[allow(clippy::len_without_is_empty)] // a reservation is never empty
    pub fn len(&self) -> usize {
        self.len
    }

    /// The header word at byte `offset` (below `SIZE_HEADER`, 8-aligned), for as long as the
    /// mapping stands. Opening backs the header before anything reads it.
    #[inline]
    pub(crate) fn header_word(&self, offset: u64) -> &AtomicU64 {
        debug_assert!(offset % 8 == 0 && offset < crate::layout::SIZE_HEADER);
        // SAFETY: the header page lies at the start of every mapping and is backed by opening
        // step 2 before any caller runs; the word is 8-aligned, lives as long as `self`, and
        // is only accessed atomically (AtomicU64 is valid for any bits).
        unsafe { &*(self.base.add(offset as usize) as *const AtomicU64) }
    }
}

/// What [`Words::collapse`] got from the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Collapse {
    /// The range is mapped with 2 MiB pages.
    Done,
    /// Not this time (no huge page free, a page busy): the range stays in 4 KiB pages.
    Refused,
    /// Never here (an older kernel, a device, the coherence model): stop asking.
    Unsupported,
}

/// The mapped heap's bytes by offset, as the components that read its words hold them: a
/// copy of the mapping's base (plain number, so its holders stay `Send` and `Sync`). Valid
/// while the heap's [`Mapping`] stands, which outlives every component holding one.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Words {
    base: usize,
}

impl Words {
    /// The words of `mapping`.
    pub(crate) fn of(mapping: &Mapping) -> Words {
        Words {
            base: mapping.base() as usize,
        }
    }

    /// This process's address of `offset`.
    #[inline]
    pub(crate) fn at(&self, offset: u64) -> *mut u8 {
        (self.base as *mut u8).wrapping_add(offset as usize)
    }

    /// Maps `[offset, offset + len)` of this process's view writable now, so that the first
    /// stores there take no page fault (`MADV_POPULATE_WRITE`). The range must be backed, and
    /// `offset` page-aligned. Only a hint: an older kernel, a device or the coherence model
    /// (whose copy of the heap fills itself on touch) leave the range to fault as before.
    /// Returns whether the kernel mapped it.
    pub(crate) fn populate(&self, offset: u64, len: u64) -> bool {
        if len == 0 || podkv_hw::model::active() {
            return false;
        }
        // SAFETY: the range lies in this process's mapping of the heap (the caller's contract)
        // and is backed, so populating it for writing only installs page-table entries for
        // pages the file already holds; it changes no byte.
        unsafe { libc::madvise(self.at(offset).cast(), len as usize, libc::MADV_POPULATE_WRITE) == 0 }
    }

    /// Asks the kernel to map `[offset, offset + len)` of this process's view with 2 MiB pages
    /// (`MADV_COLLAPSE`, Linux 6.1): the file's pages there become huge ones (shared by every
    /// process that maps them), and this mapping names each with one page-table entry, so a
    /// random access into a large heap misses the TLB far less often. The range must be
    /// backed and 2 MiB-aligned. Only a hint, like [`populate`](Self::populate): the bytes
    /// stay as they are, and a range the kernel cannot collapse stays in 4 KiB pages.
    pub(crate) fn collapse(&self, offset: u64, len: u64) -> Collapse {
        if len == 0 || podkv_hw::model::active() {
            return Collapse::Unsupported;
        }
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        {
            // SAFETY: the range lies in this process's mapping of the heap (the caller's
            // contract) and is backed; collapsing copies its pages into huge ones under the
            // kernel's page locks and changes no byte.
            let rc = unsafe {
                libc::madvise(self.at(offset).cast(), len as usize, libc::MADV_COLLAPSE)
            };
            match rc {
                0 => Collapse::Done,
                // Older kernels, and mappings the kernel never collapses (a device).
                _ if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) => {
                    Collapse::Unsupported
                }
                _ => Collapse::Refused,
            }
        }
        #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
        Collapse::Unsupported
    }

    /// The 8-byte word at `offset`. Callers pass offsets of 8-byte-aligned words in backed
    /// metadata (header, HWcc globals, remote words below `len`, slot words).
    #[inline]
    pub(crate) fn word(&self, offset: u64) -> &AtomicU64 {
        // SAFETY: the caller's contract above: the word is mapped (for as long as the mapping,
        // which outlives `self`'s holder), backed and aligned; AtomicU64 is valid for any bits.
        unsafe { &*(self.at(offset) as *const AtomicU64) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the range is this mapping's and no reference into it outlives the heap.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backing_and_releasing_count_on_the_calling_thread_only() {
        let dir = std::env::temp_dir().join(format!("podkv-file-calls-{}", std::process::id()));
        let file = HeapFile::open(&dir, true).unwrap();
        let before = calls_on_this_thread();
        file.back(0, 1 << 16).unwrap();
        file.back(1 << 16, 1 << 16).unwrap();
        file.release(0, 1 << 16);
        let after = Calls {
            backs: before.backs + 2,
            releases: before.releases + 1,
        };
        assert_eq!(calls_on_this_thread(), after);
        let other = std::thread::scope(|s| {
            s.spawn(|| {
                file.back(1 << 17, 1 << 16).unwrap();
                calls_on_this_thread()
            })
            .join()
            .unwrap()
        });
        let one_back = Calls {
            backs: 1,
            releases: 0,
        };
        assert_eq!(other, one_back, "a fresh thread counts its own call");
        assert_eq!(calls_on_this_thread(), after, "not this thread's call");
        drop(file);
        std::fs::remove_file(&dir).unwrap();
    }
}
