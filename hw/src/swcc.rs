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
//! - **Edge rule** — [`reload_edges`]: a cache writes back whole lines, so a writer whose range
//!   shares a line with another owner's bytes first reloads that line; its write-back then
//!   returns the neighbour's bytes as they are in memory, not as this cache last saw them.
//!
//! This module performs the rules; whether a heap needs them is its mode's call. Callers go
//! through [`Coherence`](crate::Coherence) (`write_back`, `invalidate`, `read_fresh`,
//! `write_back_batch`), which does nothing under `Hardware` and calls these under `Limited`
//! and `Mcas`; this module knows no modes. Each thread counts what it did ([`counts`]): tests
//! read the counts around a transition to show the write-back happens there and only there.
//! Under the coherence model ([`crate::model`], a test mode) each rule also moves the lines
//! of the model's per-process cache, so a missing one fails a test.

use crate::persist::{self, SIZE_CACHE_LINE};
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
/// The range must be mapped. A no-op when `len` is 0.
pub fn write_back(ptr: *const u8, len: usize) {
    if len == 0 {
        return;
    }
    write_back_unfenced(ptr, len);
    fence();
}

/// The writer rule's first half: starts the write-back of every line overlapping `[ptr,
/// ptr + len)` and returns without waiting for it. The caller calls [`fence`] before
/// anything that must follow the write-back (the CAS that publishes the range), and may do
/// other work meanwhile, which then overlaps with the lines' trip to memory.
///
/// The range must be mapped. A no-op when `len` is 0.
pub fn write_back_unfenced(ptr: *const u8, len: usize) {
    if len == 0 {
        return;
    }
    persist::write_back(ptr, len);
    crate::model::write_back(ptr, len);
    count(|c| c.lines_written_back += lines_of(ptr, len));
}

/// The writer rule's second half: waits until every line this thread started writing back
/// ([`write_back_unfenced`]) is in memory.
pub fn fence() {
    persist::fence();
    count(|c| c.fences += 1);
}

/// The reader rule: evicts every line overlapping `[ptr, ptr + len)` from this CPU's caches
/// and fences (`mfence`, which also orders later loads), so the next load of the range reads
/// memory rather than a stale copy.
///
/// The range must be mapped. A no-op when `len` is 0.
pub fn invalidate(ptr: *const u8, len: usize) {
    if len == 0 {
        return;
    }
    persist::evict(ptr, len);
    persist::fence_full();
    crate::model::invalidate(ptr, len);
    count(|c| {
        c.lines_invalidated += lines_of(ptr, len);
        c.fences += 1;
    });
}

/// The edge rule, the writer rule's first half for a range that shares its first or last line
/// with bytes another host may own (a block not 64-byte aligned and sized, beside its slab
/// neighbours): reloads those partial lines before the caller writes the range. The writer
/// rule writes back whole lines, so without the reload the neighbours' bytes go back as this
/// cache last saw them, over what their owner wrote since. Lines the range covers whole are
/// left alone (the caller overwrites or owns them). Nobody may write the neighbours' bytes
/// between this and the write-back: true of a slab's blocks, which only its owner writes.
///
/// A no-op when `len` is 0 or both ends fall on line boundaries.
pub fn reload_edges(ptr: *const u8, len: usize) {
    if len == 0 {
        return;
    }
    let (start, end) = (ptr as usize, ptr as usize + len);
    let (ragged_start, ragged_end) = (start % SIZE_CACHE_LINE != 0, end % SIZE_CACHE_LINE != 0);
    let first = start & !(SIZE_CACHE_LINE - 1);
    let last = (end - 1) & !(SIZE_CACHE_LINE - 1);
    if ragged_start {
        invalidate(first as *const u8, 1);
    }
    // Both ends in one line: reloaded once.
    if ragged_end && !(ragged_start && last == first) {
        invalidate(last as *const u8, 1);
    }
}

/// Invalidates then re-reads a `T` this thread does not own: the reader rule in one call.
///
/// # Safety
/// - `src` is valid for reads of a `T` and aligned for it;
/// - any bit pattern the owner may have stored there is a valid `T` (a torn or stale value is
///   possible in principle; callers validate it with the CAS that consumes it).
pub unsafe fn read_fresh<T: Copy>(src: *const T) -> T {
    invalidate(src.cast(), std::mem::size_of::<T>());
    // SAFETY: the caller guarantees `src` is valid, aligned and holds a valid `T`; volatile so
    // the load is issued after the fence rather than reused from an earlier read.
    unsafe { std::ptr::read_volatile(src) }
}

/// The writer rule, batched: collects the lines a thread dirtied on its fast path (no flush,
/// no fence there) and writes them all back with one fence at the transition.
///
/// Dropping a batch with lines still pending finishes it, so a forgotten `finish` costs time,
/// never coherence. A [`Batching::Off`] batch (what `Coherence::Hardware` hands out) returns
/// at once from every method.
#[derive(Debug)]
pub struct WriteBackBatch {
    batching: Batching,
    /// Line addresses not yet written back: `lines[..len]`, distinct.
    lines: [usize; BATCH_LINES],
    len: usize,
    /// Lines were written back since the last fence (early, when `lines` filled up).
    unfenced: bool,
}

/// Whether a [`WriteBackBatch`] writes back what is pushed: the one fact of a heap's mode the
/// batch needs, decided by [`Coherence::write_back_batch`](crate::Coherence::write_back_batch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Batching {
    /// The memory is hardware coherent: pushes are ignored, nothing is written back.
    Off,
    /// The memory follows SWcc: pushed lines are written back, with one fence at `finish`.
    On,
}

impl WriteBackBatch {
    /// An empty batch.
    pub fn new(batching: Batching) -> WriteBackBatch {
        WriteBackBatch {
            batching,
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
        if self.batching == Batching::Off || len == 0 {
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
            crate::model::write_back(line as *const u8, SIZE_CACHE_LINE);
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

    #[derive(Clone, Copy)]
    #[repr(C, align(64))]
    struct Line([u64; 8]);

    /// A buffer of `count` whole cache lines.
    fn lines(count: usize) -> Vec<Line> {
        vec![Line([0; 8]); count]
    }

    #[test]
    fn reload_edges_reloads_exactly_the_lines_a_range_covers_in_part() {
        let buf = lines(4);
        let base = buf.as_ptr().cast::<u8>();
        let reloaded = |start: usize, len: usize| {
            let before = counts();
            // SAFETY: inside the four-line buffer.
            reload_edges(unsafe { base.add(start) }, len);
            counts().since(before).lines_invalidated
        };
        assert_eq!(reloaded(0, 128), 0, "whole lines: nothing to reload");
        assert_eq!(reloaded(0, 0), 0);
        assert_eq!(reloaded(8, 120), 1, "a ragged start");
        assert_eq!(reloaded(0, 100), 1, "a ragged end");
        assert_eq!(reloaded(8, 200), 2, "both ends, in different lines");
        assert_eq!(reloaded(8, 16), 1, "both ends in one line: that line once");
        assert_eq!(
            reloaded(0, 8),
            1,
            "an aligned start, its end in the same line"
        );
    }

    #[test]
    fn batch_defers_every_flush_to_one_fence_at_finish() {
        let buf = lines(8);
        let base = buf.as_ptr().cast::<u8>();
        let before = counts();
        let mut batch = WriteBackBatch::new(Batching::On);
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
            let mut batch = WriteBackBatch::new(Batching::On);
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
}
