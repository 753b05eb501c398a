//! A store writer on another host stopped past its lease (issue 20 item 4): a child process
//! with its own `PODKV_HOST_ID` sets keys through the store of a lease-mode heap, logging each
//! acknowledged write. The test SIGSTOPs it for several leases; meanwhile this process (its
//! peer) watches the child's slots fenced and keeps writing: its own keys, and the child's
//! churn keys, so it frees items the child allocated. Then the child is SIGCONTed, rejoins
//! its slot, writes on and stops cleanly. Afterwards every acknowledged write of either side
//! reads back, and the store and the heap check clean.
//!
//! Written against the public `Store` API only (set, get, delete, check). `PODKV_SOAK=1`
//! runs 20 rounds instead of 2.

mod common;

use podkv_alloc::process::SlotLife;
use podkv_alloc::slot::Owner;
use podkv_alloc::Liveness;
use podkv_store::{Store, StoreConfig, StoreError};
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const ROLE: &str = "PODKV_STORE_FENCE_DIR";
const LEASE: Duration = Duration::from_millis(150);
/// Keys only the child writes (`k0..`), with acknowledged writes logged.
const KEYS: u64 = 16;
/// Keys both sides overwrite and delete (`c0..`).
const CHURN: u64 = 61;

fn config() -> StoreConfig {
    let mut config = common::config();
    config.heap.liveness = Liveness::Lease;
    config.heap.lease = LEASE;
    config
}

/// The host id the child plays: any but this process's.
fn other_host() -> u16 {
    if podkv_alloc::process::host_id() == 4242 {
        4243
    } else {
        4242
    }
}

/// A churn value of a size class chosen by `seq`.
fn churn_value(seq: u64) -> Vec<u8> {
    vec![b'x'; [16, 200, 3000, 40_000][(seq % 4) as usize]]
}

/// The child: writes `seq` to `k{seq % KEYS}` and churns until the file `stop` appears,
/// logging each acknowledged write as `key seq` (one write(2) each), then exits 0. A failed
/// operation ends it with one line and exit 2.
#[test]
fn writer_child_entry() {
    let Ok(dir) = std::env::var(ROLE) else {
        return;
    };
    let dir = Path::new(&dir);
    let store = Store::open(dir.join("heap"), config()).unwrap();
    let h = store.handle().unwrap();
    let mut log = std::fs::File::create(dir.join("log")).unwrap();
    let fail = |what: String| -> ! {
        eprintln!("store writer: {what}");
        std::process::exit(2)
    };
    let mut seq = 0u64;
    while seq % 64 != 0 || !dir.join("stop").exists() {
        let k = seq % KEYS;
        if let Err(e) = h.set(format!("k{k}").as_bytes(), &seq.to_le_bytes(), 0, 0) {
            fail(format!("set k{k}: {e}"));
        }
        log.write_all(format!("{k} {seq}\n").as_bytes()).unwrap();
        let churn = format!("c{}", seq % CHURN);
        let churned = if seq % 3 == 2 {
            h.delete(churn.as_bytes()).map(drop)
        } else {
            h.set(churn.as_bytes(), &churn_value(seq), 0, 0).map(drop)
        };
        if let Err(e) = churned {
            fail(format!("churn {churn}: {e}"));
        }
        seq += 1;
    }
}

/// The last acknowledged `seq` of each of the child's keys, and how many writes it logged.
fn last_acked(log: &Path) -> (Vec<Option<u64>>, usize) {
    let mut last = vec![None; KEYS as usize];
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut count = 0;
    // Whole lines only: a kill can cut the last write(2) short where it crosses a page.
    for line in text
        .split_inclusive('\n')
        .filter_map(|l| l.strip_suffix('\n'))
    {
        let mut f = line.split(' ');
        if let (Some(Ok(k)), Some(Ok(seq))) = (
            f.next().map(str::parse::<usize>),
            f.next().map(str::parse::<u64>),
        ) {
            last[k] = Some(seq);
            count += 1;
        }
    }
    (last, count)
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether process `pid` is stopped (state `T` in `/proc/PID/stat`).
fn is_stopped(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rfind(')')
        .and_then(|at| stat[at + 2..].chars().next())
        .is_some_and(|state| state == 'T')
}

/// The slots of the child's host that are fenced now (judging every slot: this watches).
fn fenced_of_child(store: &Store) -> usize {
    let heap = store.heap();
    (0..heap.geometry().slots())
        .filter(|&i| match heap.slot_life(i) {
            SlotLife::Fenced(word) => Owner::unpack(word).is_some_and(|o| o.host == other_host()),
            _ => false,
        })
        .count()
}

/// The child, killed if the round fails before it exits.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// One round: see the module docs.
fn round(dir: &Path, round: u64) {
    let store = Store::open(dir.join("heap"), config()).unwrap();
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "writer_child_entry", "--nocapture"])
        .env(ROLE, dir)
        .env("PODKV_HOST_ID", other_host().to_string())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut child = Child(child);
    let pid = child.0.id() as i32;
    let log = dir.join("log");
    wait_for("the child's first writes", || last_acked(&log).1 > 200);
    // SAFETY: stopping our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    wait_for("the child to stop", || is_stopped(pid));
    let (acked_at_stop, count_at_stop) = last_acked(&log);

    // Its slot is fenced once its lease has lapsed; meanwhile, and after, this peer writes.
    //
    // While the child is stopped, a write may fail with `OutOfMemory`, and only so: a child
    // stopped inside an operation stays pinned, fenced or not, and the store frees nothing
    // a pin may still read, so the peer's churn fills the heap's large slabs until the child
    // resumes. That is the store's answer by design; the writes after the resume must all
    // succeed.
    let h = store.handle().unwrap();
    let mut seq = 0u64;
    let refused = std::cell::Cell::new(0u64);
    let write = |seq: &mut u64, stopped: bool| {
        let done = |what: &str, r: Result<(), StoreError>| match r {
            Ok(()) => {}
            Err(StoreError::OutOfMemory) if stopped => refused.set(refused.get() + 1),
            Err(e) => panic!("round {round}: this peer's {what}: {e}"),
        };
        let p = *seq % 32;
        let set = h.set(format!("p{p}").as_bytes(), &seq.to_le_bytes(), 0, 0);
        done("set", set);
        let churn = format!("c{}", *seq % CHURN);
        if *seq % 4 == 3 {
            done("delete", h.delete(churn.as_bytes()).map(drop));
        } else {
            let set = h.set(churn.as_bytes(), &churn_value(*seq + 1), 0, 0);
            done("churn", set);
        }
        *seq += 1;
    };
    let watched = Instant::now();
    let mut fenced = 0;
    while fenced == 0 || watched.elapsed() < 3 * LEASE {
        for _ in 0..50 {
            write(&mut seq, true);
        }
        fenced = fenced.max(fenced_of_child(&store));
        assert!(
            watched.elapsed() < Duration::from_secs(60),
            "round {round}: the stopped writer's slot was never fenced"
        );
    }
    assert_eq!(
        last_acked(&log).1,
        count_at_stop,
        "round {round}: a stopped writer wrote"
    );
    for _ in 0..2000 {
        write(&mut seq, true);
    }

    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    wait_for("the child to rejoin", || fenced_of_child(&store) == 0);
    wait_for("the child to write on", || {
        last_acked(&log).1 > count_at_stop + 200
    });
    for _ in 0..2000 {
        write(&mut seq, false);
    }
    std::fs::write(dir.join("stop"), b"").unwrap();
    let status = child.0.wait().unwrap();
    assert!(
        status.success(),
        "round {round}: the resumed writer failed: {status}"
    );

    // Every acknowledged write reads back: the child's last ones, and this peer's.
    let (acked, _) = last_acked(&log);
    for (k, seq) in acked.iter().enumerate() {
        let seq = seq.expect("every key written");
        assert!(acked_at_stop[k].is_none_or(|before| seq >= before));
        let got = h.get(format!("k{k}").as_bytes()).unwrap();
        let got = got.map(|g| g.value().to_vec());
        assert_eq!(
            got.as_deref(),
            Some(&seq.to_le_bytes()[..]),
            "round {round}: key k{k}, acknowledged {seq}"
        );
    }
    for back in 1..=32.min(seq) {
        let s = seq - back;
        let got = h.get(format!("p{}", s % 32).as_bytes()).unwrap();
        assert_eq!(
            got.map(|g| g.value().to_vec()).as_deref(),
            Some(&s.to_le_bytes()[..]),
            "round {round}: this peer's key p{}",
            s % 32
        );
    }
    drop(h);
    assert!(
        store.heap().recover_dead().is_empty(),
        "round {round}: the writer released its slot"
    );
    let report = store.check();
    assert!(
        report.is_valid(),
        "round {round}: store check: {:?}",
        report.problems
    );
    let heap = store.heap().check();
    assert!(
        heap.is_valid(),
        "round {round}: heap check: {:?}",
        heap.problems
    );
    eprintln!(
        "round {round}: {fenced} slot(s) of the stopped writer fenced; it wrote {} before the \
         stop and {} after; this peer wrote {seq} times, {} refused for want of memory while \
         it was stopped",
        count_at_stop,
        last_acked(&log).1 - count_at_stop,
        refused.get()
    );
}

#[test]
fn a_store_writer_resumed_after_its_lease_lapsed_loses_nothing_and_corrupts_nothing() {
    if std::env::var_os(ROLE).is_some() {
        return;
    }
    let rounds = if std::env::var_os("PODKV_SOAK").is_some() {
        20
    } else {
        2
    };
    for r in 0..rounds {
        let (dir, _) = common::heap_path("heap");
        round(dir.path(), r);
    }
}
