//! A proptest state machine: random allocate/free sequences by two thread slots (two handles,
//! so frees by the other slot are remote) against a reference allocator that is just the set
//! of live blocks. After every step the blocks are disjoint, their bytes intact, and the heap
//! checker agrees with the model on the number of live blocks.

use podkv_alloc::{Config, Heap, Offset, ThreadHandle};
use proptest::prelude::*;
use std::alloc::Layout;
use std::collections::BTreeMap;

#[derive(Clone, Debug)]
enum Op {
    Allocate {
        by: usize,
        size: usize,
        align: usize,
    },
    Free {
        by: usize,
        pick: usize,
    },
}

fn op(threads: usize) -> impl Strategy<Value = Op> {
    let size = prop_oneof![1usize..=1024, 1025usize..=8192, 8193usize..=524_288];
    prop_oneof![
        3 => (0..threads, size, prop_oneof![Just(1usize), Just(8), Just(64), Just(4096)])
            .prop_map(|(by, size, align)| Op::Allocate { by, size, align }),
        2 => (0..threads, any::<usize>()).prop_map(|(by, pick)| Op::Free { by, pick }),
    ]
}

/// The reference allocator: live blocks by offset, with size and fill byte.
#[derive(Default)]
struct Model {
    live: BTreeMap<u64, (usize, u8)>,
}

impl Model {
    fn overlaps(&self, off: u64, size: usize) -> bool {
        let before = self
            .live
            .range(..=off)
            .next_back()
            .is_some_and(|(&o, &(s, _))| o + s as u64 > off);
        let after = self
            .live
            .range(off..)
            .next()
            .is_some_and(|(&o, _)| o < off + size as u64);
        before || after
    }
}

fn run(ops: Vec<Op>, threads: usize) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        small_bytes: 64 << 20,
        large_bytes: 256 << 20,
        slots: 8,
        ..Config::default()
    };
    let heap = Heap::open(dir.path().join("heap"), &config).unwrap();
    let handles: Vec<ThreadHandle> = (0..threads).map(|_| heap.thread().unwrap()).collect();
    let mut model = Model::default();
    for (step, op) in ops.into_iter().enumerate() {
        match op {
            Op::Allocate { by, size, align } => {
                let t = &handles[by];
                let off = t
                    .allocate(Layout::from_size_align(size, align).unwrap())
                    .unwrap()
                    .0;
                prop_assert_eq!(t.resolve(Offset(off)) as usize % align, 0);
                prop_assert!(
                    !model.overlaps(off, size),
                    "block {off:#x}+{size} overlaps a live one"
                );
                let fill = step as u8;
                // SAFETY: a fresh block of `size` bytes.
                unsafe { std::ptr::write_bytes(t.resolve(Offset(off)), fill, size) };
                model.live.insert(off, (size, fill));
            }
            Op::Free { by, pick } => {
                if model.live.is_empty() {
                    continue;
                }
                let off = *model.live.keys().nth(pick % model.live.len()).unwrap();
                let (size, fill) = model.live.remove(&off).unwrap();
                let t = &handles[by];
                // SAFETY: the block is live and `size` bytes long.
                let bytes = unsafe { std::slice::from_raw_parts(t.resolve(Offset(off)), size) };
                prop_assert!(
                    bytes.iter().all(|&b| b == fill),
                    "block {off:#x} was overwritten"
                );
                t.free(Offset(off));
            }
        }
        let report = heap.check();
        prop_assert!(report.is_valid(), "step {step}: {:?}", report.problems);
        prop_assert_eq!(report.live_blocks(), model.live.len() as u64);
    }
    let remaining: Vec<u64> = model.live.keys().copied().collect();
    for off in remaining {
        handles[0].free(Offset(off));
    }
    drop(handles);
    let report = heap.check();
    prop_assert!(report.is_valid(), "{:?}", report.problems);
    prop_assert_eq!(report.live_blocks(), 0);
    prop_assert!(report.claimed_slots.is_empty());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn one_thread_matches_the_model(ops in proptest::collection::vec(op(1), 1..120)) {
        run(ops, 1)?;
    }

    #[test]
    fn two_threads_match_the_model(ops in proptest::collection::vec(op(2), 1..120)) {
        run(ops, 2)?;
    }
}
