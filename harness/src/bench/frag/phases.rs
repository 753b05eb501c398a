//! One Fragbench run in this process: the Before, Delete and After phases over one allocator,
//! measured at each phase's end.
//!
//! # The loop (NVAlloc §3, after RAMCloud's fragmentation benchmark)
//! - **Before**: allocate blocks of the workload's first size distribution until `total`
//!   bytes were allocated; whenever the next block would take the live data over `live_cap`,
//!   first free live blocks chosen uniformly at random until it fits.
//! - **Delete**: free the workload's share of the live blocks, chosen at random.
//! - **After**: as Before, with the second size distribution; the random frees hit old and
//!   new blocks alike.
//!
//! Every block is written whole when it is allocated, so its pages are resident. Live blocks
//! are tracked in one table allocated and touched before the first allocation, and podkv's
//! census runs once before it too (its first walk reads every thread slot), so the PSS a phase
//! reports is the allocator's: the process's PSS then, less its PSS just before Before.

use super::{Phase, Workload};
use crate::bench::alloc::BenchAlloc;
use crate::process_stats;
use podkv_alloc::Census;
use std::alloc::Layout;
use std::time::Instant;

/// What one phase measured.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct PhaseResult {
    /// `before`, `delete` or `after`.
    pub phase: String,
    /// The process's PSS at the phase's end less its PSS before the first allocation.
    pub pss_bytes: u64,
    /// Bytes the live blocks were asked for, at the phase's end.
    pub live_bytes: u64,
    /// Live blocks at the phase's end.
    pub live_blocks: u64,
    /// Allocations plus frees in the phase.
    pub ops: u64,
    /// The phase's wall time (writing each new block included; measuring excluded).
    pub seconds: f64,
    /// Minor page faults in the phase.
    pub page_faults: u64,
    /// podkv: slabs holding a class by occupancy band (0–30%, 30–70%, 70–100%).
    pub occupancy: Option<[u64; 3]>,
    /// podkv: bytes of slabs holding a class.
    pub slab_bytes: Option<u64>,
    /// podkv: bytes of live blocks by block size (the class sizes the requests fell in).
    pub block_bytes: Option<u64>,
    /// podkv: bytes of storage the heap file holds.
    pub file_bytes: Option<u64>,
}

/// What podkv adds to a phase's measurement: its census and file size; `None` for the others.
pub type Probe<'a> = &'a dyn Fn() -> Option<(Census, u64)>;

/// A small, fast, seeded generator (splitmix64): the run's sizes and victims.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        podkv_traces::mix64(self.0)
    }

    /// Uniform in `0..n` (`n > 0`).
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `lo..=hi`.
    fn size(&mut self, (lo, hi): (u32, u32)) -> u32 {
        lo + self.below(u64::from(hi - lo) + 1) as u32
    }
}

/// The live blocks: (block, size), removed by swapping with the last.
struct Live<'a, A: BenchAlloc> {
    alloc: &'a A,
    blocks: Vec<(u64, u32)>,
    bytes: u64,
    ops: u64,
}

impl<A: BenchAlloc> Live<'_, A> {
    fn layout(size: u32) -> Layout {
        Layout::from_size_align(size as usize, 8).expect("sizes are small")
    }

    fn allocate(&mut self, size: u32, fill: u8) {
        let block = self.alloc.alloc(Self::layout(size));
        // SAFETY: a fresh block of `size` bytes, ours until freed.
        unsafe { std::ptr::write_bytes(self.alloc.addr(block), fill, size as usize) };
        self.blocks.push((block, size));
        self.bytes += u64::from(size);
        self.ops += 1;
    }

    fn free_random(&mut self, rng: &mut Rng) {
        let i = rng.below(self.blocks.len() as u64) as usize;
        let (block, size) = self.blocks.swap_remove(i);
        self.alloc.free(block, Self::layout(size));
        self.bytes -= u64::from(size);
        self.ops += 1;
    }
}

/// Runs the three phases of `workload` over `alloc`; `probe` is podkv's census.
pub fn run<A: BenchAlloc>(
    alloc: &A,
    workload: Workload,
    total: u64,
    live_cap: u64,
    seed: u64,
    probe: Probe,
) -> Vec<PhaseResult> {
    let smallest = workload
        .sizes(Phase::Before)
        .0
        .min(workload.sizes(Phase::After).0);
    let mut blocks = Vec::with_capacity((live_cap / u64::from(smallest)) as usize + 1);
    // Touch the table now, so its pages are in the base PSS, not in a phase's.
    blocks.resize(blocks.capacity(), (u64::MAX, 0));
    blocks.clear();
    let mut live = Live {
        alloc,
        blocks,
        bytes: 0,
        ops: 0,
    };
    let mut rng = Rng(seed);
    // The census walks every thread slot's lists (2 KiB a slot, 2 MiB at 1024 slots): the
    // pages it reads the first time are measurement, not allocation, so they go in the base.
    let _ = probe();
    let base = process_stats::pss_bytes();
    let mut results = Vec::new();
    for phase in Phase::ALL {
        let (faults, started) = (process_stats::minor_faults(), Instant::now());
        live.ops = 0;
        match phase {
            Phase::Delete => {
                let victims = live.blocks.len() as u64 * u64::from(workload.delete_percent()) / 100;
                for _ in 0..victims {
                    live.free_random(&mut rng);
                }
            }
            Phase::Before | Phase::After => fill(
                &mut live,
                &mut rng,
                workload.sizes(phase),
                total,
                live_cap,
                phase as u8,
            ),
        }
        let seconds = started.elapsed().as_secs_f64();
        let page_faults = process_stats::minor_faults() - faults;
        results.push(measure(&live, phase, seconds, page_faults, base, probe));
    }
    while !live.blocks.is_empty() {
        live.free_random(&mut rng);
    }
    results
}

/// Before or After: allocate `total` bytes of `sizes`, keeping the live bytes within `cap`.
fn fill<A: BenchAlloc>(
    live: &mut Live<'_, A>,
    rng: &mut Rng,
    sizes: (u32, u32),
    total: u64,
    cap: u64,
    fill: u8,
) {
    let mut allocated = 0;
    while allocated < total {
        let size = rng.size(sizes);
        while live.bytes + u64::from(size) > cap && !live.blocks.is_empty() {
            live.free_random(rng);
        }
        live.allocate(size, fill);
        allocated += u64::from(size);
    }
}

fn measure<A: BenchAlloc>(
    live: &Live<'_, A>,
    phase: Phase,
    seconds: f64,
    page_faults: u64,
    base: u64,
    probe: Probe,
) -> PhaseResult {
    let census = probe();
    PhaseResult {
        phase: phase.name().into(),
        pss_bytes: process_stats::pss_bytes().saturating_sub(base),
        live_bytes: live.bytes,
        live_blocks: live.blocks.len() as u64,
        ops: live.ops,
        seconds,
        page_faults,
        occupancy: census.as_ref().map(|(c, _)| c.occupancy.slabs),
        slab_bytes: census.as_ref().map(|(c, _)| c.slab_bytes),
        block_bytes: census.as_ref().map(|(c, _)| c.live_bytes),
        file_bytes: census.as_ref().map(|&(_, file)| file),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::alloc;

    #[test]
    fn phases_keep_live_data_under_the_cap_and_delete_their_share() {
        let results = run(&alloc::system(), Workload::W3, 4 << 20, 1 << 20, 7, &|| {
            None
        });
        let [before, delete, after] = &results[..] else {
            panic!("three phases: {results:?}")
        };
        assert!(before.live_bytes <= 1 << 20 && before.live_bytes > (1 << 20) - 150);
        let kept = before.live_blocks - before.live_blocks * 90 / 100;
        assert_eq!(delete.live_blocks, kept);
        assert!(after.live_bytes <= 1 << 20 && after.live_bytes > (1 << 20) - 250);
        assert!(before.ops > (4 << 20) / 150, "{before:?}");
    }

    #[test]
    fn sizes_are_uniform_within_bounds() {
        let mut rng = Rng(1);
        let sizes: Vec<u32> = (0..10_000).map(|_| rng.size((100, 150))).collect();
        assert!(sizes.iter().all(|s| (100..=150).contains(s)));
        assert!(sizes.contains(&100) && sizes.contains(&150));
    }
}
