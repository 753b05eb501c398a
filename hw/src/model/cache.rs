//! One heap's modelled cache in this process: its mappings, its pages' states, and the line
//! operations (fill, write back, invalidate, evict, forget).
//!
//! # Addresses
//! For a heap offset `o` in `[start, total)`:
//! - `base + o` is what the program touches: the cache memfd's page `o - start`, `PROT_NONE`
//!   until filled (or not mapped at all: a huge block this process has not attached);
//! - `backstage + (o - start)` is the same cache page, always writable: the model's own access;
//! - `backstage + span + (o - start)` is the page's snapshot: the values it was loaded with
//!   (at fill, or at a line's last write-back or invalidation);
//! - `memory + o` is the pod's memory: a `MAP_SHARED` mapping of the heap file.
//!
//! # The cache file, and a process that dies
//! The cache and its snapshots live in a file beside the heap file, named after the process
//! (`HEAP.model-PID-START-N`, `START` the low 24 bits of its start time, as slot owner words
//! keep it); it is removed when the heap is closed. A process killed with dirty lines leaves
//! its file behind: its host's cache still holds those lines, so a process of that host that
//! judges it dead sees them (its adoption reads the dead owner's state), and they reach memory
//! when it does so ([`HeapCache::settle_dead`]), but in a page it was killed filling (marked in
//! the file): half loaded, its lines would show as dirty, partly zero. Where the directory
//! takes no file (a device), the cache is an anonymous memfd and nothing outlives the process.
//!
//! # Page states
//! `EMPTY` (a huge page not attached, or an eager page never touched), `UNTOUCHED` (mapped,
//! to be filled at first touch), `BUSY` (one thread of this process is filling it or moving
//! lines of it), `FILLED`. Line operations hold a page `BUSY` only while they copy, and never
//! touch `base` addresses meanwhile, so a thread holding one never faults.
//!
//! # Lines written while they are moved
//! Another thread of this process may store into a line while it is written back or reloaded:
//! a write-back writes one copy to memory and snapshot (a later store still shows dirty); a
//! reload CASes each word from the value written back (a later store is kept). A page dropped
//! from the cache is closed (`PROT_NONE`) before its lines are written back.

use super::file::{create_file, data_pages, filling, new_domain, set_filling, size_file};
use crate::sync::mapped::{fence, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

pub(super) use super::file::SIZE_PAGE;
const SIZE_LINE: usize = 64;
const WORDS: usize = SIZE_LINE / 8;
const EMPTY: u8 = 0;
const UNTOUCHED: u8 = 1;
const BUSY: u8 = 2;
const FILLED: u8 = 3;
/// The grain at which [`HeapCache::forget`] skips what was never cached.
const SIZE_CHUNK: usize = 2 << 20;
/// Recently filled pages, for random evictions to pick from.
const COUNT_RING: usize = 1024;

/// One heap's cache in this process (see the module docs for its addresses).
pub(super) struct HeapCache {
    /// The heap file, to find the region from a file offset.
    pub(super) fd: libc::c_int,
    pub(super) base: usize,
    pub(super) start: usize,
    /// Offsets `[start, eager_end)` are cached from the start; `[eager_end, total)` only
    /// where attached.
    pub(super) eager_end: usize,
    pub(super) total: usize,
    memory: usize,
    backstage: usize,
    /// Bytes of the cached range: `total - start`.
    span: usize,
    states: usize,
    /// One byte per `SIZE_CHUNK` of the span: set once a page of it was attached or filled.
    chunks: usize,
    memfd: libc::c_int,
    /// The cache file, removed at drop (`None`: an anonymous memfd).
    file: Option<PathBuf>,
    /// The heap file's path, where dead processes' cache files are found.
    heap: Option<PathBuf>,
    ring: [AtomicU32; COUNT_RING],
    ring_next: AtomicUsize,
    /// This cache's name among every cache of the machine ([`new_domain`]).
    pub(super) domain: u64,
}

fn mmap(addr: usize, len: usize, prot: i32, flags: i32, fd: i32, off: usize) -> io::Result<usize> {
    // SAFETY: callers pass either no address or one inside a range they own (MAP_FIXED).
    let got = unsafe { libc::mmap(addr as *mut _, len, prot, flags, fd, off as libc::off_t) };
    if got == libc::MAP_FAILED {
        Err(io::Error::last_os_error())
    } else {
        Ok(got as usize)
    }
}

const RW: i32 = libc::PROT_READ | libc::PROT_WRITE;

impl HeapCache {
    /// Maps the cache over `[base + start, base + eager_end)` (`PROT_NONE`), the backstage,
    /// the snapshots and the pod's memory.
    ///
    /// # Safety
    /// `[base + start, base + total)` is the caller's reservation, which it gives to the model
    /// (only [`HeapCache::attach`] maps into `[eager_end, total)` from now on).
    pub(super) unsafe fn map(
        base: usize,
        fd: libc::c_int,
        start: usize,
        eager_end: usize,
        total: usize,
    ) -> io::Result<HeapCache> {
        let span = total - start;
        let memory = mmap(0, total, RW, libc::MAP_SHARED | libc::MAP_NORESERVE, fd, 0)?;
        let heap = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok();
        let (memfd, file) = create_file(heap.as_deref())?;
        // SAFETY: `memfd` is ours; a sparse size.
        if unsafe { libc::ftruncate(memfd, size_file(span) as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let shared = libc::MAP_SHARED | libc::MAP_NORESERVE;
        let backstage = mmap(0, 2 * span, RW, shared, memfd, 0)?;
        let anon = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
        let states = mmap(0, span / SIZE_PAGE, RW, anon, -1, 0)?;
        let chunks = mmap(0, span.div_ceil(SIZE_CHUNK), RW, anon, -1, 0)?;
        mmap(
            base + start,
            eager_end - start,
            libc::PROT_NONE,
            shared | libc::MAP_FIXED,
            memfd,
            0,
        )?;
        Ok(HeapCache {
            fd,
            base,
            start,
            eager_end,
            total,
            memory,
            backstage,
            span,
            states,
            chunks,
            memfd,
            file,
            heap,
            ring: [const { AtomicU32::new(0) }; COUNT_RING],
            ring_next: AtomicUsize::new(0),
            domain: new_domain(),
        })
    }

    /// Whether the address lies in the cached range.
    pub(super) fn contains(&self, addr: usize) -> bool {
        (self.base + self.start..self.base + self.total).contains(&addr)
    }

    fn state(&self, page: usize) -> &AtomicU8 {
        // SAFETY: `states` holds one byte per page of the span; callers pass pages in it.
        unsafe { &*((self.states + page) as *const AtomicU8) }
    }

    fn page_of(&self, addr: usize) -> usize {
        (addr - self.base - self.start) / SIZE_PAGE
    }

    /// An `EMPTY` page in the eager range is untouched; in the huge range it is not mapped.
    fn fillable(&self, page: usize, state: u8) -> bool {
        state == UNTOUCHED || state == EMPTY && self.start + page * SIZE_PAGE < self.eager_end
    }

    fn words(&self, addr: usize) -> &[AtomicU64; WORDS] {
        // SAFETY: the mappings named in the module docs are RW for the region's lifetime, and
        // callers pass line-aligned addresses inside them.
        unsafe { &*(addr as *const [AtomicU64; WORDS]) }
    }

    fn local(&self, page: usize) -> usize {
        self.backstage + page * SIZE_PAGE
    }

    fn snapshot(&self, page: usize) -> usize {
        self.backstage + self.span + page * SIZE_PAGE
    }

    fn mem(&self, page: usize) -> usize {
        self.memory + self.start + page * SIZE_PAGE
    }

    /// The SIGSEGV handler's part: fills `addr`'s page from memory if it is an untouched
    /// cache page. Returns whether the faulting access should simply run again.
    pub(super) fn serve_fault(&self, addr: usize) -> bool {
        let page = self.page_of(addr);
        let state = self.state(page);
        loop {
            match state.load(Ordering::Acquire) {
                FILLED => return true,
                BUSY => std::hint::spin_loop(),
                s if self.fillable(page, s) => {
                    if state
                        .compare_exchange(s, BUSY, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        self.fill(page);
                        state.store(FILLED, Ordering::Release);
                        return true;
                    }
                }
                _ => return false,
            }
        }
    }

    fn fill(&self, page: usize) {
        set_filling(self.memfd, self.span, page, true);
        self.chunk(page).store(1, Ordering::Release);
        for line in 0..SIZE_PAGE / SIZE_LINE {
            let at = line * SIZE_LINE;
            let mem = self.words(self.mem(page) + at);
            let (local, snap) = (
                self.words(self.local(page) + at),
                self.words(self.snapshot(page) + at),
            );
            for w in 0..WORDS {
                let v = mem[w].load(Ordering::Relaxed);
                local[w].store(v, Ordering::Relaxed);
                snap[w].store(v, Ordering::Relaxed);
            }
        }
        fence(Ordering::SeqCst);
        set_filling(self.memfd, self.span, page, false);
        let addr = self.base + self.start + page * SIZE_PAGE;
        // SAFETY: the page is this region's cache page, mapped from the memfd.
        unsafe { libc::mprotect(addr as *mut _, SIZE_PAGE, RW) };
        let slot = self.ring_next.fetch_add(1, Ordering::Relaxed) % COUNT_RING;
        self.ring[slot].store(page as u32 + 1, Ordering::Relaxed);
    }

    /// Runs `f` on the page holding `addr` while it is `BUSY`, if it is filled.
    fn with_filled(&self, page: usize, f: impl FnOnce()) {
        let state = self.state(page);
        loop {
            match state.load(Ordering::Acquire) {
                FILLED => {
                    if state
                        .compare_exchange(FILLED, BUSY, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        f();
                        state.store(FILLED, Ordering::Release);
                        return;
                    }
                }
                BUSY => std::hint::spin_loop(),
                _ => return,
            }
        }
    }

    /// Writes line `line` of `page` back if dirty; returns the values it now has in memory
    /// (or, clean, the snapshot's).
    fn write_back_line(&self, page: usize, line: usize) -> [u64; WORDS] {
        let at = line * SIZE_LINE;
        let local = self.words(self.local(page) + at);
        let snap = self.words(self.snapshot(page) + at);
        let copy: [u64; WORDS] = std::array::from_fn(|w| local[w].load(Ordering::Relaxed));
        if (0..WORDS).all(|w| copy[w] == snap[w].load(Ordering::Relaxed)) {
            return copy;
        }
        let mem = self.words(self.mem(page) + at);
        if super::clobber::on() {
            super::clobber::report(self.start + page * SIZE_PAGE + at, &copy, snap, mem);
        }
        for w in 0..WORDS {
            mem[w].store(copy[w], Ordering::Relaxed);
            snap[w].store(copy[w], Ordering::Relaxed);
        }
        copy
    }

    fn invalidate_line(&self, page: usize, line: usize) {
        let was = self.write_back_line(page, line);
        fence(Ordering::SeqCst);
        let at = line * SIZE_LINE;
        let mem = self.words(self.mem(page) + at);
        let local = self.words(self.local(page) + at);
        let snap = self.words(self.snapshot(page) + at);
        for w in 0..WORDS {
            let v = mem[w].load(Ordering::Relaxed);
            snap[w].store(v, Ordering::Relaxed);
            let _ = local[w].compare_exchange(was[w], v, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// Applies `op` to every cached line overlapping `[addr, addr + len)`.
    fn lines(&self, addr: usize, len: usize, op: impl Fn(usize, usize)) {
        let end = (addr + len).min(self.base + self.total);
        let mut line = addr & !(SIZE_LINE - 1);
        while line < end {
            let page = self.page_of(line);
            let page_end = (self.base + self.start + (page + 1) * SIZE_PAGE).min(end);
            self.with_filled(page, || {
                let mut at = line;
                while at < page_end {
                    op(page, (at % SIZE_PAGE) / SIZE_LINE);
                    at += SIZE_LINE;
                }
            });
            line = self.base + self.start + (page + 1) * SIZE_PAGE;
        }
        fence(Ordering::SeqCst);
    }

    /// Marks every line overlapping `[addr, addr + len)` dirty, whatever it holds: the caller
    /// stored into each of them (see [`super::stored`]).
    pub(super) fn stored(&self, addr: usize, len: usize) {
        self.lines(addr, len, |page, line| {
            let at = line * SIZE_LINE;
            let local = self.words(self.local(page) + at);
            let snap = self.words(self.snapshot(page) + at);
            snap[0].store(!local[0].load(Ordering::Relaxed), Ordering::Relaxed);
        });
    }

    pub(super) fn write_back(&self, addr: usize, len: usize) {
        self.lines(addr, len, |page, line| {
            self.write_back_line(page, line);
        });
    }

    pub(super) fn invalidate(&self, addr: usize, len: usize) {
        self.lines(addr, len, |page, line| self.invalidate_line(page, line));
    }

    /// Evicts dirty lines of one recently filled page, each with probability one half.
    pub(super) fn evict_some(&self, random: u64) {
        let filled = self.ring_next.load(Ordering::Relaxed).min(COUNT_RING);
        if filled == 0 {
            return;
        }
        let page = self.ring[(random as usize >> 8) % filled].load(Ordering::Relaxed);
        if page == 0 {
            return;
        }
        let page = page as usize - 1;
        self.with_filled(page, || {
            for line in 0..SIZE_PAGE / SIZE_LINE {
                if (random >> (line % 64)) & 1 == 1 {
                    self.write_back_line(page, line);
                }
            }
        });
        fence(Ordering::SeqCst);
    }

    /// Evicts whole pages of `[addr, addr + len)` (dirty lines written back) and drops them
    /// from the cache, so they use no memory and reload at the next touch; `mapped` says
    /// whether the pages stay mapped (`UNTOUCHED`) or are being unmapped (`EMPTY`).
    pub(super) fn forget(&self, addr: usize, len: usize, mapped: bool) {
        let first = (addr + SIZE_PAGE - 1) & !(SIZE_PAGE - 1);
        let end = (addr + len) & !(SIZE_PAGE - 1);
        if first >= end {
            return self.write_back(addr, len);
        }
        self.write_back(addr, first - addr);
        self.write_back(end, addr + len - end);
        // Chunk by chunk, skipping chunks never cached (a heap's close forgets its whole
        // huge range, a terabyte of address space).
        let mut piece = first;
        while piece < end {
            let piece_end = ((piece + SIZE_CHUNK) & !(SIZE_CHUNK - 1)).min(end);
            if self.chunk(self.page_of(piece)).load(Ordering::Acquire) != 0 {
                self.forget_pages(piece, piece_end, mapped);
            }
            piece = piece_end;
        }
    }

    /// [`HeapCache::forget`] for whole pages of one chunk. Every page is held BUSY until the
    /// punch is done, so no thread refills one before its memory is gone.
    fn forget_pages(&self, first: usize, end: usize, mapped: bool) {
        let pages = self.page_of(first)..self.page_of(end - 1) + 1;
        let mut next = [EMPTY; SIZE_CHUNK / SIZE_PAGE];
        for (i, page) in pages.clone().enumerate() {
            let was = self.hold(page);
            if was == FILLED {
                let at = self.base + self.start + page * SIZE_PAGE;
                // SAFETY: the cache page is ours. Closed first, so a thread storing into it (a
                // huge block where a freed one is unmapped lazily now) waits, as with munmap.
                unsafe { libc::mprotect(at as *mut _, SIZE_PAGE, libc::PROT_NONE) };
                for line in 0..SIZE_PAGE / SIZE_LINE {
                    self.write_back_line(page, line);
                }
            }
            if mapped && was != EMPTY {
                next[i] = UNTOUCHED;
            }
        }
        self.punch(first - self.base - self.start, end - first);
        if !mapped {
            // The reservation goes back while the pages are held, so an attach by another
            // thread maps after it; a remap by the caller later could land over that attach,
            // leaving pages the model counts as attached under an anonymous page.
            let flags =
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED;
            let _ = mmap(first, end - first, libc::PROT_NONE, flags, -1, 0);
        }
        fence(Ordering::SeqCst);
        for (i, page) in pages.enumerate() {
            self.state(page).store(next[i], Ordering::Release);
        }
    }

    /// The flag of the chunk holding `page`: set once any page of it was attached or filled.
    fn chunk(&self, page: usize) -> &AtomicU8 {
        // SAFETY: `chunks` holds one byte per chunk of the span; `page` is in the span.
        unsafe { &*((self.chunks + page * SIZE_PAGE / SIZE_CHUNK) as *const AtomicU8) }
    }

    /// Takes page `page` BUSY from whatever state it is in; returns that state.
    fn hold(&self, page: usize) -> u8 {
        let state = self.state(page);
        loop {
            let s = state.load(Ordering::Acquire);
            if s != BUSY
                && state
                    .compare_exchange(s, BUSY, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                return s;
            }
            std::hint::spin_loop();
        }
    }

    /// Frees the cache's (and the snapshots') memory of `[off, off + len)` of the span, whose
    /// pages the caller holds BUSY.
    fn punch(&self, off: usize, len: usize) {
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        for at in [off, self.span + off] {
            // SAFETY: the model's own memfd.
            unsafe { libc::fallocate(self.memfd, mode, at as libc::off_t, len as libc::off_t) };
        }
    }

    /// Maps the cache (`PROT_NONE`, `UNTOUCHED`) over each page of a huge block at `[addr,
    /// addr + len)` not yet attached (an earlier block's pages may still be: freed blocks are
    /// unmapped lazily). Each is taken `BUSY` first, so two faults map it once.
    pub(super) fn attach(&self, addr: usize, len: usize) -> bool {
        let first = self.page_of(addr);
        let end = first + len.div_ceil(SIZE_PAGE);
        let take = |page: usize| {
            self.state(page)
                .compare_exchange(EMPTY, BUSY, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        };
        let mut page = first;
        while page < end {
            if !take(page) {
                page += 1;
                continue;
            }
            let run = page;
            page += 1;
            while page < end && take(page) {
                page += 1;
            }
            if !self.attach_pages(run, page) {
                return false;
            }
        }
        true
    }

    /// Maps the cache over pages `[first, end)`, which the caller holds `BUSY` (taken from
    /// `EMPTY`), and leaves them `UNTOUCHED`; on failure, `EMPTY` again.
    fn attach_pages(&self, first: usize, end: usize) -> bool {
        for page in (first..end)
            .step_by(SIZE_CHUNK / SIZE_PAGE)
            .chain([end - 1])
        {
            self.chunk(page).store(1, Ordering::Release);
        }
        let flags = libc::MAP_SHARED | libc::MAP_NORESERVE | libc::MAP_FIXED;
        let addr = self.base + self.start + first * SIZE_PAGE;
        let len = (end - first) * SIZE_PAGE;
        let mapped = mmap(
            addr,
            len,
            libc::PROT_NONE,
            flags,
            self.memfd,
            first * SIZE_PAGE,
        )
        .is_ok();
        for page in first..end {
            self.state(page)
                .store(if mapped { UNTOUCHED } else { EMPTY }, Ordering::Release);
        }
        mapped
    }

    /// Undoes [`HeapCache::attach`]: dirty lines are written back (evicted), the pages dropped
    /// and the reservation mapped back over them (as a huge block's unmap does without the
    /// model).
    pub(super) fn detach(&self, addr: usize, len: usize) {
        self.forget(addr, len, false);
    }
}

impl HeapCache {
    /// Writes back the dirty lines that dead process `pid` (start time `start`, low 24 bits)
    /// left in its cache of this heap, and removes its cache file: what its host does for a
    /// process of that host that judges it dead. Returns the lines written back. Lines are
    /// marked clean as they go, so a second settler (holding the file's lock after the first)
    /// writes nothing again.
    pub(super) fn settle_dead(&self, pid: u32, start: u32) -> usize {
        let Some(heap) = &self.heap else {
            return 0;
        };
        let (Some(dir), Some(name)) = (heap.parent(), heap.file_name()) else {
            return 0;
        };
        let mut prefix = name.as_bytes().to_vec();
        prefix.extend_from_slice(format!(".model-{pid}-{start}-").as_bytes());
        let Ok(entries) = std::fs::read_dir(dir) else {
            return 0;
        };
        let mut lines = 0;
        for entry in entries.flatten() {
            if entry.file_name().as_bytes().starts_with(&prefix) {
                lines += self.settle_file(&entry.path());
            }
        }
        lines
    }

    fn settle_file(&self, path: &Path) -> usize {
        let Ok(file) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
        else {
            return 0;
        };
        let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
        // SAFETY: our own descriptor; a blocking lock (the model is a test mode: a second
        // settler waits for the first, then finds every line clean).
        unsafe { libc::flock(fd, libc::LOCK_EX) };
        let mut lines = 0;
        if file
            .metadata()
            .is_ok_and(|m| m.len() == size_file(self.span) as u64)
        {
            if let Ok(dead) = mmap(0, 2 * self.span, RW, libc::MAP_SHARED, fd, 0) {
                for page in data_pages(fd, self.span) {
                    if !filling(fd, self.span, page) {
                        lines += self.settle_page(dead, page);
                    }
                }
                // SAFETY: the mapping made just above.
                unsafe { libc::munmap(dead as *mut _, 2 * self.span) };
            }
        }
        let _ = std::fs::remove_file(path);
        lines
    }

    /// Writes back the dirty lines of page `page` of a dead process's cache mapped at `dead`.
    fn settle_page(&self, dead: usize, page: usize) -> usize {
        let mut lines = 0;
        for line in 0..SIZE_PAGE / SIZE_LINE {
            let at = page * SIZE_PAGE + line * SIZE_LINE;
            let (local, snap) = (self.words(dead + at), self.words(dead + self.span + at));
            let copy: [u64; WORDS] = std::array::from_fn(|w| local[w].load(Ordering::Relaxed));
            if (0..WORDS).all(|w| copy[w] == snap[w].load(Ordering::Relaxed)) {
                continue;
            }
            let mem = self.words(self.mem(page) + line * SIZE_LINE);
            for w in 0..WORDS {
                mem[w].store(copy[w], Ordering::Relaxed);
                snap[w].store(copy[w], Ordering::Relaxed);
            }
            lines += 1;
        }
        fence(Ordering::SeqCst);
        lines
    }
}

impl Drop for HeapCache {
    fn drop(&mut self) {
        // SAFETY: the model's own mappings and memfd, unused once unregistered.
        unsafe {
            libc::munmap(self.memory as *mut _, self.total);
            libc::munmap(self.backstage as *mut _, 2 * self.span);
            libc::munmap(self.states as *mut _, self.span / SIZE_PAGE);
            libc::munmap(self.chunks as *mut _, self.span.div_ceil(SIZE_CHUNK));
            libc::close(self.memfd);
        }
        if let Some(file) = &self.file {
            let _ = std::fs::remove_file(file);
        }
    }
}
