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
//!
//! # Stopping early
//! Both read the runner's `stop` word once per batch (`--duration`, `bench huge
//! --timeout`) and then allocate no more. A threadtest worker frees its round and returns.
//! An xmalloc worker hands over what it made, then [`END`], and frees its input until the
//! `END` of its producer: every block made is freed, whenever the run stops.

use super::alloc::BenchAlloc;
use super::ring::Ring;
use std::alloc::Layout;
use std::sync::atomic::{AtomicU64, Ordering};

/// The last value a producer hands over: no block has this name.
pub const END: u64 = u64::MAX;

/// Runs `rounds` threadtest rounds of `batch` objects, fewer if `stop` is raised; returns
/// the allocations made.
pub fn threadtest<A: BenchAlloc>(
    a: &A,
    layout: Layout,
    rounds: u64,
    batch: usize,
    progress: &AtomicU64,
    stop: &AtomicU64,
) -> u64 {
    let mut blocks = vec![0u64; batch];
    for round in 0..rounds {
        if stop.load(Ordering::Relaxed) != 0 {
            return round * batch as u64;
        }
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

/// Runs xmalloc: up to `ops` blocks produced into `out` (in batches of `batch`, at most
/// `window` waiting in `out`), then [`END`]; frees what `input` brings until its `END`.
/// Returns the blocks produced (`ops` unless `stop` was raised).
pub fn xmalloc<A: BenchAlloc>(
    a: &A,
    layout: Layout,
    ops: u64,
    (batch, window): (u64, usize),
    (out, input): (&Ring, &Ring),
    progress: &AtomicU64,
    stop: &AtomicU64,
) -> u64 {
    let (mut produced, mut limit) = (0u64, ops);
    // Nothing is produced once `END` is queued, so the output is over when `pending`,
    // which ends with it, has all been sent.
    let (mut end_queued, mut input_ended) = (false, false);
    let mut pending: Vec<u64> = Vec::with_capacity(batch as usize + 1);
    while !(end_queued && pending.is_empty() && input_ended) {
        if produced < limit && pending.len() < batch as usize {
            if stop.load(Ordering::Relaxed) != 0 {
                limit = produced;
            }
            while produced < limit && pending.len() < batch as usize {
                let block = a.alloc(layout);
                // SAFETY: the block is at least one byte and ours until handed over.
                unsafe { a.addr(block).write_volatile(1) };
                pending.push(block);
                produced += 1;
            }
            progress.store(produced, Ordering::Relaxed);
        }
        if produced == limit && !end_queued {
            pending.push(END);
            end_queued = true;
        }
        let sent = out.push_many_within(&pending, window);
        pending.drain(..sent);
        input.pop_all(|block| match block {
            END => input_ended = true,
            block => a.free(block, layout),
        });
        if sent == 0 && produced == limit {
            std::hint::spin_loop();
        }
    }
    produced
}
