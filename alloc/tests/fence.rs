//! Fencing (issue 20): an owner that stalls longer than its lease and then resumes.
//!
//! A child process on "another host" (its own `PODKV_HOST_ID`) allocates and frees in two
//! threads of a lease-mode heap; the test SIGSTOPs it for several leases while this process
//! judges its slots and keeps allocating and freeing, then SIGCONTs it and lets it work on
//! before it stops cleanly. Every block either side holds carries its own offset, checked at
//! its free, so a block handed out twice shows; afterwards the heap must check clean and hold
//! no live block: nothing corrupted, lost, leaked or freed twice.
//!
//! `PODKV_SOAK=1` runs 200 rounds instead of 20.

use podkv_alloc::process::SlotLife;
use podkv_alloc::slot::Owner;
use podkv_alloc::{Config, Heap, Liveness, Offset, ThreadHandle};
use std::alloc::Layout;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const ROLE: &str = "PODKV_FENCE_TEST_ROLE";
const LEASE: Duration = Duration::from_millis(150);

fn config() -> Config {
    Config {
        small_bytes: 64 << 20,
        large_bytes: 256 << 20,
        slots: 64,
        huge_bytes: 0,
        liveness: Liveness::Lease,
        lease: LEASE,
        ..Config::default()
    }
}

/// A tiny deterministic generator, so a failing round can be replayed by its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Blocks one thread holds, each stamped with its own offset.
struct Held {
    blocks: Vec<Offset>,
    rng: Rng,
}

impl Held {
    fn new(seed: u64) -> Held {
        Held {
            blocks: Vec::new(),
            rng: Rng(seed | 1),
        }
    }

    /// One step: allocate (small or large) or free a random held block. An allocation that
    /// fails is reported as the error's text.
    fn step(&mut self, heap: &Heap, t: &ThreadHandle, most: usize) -> Result<(), String> {
        let r = self.rng.next();
        if self.blocks.len() < most && (r % 3 != 0 || self.blocks.is_empty()) {
            let size = if r % 16 == 0 {
                1024 + (r >> 8) % 8192
            } else {
                8 + (r >> 8) % 512
            };
            let layout = Layout::from_size_align(size as usize, 8).unwrap();
            let off = t.allocate(layout).map_err(|e| e.to_string())?;
            // SAFETY: a fresh block of at least 8 bytes, 8-aligned.
            unsafe { (heap.resolve(off) as *mut u64).write(off.0) };
            self.blocks.push(off);
        } else {
            let i = (r >> 20) as usize % self.blocks.len();
            let off = self.blocks.swap_remove(i);
            self.free(heap, t, off);
        }
        Ok(())
    }

    fn free(&self, heap: &Heap, t: &ThreadHandle, off: Offset) {
        // SAFETY: a block this thread holds, stamped at its allocation.
        let stamp = unsafe { (heap.resolve(off) as *const u64).read() };
        if stamp != off.0 {
            eprintln!("block {off} was handed out twice: it holds {stamp:#x}");
            std::process::exit(3);
        }
        t.free(off);
    }

    fn free_all(&mut self, heap: &Heap, t: &ThreadHandle) {
        for off in std::mem::take(&mut self.blocks) {
            self.free(heap, t, off);
        }
    }
}

/// The child: two threads allocate and free until the file `stop` appears, then give
/// everything back and exit 0. A thread whose allocation fails (its slot fenced) takes a
/// fresh handle and goes on.
#[test]
fn stress_child_entry() {
    if std::env::var(ROLE).as_deref() != Ok("stress") {
        return;
    }
    let dir = std::path::PathBuf::from(std::env::var("PODKV_FENCE_DIR").unwrap());
    let heap = Heap::open(
        dir.join("heap"),
        &Config {
            create: false,
            ..config()
        },
    )
    .unwrap();
    let threads: Vec<_> = (0..2u64)
        .map(|n| {
            let heap = heap.clone();
            let dir = dir.clone();
            std::thread::spawn(move || {
                let mut t = heap.thread().unwrap();
                let mut held = Held::new(0x9E37_79B9 + n);
                let mut steps = 0u64;
                while steps % 256 != 0 || !dir.join("stop").exists() {
                    if let Err(why) = held.step(&heap, &t, 400) {
                        eprintln!("child: allocation refused ({why}); a fresh handle");
                        held.free_all(&heap, &t);
                        drop(t);
                        t = heap.thread().unwrap();
                    }
                    steps += 1;
                    if steps == 1000 {
                        std::fs::write(dir.join(format!("ready{n}")), b"").unwrap();
                    }
                }
                held.free_all(&heap, &t);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// The host id the child plays: any but this process's.
fn other_host() -> u16 {
    let me = podkv_alloc::process::host_id();
    if me == 4242 {
        4243
    } else {
        4242
    }
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

/// The slots the child's host holds now: (slot, owner word), for failure messages.
fn child_slots(heap: &Heap) -> Vec<(u64, String)> {
    (0..heap.geometry().slots())
        .filter(|&i| heap.slot_owner(i).is_some_and(|o| o.host == other_host()))
        .map(|i| {
            (
                i,
                format!("{:#x}", heap.slot_owner_word(i).load(Ordering::Acquire)),
            )
        })
        .collect()
}

/// The state of each of process `pid`'s threads (`/proc/PID/task/*/stat`), for failure messages.
fn thread_states(pid: i32) -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("stat")).ok())
        .filter_map(|stat| {
            let name = &stat[stat.find('(')? + 1..stat.rfind(')')?];
            let state = stat[stat.rfind(')')? + 2..].chars().next()?;
            Some(format!("{name}:{state}"))
        })
        .collect()
}

/// Watches every slot for three leases (an observer must see an owner silent for a whole
/// lease); returns whether it saw (and so fenced) a slot of the child's host. If a fence is
/// `expected`, it goes on watching past three leases, up to twenty, until it sees one: on a
/// loaded machine this thread may sleep through most of a lease (one round of a suite run on
/// 2 cores saw none in three).
fn watch_for_fence(heap: &Heap, expected: bool) -> bool {
    let mut fenced = false;
    let start = Instant::now();
    let until = start + 3 * LEASE;
    let give_up = if expected { start + 20 * LEASE } else { until };
    while Instant::now() < until || (!fenced && Instant::now() < give_up) {
        for i in 0..heap.geometry().slots() {
            if let SlotLife::Fenced(word) = heap.slot_life(i) {
                fenced |= Owner::unpack(word).is_some_and(|o| o.host == other_host());
            }
        }
        assert!(
            heap.recover_dead().is_empty(),
            "a stopped owner is not known dead"
        );
        std::thread::sleep(LEASE / 4);
    }
    fenced
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

/// How a round stops the child: from outside (SIGSTOP at a random instruction), or at a named
/// stall point it passes (after passing it `skip` times).
#[derive(Clone, Copy, Debug)]
enum Stop {
    Outside,
    At(&'static str, u32),
}

/// One round: see the module docs.
fn round(dir: &Path, seed: u64, stop: Stop) {
    let heap = Heap::open(dir.join("heap"), &config()).unwrap();
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            "stress_child_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, "stress")
        .env("PODKV_HOST_ID", other_host().to_string())
        .env("PODKV_FENCE_DIR", dir)
        .stdout(std::process::Stdio::null());
    if let Stop::At(point, skip) = stop {
        command
            .env("PODKV_CRASH_POINT", point)
            .env("PODKV_CRASH_SKIP", skip.to_string())
            .env("PODKV_CRASH_STOP", "once");
    }
    let mut child = Child(command.spawn().unwrap());
    let pid = child.0.id() as i32;
    let ready = || dir.join("ready0").exists() && dir.join("ready1").exists();
    wait_for("the child's threads to work", || ready() || is_stopped(pid));
    let point = match stop {
        Stop::Outside => "outside",
        Stop::At(point, _) => point,
    };
    match point {
        "outside" => {
            // SAFETY: stopping our own child.
            unsafe { libc::kill(pid, libc::SIGSTOP) };
        }
        "rejoin.beaten" => {
            // A rejoin needs a fence first: stop it from outside, fence, continue.
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGSTOP) };
            assert!(
                watch_for_fence(&heap, true),
                "{point}: fenced before the rejoin"
            );
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGCONT) };
        }
        "release.written" => std::fs::write(dir.join("stop"), b"").unwrap(),
        _ => {}
    }
    wait_for(point, || is_stopped(pid));
    let at_stop = format!(
        "it held {:?} when it stopped (threads {:?})",
        child_slots(&heap),
        thread_states(pid)
    );
    // Stopped with a slot held, the child must be fenced (at other points it may have
    // stopped before its claim).
    let holds = matches!(
        point,
        "outside" | "renew.read" | "rejoin.beaten" | "release.written"
    );
    let fenced = watch_for_fence(&heap, holds);
    let after_watch = format!("{:?} after the watch", child_slots(&heap));
    // Work while it is stopped, beside whatever it holds.
    let t = heap.thread().unwrap();
    let mut held = Held::new(seed);
    for _ in 0..20_000 {
        held.step(&heap, &t, 2000).unwrap();
    }
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    if point != "release.written" {
        // It rejoins: its slots are fenced no more.
        wait_for("the child to rejoin", || {
            (0..heap.geometry().slots()).all(|i| !matches!(heap.slot_life(i), SlotLife::Fenced(_)))
        });
    }
    for _ in 0..20_000 {
        held.step(&heap, &t, 2000).unwrap();
    }
    std::fs::write(dir.join("stop"), b"").unwrap();
    let status = child.0.wait().unwrap();
    held.free_all(&heap, &t);
    drop(t);
    assert!(
        heap.recover_dead().is_empty(),
        "{point}: every slot released"
    );
    assert!(
        status.success(),
        "round {seed} ({point}): the resumed child failed: {status}"
    );
    if holds {
        assert!(
            fenced,
            "round {seed} ({point}): the stopped child was fenced: {at_stop}, {after_watch}"
        );
    }
    let report = heap.check();
    assert!(
        report.is_valid(),
        "round {seed} ({point}): heap check after the stall: {:?}",
        report.problems
    );
    assert_eq!(
        report.live_blocks(),
        0,
        "round {seed} ({point}): every block was freed: {:?}",
        report.claimed_slots
    );
}

/// Every stall point of the fence, and transitions' crash points the stress passes, used as
/// stalls: the child stops itself there, is fenced, and resumes.
#[test]
fn an_owner_stalled_in_each_window_corrupts_nothing() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    let mut stops: Vec<Stop> = podkv_alloc::crash::STALL_POINTS
        .iter()
        .map(|&p| Stop::At(p, if p == "claim.beaten" { 1 } else { 0 }))
        .collect();
    stops.extend([
        Stop::At("alloc.logged", 3000),
        Stop::At("free.logged", 3000),
        Stop::At("to_sized.popped", 2),
        Stop::At("grow.grown", 3),
    ]);
    for (seed, stop) in stops.into_iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        round(dir.path(), seed as u64 + 1000, stop);
    }
}

/// Issue 20's corruption: a lease-mode owner stopped past its lease, its slots judged dead
/// by a peer that keeps working, then resumed.
#[test]

fn an_owner_resumed_after_its_lease_lapsed_corrupts_nothing() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    let rounds = if std::env::var_os("PODKV_SOAK").is_some() {
        200
    } else {
        20
    };
    for seed in 1..=rounds {
        let dir = tempfile::tempdir().unwrap();
        round(dir.path(), seed, Stop::Outside);
    }
}

/// A child that claims a slot and idles, its renewer beating by the child's clock.
#[test]
fn idle_child_entry() {
    if std::env::var(ROLE).as_deref() != Ok("idle") {
        return;
    }
    let dir = std::path::PathBuf::from(std::env::var("PODKV_FENCE_DIR").unwrap());
    let heap = Heap::open(
        dir.join("heap"),
        &Config {
            create: false,
            ..config()
        },
    )
    .unwrap();
    let t = heap.thread().unwrap();
    let off = t.allocate(Layout::from_size_align(64, 8).unwrap()).unwrap();
    t.free(off);
    loop {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Liveness trusts no clock but each process's own: an owner whose clock runs 5 s behind,
/// 5 s ahead or twice as fast (`PODKV_CLOCK`, read by `lease::clock_ms`) is never fenced
/// while it beats, and is fenced once stopped for a lease.
#[test]
fn an_owner_with_a_skewed_clock_is_judged_by_its_beat_alone() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    for clock in ["skew=-5000", "skew=+5000", "rate=2"] {
        let dir = tempfile::tempdir().unwrap();
        let heap = Heap::open(dir.path().join("heap"), &config()).unwrap();
        let child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "idle_child_entry",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE, "idle")
            .env("PODKV_HOST_ID", other_host().to_string())
            .env("PODKV_FENCE_DIR", dir.path())
            .env("PODKV_CLOCK", clock)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let child = Child(child);
        let pid = child.0.id() as i32;
        let slots = heap.geometry().slots();
        wait_for("the child's claim", || {
            (0..slots).any(|i| heap.slot_owner(i).is_some_and(|o| o.host == other_host()))
        });
        // Alive: several leases of watching fence nothing.
        assert!(
            !watch_for_fence(&heap, false),
            "{clock}: a beating owner was fenced"
        );
        assert!(
            !watch_for_fence(&heap, false),
            "{clock}: a beating owner was fenced"
        );
        // SAFETY: stopping our own child (killed by `Child`'s drop).
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        assert!(
            watch_for_fence(&heap, true),
            "{clock}: a stopped owner was not fenced"
        );
    }
}
