//! A slot's next tenure, in another process, allocates beside the blocks the last tenure left
//! live, under the model of non-coherent caches (`podkv_hw::model`).
//!
//! A slab that filled up (detached) stays its slot's when the slot is released, with the last
//! tenure's blocks live in it. The next holder of the slot frees some of them locally and
//! allocates there again: its new blocks share lines with the old live ones. Its write-back of
//! a new block carries those lines whole, so its copy of the old blocks' bytes must be the one
//! in memory. Here the parent loaded those lines (as its own blocks, freed since) before the
//! child wrote them: without the claim's reader rule (`alloc.thread.claim.invalidate_data`)
//! the parent's write-backs put its stale bytes back over the child's live blocks.

mod common;

use podkv_alloc::{Config, Heap, Offset, ThreadHandle};
use podkv_hw::Coherence;
use std::alloc::Layout;
use std::io::{BufRead, BufReader};
use std::process::Stdio;

const ENV_CHILD: &str = "PODKV_TENURE_CHILD";
/// Not a multiple of 64: every line of a slab holds parts of two or three blocks.
const SIZE_BLOCK: usize = 48;
const COUNT_BLOCKS: usize = 6000;

fn config() -> Config {
    Config {
        small_bytes: 64 << 20,
        large_bytes: 64 << 20,
        slots: 1,
        coherence: Coherence::Limited,
        ..Config::default()
    }
}

fn layout() -> Layout {
    Layout::from_size_align(SIZE_BLOCK, 8).unwrap()
}

/// Fills block `off` with `byte` and writes it back (the SWcc writer rule).
fn fill(heap: &Heap, t: &ThreadHandle, off: Offset, byte: u8) {
    // SAFETY: the block has SIZE_BLOCK bytes and is this thread's.
    unsafe { std::ptr::write_bytes(t.resolve(off), byte, SIZE_BLOCK) };
    heap.geometry()
        .coherence
        .write_back_new(t.resolve(off), SIZE_BLOCK);
}

/// Whether block `off` holds `byte` throughout, read fresh (the SWcc reader rule).
fn holds(heap: &Heap, t: &ThreadHandle, off: Offset, byte: u8) -> bool {
    heap.geometry()
        .coherence
        .invalidate(t.resolve(off), SIZE_BLOCK);
    // SAFETY: as in `fill`; the block is live.
    let bytes = unsafe { std::slice::from_raw_parts(t.resolve(off), SIZE_BLOCK) };
    bytes.iter().all(|&b| b == byte)
}

/// The child: the slot's middle tenure. Allocates the blocks, fills them with `0xC1`, prints
/// their offsets and releases the slot with them live.
#[test]
fn tenure_child() {
    let Ok(path) = std::env::var(ENV_CHILD) else {
        return;
    };
    assert!(
        podkv_hw::model::active(),
        "the parent sets PODKV_COHERENCE_MODEL"
    );
    let heap = Heap::open(&path, &config()).unwrap();
    let t = heap.thread().unwrap();
    for _ in 0..COUNT_BLOCKS {
        let off = t.allocate(layout()).unwrap();
        fill(&heap, &t, off, 0xC1);
        println!("block {}", off.0);
    }
}

#[test]
fn a_new_tenure_allocating_beside_the_last_ones_live_blocks_keeps_them_whole() {
    if std::env::var_os(ENV_CHILD).is_some() {
        return;
    }
    let (_dir, path, heap) = common::modelled_heap(&config());
    // The first tenure: this process loads the lines the child will use, as its own blocks.
    {
        let t = heap.thread().unwrap();
        let mine: Vec<Offset> = (0..COUNT_BLOCKS)
            .map(|_| t.allocate(layout()).unwrap())
            .collect();
        for &off in &mine {
            fill(&heap, &t, off, 0xA0);
        }
        for off in mine {
            t.free(off);
        }
    }
    let child = common::child("tenure_child", ENV_CHILD, &path.display().to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the child failed: {}", out.status);
    let theirs: Vec<Offset> = BufReader::new(out.stdout.as_slice())
        .lines()
        // The harness prints `test tenure_child ... ` before the first line.
        .filter_map(|l| {
            let l = l.unwrap();
            let at = l.find("block ")?;
            Some(Offset(l[at + 6..].trim().parse().unwrap()))
        })
        .collect();
    assert_eq!(theirs.len(), COUNT_BLOCKS);
    // The third tenure: frees every third of the child's blocks (local frees into the slabs
    // the slot kept) and allocates as many new blocks, which land beside the others.
    let t = heap.thread().unwrap();
    let (freed, kept): (Vec<_>, Vec<_>) = theirs.iter().enumerate().partition(|(i, _)| i % 3 == 0);
    for (_, &off) in &freed {
        t.free(off);
    }
    let new: Vec<Offset> = freed
        .iter()
        .map(|_| t.allocate(layout()).unwrap())
        .collect();
    for &off in &new {
        fill(&heap, &t, off, 0xB2);
    }
    let torn = kept
        .iter()
        .filter(|(_, &off)| !holds(&heap, &t, off, 0xC1))
        .count();
    assert_eq!(
        torn,
        0,
        "{torn} of the child's {} live blocks lost bytes",
        kept.len()
    );
    assert!(new.iter().all(|&off| holds(&heap, &t, off, 0xB2)));
    for off in new.into_iter().chain(kept.into_iter().map(|(_, &off)| off)) {
        t.free(off);
    }
    drop(t);
    common::assert_clean(&heap, "");
}
