//! Real processes sharing one heap: four OS processes (this test binary, re-executed) open one
//! fresh zero-length file at the same moment, allocate and free random sizes in both slab
//! heaps, and hand most blocks to each other through a stack in the heap, so most frees are
//! remote and many cross processes. Afterwards the heap must check clean with no live block.

use podkv_alloc::stress::{self, StressReport};
use podkv_alloc::{Config, Heap};
use std::process::Command;

const ENV_ROLE: &str = "PODKV_STRESS_CHILD";
const COUNT_PROCESSES: u64 = 4;
/// Steps per thread: 20 000 by default, 400 000 under `scripts/test --soak` (PODKV_SOAK=1).
fn count_ops() -> u64 {
    if std::env::var_os("PODKV_SOAK").is_some() {
        400_000
    } else {
        20_000
    }
}

fn config() -> Config {
    Config {
        small_bytes: 1 << 30,
        large_bytes: 4 << 30,
        slots: 64,
        ..Config::default()
    }
}

/// The child's entry point: runs only when re-executed with the role variable set.
#[test]
fn stress_child() {
    let Ok(spec) = std::env::var(ENV_ROLE) else {
        return;
    };
    let (path, index) = spec.split_once('|').expect("path|index");
    let heap = Heap::open(path, &config()).expect("child opens the shared heap");
    let index: u64 = index.parse().unwrap();
    let threads: Vec<_> = (0..2)
        .map(|t| {
            let heap = heap.clone();
            std::thread::spawn(move || stress::worker(&heap, index * 10 + t, count_ops()))
        })
        .collect();
    for thread in threads {
        let report: StressReport = thread.join().unwrap();
        assert_eq!(
            report.corrupt, 0,
            "corrupt blocks seen by child {index}: {report:?}"
        );
        assert!(
            report.freed_from_stack > 0,
            "child {index} never took another's block"
        );
        println!("child {index}: {report:?}");
    }
}

#[test]
fn four_processes_share_one_fresh_heap_and_it_checks_clean() {
    if std::env::var(ENV_ROLE).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared-heap");
    std::fs::File::create(&path).unwrap(); // zero bytes: a fresh heap nobody initialised
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..COUNT_PROCESSES)
        .map(|i| {
            Command::new(&exe)
                .args(["--exact", "stress_child", "--nocapture", "--test-threads=1"])
                .env(ENV_ROLE, format!("{}|{i}", path.display()))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "a stress child failed ({}):\n{said}",
            out.status
        );
        println!(
            "{}",
            said.lines()
                .filter(|l| l.starts_with("child "))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    let heap = Heap::open(&path, &config()).unwrap();
    let (freed, corrupt) = stress::drain(&heap);
    assert_eq!(corrupt, 0);
    println!("drained {freed} blocks left on the stack");
    let report = heap.check();
    assert!(report.is_valid(), "{:#?}", report.problems);
    assert_eq!(report.live_blocks(), 0, "blocks unaccounted for");
    assert!(
        report.claimed_slots.is_empty(),
        "every slot released: {:?}",
        report.claimed_slots
    );
    assert!(
        report.heaps[0].len > 0 && report.heaps[1].len > 0,
        "both slab heaps were used"
    );
}
