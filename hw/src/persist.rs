//! Cache-line write-back and fences.
//!
//! # Contract
//! - [`write_back`]`(ptr, len)`: every cache line overlapping `[ptr, ptr + len)` is written
//!   back to memory (it may stay cached with `clwb`). Not ordered with later stores until
//!   [`fence`].
//! - [`fence`]: orders all earlier write-backs and stores before any later store (`sfence`;
//!   `clflush` is already ordered, the fence is kept for uniformity).
//! - [`evict`]`(ptr, len)`: every cache line overlapping the range is written back *and*
//!   dropped from this CPU's caches, so the next load reads memory (the SWcc reader rule).
//!   `clwb` may keep the line, so eviction always uses `clflushopt`, else `clflush`.
//! - [`fence_full`]: orders earlier evictions, stores and loads before any later load or store
//!   (`mfence`): a load after it cannot be served from a line evicted before it.
//! - [`prefetch_write`]`(ptr)`: a hint only (no state changes, never faults): the line is
//!   on its way before the write that needs it.
//!
//! # Implementations, chosen once at run time
//! | instruction | when | why this order |
//! | --- | --- | --- |
//! | `clwb` | CPUID.7.0:EBX[24] | writes back without evicting: the owner keeps its line hot |
//! | `clflushopt` | CPUID.7.0:EBX[23] | weakly ordered, pipelines across lines |
//! | `clflush` | CPUID.1:EDX[19] | every x86-64 CPU has it; serialising and slow |
//! | none | not x86-64 | a compiler fence only; such builds support hardware coherence alone |

// Process-global detection state, not shared protocol state: std atomics even
// under loom.
use crate::sync::mapped::{AtomicU8, Ordering};

/// Bytes in one cache line on every CPU podkv targets.
pub const SIZE_CACHE_LINE: usize = 64;

/// The write-back instruction this CPU offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flush {
    /// `clwb`: write back, keep the line.
    Clwb,
    /// `clflushopt`: write back and evict, weakly ordered.
    ClflushOpt,
    /// `clflush`: write back and evict, strongly ordered.
    Clflush,
    /// No instruction: not an x86-64 CPU.
    None,
}

impl Flush {
    /// The instruction's name, for `podkv heap info` and benchmark records.
    pub const fn name(self) -> &'static str {
        match self {
            Flush::Clwb => "clwb",
            Flush::ClflushOpt => "clflushopt",
            Flush::Clflush => "clflush",
            Flush::None => "none",
        }
    }
}

// 0 = not yet detected; otherwise 1 + the `Flush` discriminant.
static CHOSEN: AtomicU8 = AtomicU8::new(0);
// 0 = not yet detected; 2 = clflushopt, 3 = clflush, 4 = none (the `encode` numbering).
static CHOSEN_EVICT: AtomicU8 = AtomicU8::new(0);

#[cfg(test)]
thread_local! {
    // Per thread, and only in this module's tests: what callers need counted they count in
    // `swcc::Counts`. A process-wide atomic here once cost every batch its overlap: a locked
    // add after a `clwb` or `clflushopt` waits for that line's write-back to finish, so the
    // lines of a batch went to memory one at a time (perf: 98% of the batch's time on the add).
    static LINES_WRITTEN_BACK: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Notes `lines` written back or evicted, for this module's tests; nothing otherwise.
#[inline(always)]
fn count_lines(_lines: u64) {
    #[cfg(test)]
    LINES_WRITTEN_BACK.with(|cell| cell.set(cell.get() + _lines));
}

/// The write-back instruction chosen for this process (detected on first use).
pub fn flush_kind() -> Flush {
    match CHOSEN.load(Ordering::Relaxed) {
        0 => {
            let kind = detect();
            CHOSEN.store(encode(kind), Ordering::Relaxed);
            kind
        }
        code => decode(code),
    }
}

fn encode(kind: Flush) -> u8 {
    match kind {
        Flush::Clwb => 1,
        Flush::ClflushOpt => 2,
        Flush::Clflush => 3,
        Flush::None => 4,
    }
}

fn decode(code: u8) -> Flush {
    match code {
        1 => Flush::Clwb,
        2 => Flush::ClflushOpt,
        3 => Flush::Clflush,
        _ => Flush::None,
    }
}

/// The instruction [`evict`] uses: one that drops the line, never `clwb`.
pub fn evict_kind() -> Flush {
    match CHOSEN_EVICT.load(Ordering::Relaxed) {
        0 => {
            let kind = if detect_clflushopt() {
                Flush::ClflushOpt
            } else if flush_kind() == Flush::None {
                Flush::None
            } else {
                Flush::Clflush
            };
            CHOSEN_EVICT.store(encode(kind), Ordering::Relaxed);
            kind
        }
        code => decode(code),
    }
}

#[cfg(target_arch = "x86_64")]
fn detect_clflushopt() -> bool {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    // CPUID is safe to execute on every x86-64 CPU; leaf 7 is only read when leaf 0 reports it.
    __cpuid(0).eax >= 7 && __cpuid_count(7, 0).ebx & (1 << 23) != 0
}

#[cfg(not(target_arch = "x86_64"))]
fn detect_clflushopt() -> bool {
    false
}

#[cfg(target_arch = "x86_64")]
fn detect() -> Flush {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    // CPUID is safe to execute on every x86-64 CPU; leaf 7 is only read when leaf 0 reports it.
    let max_leaf = __cpuid(0).eax;
    if max_leaf >= 7 {
        let ebx = __cpuid_count(7, 0).ebx;
        if ebx & (1 << 24) != 0 {
            return Flush::Clwb;
        }
        if ebx & (1 << 23) != 0 {
            return Flush::ClflushOpt;
        }
    }
    let edx = __cpuid(1).edx;
    if edx & (1 << 19) != 0 {
        Flush::Clflush
    } else {
        Flush::None
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> Flush {
    Flush::None
}

/// Writes back every cache line overlapping `[ptr, ptr + len)`.
///
/// The range must be mapped (reading it would be sound); it need not be aligned.
pub fn write_back(ptr: *const u8, len: usize) {
    flush_range(flush_kind(), ptr, len);
}

/// Writes back and evicts every cache line overlapping `[ptr, ptr + len)`; follow with
/// [`fence_full`] before loading from the range.
///
/// The range must be mapped (reading it would be sound); it need not be aligned.
pub fn evict(ptr: *const u8, len: usize) {
    flush_range(evict_kind(), ptr, len);
}

/// Writes back (or evicts) one cache line by address, the batched flusher's step; the address
/// need not be aligned.
pub(crate) fn write_back_line(line: usize, evict: bool) {
    let kind = if evict { evict_kind() } else { flush_kind() };
    flush_line(kind, (line & !(SIZE_CACHE_LINE - 1)) as *const u8);
    count_lines(1);
}

fn flush_range(kind: Flush, ptr: *const u8, len: usize) {
    if len == 0 {
        return;
    }
    let first = ptr as usize & !(SIZE_CACHE_LINE - 1);
    let end = ptr as usize + len;
    let mut line = first;
    while line < end {
        flush_line(kind, line as *const u8);
        line += SIZE_CACHE_LINE;
    }
    count_lines((end - first).div_ceil(SIZE_CACHE_LINE) as u64);
}

#[cfg(target_arch = "x86_64")]
fn flush_line(kind: Flush, line: *const u8) {
    // SAFETY: the caller of `write_back` guarantees the range is mapped; these instructions
    // only move the line between cache and memory and never change its bytes.
    unsafe {
        match kind {
            Flush::Clwb => {
                std::arch::asm!("clwb [{0}]", in(reg) line, options(nostack, preserves_flags))
            }
            Flush::ClflushOpt => {
                std::arch::asm!("clflushopt [{0}]", in(reg) line, options(nostack, preserves_flags))
            }
            Flush::Clflush => {
                std::arch::asm!("clflush [{0}]", in(reg) line, options(nostack, preserves_flags))
            }
            Flush::None => {}
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn flush_line(_kind: Flush, _line: *const u8) {}

/// Orders earlier write-backs and stores before later stores.
#[inline]
pub fn fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` has no operands and only orders stores.
    unsafe {
        std::arch::asm!("sfence", options(nostack, preserves_flags));
    }
    #[cfg(not(target_arch = "x86_64"))]
    crate::sync::mapped::fence(Ordering::SeqCst);
}

/// Orders earlier evictions, loads and stores before later loads and stores (`mfence`).
#[inline]
pub fn fence_full() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `mfence` has no operands and only orders memory accesses.
    unsafe {
        std::arch::asm!("mfence", options(nostack, preserves_flags));
    }
    #[cfg(not(target_arch = "x86_64"))]
    crate::sync::mapped::fence(Ordering::SeqCst);
}

/// Cache lines written back (or evicted) by the calling thread so far, for this module's tests.
#[cfg(test)]
fn lines_written_back() -> u64 {
    LINES_WRITTEN_BACK.with(std::cell::Cell::get)
}

/// Hints the CPU to bring the line at `at` into cache before a write (no effect elsewhere).
/// `prefetcht0`: a line no other core holds arrives exclusive, so the write that follows
/// needs no further request (`prefetchw` needs a target feature the baseline lacks).
#[inline(always)]
pub fn prefetch_write(at: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and has no architectural effect, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_is_stable_and_names_an_instruction() {
        let first = flush_kind();
        assert_eq!(first, flush_kind());
        #[cfg(target_arch = "x86_64")]
        assert_ne!(first, Flush::None, "every x86-64 CPU has at least clflush");
    }

    #[test]
    fn eviction_never_uses_clwb_and_keeps_bytes() {
        assert_ne!(evict_kind(), Flush::Clwb);
        let buf = vec![9u8; 4 * SIZE_CACHE_LINE];
        let aligned = (buf.as_ptr() as usize).next_multiple_of(SIZE_CACHE_LINE) as *const u8;
        let before = lines_written_back();
        evict(aligned, 3 * SIZE_CACHE_LINE);
        fence_full();
        assert_eq!(lines_written_back() - before, 3);
        assert!(buf.iter().all(|&b| b == 9));
    }

    #[test]
    fn write_back_counts_every_overlapping_line() {
        let buf = vec![7u8; 4 * SIZE_CACHE_LINE];
        let aligned = (buf.as_ptr() as usize).next_multiple_of(SIZE_CACHE_LINE) as *const u8;
        let before = lines_written_back();
        // One byte before a line boundary to one byte after: two lines.
        // SAFETY: both pointers stay inside `buf`.
        write_back(unsafe { aligned.add(SIZE_CACHE_LINE - 1) }, 2);
        fence();
        assert_eq!(lines_written_back() - before, 2);
        assert!(
            buf.iter().all(|&b| b == 7),
            "write-back never changes bytes"
        );
    }

    #[test]
    fn another_threads_write_backs_are_its_own() {
        let before = lines_written_back();
        std::thread::spawn(|| {
            let buf = [1u8; 2 * SIZE_CACHE_LINE];
            write_back(buf.as_ptr(), buf.len());
            fence();
            assert!(lines_written_back() >= 2);
        })
        .join()
        .unwrap();
        assert_eq!(lines_written_back(), before);
    }
}
