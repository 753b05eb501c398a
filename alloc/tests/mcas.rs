//! `mcas` heaps (CXLALLOC §4): every change of a multi-writer word goes through memory-side
//! CAS, with each implementation (`flush-cas`, `nmp`); a `hardware` heap sends none. Separate
//! OS processes sharing a fresh mcas heap of each implementation run in `multiprocess.rs`'s
//! coherence-mode matrix.

use podkv_alloc::layout::Geometry;
use podkv_alloc::process::SlotLife;
use podkv_alloc::slot::Owner;
use podkv_alloc::{Config, Heap, Offset};
use podkv_hw::mcas::processor::{is_beating, TAKEOVER_AFTER};
use podkv_hw::mcas::{McasKind, Processor, RegionFile};
use podkv_hw::Coherence;
use std::alloc::Layout;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn config(coherence: Coherence, mcas: McasKind) -> Config {
    Config {
        small_bytes: 1 << 30,
        large_bytes: 4 << 30,
        slots: 64,
        coherence,
        mcas,
        ..Config::default()
    }
}

/// Each mCAS implementation, and a `hardware` heap, which must send no request.
const MODES_SENDING_AND_NOT: [(Coherence, McasKind); 3] = [
    (Coherence::Mcas, McasKind::FlushCas),
    (Coherence::Mcas, McasKind::Nmp),
    (Coherence::Hardware, McasKind::FlushCas),
];

fn small(size: usize) -> Layout {
    Layout::from_size_align(size, 8).unwrap()
}

/// mCAS requests `f` sends from this process.
fn ops_during(heap: &Heap, f: impl FnOnce()) -> u64 {
    let before = heap.mcas_ops();
    f();
    heap.mcas_ops() - before
}

#[test]
fn grow_remote_free_and_global_push_pop_go_through_mcas_and_hardware_sends_none() {
    for (coherence, kind) in MODES_SENDING_AND_NOT {
        let mcas = coherence == Coherence::Mcas;
        let dir = tempfile::tempdir().unwrap();
        let heap = Heap::open(dir.path().join("heap"), &config(coherence, kind)).unwrap();
        let owner = heap.thread().unwrap();
        let mut blocks = Vec::new();
        let grow = ops_during(&heap, || {
            blocks.extend((0..64).map(|_| owner.allocate(small(512)).unwrap()));
        });
        assert_eq!(grow > 0, mcas, "{coherence}/{kind}: growing sent {grow}");
        let freer = heap.thread().unwrap();
        let remote = ops_during(&heap, || {
            for &block in &blocks {
                freer.free(block);
            }
            drop(freer); // flushes its batch of remote frees onto the slab's remote word
        });
        assert_eq!(
            remote > 0,
            mcas,
            "{coherence}/{kind}: remote frees sent {remote}"
        );
        let push = ops_during(&heap, || drop(owner)); // empty slabs go to the global lists
        assert_eq!(push > 0, mcas, "{coherence}/{kind}: pushes sent {push}");
        let len = heap.len(heap.slab_heap(podkv_alloc::Kind::Small));
        let again = heap.thread().unwrap();
        let pop = ops_during(&heap, || {
            let block: Offset = again.allocate(small(512)).unwrap();
            again.free(block);
        });
        assert_eq!(pop > 0, mcas, "{coherence}/{kind}: the pop sent {pop}");
        assert_eq!(
            heap.len(heap.slab_heap(podkv_alloc::Kind::Small)),
            len,
            "the slab came off the global list, not from growth"
        );
        drop(again);
        assert!(heap.check().is_valid());
    }
}

#[test]
fn the_header_records_the_impl_and_refuses_it_outside_mcas() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("heap");
    let heap = Heap::open(&path, &config(Coherence::Mcas, McasKind::Nmp)).unwrap();
    let word = heap.geometry().to_word();
    assert_eq!(Geometry::from_word(word).unwrap().mcas, McasKind::Nmp);
    let hardware = Geometry {
        coherence: Coherence::Hardware,
        ..heap.geometry()
    };
    assert!(Geometry::from_word(hardware.to_word()).is_err());
    let device = Config {
        mcas: McasKind::Device,
        ..config(Coherence::Mcas, McasKind::FlushCas)
    };
    let err = Heap::open(dir.path().join("device"), &device).unwrap_err();
    assert!(err.to_string().contains("not available"), "{err}");
}

const ENV_PROCESSOR: &str = "PODKV_MCAS_PROCESSOR";

/// The child: serves the heap's mCAS region as its own process until killed.
#[test]
fn nmp_processor_child() {
    let Ok(spec) = std::env::var(ENV_PROCESSOR) else {
        return;
    };
    let (path, offset) = spec.split_once('|').unwrap();
    let file = RegionFile::open_at(path.as_ref(), offset.parse().unwrap()).unwrap();
    let processor = Processor::claim(file.region(), TAKEOVER_AFTER).unwrap();
    processor.run(&AtomicBool::new(false));
}

#[test]
fn a_killed_processor_process_is_replaced_and_the_heap_works_on() {
    if std::env::var(ENV_PROCESSOR).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("heap");
    let config = config(Coherence::Mcas, McasKind::Nmp);
    let offset = Heap::open(&path, &config).unwrap().layout().mcas; // closed: its processor stops
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "nmp_processor_child", "--test-threads=1"])
        .env(ENV_PROCESSOR, format!("{}|{offset}", path.display()))
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let region = RegionFile::open_at(&path, offset).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !is_beating(region.region(), Duration::from_millis(50)) {
        assert!(
            Instant::now() < deadline,
            "the processor child never served"
        );
    }
    let heap = Heap::open(&path, &config).unwrap(); // finds the child serving: starts none
    let t = heap.thread().unwrap();
    let first: Vec<Offset> = (0..100).map(|_| t.allocate(small(4096)).unwrap()).collect();
    assert!(heap.mcas_ops() > 0);
    child.kill().unwrap();
    child.wait().unwrap();
    // Requests now find the processor dead (an error from podkv_hw::mcas, after its heartbeat
    // timeout); the heap starts a processor on a thread here and carries on.
    let started = Instant::now();
    let more: Vec<Offset> = (0..2000)
        .map(|_| t.allocate(small(4096)).unwrap())
        .collect();
    let other = heap.thread().unwrap();
    for block in first.into_iter().chain(more) {
        other.free(block);
    }
    drop((t, other));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took over in {:?}",
        started.elapsed()
    );
    assert!(is_beating(region.region(), Duration::from_secs(1)));
    let report = heap.check();
    assert!(report.is_valid(), "{:#?}", report.problems);
    assert_eq!(report.live_blocks(), 0);
}

/// The huge heap's reservation array lies among the mCAS targets: claiming a run of ranges
/// and giving it back go through mCAS too (none in a `hardware` heap), and a checker finds the
/// array consistent afterwards.
#[test]
fn huge_ranges_are_claimed_and_given_back_through_mcas() {
    for (coherence, kind) in MODES_SENDING_AND_NOT {
        let mcas = coherence == Coherence::Mcas;
        let dir = tempfile::tempdir().unwrap();
        let heap = Heap::open(dir.path().join("heap"), &config(coherence, kind)).unwrap();
        let thread = heap.thread().unwrap();
        let huge = Layout::from_size_align(3 << 20, 8).unwrap();
        let mut block = Offset(0);
        let claim = ops_during(&heap, || block = thread.allocate(huge).unwrap());
        assert_eq!(claim > 0, mcas, "{coherence}/{kind}: claiming sent {claim}");
        let give_back = ops_during(&heap, || {
            thread.free(block);
            drop(thread); // collects the freed allocation and gives its run back
        });
        assert_eq!(
            give_back > 0,
            mcas,
            "{coherence}/{kind}: giving back sent {give_back}"
        );
        let report = heap.check();
        assert!(report.is_valid(), "{coherence}/{kind}: {report:?}");
    }
}

/// Thread-test's steady state (CXLALLOC §5.2.2: a thread allocates a batch spanning two slabs
/// and frees it) sends no mCAS in either implementation: the filled slab stays attached while
/// it is its class's only one and nobody else freed into it, and an emptied slab is sized
/// again without rewriting a remote word that already counts every block free.
#[test]
fn a_thread_that_frees_its_own_blocks_sends_no_mcas_in_the_steady_state() {
    for kind in [McasKind::FlushCas, McasKind::Nmp] {
        let dir = tempfile::tempdir().unwrap();
        let heap = Heap::open(dir.path().join("heap"), &config(Coherence::Mcas, kind)).unwrap();
        let thread = heap.thread().unwrap();
        let mut blocks = vec![Offset(0); 1000];
        let mut round = || {
            ops_during(&heap, || {
                for block in blocks.iter_mut() {
                    *block = thread.allocate(small(64)).unwrap();
                }
                for &block in &blocks {
                    thread.free(block);
                }
            })
        };
        assert!(
            round() > 0,
            "{kind}: the first round grows the heap by mCAS"
        );
        for i in 1..20 {
            assert_eq!(round(), 0, "{kind}: round {i}");
        }
        drop(thread);
        let report = heap.check();
        assert!(report.is_valid(), "{kind}: {report:?}");
    }
}

/// This process as a slot owner, with a pid no process has (above Linux's `pid_max`): an owner
/// of this host known dead.
fn dead_owner() -> Owner {
    Owner {
        pid: 0xFF_FFFE,
        ..podkv_alloc::process::me()
    }
}

/// A heap that logs nothing (so a claim does not also move its acknowledgement window, one
/// more mCAS) and has no huge heap unless asked.
fn quiet(coherence: Coherence, kind: McasKind, huge: bool) -> Config {
    Config {
        recoverable: false,
        huge_bytes: if huge { 1 << 31 } else { 0 },
        ..config(coherence, kind)
    }
}

/// The word at heap offset `at`.
fn word_at(heap: &Heap, at: u64) -> &AtomicU64 {
    // SAFETY: callers pass offsets of words in the HWcc region, mapped while `heap` lives.
    unsafe { &*(heap.resolve(Offset(at)) as *const AtomicU64) }
}

/// The owner words live among the mCAS targets (the HWcc region), and every change of them is
/// one request: a claim, an adoption (planted dead owner, then recovered), a release.
#[test]
fn slot_claims_adoptions_and_releases_are_one_mcas_each() {
    for (coherence, kind) in MODES_SENDING_AND_NOT {
        let sends = u64::from(coherence == Coherence::Mcas);
        let dir = tempfile::tempdir().unwrap();
        let heap = Heap::open(dir.path().join("heap"), &quiet(coherence, kind, false)).unwrap();
        let layout = heap.layout();
        let at =
            heap.slot_owner_word(0) as *const AtomicU64 as u64 - heap.resolve(Offset(0)) as u64;
        assert_eq!(at, layout.slot_owners);
        assert!(
            (layout.hwcc..layout.hwcc_end).contains(&at),
            "an mCAS target"
        );
        let mut thread = None;
        let claim = ops_during(&heap, || thread = Some(heap.thread().unwrap()));
        let thread = thread.unwrap();
        let i = u64::from(thread.slot_index());
        assert_eq!(claim, sends, "{coherence}/{kind}: the claim");
        assert_eq!(heap.slot_owner(i), Some(podkv_alloc::process::me()));
        let release = ops_during(&heap, || drop(thread));
        assert_eq!(release, sends, "{coherence}/{kind}: the release");
        assert_eq!(heap.slot_owner_word(i).load(Ordering::Acquire), 0);
        let plant = ops_during(&heap, || assert!(heap.try_claim_slot(i, 0, dead_owner())));
        assert_eq!(plant, sends, "{coherence}/{kind}: planting an owner");
        assert!(matches!(heap.slot_life(i), SlotLife::Dead(_)));
        let mut recovered = Vec::new();
        let adopt = ops_during(&heap, || recovered = heap.recover_dead());
        assert_eq!(recovered.len(), 1);
        assert_eq!(
            adopt,
            2 * sends,
            "{coherence}/{kind}: adoption, then release"
        );
        assert_eq!(heap.slot_owner_word(i).load(Ordering::Acquire), 0);
    }
}

/// A process's hazard record is claimed through the heap's hook when the heap opens (the
/// only request opening sends), its owner word is this process in the HWcc region, and
/// closing gives it back.
#[test]
fn a_hazard_record_is_claimed_by_mcas_at_open_and_given_back_at_close() {
    for (coherence, kind) in MODES_SENDING_AND_NOT {
        let sends = u64::from(coherence == Coherence::Mcas);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("heap");
        let without = Heap::open(dir.path().join("flat"), &quiet(coherence, kind, false)).unwrap();
        assert_eq!(
            without.mcas_ops(),
            0,
            "{coherence}/{kind}: no huge heap, no record"
        );
        let heap = Heap::open(&path, &quiet(coherence, kind, true)).unwrap();
        assert_eq!(
            heap.mcas_ops(),
            sends,
            "{coherence}/{kind}: the record's claim"
        );
        let owners = heap.layout().hazard_owners;
        assert!(owners < heap.layout().hwcc_end);
        let mine = (0..64)
            .filter(|&r| word_at(&heap, owners + 8 * r).load(Ordering::Acquire) != 0)
            .collect::<Vec<_>>();
        assert_eq!(mine.len(), 1, "{coherence}/{kind}");
        let word = word_at(&heap, owners + 8 * mine[0]).load(Ordering::Acquire);
        assert_eq!(Owner::unpack(word), Some(podkv_alloc::process::me()));
        drop(heap);
        let again = Heap::open(&path, &quiet(coherence, kind, true)).unwrap();
        let held = (0..64)
            .filter(|&r| word_at(&again, owners + 8 * r).load(Ordering::Acquire) != 0)
            .count();
        assert_eq!(held, 1, "{coherence}/{kind}: the first was given back");
    }
}

const ENV_CLAIMER: &str = "PODKV_MCAS_CLAIMER";

/// The child: claims a slot of the heap (an `nmp` heap whose processor the parent runs),
/// prints the slot and the requests its claim sent, and dies holding it.
#[test]
fn slot_claimer_child() {
    let Ok(path) = std::env::var(ENV_CLAIMER) else {
        return;
    };
    let heap = Heap::open(&path, &quiet(Coherence::Mcas, McasKind::Nmp, false)).unwrap();
    let mut thread = None;
    let claim = ops_during(&heap, || thread = Some(heap.thread().unwrap()));
    let thread = thread.unwrap();
    println!("claimed slot {} with {claim} requests", thread.slot_index());
    // Dies holding the slot (and its process line): no destructor runs.
    std::process::exit(0);
}

/// Another process claims a slot by mCAS on its process line (one request), dies holding it,
/// and this process adopts the dead slot by mCAS and recovers it; the heap checks clean.
#[test]
fn another_process_claims_by_mcas_and_its_dead_slot_is_adopted_by_mcas() {
    if std::env::var(ENV_CLAIMER).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("heap");
    let heap = Heap::open(&path, &quiet(Coherence::Mcas, McasKind::Nmp, false)).unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "slot_claimer_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ENV_CLAIMER, &path)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = said
        .lines()
        .find_map(|l| l.split_once("claimed slot ").map(|(_, said)| said))
        .unwrap_or_else(|| panic!("the child said {said}"));
    let (slot, rest) = line.split_once(' ').unwrap();
    let slot: u64 = slot.parse().unwrap();
    assert_eq!(rest, "with 1 requests", "the child's claim is one mCAS");
    let dead = heap.slot_owner_word(slot).load(Ordering::Acquire);
    assert_ne!(dead, 0);
    assert_eq!(heap.slot_life(slot), SlotLife::Dead(dead));
    let mut recovered = Vec::new();
    let adopt = ops_during(&heap, || recovered = heap.recover_dead());
    assert_eq!(recovered.len(), 1);
    assert_eq!(recovered[0].slot, slot as u32);
    assert_eq!(
        adopt, 2,
        "adoption, then release, by mCAS (an empty slot: nothing else)"
    );
    assert_eq!(heap.slot_owner_word(slot).load(Ordering::Acquire), 0);
    let report = heap.check();
    assert!(report.is_valid(), "{:#?}", report.problems);
}
