//! Leases seen by another process: a beating owner is never fenced; a fence one process sets
//! on a silent owner, and the owner's rejoin once it resumes, are what every other process
//! then reads in the owner word.

use super::*;
use podkv_alloc::lease::FLAG_FENCED;
use podkv_alloc::process::SlotLife;

const ROOT_HELD: usize = 6;
const ROOT_DONE: usize = 7;

/// The lease of [`an_owner_that_keeps_beating_is_never_fenced`]: long enough that a renewer
/// (every third of it) is never starved past it on a loaded machine.
const LEASE_WATCHED: Duration = Duration::from_millis(1200);

fn lease_config() -> Config {
    Config {
        liveness: Liveness::Lease,
        lease: LEASE_WATCHED,
        ..config(2)
    }
}

/// An owner on another host (`PODKV_HOST_ID`) holds a slot for many leases while its
/// renewer beats; a watcher that read the slot's beat before must judge it alive throughout
/// (a beat left unwritten, or read from the watcher's cache, gets a live owner fenced). The
/// slot was this process's before (its beat line is in this process's cache).
#[test]
fn an_owner_that_keeps_beating_is_never_fenced() {
    const TEST: &str = "fence::an_owner_that_keeps_beating_is_never_fenced";
    if let Some(parts) = role(TEST) {
        let heap = Heap::open(&parts[1], &lease_config()).unwrap();
        let t = heap.thread().unwrap();
        heap.root(ROOT_HELD)
            .store(u64::from(t.slot_index()) + 1, SeqCst);
        wait_for("the watcher", None, || {
            heap.root(ROOT_DONE).load(SeqCst) != 0
        });
        assert_eq!(heap.slots_lost(), 0);
        return;
    }
    if other_role() {
        return;
    }
    let (_dir, path, heap) = common::modelled_heap(&lease_config());
    for _ in 0..3 {
        let t = heap.thread().unwrap();
        drop(t);
        for i in 0..2 {
            heap.slot_life(i);
        }
    }
    let host = podkv_alloc::process::host_id().wrapping_add(7).max(1);
    let mut child = common::child(TEST, ROLE, &format!("{TEST}|{}", path.display()))
        .env("PODKV_HOST_ID", host.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the child's slot", Some(&mut child), || {
        heap.root(ROOT_HELD).load(SeqCst) != 0
    });
    let slot = heap.root(ROOT_HELD).load(SeqCst) - 1;
    let started = Instant::now();
    let mut judged = None;
    while judged.is_none() && started.elapsed() < LEASE_WATCHED * 3 {
        let life = heap.slot_life(slot);
        if !matches!(life, podkv_alloc::process::SlotLife::Alive(_)) {
            judged = Some(life);
        }
        std::thread::sleep(LEASE_WATCHED / 20);
    }
    heap.root(ROOT_DONE).store(1, SeqCst);
    finish(child, "");
    assert!(judged.is_none(), "a beating owner judged {judged:?}");
}

const ROOT_STOPPED_HELD: usize = 14;
const ROOT_STOPPED_DONE: usize = 15;

/// Slot `slot`'s owner word as a process that only reads it sees it (it holds no slot and
/// judges no owner, so it fences nothing itself).
fn owner_word_elsewhere(test: &str, path: &std::path::Path, slot: u64) -> u64 {
    let child = common::child(
        test,
        ROLE,
        &format!("{test}|{}|reader|{slot}", path.display()),
    )
    .stdout(Stdio::piped())
    .spawn()
    .unwrap();
    let said = finish(child, "owner word ");
    said.first()
        .expect("the reader said no word")
        .parse()
        .unwrap()
}

/// An owner on another host stops (SIGSTOP) for longer than its lease; this process judges
/// it and fences it. Another process must then read the fence in the owner word: a fence
/// that stays in the fencer's cache (a CPU CAS where the hook's is needed) is a fence no
/// adopter or `recover_host` elsewhere honours. The owner then resumes, and its renewer
/// rejoins (clears the flag): another process must read it unfenced again, or it may take
/// the slot of an owner that runs.
#[test]
fn a_fence_and_the_rejoin_after_it_are_read_by_every_process() {
    const TEST: &str = "fence::a_fence_and_the_rejoin_after_it_are_read_by_every_process";
    if let Some(parts) = role(TEST) {
        let heap = Heap::open(&parts[1], &lease_config()).unwrap();
        if parts[2] == "reader" {
            let slot: usize = parts[3].parse().unwrap();
            let word = heap.slot_owner_words()[slot].load(SeqCst);
            println!("owner word {word}");
            return;
        }
        let t = heap.thread().unwrap();
        heap.root(ROOT_STOPPED_HELD)
            .store(u64::from(t.slot_index()) + 1, SeqCst);
        wait_for("the end", None, || {
            heap.root(ROOT_STOPPED_DONE).load(SeqCst) != 0
        });
        drop(t);
        return;
    }
    if other_role() {
        return;
    }
    let (_dir, path, heap) = common::modelled_heap(&lease_config());
    let host = podkv_alloc::process::host_id().wrapping_add(7).max(1);
    let mut owner = common::child(TEST, ROLE, &format!("{TEST}|{}|owner", path.display()))
        .env("PODKV_HOST_ID", host.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the owner's slot", Some(&mut owner), || {
        heap.root(ROOT_STOPPED_HELD).load(SeqCst) != 0
    });
    let slot = heap.root(ROOT_STOPPED_HELD).load(SeqCst) - 1;
    let running = heap.slot_owner_words()[slot as usize].load(SeqCst);
    assert_eq!(running & FLAG_FENCED, 0);
    // SAFETY: plain signals to a child of this process, which it waits for below.
    unsafe { libc::kill(owner.id() as i32, libc::SIGSTOP) };
    let started = Instant::now();
    let mut fenced = false;
    while !fenced && started.elapsed() < LEASE_WATCHED * 6 {
        fenced = matches!(heap.slot_life(slot), SlotLife::Fenced(_));
        std::thread::sleep(LEASE_WATCHED / 20);
    }
    let elsewhere = owner_word_elsewhere(TEST, &path, slot);
    // SAFETY: as above.
    unsafe { libc::kill(owner.id() as i32, libc::SIGCONT) };
    assert!(fenced, "a stopped owner was not fenced in 6 leases");
    assert_eq!(
        elsewhere,
        running | FLAG_FENCED,
        "fenced here, but another process reads {elsewhere:#x}"
    );
    // The renewer beats every third of a lease and rejoins at its first round.
    std::thread::sleep(LEASE_WATCHED * 2);
    let elsewhere = owner_word_elsewhere(TEST, &path, slot);
    heap.root(ROOT_STOPPED_DONE).store(1, SeqCst);
    finish(owner, "");
    assert_eq!(
        elsewhere, running,
        "the owner resumed two leases ago, but another process reads {elsewhere:#x}"
    );
}
