//! CPU CASes and stores to mCAS words, as a host without coherence would make them: what a
//! switched-off hook site does under the model.
//!
//! An `mcas` heap's multi-writer words live in memory no host caches coherently; the model
//! keeps them coherent because every change goes through mCAS, which acts at memory. A CPU CAS
//! or store there instead acts on the host's *cached copy* of the line: it loads the line (if
//! this host holds no copy yet), changes the copy, and leaves it dirty. Other hosts and the
//! mCAS device see the change only when the whole line is written back: at this host's next
//! write-back or eviction of that line (`clflush` of a dirty line writes it first), or at a
//! random eviction. Written back whole, the line also puts back the neighbours' values this
//! host loaded, over whatever mCAS made of them since.
//!
//! This module keeps those dirty copies: at most [`COUNT_LINES`] lines per process, each the
//! line's eight words. One simplification: this process's own plain loads of the word still
//! read memory, not its copy (on a real host they would read the copy), so its own threads
//! also miss the change until the line goes back.
//!
//! No allocation and no blocking lock: the copies are a fixed array, guarded by one spin flag
//! held only across loads and stores of mCAS lines, which are always mapped, so the huge
//! heap's SIGSEGV handler cannot find it held by the thread it interrupted.

use crate::sync::mapped::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Dirty copies a process holds at most; one more evicts the oldest.
const COUNT_LINES: usize = 64;
const SIZE_LINE: usize = 64;
const WORDS: usize = SIZE_LINE / 8;

/// This process's copy of one line of mCAS words.
struct LineCopy {
    /// The line's address; 0 when this entry holds none.
    line: AtomicUsize,
    words: [AtomicU64; WORDS],
}

static COPIES: [LineCopy; COUNT_LINES] = [const {
    LineCopy {
        line: AtomicUsize::new(0),
        words: [const { AtomicU64::new(0) }; WORDS],
    }
}; COUNT_LINES];
/// Entries in use: lets the common case (no site switched off) skip the table.
static HELD: AtomicUsize = AtomicUsize::new(0);
/// The next entry to take when all are in use (oldest first, roughly).
static NEXT: AtomicUsize = AtomicUsize::new(0);
/// Held while a copy is made, changed or written out; only always-mapped mCAS lines are
/// touched meanwhile, so no fault handler can find it held.
static LOCK: AtomicBool = AtomicBool::new(false);

struct Guard;

fn lock() -> Guard {
    while LOCK
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        std::hint::spin_loop();
    }
    Guard
}

impl Drop for Guard {
    fn drop(&mut self) {
        LOCK.store(false, Ordering::Release);
    }
}

fn line_of(addr: usize) -> usize {
    addr & !(SIZE_LINE - 1)
}

/// The memory words of the line at `line`.
///
/// # Safety
/// `line` is the address of a mapped, 64-byte aligned line of mCAS words.
unsafe fn memory<'a>(line: usize) -> &'a [AtomicU64; WORDS] {
    // SAFETY: the caller's contract; any bits are a valid AtomicU64.
    unsafe { &*(line as *const [AtomicU64; WORDS]) }
}

/// The entry holding this process's copy of `word`'s line, loading the line into a new entry
/// (evicting one if all are taken) when none does. Called under the lock.
fn copy_of(word: &AtomicU64) -> &'static LineCopy {
    let line = line_of(word as *const AtomicU64 as usize);
    if let Some(held) = COPIES
        .iter()
        .find(|c| c.line.load(Ordering::Relaxed) == line)
    {
        return held;
    }
    let entry = match COPIES.iter().find(|c| c.line.load(Ordering::Relaxed) == 0) {
        Some(free) => free,
        None => {
            let victim = &COPIES[NEXT.fetch_add(1, Ordering::Relaxed) % COUNT_LINES];
            write_out(victim);
            victim
        }
    };
    // SAFETY: `word` is a mapped mCAS word, so its whole (aligned) line is mapped.
    let memory = unsafe { memory(line) };
    for (copy, now) in entry.words.iter().zip(memory) {
        copy.store(now.load(Ordering::Acquire), Ordering::Relaxed);
    }
    entry.line.store(line, Ordering::Relaxed);
    HELD.fetch_add(1, Ordering::Relaxed);
    entry
}

/// Writes an entry's line to memory whole and frees the entry. Called under the lock.
fn write_out(entry: &LineCopy) {
    let line = entry.line.load(Ordering::Relaxed);
    if line == 0 {
        return;
    }
    // SAFETY: the line was a mapped mCAS line when copied; a heap's mCAS region stays mapped
    // while any of its words can be named (the caller unmaps only after its last use).
    let memory = unsafe { memory(line) };
    for (copy, word) in entry.words.iter().zip(memory) {
        word.store(copy.load(Ordering::Relaxed), Ordering::Release);
    }
    entry.line.store(0, Ordering::Relaxed);
    HELD.fetch_sub(1, Ordering::Relaxed);
}

/// A CPU CAS of `word` on this host's copy of its line.
pub fn cas(word: &AtomicU64, current: u64, new: u64) -> Result<u64, u64> {
    let _held = lock();
    let copy = copy_of(word);
    let at = &copy.words[(word as *const AtomicU64 as usize % SIZE_LINE) / 8];
    let seen = at.load(Ordering::Relaxed);
    if seen != current {
        return Err(seen);
    }
    at.store(new, Ordering::Relaxed);
    Ok(current)
}

/// A CPU store to `word` on this host's copy of its line.
pub fn store(word: &AtomicU64, value: u64) {
    let _held = lock();
    let copy = copy_of(word);
    copy.words[(word as *const AtomicU64 as usize % SIZE_LINE) / 8].store(value, Ordering::Relaxed);
}

/// A write-back or eviction of `[ptr, ptr + len)` by this process: its copies of lines there
/// go to memory (an eviction writes a dirty line back first).
pub fn write_back(ptr: *const u8, len: usize) {
    if HELD.load(Ordering::Relaxed) == 0 || len == 0 {
        return;
    }
    let (first, end) = (line_of(ptr as usize), ptr as usize + len);
    let _held = lock();
    for entry in &COPIES {
        let line = entry.line.load(Ordering::Relaxed);
        if line != 0 && line >= first && line < end {
            write_out(entry);
        }
    }
}

/// Drops this process's copies of lines in `[from, from + len)` unwritten: the heap mapped
/// there is being closed, and a copy written out later would land in whatever is mapped at
/// that address next (or fault).
pub(super) fn forget(from: usize, len: usize) {
    if HELD.load(Ordering::Relaxed) == 0 {
        return;
    }
    let _held = lock();
    for entry in &COPIES {
        let line = entry.line.load(Ordering::Relaxed);
        if line != 0 && line >= from && line < from + len {
            entry.line.store(0, Ordering::Relaxed);
            HELD.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// A random eviction: one copy in `one_in` goes to memory.
pub(super) fn evict_some(random: u64, one_in: u64) {
    if HELD.load(Ordering::Relaxed) == 0 {
        return;
    }
    let _held = lock();
    for (i, entry) in COPIES.iter().enumerate() {
        if (random.rotate_left(i as u32) % one_in.max(1)) == 0 {
            write_out(entry);
        }
    }
}

/// Forgets every copy (tests: the next test starts with a clean cache).
#[cfg(test)]
fn forget_all() {
    let _held = lock();
    for entry in &COPIES {
        if entry.line.swap(0, Ordering::Relaxed) != 0 {
            HELD.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(align(64))]
    struct Line([AtomicU64; WORDS]);

    #[test]
    fn a_plain_cas_reaches_memory_only_when_its_line_is_written_back_and_then_whole() {
        let line = Line([const { AtomicU64::new(0) }; WORDS]);
        let (word, neighbour) = (&line.0[2], &line.0[5]);
        assert_eq!(cas(word, 0, 7), Ok(0));
        // Memory has not seen it; a second CAS on the copy sees it.
        assert_eq!(word.load(Ordering::Acquire), 0);
        assert_eq!(cas(word, 0, 9), Err(7));
        // Meanwhile an mCAS changes the neighbour at memory.
        neighbour.store(3, Ordering::Release);
        write_back((word as *const AtomicU64).cast(), 8);
        assert_eq!(word.load(Ordering::Acquire), 7);
        // The whole line went back: the neighbour's change is lost.
        assert_eq!(neighbour.load(Ordering::Acquire), 0);
        store(word, 11);
        assert_eq!(word.load(Ordering::Acquire), 7);
        forget_all();
        assert_eq!(word.load(Ordering::Acquire), 7);
    }
}
