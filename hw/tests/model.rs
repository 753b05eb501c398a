//! The model of non-coherent caches (`podkv_hw::model`), property by property, with real
//! processes: each test re-executes this binary as two children, *A* and *B*, that map one
//! file (the pod's memory) through a [`Cache`]: its first page is coherent (shared) and holds
//! the steps the children wait on and the coherent words; the rest is each child's own cache.
//! Random evictions are off (`PODKV_COHERENCE_EVICT=0`) except where a test measures them.

use podkv_hw::model::{self, Cache};
use podkv_hw::sync::mapped::{AtomicU64, Ordering};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ENV_CHILD: &str = "PODKV_MODEL_PROPERTY";
const SIZE_FILE: usize = 1 << 20;
const SIZE_COHERENT: usize = 4096;

/// One child's view of the pod: the mapping and its cache.
struct Pod {
    base: *mut u8,
    /// The pod file's descriptor (kept open: the model uses it).
    fd: libc::c_int,
    _cache: Cache,
}

impl Pod {
    fn open(path: &str) -> Pod {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
        // SAFETY: a fresh shared mapping of the whole (backed) file at an address the kernel
        // picks; the model then replaces all but its first page by this process's cache.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                SIZE_FILE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        let base = base.cast::<u8>();
        // SAFETY: the mapping is ours for the process's life (never unmapped).
        let cache = unsafe { Cache::map(base, fd, SIZE_COHERENT, SIZE_FILE, SIZE_FILE) }.unwrap();
        std::mem::forget(file); // the model keeps using the descriptor
        Pod {
            base,
            fd,
            _cache: cache,
        }
    }

    /// Word `i` of the coherent page (the first eight are steps).
    fn coherent(&self, i: usize) -> &AtomicU64 {
        assert!(8 * i < SIZE_COHERENT);
        // SAFETY: inside the shared first page, aligned.
        unsafe { &*(self.base.add(8 * i) as *const AtomicU64) }
    }

    /// The word at byte `offset` of the modelled range.
    fn word(&self, offset: usize) -> &AtomicU64 {
        assert!(SIZE_COHERENT + offset < SIZE_FILE && offset % 8 == 0);
        // SAFETY: inside the modelled range, aligned; filled on first touch.
        unsafe { &*(self.base.add(SIZE_COHERENT + offset) as *const AtomicU64) }
    }

    fn line(&self, offset: usize) -> *const u8 {
        self.word(offset) as *const AtomicU64 as *const u8
    }

    fn write_back(&self, offset: usize) {
        model::write_back(self.line(offset), 8);
    }

    fn invalidate(&self, offset: usize) {
        model::invalidate(self.line(offset), 8);
    }

    /// Says step `n` is done.
    fn step(&self, n: u64) {
        self.coherent(0).fetch_max(n, Ordering::SeqCst);
    }

    /// Waits for step `n`.
    fn wait(&self, n: u64) {
        let start = Instant::now();
        while self.coherent(0).load(Ordering::SeqCst) < n {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "step {n} never came"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// A fresh pod: a file of zeros in a temp dir (kept while the dir lives).
fn fresh_pod() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pod");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(SIZE_FILE as u64)
        .unwrap();
    (dir, path)
}

/// Runs `test` as children A and B on a fresh pod (a file of zeros), with `env` extra.
fn run_pair(test: &str, env: &[(&str, &str)]) {
    let (_dir, path) = fresh_pod();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = ["A", "B"]
        .iter()
        .map(|role| {
            let mut cmd = Command::new(&exe);
            cmd.args(["--exact", test, "--nocapture", "--test-threads=1"])
                .env(ENV_CHILD, format!("{role}|{}", path.display()))
                .env("PODKV_COHERENCE_EVICT", "0")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            for (k, v) in env {
                cmd.env(k, v);
            }
            cmd.spawn().unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{test}: a child failed:\n{said}");
    }
}

/// In a child: its role and pod. In the parent: runs the pair and returns `None`.
fn child(test: &str, env: &[(&str, &str)]) -> Option<(String, Pod)> {
    match std::env::var(ENV_CHILD) {
        Ok(spec) => {
            let (role, path) = spec.split_once('|').unwrap();
            Some((role.to_owned(), Pod::open(path)))
        }
        Err(_) => {
            run_pair(test, env);
            None
        }
    }
}

#[test]
fn a_line_only_read_keeps_its_value_until_invalidated() {
    let Some((role, pod)) = child("a_line_only_read_keeps_its_value_until_invalidated", &[]) else {
        return;
    };
    if role == "A" {
        assert_eq!(
            pod.word(0).load(Ordering::Relaxed),
            0,
            "first touch reads memory"
        );
        pod.step(1);
        pod.wait(2);
        assert_eq!(
            pod.word(0).load(Ordering::Relaxed),
            0,
            "B's store was written back, but A never invalidated its line"
        );
        assert_eq!(
            pod.word(8192).load(Ordering::Relaxed),
            42,
            "a first touch after the write-back sees it"
        );
        pod.invalidate(0);
        assert_eq!(
            pod.word(0).load(Ordering::Relaxed),
            42,
            "invalidated: fresh"
        );
        assert_eq!(
            pod.word(64).load(Ordering::Relaxed),
            0,
            "a line B wrote without writing it back stays B's"
        );
        pod.invalidate(64);
        assert_eq!(pod.word(64).load(Ordering::Relaxed), 0, "still B's alone");
        pod.step(3);
    } else {
        pod.wait(1);
        pod.word(0).store(42, Ordering::Relaxed);
        pod.word(8192).store(42, Ordering::Relaxed);
        pod.word(64).store(7, Ordering::Relaxed);
        pod.write_back(0);
        pod.write_back(8192);
        pod.step(2);
        pod.wait(3);
    }
}

/// Both children load one line; A writes word 0 of it and writes it back, then B writes word
/// 1 and writes back (first reloading the line, the SWcc edge rule, when `reload_edges`).
/// Returns, in A, both words as memory holds them at the end.
fn two_writers_of_one_line(role: &str, pod: &Pod, reload_edges: bool) -> Option<(u64, u64)> {
    pod.word(0).load(Ordering::Relaxed);
    if role == "A" {
        pod.step(1);
        pod.wait(2);
        pod.word(0).store(1, Ordering::Relaxed);
        pod.write_back(0);
        pod.step(3);
        pod.wait(4);
        pod.invalidate(0);
        return Some((
            pod.word(0).load(Ordering::Relaxed),
            pod.word(8).load(Ordering::Relaxed),
        ));
    }
    pod.wait(1);
    pod.step(2);
    pod.wait(3);
    if reload_edges {
        podkv_hw::swcc::reload_edges(pod.line(8), 8);
    }
    pod.word(8).store(2, Ordering::Relaxed);
    pod.write_back(8);
    pod.step(4);
    None
}

#[test]
fn two_hosts_writing_different_bytes_of_one_line_clobber_each_other() {
    let Some((role, pod)) = child(
        "two_hosts_writing_different_bytes_of_one_line_clobber_each_other",
        &[],
    ) else {
        return;
    };
    if let Some(words) = two_writers_of_one_line(&role, &pod, false) {
        assert_eq!(
            words,
            (0, 2),
            "B wrote back its whole line, with A's word as B had loaded it"
        );
    }
}

#[test]
fn a_writer_that_reloads_its_edge_lines_first_leaves_its_neighbours_bytes_alone() {
    let Some((role, pod)) = child(
        "a_writer_that_reloads_its_edge_lines_first_leaves_its_neighbours_bytes_alone",
        &[],
    ) else {
        return;
    };
    // B's range (word 1 of the line) is a block whose first line holds A's word.
    if let Some(words) = two_writers_of_one_line(&role, &pod, true) {
        assert_eq!(
            words,
            (1, 2),
            "B reloaded the line it shares with A before writing its part"
        );
    }
}

/// Both children load line 0 (zeros). B writes 5 into it and writes it back. Then A, without
/// reloading, rewrites the whole line with the bytes it loaded (zeros: a new block that happens
/// to hold what this cache saw there) and writes it back, by `write_back` or, marking the lines
/// stored first, by `write_back_new`. Returns, in B, word 0 as memory holds it at the end.
fn a_line_rewritten_with_what_was_loaded(role: &str, pod: &Pod, new: bool) -> Option<u64> {
    pod.word(0).load(Ordering::Relaxed);
    if role == "A" {
        pod.step(1);
        pod.wait(2);
        for w in 0..8 {
            pod.word(8 * w).store(0, Ordering::Relaxed);
        }
        if new {
            podkv_hw::Coherence::Limited.write_back_new(pod.line(0), 64);
        } else {
            pod.write_back(0);
        }
        pod.step(3);
        return None;
    }
    pod.wait(1);
    pod.word(0).store(5, Ordering::Relaxed);
    pod.write_back(0);
    pod.step(2);
    pod.wait(3);
    pod.invalidate(0);
    Some(pod.word(0).load(Ordering::Relaxed))
}

#[test]
fn a_line_rewritten_with_the_bytes_it_was_loaded_with_reaches_memory_as_new() {
    let Some((role, pod)) = child(
        "a_line_rewritten_with_the_bytes_it_was_loaded_with_reaches_memory_as_new",
        &[],
    ) else {
        return;
    };
    if let Some(word) = a_line_rewritten_with_what_was_loaded(&role, &pod, true) {
        assert_eq!(word, 0, "A's rewrite, marked stored, reached memory");
    }
}

#[test]
fn a_line_rewritten_with_the_bytes_it_was_loaded_with_looks_clean_unless_marked() {
    let Some((role, pod)) = child(
        "a_line_rewritten_with_the_bytes_it_was_loaded_with_looks_clean_unless_marked",
        &[],
    ) else {
        return;
    };
    // The model's limit, pinned so the need for `write_back_new` stays visible: dirty lines
    // are told by value, so equal bytes look clean and memory keeps B's word.
    if let Some(word) = a_line_rewritten_with_what_was_loaded(&role, &pod, false) {
        assert_eq!(word, 5, "A's plain write-back found the line clean");
    }
}

/// A page dropped from the cache (its memory released, `forget_file`) while another thread
/// of the process stores into it loses no store: the page is closed before its lines are
/// written back, so a store either lands before (and is written back) or faults and waits,
/// then reloads the page, as a store racing a real unmap would. Round after round, a writer
/// stores the round's number into every word of a page while a second thread drops the page
/// over and over; every word must read the round's number after it.
#[test]
fn a_store_racing_a_page_dropped_from_the_cache_is_never_lost() {
    let Some((role, pod)) = child(
        "a_store_racing_a_page_dropped_from_the_cache_is_never_lost",
        &[],
    ) else {
        return;
    };
    if role != "A" {
        return;
    }
    const WORDS: usize = 4096 / 8;
    let page = 4096; // the second modelled page, its own
    let done = std::sync::atomic::AtomicBool::new(false);
    let lost = std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                model::forget_file(pod.fd, (SIZE_COHERENT + page) as u64, 4096);
            }
        });
        let lost = (1..=300u64).find_map(|round| {
            for w in 0..WORDS {
                pod.word(page + 8 * w).store(round, Ordering::Relaxed);
            }
            let lost = (0..WORDS)
                .filter(|&w| pod.word(page + 8 * w).load(Ordering::Relaxed) != round)
                .count();
            (lost > 0).then_some((round, lost))
        });
        done.store(true, Ordering::Relaxed);
        lost
    });
    assert_eq!(
        lost, None,
        "(round, stores lost to a page dropped meanwhile)"
    );
}

#[test]
fn dirty_lines_are_evicted_at_random_moments() {
    let env = [("PODKV_COHERENCE_EVICT", "1")];
    let Some((role, pod)) = child("dirty_lines_are_evicted_at_random_moments", &env) else {
        return;
    };
    if role == "A" {
        pod.word(0).load(Ordering::Relaxed);
        pod.step(1);
        let start = Instant::now();
        loop {
            pod.invalidate(0);
            if pod.word(0).load(Ordering::Relaxed) == 5 {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "B's dirty line never reached memory without a write-back"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        pod.step(2);
    } else {
        pod.wait(1);
        pod.word(0).store(5, Ordering::Relaxed);
        // No write-back of it: only evictions (background, and at these SWcc calls) move it.
        while pod.coherent(0).load(Ordering::SeqCst) < 2 {
            pod.invalidate(4096);
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

const COUNT_INCREMENTS: u64 = 5_000;

#[test]
fn a_cpu_cas_on_swcc_memory_loses_updates_and_one_on_coherent_memory_does_not() {
    let Some((_, pod)) = child(
        "a_cpu_cas_on_swcc_memory_loses_updates_and_one_on_coherent_memory_does_not",
        &[],
    ) else {
        return;
    };
    // Both start together, so their increments overlap.
    pod.coherent(1).fetch_add(1, Ordering::SeqCst);
    while pod.coherent(1).load(Ordering::SeqCst) < 2 {
        std::hint::spin_loop();
    }
    let (swcc, coherent) = (pod.word(0), pod.coherent(8));
    for _ in 0..COUNT_INCREMENTS {
        // SWcc done "right" but with a CPU CAS: invalidate, CAS, write back.
        loop {
            pod.invalidate(0);
            let seen = swcc.load(Ordering::Acquire);
            // A pause, as a busy host has: the other process gets to run inside the window.
            if seen % 8 == 0 {
                std::thread::sleep(Duration::from_micros(20));
            }
            if swcc
                .compare_exchange(seen, seen + 1, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                pod.write_back(0);
                break;
            }
        }
        coherent.fetch_add(1, Ordering::AcqRel);
    }
    let done = pod.coherent(2).fetch_add(1, Ordering::SeqCst) + 1;
    if done == 2 {
        pod.invalidate(0);
        let total = swcc.load(Ordering::Acquire);
        assert_eq!(coherent.load(Ordering::SeqCst), 2 * COUNT_INCREMENTS);
        assert!(
            total < 2 * COUNT_INCREMENTS,
            "every SWcc CAS counted ({total}): the CPU CAS acted on memory, not a local copy"
        );
        println!("SWcc counter {total} of {}", 2 * COUNT_INCREMENTS);
    }
}

/// The cache files of `pod` (`pod.model-PID-START-N`) in `dir`.
fn cache_files(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("pod.model-"))
        .collect()
}

#[test]
fn a_dead_process_leaves_its_dirty_lines_to_whoever_judges_it_dead_on_its_host() {
    if let Ok(spec) = std::env::var(ENV_CHILD) {
        let (role, path) = spec.split_once('|').unwrap();
        if role != "victim" {
            return;
        }
        let pod = Pod::open(path);
        pod.word(0).store(42, Ordering::Relaxed); // dirty, never written back
        pod.word(4096).store(43, Ordering::Relaxed);
        pod.write_back(4096); // clean: in memory already
        pod.coherent(1)
            .store(u64::from(std::process::id()), Ordering::SeqCst);
        let start = podkv_hw::process::start_time(std::process::id()).unwrap();
        pod.coherent(2).store(start & 0xFF_FFFF, Ordering::SeqCst);
        pod.step(1);
        // SAFETY: killing this very process, as `kill -9` would.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        unreachable!("SIGKILL");
    }
    let (dir, path) = fresh_pod();
    let test = "a_dead_process_leaves_its_dirty_lines_to_whoever_judges_it_dead_on_its_host";
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(ENV_CHILD, format!("victim|{}", path.display()))
        .env("PODKV_COHERENCE_EVICT", "0")
        .output()
        .unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&out.status),
        Some(libc::SIGKILL),
        "the victim dies by SIGKILL:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        cache_files(dir.path()).len(),
        1,
        "the victim's cache outlives it"
    );
    let judge = Pod::open(path.to_str().unwrap());
    let (pid, start) = (
        judge.coherent(1).load(Ordering::SeqCst) as u32,
        judge.coherent(2).load(Ordering::SeqCst) as u32,
    );
    assert_eq!(
        judge.word(0).load(Ordering::Relaxed),
        0,
        "not in memory yet"
    );
    assert_eq!(
        model::settle_dead(pid, start + 1),
        0,
        "another process's start time: not it"
    );
    assert_eq!(
        model::settle_dead(pid, start),
        1,
        "one dirty line: the clean one stays"
    );
    judge.invalidate(0);
    assert_eq!(
        judge.word(0).load(Ordering::Relaxed),
        42,
        "its dirty line reached memory"
    );
    assert_eq!(judge.word(4096).load(Ordering::Relaxed), 43);
    assert_eq!(model::settle_dead(pid, start), 0, "settled once");
    let files = cache_files(dir.path());
    assert_eq!(
        files.len(),
        1,
        "the victim's file is gone, the judge's is there: {files:?}"
    );
    drop(judge);
    assert!(
        cache_files(dir.path()).is_empty(),
        "a closed cache removes its file"
    );
}
