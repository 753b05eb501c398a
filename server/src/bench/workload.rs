//! The benchmark loops. "Do not use these as tests": they check nothing but their own counts.
//!
//! - **threadtest** (Hoard's, as CXLALLOC §5.2.2 runs it): each worker allocates a batch of
//!   fixed-size objects, writes each once, then frees the batch; entirely thread-local.
//! - **xmalloc** (producer/consumer): worker `i` allocates, writes and hands every block to
//!   worker `i + 1` (mod the worker count) through a ring, and frees what worker `i - 1` hands
//!   it: every free is remote.
//!
//! Both publish their count of allocations in `progress` (relaxed) once per batch, for the
//! runner's progress bar: one store per thousand operations by default, nothing per op.

use super::alloc::BenchAlloc;
use super::ring::Ring;
use std::alloc::Layout;
use std::sync::atomic::{AtomicU64, Ordering};

/// Runs `rounds` threadtest rounds of `batch` objects; returns the allocations made.
pub fn threadtest<A: BenchAlloc>(
    a: &A,
    layout: Layout,
    rounds: u64,
    batch: usize,
    progress: &AtomicU64,
) -> u64 {
    let mut blocks = vec![0u64; batch];
    for round in 0..rounds {
        for slot in blocks.iter_mut() {
            let block = a.alloc(layout);
            // SAFETY: the block is at least one byte and ours until freed below.
            unsafe { a.addr(block).write_volatile(1) };
            *slot = block;
        }
        for &block in &blocks {
            a.free(block, layout);
        }
        progress.store((round + 1) * batch as u64, Ordering::Relaxed);
    }
    rounds * batch as u64
}

/// Runs xmalloc for `ops` blocks produced into `out` (in batches of `batch`, at most `window`
/// waiting in `out`) and `ops` consumed from `input`.
pub fn xmalloc<A: BenchAlloc>(
    a: &A,
    layout: Layout,
    ops: u64,
    (batch, window): (u64, usize),
    out: &Ring,
    input: &Ring,
    progress: &AtomicU64,
) -> u64 {
    let (mut produced, mut consumed) = (0u64, 0u64);
    let mut pending: Vec<u64> = Vec::with_capacity(batch as usize);
    while produced < ops || consumed < ops || !pending.is_empty() {
        if produced < ops && pending.len() < batch as usize {
            while produced < ops && pending.len() < batch as usize {
                let block = a.alloc(layout);
                // SAFETY: the block is at least one byte and ours until handed over.
                unsafe { a.addr(block).write_volatile(1) };
                pending.push(block);
                produced += 1;
            }
            progress.store(produced, Ordering::Relaxed);
        }
        let sent = out.push_many_within(&pending, window);
        pending.drain(..sent);
        consumed += input.pop_all(|block| a.free(block, layout));
        if sent == 0 && produced == ops {
            std::hint::spin_loop();
        }
    }
    produced
}
