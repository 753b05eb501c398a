//! Crash points: a child process runs a workload that passes through every transition and is
//! killed (SIGKILL, by itself) at one named crash point; the parent recovers its dead slots and
//! proves nothing was lost, leaked or freed twice:
//!
//! - the child records, in a file the parent can read, every block the application holds
//!   (an allocation is recorded after `allocate` returns; a free is marked before `free` is
//!   called and cleared after it returns), and which block each slot was last handed;
//! - after [`Heap::recover_dead`] the parent frees every block the application still holds,
//!   every block recovery reports as allocated but never handed over, and every block marked
//!   as being freed that recovery does not report as freed — a double free panics;
//! - then the heap must check clean and hold no live block: every slab accounted for.
//!
//! Every crash point is run (at its first pass and at later passes) in every coherence mode
//! (`hardware`, `limited`, `mcas` with `flush-cas`: the same hook and region as `nmp`, without
//! a processor to take over after each kill, which costs seconds a run); a point the child
//! never reaches fails the test, so the list in `crash.rs` and the workload stay in step.

use podkv_alloc::{crash, Config, Heap, InFlight, Offset};
use podkv_hw::mcas::McasKind;
use podkv_hw::Coherence;
use std::alloc::Layout;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

const ROLE: &str = "PODKV_CRASH_TEST_ROLE";
const SLOTS: usize = 64;
const ENTRIES: usize = 4096;
const FREEING: u64 = 1 << 63;

fn config() -> Config {
    Config {
        small_bytes: 64 << 20,
        large_bytes: 256 << 20,
        slots: SLOTS as u64,
        ..Config::default()
    }
}

/// The coherence modes every crash point runs in, by the name the child reads.
const MODES: [&str; 3] = ["hardware", "limited", "mcas-flush-cas"];
/// The modes of the acknowledgement test: both mCAS implementations.
const MODES_ACK: [&str; 4] = ["hardware", "limited", "mcas-flush-cas", "mcas-nmp"];

/// [`config`] in coherence mode `mode` (one of [`MODES_ACK`]).
fn config_in(mode: &str) -> Config {
    let (coherence, mcas) = match mode {
        "hardware" => (Coherence::Hardware, McasKind::FlushCas),
        "limited" => (Coherence::Limited, McasKind::FlushCas),
        "mcas-flush-cas" => (Coherence::Mcas, McasKind::FlushCas),
        "mcas-nmp" => (Coherence::Mcas, McasKind::Nmp),
        other => panic!("no coherence mode {other}"),
    };
    Config {
        coherence,
        mcas,
        ..config()
    }
}

/// The application's record: `last[slot]` (block handed to the slot's caller last) and
/// `entries` (blocks held), in a shared file mapping.
struct Record {
    words: &'static [AtomicU64],
}

impl Record {
    fn open(path: &Path) -> Record {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .unwrap();
        let len = (SLOTS + ENTRIES) * 8;
        file.set_len(len as u64).unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: a fresh shared mapping of a file we sized; leaked for the process's life.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED);
        // SAFETY: `len` bytes of mapped, 8-aligned memory; AtomicU64 is valid for any bits.
        let words = unsafe { std::slice::from_raw_parts(ptr as *const AtomicU64, len / 8) };
        Record { words }
    }
    fn last(&self, slot: u32) -> &AtomicU64 {
        &self.words[slot as usize]
    }
    fn entry(&self, i: usize) -> &AtomicU64 {
        &self.words[SLOTS + i]
    }
}

/// The child's application: blocks held in `entries`, with the recording protocol.
struct App {
    record: Record,
    free_entries: Vec<usize>,
}

impl App {
    fn alloc(&mut self, t: &podkv_alloc::ThreadHandle, size: usize) -> usize {
        self.record.last(t.slot_index()).store(0, Relaxed);
        let off = t
            .allocate(Layout::from_size_align(size, 8).unwrap())
            .unwrap();
        self.record.last(t.slot_index()).store(off.0, Relaxed);
        let i = self.free_entries.pop().expect("entries left");
        self.record.entry(i).store(off.0, Relaxed);
        i
    }

    fn free(&mut self, t: &podkv_alloc::ThreadHandle, i: usize) {
        let off = self.record.entry(i).load(Relaxed);
        assert!(off != 0 && off & FREEING == 0);
        self.record.entry(i).store(off | FREEING, Relaxed);
        t.free(Offset(off));
        self.record.entry(i).store(0, Relaxed);
        self.free_entries.push(i);
    }
}

/// The workload: passes every transition with two slots in one thread (a block freed through
/// the other slot is a remote free).
fn workload(heap_path: &Path, record_path: &Path, mode: &str) {
    let heap = Heap::open(heap_path, &config_in(mode)).unwrap();
    let mut app = App {
        record: Record::open(record_path),
        free_entries: (0..ENTRIES).rev().collect(),
    };
    let big = 200 << 10; // two blocks per 512 KiB slab
    for _round in 0..3 {
        let a = heap.thread().unwrap();
        let b = heap.thread().unwrap();
        // Small blocks: fast paths, growth, a slab emptied locally and remotely.
        let small: Vec<usize> = (0..300).map(|i| app.alloc(&a, 8 + i % 200)).collect();
        for (n, &i) in small.iter().enumerate() {
            if n % 3 == 0 {
                app.free(&b, i); // remote
            } else {
                app.free(&a, i); // local
            }
        }
        // A full slab whose blocks all come back remotely before the owner notices: detached
        // with no live block, so the owner keeps it.
        let x = app.alloc(&a, big);
        let y = app.alloc(&a, big);
        app.free(&b, x);
        app.free(&b, y);
        b.flush_remote_frees(); // both counted on the slab's remote word at once
        let z = app.alloc(&a, big);
        // A detached slab freed into locally (reattach, pushed back behind the head).
        let w = app.alloc(&a, big); // fills z's slab
        let v = app.alloc(&a, big); // detaches it, new head
        app.free(&a, z); // reattach: z's slab behind v's
        app.free(&a, w); // z's slab empty, not the head: unlinked from the middle, kept
                         // A detached slab whose last block is freed remotely: the freer takes it.
        let u = app.alloc(&a, big); // fills v's slab
        let t = app.alloc(&a, big); // detaches it
        app.free(&b, v);
        app.free(&b, u);
        b.flush_remote_frees(); // b takes the slab
                                // Many empty slabs: past the unsized bound, to the global list.
        let many: Vec<usize> = (0..24).map(|_| app.alloc(&a, 300 << 10)).collect();
        for i in many {
            app.free(&a, i);
        }
        // A slab with one live block and one sized-but-empty slab when b is given back.
        let keep = app.alloc(&b, 64);
        let gone = app.alloc(&b, 2000);
        app.free(&b, gone);
        drop(b); // disowned (live block), empty one straight to the global list
        let b = heap.thread().unwrap(); // pops from the global list
        let s = app.alloc(&b, 64);
        app.free(&a, keep);
        app.free(&a, s);
        app.free(&a, t);
        drop(b);
        morph_workload(&heap, &mut app, &a);
        huge_workload(&heap, &mut app, &a);
        drop(a);
    }
    // Reaching here means the armed point was never passed.
    std::process::exit(3);
}

/// A morph (`sized_to_morphing`): a fresh slot keeping no empty slab fills two 512 B slabs,
/// frees 95% of their blocks, then asks for 100 B blocks: the sparse slab behind the list's
/// head morphs. Its old blocks are freed by their owner (`free_old`: the space under each
/// comes back, the last one ends the morph), the other slab's by `a`; the new blocks by the
/// owner (one while the slab still morphs), then the slot is given back with the slab holding
/// nothing.
fn morph_workload(heap: &Heap, app: &mut App, a: &podkv_alloc::ThreadHandle) {
    let m = heap.thread().unwrap();
    let old: Vec<usize> = (0..200).map(|_| app.alloc(&m, 512)).collect();
    // An empty slab kept on the slot's unsized list would serve the new class first: use
    // them up, one class each.
    let mut spacers = Vec::new();
    while m.slot().lists[0].unsized_list.load(Relaxed) as u32 != 0 {
        spacers.push(app.alloc(&m, 200 + 100 * spacers.len()));
    }
    let mut kept = Vec::new();
    for (n, i) in old.into_iter().enumerate() {
        if n % 20 == 0 {
            kept.push(i);
        } else {
            app.free(&m, i);
        }
    }
    let mut new: Vec<usize> = (0..5).map(|_| app.alloc(&m, 100)).collect();
    // A new block freed by the owner while its slab still morphs (`free_small`).
    app.free(&m, new.pop().unwrap());
    // The first 128 blocks filled the slab that morphed (the other is its list's head): its
    // 7 kept blocks are freed by their owner, each giving back the new blocks under it, the
    // last ending the morph; the other slab's by another slot.
    for (n, i) in kept.into_iter().enumerate() {
        if n < 7 {
            app.free(&m, i);
        } else {
            app.free(a, i);
        }
    }
    a.flush_remote_frees();
    for i in new.into_iter().chain(spacers) {
        app.free(&m, i);
    }
    drop(m);
}

/// The huge heap's transitions: claiming a run, allocating and mapping, a local free (unmap,
/// reclaim), a free of another slot's block, a run given back, and a block whose slot was
/// released before it was freed (the freer's collection sweeps that slot).
fn huge_workload(heap: &Heap, app: &mut App, a: &podkv_alloc::ThreadHandle) {
    let b = heap.thread().unwrap();
    let h1 = app.alloc(a, 3 << 20); // claims a run
    let h2 = app.alloc(a, 5 << 20); // fits in it
    app.free(a, h1); // reclaimed at once; the run still holds h2
    app.free(&b, h2); // another slot's block: its owner reclaims it and gives the run back
    let c = heap.thread().unwrap();
    let h3 = app.alloc(&c, 2 << 20);
    drop(c); // released with h3 live
    app.free(a, h3); // freed in a released slot: swept
    drop(b);
}

fn child_main() -> ! {
    let heap = std::env::var("PODKV_CRASH_HEAP").unwrap();
    let record = std::env::var("PODKV_CRASH_RECORD").unwrap();
    let mode = std::env::var("PODKV_CRASH_MODE").unwrap();
    if std::env::var_os("PODKV_CRASH_WORKLOAD").is_some_and(|w| w == "reattach") {
        reattach_workload(Path::new(&heap), Path::new(&record), &mode);
    }
    workload(Path::new(&heap), Path::new(&record), &mode);
    unreachable!()
}

/// A detached large slab with two live blocks, one freed locally: the reattach.
fn reattach_workload(heap_path: &Path, record_path: &Path, mode: &str) {
    let heap = Heap::open(heap_path, &config_in(mode)).unwrap();
    let mut app = App {
        record: Record::open(record_path),
        free_entries: (0..ENTRIES).rev().collect(),
    };
    let a = heap.thread().unwrap();
    let b = heap.thread().unwrap();
    let size = 160 << 10; // three blocks per 512 KiB slab
    let first: Vec<usize> = (0..3).map(|_| app.alloc(&a, size)).collect();
    app.free(&b, first[2]); // a remote free touches the full slab
    b.flush_remote_frees();
    let _next = app.alloc(&a, size); // finds the slab full: detached, two blocks live
    app.free(&a, first[0]); // reattach
    std::process::exit(3);
}

/// The child running the workload in `mode`, armed at `point` after `skip` passes.
fn child(dir: &Path, mode: &str, point: &str, skip: u32) -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            "crash_child_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, "child")
        .env("PODKV_CRASH_HEAP", dir.join("heap"))
        .env("PODKV_CRASH_RECORD", dir.join("record"))
        .env("PODKV_CRASH_MODE", mode)
        .env("PODKV_CRASH_POINT", point)
        .env("PODKV_CRASH_SKIP", skip.to_string());
    command
}

/// Runs the child crashing at `point` after `skip` passes; returns whether it was killed there.
fn crash_child(dir: &Path, mode: &str, point: &str, skip: u32) -> bool {
    let status = child(dir, mode, point, skip).status().unwrap();
    match status.signal() {
        Some(libc::SIGKILL) => true,
        _ => {
            assert_eq!(
                status.code(),
                Some(3),
                "child at {point}/{skip} failed: {status}"
            );
            false
        }
    }
}

/// Recovers the dead child's slots and settles the application's record; returns a problem.
fn recover_and_settle(dir: &Path, mode: &str, point: &str) -> Result<(), String> {
    let heap = Heap::open(dir.join("heap"), &config_in(mode)).unwrap();
    let record = Record::open(&dir.join("record"));
    settle(&heap, &record, point)
}

/// [`recover_and_settle`] on an open heap.
fn settle(heap: &Heap, record: &Record, point: &str) -> Result<(), String> {
    let recovered = heap.recover_dead();
    if recovered.is_empty() {
        return Err(format!("{point}: no dead slot found"));
    }
    for r in &recovered {
        // Its CPU time is real work, and within its wall time. The two clocks are read apart
        // and the thread CPU clock is charged by the scheduler, which on a loaded VM has put
        // up to ~90 µs more CPU than wall time on a recovery; allow 2 ms so only a clock
        // that counts something else fails.
        let slack = std::time::Duration::from_millis(2);
        if r.took_cpu.is_zero() || r.took_cpu > r.took + slack {
            return Err(format!(
                "{point}: recovery took {:?} of CPU time in {:?}",
                r.took_cpu, r.took
            ));
        }
    }
    let mut to_free = Vec::new();
    let mut freed_by_recovery = Vec::new();
    for r in &recovered {
        match r.in_flight {
            InFlight::Alloc(off) if record.last(r.slot).load(Relaxed) != off.0 => {
                to_free.push(off.0) // taken, never handed to the application
            }
            InFlight::Free(off) => freed_by_recovery.push(off.0),
            _ => {}
        }
    }
    for i in 0..ENTRIES {
        let e = record.entry(i).load(Relaxed);
        if e == 0 {
            continue;
        }
        if e & FREEING != 0 {
            let off = e & !FREEING;
            if !freed_by_recovery.contains(&off) {
                to_free.push(off); // marked, but the free never started
            }
        } else {
            to_free.push(e);
        }
        record.entry(i).store(0, Relaxed);
    }
    for slot in 0..SLOTS as u32 {
        record.last(slot).store(0, Relaxed);
    }
    {
        let t = heap.thread().unwrap();
        for off in to_free {
            t.free(Offset(off));
        }
    }
    let report = heap.check();
    if let Some(problem) = huge_leftovers(heap, &report) {
        return Err(format!("{point}: {problem} after {recovered:?}"));
    }
    if !report.is_valid() {
        return Err(format!(
            "{point}: {:?} after {recovered:?}",
            report.problems
        ));
    }
    if report.live_blocks() != 0 {
        return Err(format!(
            "{point}: {} blocks unaccounted for after {recovered:?}",
            report.live_blocks()
        ));
    }
    if !report.claimed_slots.is_empty() {
        return Err(format!(
            "{point}: slots still claimed: {:?}",
            report.claimed_slots
        ));
    }
    Ok(())
}

/// What the huge heap still holds after recovery and settling: descriptors, ranges, or backed
/// pages in its data range. (`SEEK_DATA` cannot tell: fallocated pages never written count as
/// holes. So the test punches the whole range itself: the file's storage must not shrink.)
fn huge_leftovers(heap: &Heap, report: &podkv_alloc::HeapReport) -> Option<String> {
    let huge = &report.huge;
    if (huge.live, huge.freed, huge.ranges_claimed) != (0, 0, 0) {
        return Some(format!("huge heap not empty: {huge:?}"));
    }
    use std::os::fd::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(heap.path())
        .unwrap();
    let (from, to) = (heap.layout().huge_data, heap.layout().total);
    let before = heap.file_allocated_bytes().unwrap();
    // SAFETY: fallocate on a file we opened; no huge block is live, so no data is lost.
    let punched = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            from as libc::off_t,
            (to - from) as libc::off_t,
        )
    };
    assert_eq!(punched, 0, "punching the huge range");
    let after = heap.file_allocated_bytes().unwrap();
    (after != before).then(|| format!("{} bytes of huge pages still backed", before - after))
}

#[test]
fn crash_child_entry() {
    if std::env::var(ROLE).as_deref() == Ok("child") {
        child_main();
    }
}

#[test]
fn every_crash_point_is_recovered_without_loss_leak_or_double_free() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    for mode in MODES {
        let mut never = Vec::new();
        let mut runs = 0;
        for &point in crash::POINTS {
            let mut reached = false;
            for skip in [0, 1, 7] {
                let dir = tempfile::tempdir().unwrap();
                if !crash_child(dir.path(), mode, point, skip) {
                    continue;
                }
                reached = true;
                runs += 1;
                if let Err(problem) = recover_and_settle(dir.path(), mode, point) {
                    panic!("{mode}: crash at {point} (skip {skip}): {problem}");
                }
            }
            if !reached {
                never.push(point);
            }
        }
        assert!(
            never.is_empty(),
            "{mode}: crash points never reached: {never:?}"
        );
        eprintln!(
            "{mode}: {runs} crashes recovered at {} points",
            crash::POINTS.len()
        );
    }
}

/// A child stopped at a crash point (`PODKV_CRASH_STOP`), killed and reaped when dropped.
struct Stopped(std::process::Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs the child in `mode` until it stops at `point` after `skip` passes (`None`: it never
/// got there).
fn stop_child(dir: &Path, mode: &str, point: &str, skip: u32) -> Option<Stopped> {
    let stopped = Stopped(
        child(dir, mode, point, skip)
            .env("PODKV_CRASH_STOP", "1")
            .env("PODKV_CRASH_WORKLOAD", "reattach")
            .spawn()
            .unwrap(),
    );
    let pid = stopped.0.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: waiting for our own child to stop (or end).
    let waited = unsafe { libc::waitpid(pid, &mut status, libc::WUNTRACED) };
    assert_eq!(waited, pid);
    if libc::WIFSTOPPED(status) {
        Some(stopped)
    } else {
        std::mem::forget(stopped); // reaped already
        None
    }
}

/// The help array of detectable CAS in every mode: the child stops right after a reattach CAS
/// (`reattach_workload`: a detached large slab freed into locally) whose slab holds another
/// live block, still alive, so this process's thread claims a slot of its own and remote-frees that block: its
/// CAS replaces the child's tag on the slab's remote word, acknowledging the child's version
/// first (by mCAS in the `mcas` heap). Then the child dies, and recovery can only learn from
/// the acknowledgement that the reattach took effect: were it lost, recovery would reattach
/// again (a debug assertion: "reattaching a slab not detached") and the counts would be off.
#[test]
fn a_cas_replaced_after_its_owner_stopped_is_known_taken_by_its_acknowledgement() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    for mode in MODES_ACK {
        let mut found = false;
        for skip in 0..16 {
            let dir = tempfile::tempdir().unwrap();
            let Some(stopped) = stop_child(dir.path(), mode, "reattach.cas", skip) else {
                break;
            };
            let heap = Heap::open(dir.path().join("heap"), &config_in(mode)).unwrap();
            let record = Record::open(&dir.path().join("record"));
            let large_data = heap.layout().large_data;
            let large_slab = |off: u64| (off - large_data) >> 19;
            let entries: Vec<(usize, u64)> = (0..ENTRIES)
                .map(|i| (i, record.entry(i).load(Relaxed)))
                .filter(|&(_, e)| e != 0)
                .collect();
            let freeing = entries
                .iter()
                .find(|&&(_, e)| e & FREEING != 0)
                .map(|&(_, e)| e & !FREEING)
                .expect("the block whose free reattached its slab");
            let Some(&(other, block)) = entries.iter().find(|&&(_, e)| {
                e & FREEING == 0 && e >= large_data && large_slab(e) == large_slab(freeing)
            }) else {
                continue; // the slab's only block: nothing to free remotely
            };
            let before = heap.mcas_ops();
            {
                let t = heap.thread().unwrap();
                t.free(Offset(block));
                t.flush_remote_frees();
            }
            if mode.starts_with("mcas") {
                assert!(
                    heap.mcas_ops() - before >= 2,
                    "the remote free's CAS and the acknowledgement both by mCAS"
                );
            }
            record.entry(other).store(0, Relaxed);
            drop(stopped);
            if let Err(problem) = settle(&heap, &record, "reattach.cas") {
                panic!("{mode} (skip {skip}): {problem}");
            }
            found = true;
            break;
        }
        assert!(
            found,
            "{mode}: no reattach of a slab with another live block"
        );
    }
}

/// A short lease for the lease-mode tests (parent and child must agree).
const LEASE_TEST: std::time::Duration = std::time::Duration::from_millis(300);

/// Lease mode: a slot held by a process on "another host" (another `PODKV_HOST_ID`) is never
/// judged by its pid; once that process stops beating (here: SIGSTOP) for a lease, its slot is
/// fenced, not recovered: nobody takes it until the host is known stopped, which an operator
/// says with `recover_host`. In process mode the same slot stays alive.
#[test]
fn lease_mode_fences_a_silent_other_host_and_recovers_it_once_known_stopped() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    use podkv_alloc::process::SlotLife;
    for liveness in [podkv_alloc::Liveness::Lease, podkv_alloc::Liveness::Process] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("heap");
        let config = Config {
            liveness,
            lease: LEASE_TEST,
            ..config()
        };
        drop(Heap::open(&path, &config).unwrap());
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "lease_child_entry",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE, "lease")
            .env("PODKV_HOST_ID", "4242")
            .env("PODKV_CRASH_HEAP", &path)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Wait for the child to hold its slot, then silence it (alive, but beating nothing).
        let heap = Heap::open(&path, &config).unwrap();
        let lives = || {
            (0..SLOTS as u64)
                .map(|i| heap.slot_life(i))
                .collect::<Vec<_>>()
        };
        let held = |lives: &[SlotLife]| lives.iter().any(|l| !matches!(l, SlotLife::Free));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !held(&lives()) {
            assert!(
                std::time::Instant::now() < deadline,
                "child never claimed a slot"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let fenced = |lives: &[SlotLife]| lives.iter().any(|l| matches!(l, SlotLife::Fenced(_)));
        if liveness == podkv_alloc::Liveness::Lease {
            // While it runs, its renewer keeps it beating past several leases.
            for _ in 0..12 {
                std::thread::sleep(LEASE_TEST / 4);
                assert!(!fenced(&lives()), "a beating owner is never fenced");
            }
        }
        // SAFETY: stopping our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGSTOP) };
        let mut seen = lives();
        for _ in 0..12 {
            std::thread::sleep(LEASE_TEST / 4);
            seen = lives();
        }
        assert!(
            heap.recover_dead().is_empty(),
            "a stopped owner is not known dead"
        );
        // SAFETY: as above.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        child.wait().unwrap();
        let recovered = heap.recover_host(4242);
        match liveness {
            podkv_alloc::Liveness::Lease => {
                assert!(fenced(&seen), "the silent owner was fenced: {seen:?}");
                assert_eq!(
                    recovered.len(),
                    1,
                    "recovered once its host is known stopped"
                )
            }
            podkv_alloc::Liveness::Process => {
                assert!(!fenced(&seen), "process mode fences nobody");
                assert!(
                    recovered.is_empty(),
                    "another host's pid is never judged here"
                )
            }
        }
    }
}

#[test]
fn lease_child_entry() {
    if std::env::var(ROLE).as_deref() != Ok("lease") {
        return;
    }
    let path = std::env::var("PODKV_CRASH_HEAP").unwrap();
    let heap = Heap::open(
        &path,
        &Config {
            create: false,
            lease: LEASE_TEST,
            ..config()
        },
    )
    .unwrap();
    let t = heap.thread().unwrap();
    let off = t.allocate(Layout::from_size_align(64, 8).unwrap()).unwrap();
    t.free(off);
    loop {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A dead slot adopted while claiming (`Heap::thread`), not by `recover_dead`: the registered
/// recovery hook sees its report while the adopter holds the slot, the claiming handle can
/// take the same report once, and a huge allocation made live but never returned is reported
/// `Alloc` like a small one.
#[test]
fn adoption_while_claiming_reports_a_huge_block_in_flight_to_the_hook_and_the_handle() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    assert!(crash_child(dir.path(), "hardware", "huge_alloc.live", 0));
    let heap = Heap::open(dir.path().join("heap"), &config()).unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let hook_seen = seen.clone();
    heap.set_recovery_hook(Some(std::sync::Arc::new(move |handle, recovered| {
        assert_eq!(handle.slot_index(), recovered.slot, "run by the adopter");
        hook_seen.lock().unwrap().push(*recovered);
    })));
    // Claim every slot: one of the claims adopts the dead one.
    let handles: Vec<_> = (0..SLOTS).map(|_| heap.thread().unwrap()).collect();
    let seen = seen.lock().unwrap().clone();
    // The child's workload held two slots (`a`, allocating, and `b`).
    assert_eq!(seen.len(), 2, "both dead slots adopted: {seen:?}");
    let adopted = *seen
        .iter()
        .find(|r| r.huge_step.is_some())
        .expect("the slot that was allocating");
    let InFlight::Alloc(block) = adopted.in_flight else {
        panic!("a huge block made live in flight: {seen:?}");
    };
    assert!(heap.huge_allocation(block).is_some());
    let adopter = handles
        .iter()
        .find(|h| h.slot_index() == adopted.slot)
        .unwrap();
    assert_eq!(
        adopter.take_adoption().map(|r| r.in_flight),
        Some(adopted.in_flight)
    );
    assert!(adopter.take_adoption().is_none(), "taken once");
    let others = handles.iter().filter(|h| h.slot_index() != adopted.slot);
    assert_eq!(
        others.filter_map(|h| h.take_adoption()).count(),
        1,
        "the other dead slot's report, kept for its adopter"
    );
    adopter.free(block);
    heap.set_recovery_hook(None);
    drop(handles);
    let report = heap.check();
    assert!(report.is_valid(), "{:?}", report.problems);
    assert_eq!(huge_leftovers(&heap, &report), None);
}
