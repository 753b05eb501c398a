//! Recovery of a holder killed in a huge step, by the slot's last holder (this host, or for a
//! crashed host) or by a third process, after a checker looked at the slot.

use super::*;

/// Who recovers a crashed holder's slot.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Recoverer {
    /// This process, on the crashed one's host (it judges it dead; the dead process's dirty
    /// lines reach memory as its host's cache would give them).
    Here,
    /// This process, for a crashed host (lease mode, `recover_host` once fenced): the dead
    /// process's cache died with its host, so only what it wrote back counts.
    OtherHost,
    /// A third process of this host, which then exits: what it changed for others must be
    /// written back.
    Third,
}

/// The crash points and recoverers of
/// [`a_crashed_holders_huge_step_is_recovered_by_its_slots_last_holder`].
const RECOVERY_CASES: [(&str, Recoverer); 5] = [
    ("huge_alloc.live", Recoverer::Here),
    ("huge_free.logged", Recoverer::Here),
    ("huge_alloc.live", Recoverer::OtherHost),
    ("huge_free.logged", Recoverer::OtherHost),
    ("huge_free.logged", Recoverer::Third),
];

/// What recovery left in flight, as a line between processes.
fn in_flight_word(in_flight: podkv_alloc::InFlight) -> String {
    match in_flight {
        podkv_alloc::InFlight::Alloc(off) => format!("alloc {}", off.0),
        podkv_alloc::InFlight::Free(off) => format!("free {}", off.0),
        podkv_alloc::InFlight::None => "none 0".to_owned(),
    }
}

/// Small blocks the crashed holder allocates first, and their size.
const COUNT_SMALL: usize = 300;
const SIZE_SMALL: usize = 64;

const TEST: &str = "recovery::a_crashed_holders_huge_step_is_recovered_by_its_slots_last_holder";

fn recovery_config(other_host: bool) -> Config {
    Config {
        liveness: if other_host {
            Liveness::Lease
        } else {
            Liveness::Process
        },
        lease: LEASE,
        ..config(2)
    }
}

/// A process frees another's huge block and allocates one of its own, and is killed in one
/// of those steps. A checker that read the slot before sees the step half made; then the
/// slot is recovered, by the process that held it before (whose cache still holds that
/// slot's huge log, descriptors and words as they were then) or by a third process. The
/// block in flight is settled as the application would (an allocation nobody received is
/// freed; a free is finished by recovery), and then every block comes back and the heap
/// checks clean.
#[test]
fn a_crashed_holders_huge_step_is_recovered_by_its_slots_last_holder() {
    if let Some(parts) = role(TEST) {
        return child(&parts);
    }
    if other_role() {
        return;
    }
    for (point, recoverer) in RECOVERY_CASES {
        one_case(point, recoverer);
    }
}

/// A child: the holder that crashes (`slot` given), or the third process that recovers it.
fn child(parts: &[String]) {
    let other_host = parts[2] == "other";
    let heap = Heap::open(&parts[1], &recovery_config(other_host)).unwrap();
    if parts[3] == "recover" {
        for recovered in heap.recover_dead() {
            println!("in-flight {}", in_flight_word(recovered.in_flight));
        }
        return;
    }
    let t = heap.thread().unwrap();
    assert_eq!(t.slot_index().to_string(), parts[3], "the free slot");
    if !other_host {
        // Small blocks in the slabs the slot's last tenure used: the application holds them
        // (a crashed host's cache takes such allocations with it: not on another host).
        for _ in 0..COUNT_SMALL {
            let off = t.allocate(layout(SIZE_SMALL)).unwrap();
            fill(&heap, &t, off, SIZE_SMALL, 0x66);
            println!("small {}", off.0);
        }
    }
    t.free(Offset(parts[4].parse().unwrap()));
    let _ = t.allocate(layout(SIZE_HUGE)).unwrap();
    std::process::exit(3); // the armed point was never passed
}

/// Runs the child to its death at `point`, has `recoverer` recover it, settles and checks.
fn one_case(point: &str, recoverer: Recoverer) {
    let other_host = recoverer == Recoverer::OtherHost;
    let case = format!("{point} ({recoverer:?})");
    let (_dir, path, heap) = common::modelled_heap(&recovery_config(other_host));
    let mine = heap.thread().unwrap();
    let theirs = mine.allocate(layout(SIZE_HUGE)).unwrap();
    fill(&heap, &mine, theirs, 4096, 0x77);
    // This process's tenure of the slot the child will hold: its huge log and descriptors
    // come into this process's cache.
    let slot = {
        let t = heap.thread().unwrap();
        let off = t.allocate(layout(SIZE_HUGE)).unwrap();
        t.free(off);
        let small: Vec<Offset> = (0..COUNT_SMALL)
            .map(|_| t.allocate(layout(SIZE_SMALL)).unwrap())
            .collect();
        for off in small {
            t.free(off);
        }
        t.collect_huge();
        t.slot_index()
    };
    assert!(heap.check().is_valid(), "{case}: the heap before");
    let host = podkv_alloc::process::host_id().wrapping_add(7).max(1);
    let host_word = if other_host { "other" } else { "same" };
    let spec = format!("{TEST}|{}|{host_word}|{slot}|{}", path.display(), theirs.0);
    let mut child = common::child(TEST, ROLE, &spec);
    child.env("PODKV_CRASH_POINT", point).stdout(Stdio::piped());
    if other_host {
        child.env("PODKV_HOST_ID", host.to_string());
    }
    let out = child.output().unwrap();
    let status = out.status;
    let held: Vec<Offset> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| Some(Offset(l[l.find("small ")? + 6..].trim().parse().ok()?)))
        .collect();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL),
        "{case}: the child was not killed there: {status}"
    );
    // The checker looks first, except where this process recovers on the crashed one's
    // host: there the recovery's own reading of the slot is what is tested.
    if recoverer != Recoverer::Here {
        let report = heap.check();
        assert!(
            report.problems.iter().any(|p| p.contains("half made")),
            "{case}: the checker missed the crashed step: {:?}",
            report.problems
        );
    }
    let in_flight = recover(&heap, &path, recoverer, slot, host);
    assert_eq!(in_flight.len(), 1, "{case}: slots recovered");
    let (what, off) = in_flight[0].trim().split_once(' ').unwrap();
    let off = Offset(off.parse().unwrap());
    match what {
        // Nobody received it: the application frees it.
        "alloc" => mine.free(off),
        "free" => assert_eq!(off, theirs, "{case}: the block in flight"),
        // A free recovery did not report as finished: the application makes it again.
        _ if point == "huge_free.logged" => mine.free(theirs),
        _ => {}
    }
    for off in held {
        assert!(
            holds(&heap, off, SIZE_SMALL, 0x66),
            "{case}: block {} torn",
            off.0
        );
        mine.free(off);
    }
    mine.collect_huge();
    drop(mine);
    common::assert_clean(&heap, &format!("{case}: "));
}

/// Recovers the dead child's slot `slot` as `recoverer` does; returns what each recovered
/// slot left in flight ([`in_flight_word`]).
fn recover(
    heap: &Heap,
    path: &std::path::Path,
    recoverer: Recoverer,
    slot: u32,
    host: u16,
) -> Vec<String> {
    match recoverer {
        Recoverer::Here => heap
            .recover_dead()
            .into_iter()
            .map(|r| in_flight_word(r.in_flight))
            .collect(),
        Recoverer::OtherHost => {
            wait_for("the dead host's fence", None, || {
                matches!(
                    heap.slot_life(u64::from(slot)),
                    podkv_alloc::process::SlotLife::Fenced(_)
                )
            });
            heap.recover_host(host)
                .into_iter()
                .map(|r| in_flight_word(r.in_flight))
                .collect()
        }
        Recoverer::Third => {
            let spec = format!("{TEST}|{}|same|recover", path.display());
            let third = common::child(TEST, ROLE, &spec)
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            finish(third, "in-flight ")
        }
    }
}
