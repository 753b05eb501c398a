//! A remote free of one huge allocation, in another process, leaves the owner's neighbouring
//! descriptor alone, under the model of non-coherent caches (`podkv_hw::model`).
//!
//! Any process frees a huge block by marking its descriptor freed and writing it back. The
//! write-back carries the whole line, so no other descriptor may share it: here the freer
//! read the descriptor, then (stopped at the crash point `huge_free.logged`) the owner made a
//! new allocation in the next descriptor, and with two descriptors to a line (heap format 9)
//! the free put the stale, empty neighbour back.

mod common;

use podkv_alloc::{Config, Heap, Offset};
use podkv_hw::Coherence;
use std::alloc::Layout;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ENV_CHILD: &str = "PODKV_HUGE_LINES_CHILD";

fn config() -> Config {
    Config {
        small_bytes: 16 << 20,
        large_bytes: 16 << 20,
        slots: 4,
        coherence: Coherence::Limited,
        ..Config::default()
    }
}

fn layout() -> Layout {
    Layout::from_size_align(1 << 20, 4096).unwrap()
}

/// The child: frees the block, stopping once (`PODKV_CRASH_STOP=once`) between reading its
/// descriptor (which brings the line into this process's cache) and marking it freed.
#[test]
fn huge_lines_child() {
    let Ok(spec) = std::env::var(ENV_CHILD) else {
        return;
    };
    let (path, block) = spec.split_once('|').unwrap();
    let heap = Heap::open(path, &config()).unwrap();
    heap.thread().unwrap().free(Offset(block.parse().unwrap()));
}

/// Whether process `pid` is stopped.
fn stopped(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(") ")
        .is_some_and(|(_, rest)| rest.starts_with('T'))
}

#[test]
fn a_remote_huge_free_keeps_the_owners_next_allocation() {
    if std::env::var_os(ENV_CHILD).is_some() {
        return;
    }
    let (_dir, path, heap) = common::modelled_heap(&config());
    let t = heap.thread().unwrap();
    let first = t.allocate(layout()).unwrap();
    let freed = t.allocate(layout()).unwrap();
    let spec = format!("{}|{}", path.display(), freed.0);
    let mut child = common::child("huge_lines_child", ENV_CHILD, &spec)
        .env("PODKV_CRASH_POINT", "huge_free.logged")
        .env("PODKV_CRASH_STOP", "once")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !stopped(child.id()) {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the child never stopped"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the child ended before its free"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // The owner's next allocation takes the descriptor after the one the child is freeing.
    let next = t.allocate(layout()).unwrap();
    let cont = Command::new("kill")
        .args(["-CONT", &child.id().to_string()])
        .status();
    assert!(cont.unwrap().success());
    assert!(child.wait().unwrap().success(), "the child failed");
    let found = heap.huge_allocation(next);
    assert!(
        found.is_some(),
        "the owner's new allocation lost its descriptor"
    );
    for off in [first, next] {
        t.free(off);
    }
    drop(t);
    // Clean includes the child's free keeping its mark (an owner's write-back of its own line
    // over it would leave the block live for ever).
    common::assert_clean(&heap, "");
}
