//! A multi-process stress workload over one heap, shared by the crate's tests and
//! `podkv heap stress`: each worker allocates random sizes from both slab heaps, writes a
//! pattern, and hands most blocks to other workers through a lock-free stack *in the heap*
//! (so most frees are remote, often across processes); it frees what it pops after checking
//! the pattern. Afterwards [`drain`] frees whatever is still on the stack, and the heap must
//! check clean with no live block.
//!
//! # The hand-over stack
//! Its head is header root word [`ROOT_STACK`]: a block's offset (bits 0..40) and a tag
//! (bits 40..64) bumped by every CAS. A block on the stack starts with
//! `[next offset, size, seed]`; its remaining bytes hold a pattern derived from the seed.
//!
//! # Coherence
//! The blocks follow the SWcc protocol like any user's data, so the workload is correct on a
//! pod without coherence (and under `podkv_hw::model`): a block is written back whole before
//! it is pushed (its link each time it is set), and a popper invalidates the link before
//! reading it and the block before checking it. The stack's head is a header root word, kept
//! coherent (a CPU CAS; the model maps the header shared).
//!
//! "Do not use this as a benchmark": it checks every byte it hands over.

use crate::heap::Heap;
use crate::offset::Offset;
use crate::thread::ThreadHandle;
use std::alloc::Layout;
use podkv_hw::sync::mapped::{AtomicU64, Ordering};

/// The header root word holding the stack's head.
pub const ROOT_STACK: usize = 31;
const MASK_OFFSET: u64 = (1 << 40) - 1;
const SIZE_NODE: usize = 24;

/// What one worker did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StressReport {
    /// Blocks allocated.
    pub allocated: u64,
    /// Blocks pushed for others.
    pub handed: u64,
    /// Blocks popped from the stack and freed (after their pattern checked out).
    pub freed_from_stack: u64,
    /// Own blocks freed directly.
    pub freed_own: u64,
    /// Blocks whose pattern was wrong (must be zero).
    pub corrupt: u64,
}

/// A small deterministic generator (xorshift64*), so a worker's run is reproducible by seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed (any value).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

fn stack(heap: &Heap) -> &AtomicU64 {
    heap.root(ROOT_STACK)
}

fn node(t: &ThreadHandle, off: Offset) -> &[AtomicU64; 3] {
    // SAFETY: `off` names a block of at least SIZE_NODE bytes that is (or was, for a racing
    // pop whose CAS will fail) on the stack; the heap keeps all slab memory mapped, so the read
    // is of mapped memory, and the words are atomics valid for any bits.
    unsafe { &*(t.resolve(off) as *const [AtomicU64; 3]) }
}

fn push(heap: &Heap, t: &ThreadHandle, off: Offset) {
    let head = stack(heap);
    let mut cur = head.load(Ordering::Acquire);
    loop {
        node(t, off)[0].store(cur & MASK_OFFSET, Ordering::Relaxed);
        heap.geometry().coherence.write_back(t.resolve(off), 8);
        let new = ((cur >> 40).wrapping_add(1) << 40) | off.0;
        match head.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return,
            Err(seen) => cur = seen,
        }
    }
}

fn pop(heap: &Heap, t: &ThreadHandle) -> Option<Offset> {
    let head = stack(heap);
    let mut cur = head.load(Ordering::Acquire);
    loop {
        let off = cur & MASK_OFFSET;
        if off == 0 {
            return None;
        }
        heap.geometry()
            .coherence
            .invalidate(t.resolve(Offset(off)), 8);
        let next = node(t, Offset(off))[0].load(Ordering::Relaxed) & MASK_OFFSET;
        let new = ((cur >> 40).wrapping_add(1) << 40) | next;
        match head.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some(Offset(off)),
            Err(seen) => cur = seen,
        }
    }
}

/// A block's pattern: a window of one long pseudo-random byte string, starting at a place
/// its seed picks, so neighbouring blocks differ and a check is one `memcmp`.
fn pattern(seed: u64, len: usize) -> &'static [u8] {
    static BYTES: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let bytes = BYTES.get_or_init(|| {
        let mut rng = Rng::new(0x5EED);
        (0..512 * 1024 + 4096)
            .map(|_| rng.next_u64() as u8)
            .collect()
    });
    let start = (seed % 4096) as usize;
    &bytes[start..start + len]
}

/// Random sizes: mostly small, some large, up to 512 KiB.
fn size(rng: &mut Rng) -> usize {
    match rng.below(100) {
        0..=79 => SIZE_NODE + rng.below(1000) as usize,
        80..=97 => 1025 + rng.below(64 * 1024) as usize,
        _ => 1025 + rng.below(511 * 1024) as usize,
    }
}

fn fill(heap: &Heap, t: &ThreadHandle, off: Offset, size: usize, seed: u64) {
    heap.geometry()
        .coherence
        .reload_edges(t.resolve(off), size);
    let words = node(t, off);
    words[1].store(size as u64, Ordering::Relaxed);
    words[2].store(seed, Ordering::Relaxed);
    // SAFETY: the block has `size` bytes and is ours until pushed.
    let bytes = unsafe { std::slice::from_raw_parts_mut(t.resolve(off), size) };
    bytes[SIZE_NODE..].copy_from_slice(pattern(seed, size - SIZE_NODE));
    // A new block, written whole: `write_back_new`, or under the model a block refilled where
    // this cache last saw an aligned window of the same pattern would look clean.
    heap.geometry()
        .coherence
        .write_back_new(t.resolve(off), size);
}

fn verify_and_free(heap: &Heap, t: &ThreadHandle, off: Offset) -> bool {
    let coherence = heap.geometry().coherence;
    coherence.invalidate(t.resolve(off), SIZE_NODE);
    let words = node(t, off);
    let (size, seed) = (
        words[1].load(Ordering::Relaxed) as usize,
        words[2].load(Ordering::Relaxed),
    );
    let ok = (SIZE_NODE..=512 * 1024).contains(&size) && {
        coherence.invalidate(t.resolve(off), size);
        // SAFETY: the block was filled with `size` bytes before it was pushed, and we own it now.
        let bytes = unsafe { std::slice::from_raw_parts(t.resolve(off), size) };
        bytes[SIZE_NODE..] == *pattern(seed, size - SIZE_NODE)
    };
    t.free(off);
    ok
}

/// Runs `ops` steps of the stress workload as one worker with its own thread slot.
pub fn worker(heap: &Heap, seed: u64, ops: u64) -> StressReport {
    let t = heap.thread().expect("a free thread slot");
    let mut rng = Rng::new(seed);
    let mut own: Vec<(Offset, usize)> = Vec::new();
    let mut report = StressReport::default();
    for _ in 0..ops {
        match rng.below(10) {
            0..=4 => {
                let size = size(&mut rng);
                let Ok(off) = t.allocate(Layout::from_size_align(size, 8).expect("valid")) else {
                    continue;
                };
                report.allocated += 1;
                fill(heap, &t, off, size, rng.next_u64());
                if rng.below(10) < 8 {
                    push(heap, &t, off);
                    report.handed += 1;
                } else {
                    own.push((off, size));
                }
            }
            5..=7 => {
                if let Some(off) = pop(heap, &t) {
                    report.corrupt += u64::from(!verify_and_free(heap, &t, off));
                    report.freed_from_stack += 1;
                }
            }
            _ => {
                if !own.is_empty() {
                    let (off, _) = own.swap_remove(rng.below(own.len() as u64) as usize);
                    report.corrupt += u64::from(!verify_and_free(heap, &t, off));
                    report.freed_own += 1;
                }
            }
        }
    }
    for (off, _) in own {
        report.corrupt += u64::from(!verify_and_free(heap, &t, off));
        report.freed_own += 1;
    }
    report
}

/// Frees every block still on the hand-over stack; returns how many, and how many were corrupt.
pub fn drain(heap: &Heap) -> (u64, u64) {
    let t = heap.thread().expect("a free thread slot");
    let (mut freed, mut corrupt) = (0, 0);
    while let Some(off) = pop(heap, &t) {
        corrupt += u64::from(!verify_and_free(heap, &t, off));
        freed += 1;
    }
    (freed, corrupt)
}
