//! Real processes sharing one heap: four OS processes (this test binary, re-executed) open one
//! fresh zero-length file at the same moment, allocate and free random sizes in both slab
//! heaps, and hand most blocks to each other through a stack in the heap, so most frees are
//! remote and many cross processes. Afterwards the heap must check clean with no live block.
//! The run repeats in every coherence mode (issue 5's matrix): `hardware`, `limited`, and
//! `mcas` with each mCAS implementation, where every child must have sent mCAS requests.

use podkv_alloc::stress::{self, StressReport};
use podkv_alloc::{Config, Heap};
use podkv_hw::mcas::McasKind;
use podkv_hw::Coherence;
use std::process::Command;

const ENV_ROLE: &str = "PODKV_STRESS_CHILD";
const COUNT_PROCESSES: u64 = 4;
/// The coherence modes the run repeats in.
const MODES: [(Coherence, McasKind); 4] = [
    (Coherence::Hardware, McasKind::FlushCas),
    (Coherence::Limited, McasKind::FlushCas),
    (Coherence::Mcas, McasKind::FlushCas),
    (Coherence::Mcas, McasKind::Nmp),
];

/// Steps per thread: 20 000 by default (5 000 in `mcas` heaps, where every shared-word change
/// is a request), 20× more under `scripts/test --soak` (PODKV_SOAK=1).
fn count_ops(coherence: Coherence) -> u64 {
    let ops = if coherence == Coherence::Mcas {
        5_000
    } else {
        20_000
    };
    if std::env::var_os("PODKV_SOAK").is_some() {
        20 * ops
    } else {
        ops
    }
}

fn config((coherence, mcas): (Coherence, McasKind)) -> Config {
    Config {
        small_bytes: 1 << 30,
        large_bytes: 4 << 30,
        slots: 64,
        coherence,
        mcas,
        ..Config::default()
    }
}

/// The child's entry point: runs only when re-executed with the role variable set.
#[test]
fn stress_child() {
    let Ok(spec) = std::env::var(ENV_ROLE) else {
        return;
    };
    let mut parts = spec.split('|');
    let (path, index, mode) = (
        parts.next().expect("path"),
        parts.next().expect("index").parse::<u64>().unwrap(),
        MODES[parts.next().expect("mode").parse::<usize>().unwrap()],
    );
    let heap = Heap::open(path, &config(mode)).expect("child opens the shared heap");
    if mode.0 == Coherence::Mcas {
        assert_eq!(heap.mcas_kind(), Some(mode.1));
    }
    let threads: Vec<_> = (0..2)
        .map(|t| {
            let heap = heap.clone();
            std::thread::spawn(move || stress::worker(&heap, index * 10 + t, count_ops(mode.0)))
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
    if mode.0 == Coherence::Mcas {
        assert!(heap.mcas_ops() > 0, "child {index} sent no mCAS");
        println!("child {index}: {} mCAS requests", heap.mcas_ops());
    }
}

#[test]
fn four_processes_share_one_fresh_heap_and_it_checks_clean() {
    if std::env::var(ENV_ROLE).is_ok() {
        return;
    }
    for (m, mode) in MODES.into_iter().enumerate() {
        four_processes_in(m, mode);
    }
}

fn four_processes_in(m: usize, mode: (Coherence, McasKind)) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared-heap");
    std::fs::File::create(&path).unwrap(); // zero bytes: a fresh heap nobody initialised
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..COUNT_PROCESSES)
        .map(|i| {
            Command::new(&exe)
                .args(["--exact", "stress_child", "--nocapture", "--test-threads=1"])
                .env(ENV_ROLE, format!("{}|{i}|{m}", path.display()))
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
            "{mode:?}: a stress child failed ({}):\n{said}",
            out.status
        );
        if mode.0 == Coherence::Mcas {
            assert!(
                said.contains("mCAS requests"),
                "{mode:?}: child ran:\n{said}"
            );
        }
        println!(
            "{}",
            said.lines()
                .filter(|l| l.starts_with("child "))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    // Opened as a hardware heap: the header decides the mode.
    let heap = Heap::open(&path, &config(MODES[0])).unwrap();
    assert_eq!(heap.geometry().coherence, mode.0, "the header decides");
    if mode.0 == Coherence::Mcas {
        assert_eq!(heap.mcas_kind(), Some(mode.1));
    }
    let (freed, corrupt) = stress::drain(&heap);
    assert_eq!(corrupt, 0, "{mode:?}");
    println!("{mode:?}: drained {freed} blocks left on the stack");
    let report = heap.check();
    assert!(report.is_valid(), "{mode:?}: {:#?}", report.problems);
    assert_eq!(report.live_blocks(), 0, "{mode:?}: blocks unaccounted for");
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
