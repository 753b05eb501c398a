//! The SWcc protocol (CXLALLOC §3.2.2): software cache coherence for memory the hardware does
//! not keep coherent across hosts.
//!
//! Data outside the HWcc region has one writer at a time, its *owner*, who may keep it cached.
//! Two rules make that safe without hardware coherence:
//!
//! - **Writer rule** — [`write_back`]: before ownership of a range can move (a slab pushed on a
//!   global list, detached or disowned), the owner writes every line of it back and fences, so
//!   the next owner's loads see its stores. Callers batch lines on their fast path with a
//!   [`WriteBackBatch`] and pay one fence at the transition.
//! - **Reader rule** — [`invalidate`] then re-read ([`read_fresh`]): a thread that reads data it
//!   does not own first evicts its (possibly stale) cached copy and fences, so the load goes to
//!   memory. A stale value that slips through is caught by the CAS (or mCAS) that consumes it.
//!
//! Every operation is a no-op under [`Coherence::Hardware`] and real under
//! [`Coherence::Limited`] and [`Coherence::Mcas`]. Each thread counts what it did ([`counts`]):
//! tests read the counts around a transition to show the write-back happens there and only
//! there.

use crate::persist::{self, SIZE_CACHE_LINE};
use crate::Coherence;
use std::cell::Cell;

/// Lines a [`WriteBackBatch`] holds before it writes them back early (still one fence at
/// [`WriteBackBatch::finish`]): a slab descriptor and its neighbours fit many times over.
pub const BATCH_LINES: usize = 16;

/// What this thread's SWcc operations did so far: each field only grows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Cache lines written back by the writer rule (each line of a range, once per call).
    pub lines_written_back: u64,
    /// Cache lines evicted by the reader rule.
    pub lines_invalidated: u64,
    /// Fences issued by either rule.
    pub fences: u64,
}

impl Counts {
    /// What happened between `earlier` and `self`.
    pub fn since(self, earlier: Counts) -> Counts {
        Counts {
            lines_written_back: self.lines_written_back - earlier.lines_written_back,
            lines_invalidated: self.lines_invalidated - earlier.lines_invalidated,
            fences: self.fences - earlier.fences,
        }
    }
}

thread_local! {
    // Per thread so the count costs no shared write and concurrent tests cannot disturb it.
    static COUNTS: Cell<Counts> = const { Cell::new(Counts {
        lines_written_back: 0,
        lines_invalidated: 0,
        fences: 0,
    }) };
}

/// What the calling thread's SWcc operations did so far.
pub fn counts() -> Counts {
    COUNTS.with(Cell::get)
}

fn count(f: impl FnOnce(&mut Counts)) {
    COUNTS.with(|cell| {
        let mut counts = cell.get();
        f(&mut counts);
        cell.set(counts);
    });
}

/// Lines overlapping `[ptr, ptr + len)`.
fn lines_of(ptr: *const u8, len: usize) -> u64 {
    if len == 0 {
        return 0;
    }
    let first = ptr as usize & !(SIZE_CACHE_LINE - 1);
    (ptr as usize + len - first).div_ceil(SIZE_CACHE_LINE) as u64
}

/// The writer rule: writes back every line overlapping `[ptr, ptr + len)`, then fences, so
/// another host that reads the range after ownership moves sees this thread's stores.
///
/// The range must be mapped. A no-op under [`Coherence::Hardware`].
pub fn write_back(coherence: Coherence, ptr: *const u8, len: usize) {
    if !coherence.is_swcc() || len == 0 {
        return;
    }
    persist::write_back(ptr, len);
    persist::fence();
    count(|c| {
        c.lines_written_back += lines_of(ptr, len);
        c.fences += 1;
    });
}

/// The reader rule: evicts every line overlapping `[ptr, ptr + len)` from this CPU's caches
/// and fences (`mfence`, which also orders later loads), so the next load of the range reads
/// memory rather than a stale copy.
///
/// The range must be mapped. A no-op under [`Coherence::Hardware`].
pub fn invalidate(coherence: Coherence, ptr: *const u8, len: usize) {
    if !coherence.is_swcc() || len == 0 {
        return;
    }
    persist::evict(ptr, len);
    persist::fence_full();
    count(|c| {
        c.lines_invalidated += lines_of(ptr, len);
        c.fences += 1;
    });
}

/// Invalidates then re-reads a `T` this thread does not own: the reader rule in one call.
///
/// # Safety
/// - `src` is valid for reads of a `T` and aligned for it;
/// - any bit pattern the owner may have stored there is a valid `T` (a torn or stale value is
///   possible in principle; callers validate it with the CAS that consumes it).
pub unsafe fn read_fresh<T: Copy>(coherence: Coherence, src: *const T) -> T {
    invalidate(coherence, src.cast(), std::mem::size_of::<T>());
    // SAFETY: the caller guarantees `src` is valid, aligned and holds a valid `T`; volatile so
    // the load is issued after the fence rather than reused from an earlier read.
    unsafe { std::ptr::read_volatile(src) }
}

/// The writer rule, batched: collects the lines a thread dirtied on its fast path (no flush,
/// no fence there) and writes them all back with one fence at the transition.
///
/// Dropping a batch with lines still pending finishes it, so a forgotten `finish` costs time,
/// never coherence. Under [`Coherence::Hardware`] every method returns at once.
#[derive(Debug)]
pub struct WriteBackBatch {
    coherence: Coherence,
    /// Line addresses not yet written back: `lines[..len]`, distinct.
    lines: [usize; BATCH_LINES],
    len: usize,
    /// Lines were written back since the last fence (early, when `lines` filled up).
    unfenced: bool,
}

impl WriteBackBatch {
    /// An empty batch for a heap in `coherence` mode.
    pub fn new(coherence: Coherence) -> WriteBackBatch {
        WriteBackBatch {
            coherence,
            lines: [0; BATCH_LINES],
            len: 0,
            unfenced: false,
        }
    }

    /// Remembers every line overlapping `[ptr, ptr + len)`. Costs a few compares per line;
    /// when the batch is full its lines are written back now (the fence still waits for
    /// [`finish`](Self::finish)). The range must stay mapped until then.
    #[inline]
    pub fn push(&mut self, ptr: *const u8, len: usize) {
        if !self.coherence.is_swcc() || len == 0 {
            return;
        }
        let first = ptr as usize & !(SIZE_CACHE_LINE - 1);
        let end = ptr as usize + len;
        let mut line = first;
        while line < end {
            self.push_line(line);
            line += SIZE_CACHE_LINE;
        }
    }

    fn push_line(&mut self, line: usize) {
        if self.lines[..self.len].contains(&line) {
            return;
        }
        if self.len == BATCH_LINES {
            self.write_back_pending();
        }
        self.lines[self.len] = line;
        self.len += 1;
    }

    /// Lines waiting for [`finish`](Self::finish).
    pub fn pending(&self) -> usize {
        self.len
    }

    /// Writes back every pending line and fences once: after it returns, another host that
    /// takes ownership sees everything pushed. A no-op when nothing was pushed.
    pub fn finish(&mut self) {
        if self.len == 0 && !self.unfenced {
            return;
        }
        self.write_back_pending();
        persist::fence();
        self.unfenced = false;
        count(|c| c.fences += 1);
    }

    fn write_back_pending(&mut self) {
        for &line in &self.lines[..self.len] {
            persist::write_back_line(line, false);
        }
        let written = self.len as u64;
        count(|c| c.lines_written_back += written);
        self.len = 0;
        self.unfenced = true;
    }
}

impl Drop for WriteBackBatch {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coherence::COHERENCE_ALL;

    #[derive(Clone, Copy)]
    #[repr(C, align(64))]
    struct Line([u64; 8]);

    /// A buffer of `count` whole cache lines.
    fn lines(count: usize) -> Vec<Line> {
        vec![Line([0; 8]); count]
    }

    #[test]
    fn write_back_counts_lines_and_one_fence_only_when_swcc() {
        let buf = lines(4);
        for mode in COHERENCE_ALL {
            let before = counts();
            // Two bytes straddling the first line boundary: two lines.
            write_back(mode, buf.as_ptr().cast::<u8>().wrapping_add(63), 2);
            let did = counts().since(before);
            match mode {
                Coherence::Hardware => assert_eq!(did, Counts::default()),
                Coherence::Limited | Coherence::Mcas => {
                    assert_eq!(did.lines_written_back, 2);
                    assert_eq!(did.fences, 1);
                    assert_eq!(did.lines_invalidated, 0);
                }
            }
        }
    }

    #[test]
    fn invalidate_and_read_fresh_count_only_when_swcc() {
        let mut buf = lines(2);
        buf[1].0[3] = 0xfeed;
        for mode in COHERENCE_ALL {
            let before = counts();
            invalidate(mode, buf.as_ptr().cast(), 128);
            // SAFETY: the pointer is into `buf`, aligned for u64, and any u64 is valid.
            let value = unsafe { read_fresh(mode, &buf[1].0[3] as *const u64) };
            assert_eq!(value, 0xfeed);
            let did = counts().since(before);
            match mode {
                Coherence::Hardware => assert_eq!(did, Counts::default()),
                Coherence::Limited | Coherence::Mcas => {
                    assert_eq!(did.lines_invalidated, 2 + 1);
                    assert_eq!(did.fences, 2);
                    assert_eq!(did.lines_written_back, 0);
                }
            }
        }
    }

    #[test]
    fn batch_defers_every_flush_to_one_fence_at_finish() {
        let buf = lines(8);
        let base = buf.as_ptr().cast::<u8>();
        let before = counts();
        let mut batch = WriteBackBatch::new(Coherence::Limited);
        // The fast path: five pushes over three distinct lines, nothing flushed yet.
        batch.push(base, 8);
        batch.push(base.wrapping_add(8), 8);
        batch.push(base.wrapping_add(64), 100); // lines 1 and 2
        batch.push(base.wrapping_add(130), 4);
        assert_eq!(counts().since(before), Counts::default());
        assert_eq!(batch.pending(), 3);
        // The transition: three lines, one fence.
        batch.finish();
        let did = counts().since(before);
        assert_eq!((did.lines_written_back, did.fences), (3, 1));
        batch.finish();
        assert_eq!(
            counts().since(before).fences,
            1,
            "an empty finish fences nothing"
        );
    }

    #[test]
    fn a_full_batch_writes_back_early_but_still_fences_once() {
        let buf = lines(BATCH_LINES + 4);
        let before = counts();
        {
            let mut batch = WriteBackBatch::new(Coherence::Mcas);
            batch.push(buf.as_ptr().cast(), (BATCH_LINES + 4) * SIZE_CACHE_LINE);
            let early = counts().since(before);
            assert_eq!(
                (early.lines_written_back, early.fences),
                (BATCH_LINES as u64, 0)
            );
        } // dropped: finishes
        let did = counts().since(before);
        assert_eq!(did.lines_written_back, BATCH_LINES as u64 + 4);
        assert_eq!(did.fences, 1);
    }

    #[test]
    fn batch_under_hardware_coherence_does_nothing() {
        let buf = lines(4);
        let before = counts();
        let mut batch = WriteBackBatch::new(Coherence::Hardware);
        batch.push(buf.as_ptr().cast(), 256);
        assert_eq!(batch.pending(), 0);
        batch.finish();
        assert_eq!(counts().since(before), Counts::default());
    }
}
