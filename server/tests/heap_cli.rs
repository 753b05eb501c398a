//! `podkv heap` end to end: the binary creates a heap, four of its processes stress it at
//! once, and `podkv heap check` proves it clean; bad files get one clear line and exit 1.

use std::process::{Command, Output};

fn podkv(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_podkv"))
        .args(args)
        .output()
        .expect("podkv runs")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `podkv heap create HEAP` with a 1 GiB small heap, `large` of large heap and `flags`; must
/// succeed.
fn create(heap: &str, large: &str, flags: &[&str]) -> Output {
    let mut args = vec![
        "heap",
        "create",
        heap,
        "--small-bytes",
        "1GiB",
        "--large-bytes",
        large,
    ];
    args.extend_from_slice(flags);
    let out = podkv(&args);
    assert!(out.status.success(), "{flags:?}: {}", text(&out));
    out
}

/// The coherence modes every multi-process heap test runs in (issue 5's test matrix):
/// `podkv heap create` flags and the mode `heap info` then names.
const MODES: [(&[&str], &str); 4] = [
    (&["--coherence", "hardware"], "hardware"),
    (&["--coherence", "limited"], "limited"),
    (&["--coherence", "mcas", "--mcas-impl", "flush-cas"], "mcas"),
    (&["--coherence", "mcas", "--mcas-impl", "nmp"], "mcas"),
];

#[test]
fn create_stress_from_four_processes_then_check_clean() {
    for (flags, name) in MODES {
        let dir = tempfile::tempdir().unwrap();
        let heap = dir.path().join("heap");
        let heap = heap.to_str().unwrap();
        stress_then_check(heap, flags, name);
    }
}

fn stress_then_check(heap: &str, flags: &[&str], name: &str) {
    let out = create(heap, "4GiB", flags);
    assert!(
        text(&out).contains(&format!("coherence   {name}")),
        "{flags:?}: {}",
        text(&out)
    );
    let out = podkv(&[
        "heap",
        "stress",
        heap,
        "--processes",
        "4",
        "--threads",
        "2",
        "--ops",
        "10000",
    ]);
    assert!(out.status.success(), "{flags:?}: {}", text(&out));
    assert!(text(&out).contains("ok:"), "{}", text(&out));
    let out = podkv(&["heap", "check", heap, "--expect-empty"]);
    assert!(out.status.success(), "{flags:?}: {}", text(&out));
    let out = podkv(&["heap", "info", heap]);
    assert!(
        text(&out).contains("512 B the hazard records' owner words"),
        "{flags:?}: the HWcc line counts them: {}",
        text(&out)
    );
    let out = podkv(&["heap", "info", heap, "--json"]);
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).expect("info --json is JSON");
    assert_eq!(info["live_blocks"], 0, "{flags:?}");
    assert!(info["hwcc_bytes"].as_u64().unwrap() > 0);
}

#[test]
fn a_foreign_file_is_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, "shopping list\n".repeat(500)).unwrap();
    let out = podkv(&["heap", "check", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("podkv: ") && err.contains("not a podkv heap"),
        "{err}"
    );
}

#[test]
fn a_missing_heap_is_not_created_by_check() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent");
    let out = podkv(&["heap", "info", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!path.exists());
}

/// Issue 4's chaos run: 200 SIGKILLs of worker processes (10,000 with `PODKV_SOAK=1`), each
/// followed by recovery while the others work on, then restart and an exact check of the heap
/// against the workers' record.
#[test]
fn chaos_kills_recover_with_no_leak_loss_or_double_free() {
    let dir = tempfile::tempdir().unwrap();
    let heap = dir.path().join("heap");
    let kills = if std::env::var_os("PODKV_SOAK").is_some() {
        "10000"
    } else {
        "200"
    };
    let out = podkv(&["heap", "chaos", heap.to_str().unwrap(), "--kills", kills]);
    let text = text(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&format!("chaos: {kills} kills of 3 processes")),
        "{text}"
    );
    assert!(text.contains("no leak, no loss, no double free"), "{text}");
    // Nobody blocks: the living were never paused for a kill, and each finished operations
    // while the dead process's slots were still unrecovered, in every round.
    assert!(
        text.contains(&format!(
            "{kills} windows): every live worker kept finishing operations"
        )),
        "{text}"
    );
    // The A/A control ran as often, with operations in it, and every measure is reported
    // against it.
    let control = text
        .lines()
        .find(|l| l.starts_with("control: as many windows"))
        .unwrap_or_else(|| panic!("no control line: {text}"));
    let ops: u64 = control
        .rsplit("; ")
        .next()
        .and_then(|tail| tail.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no operation count: {control}"));
    assert!(ops > 0, "{control}");
    assert_eq!(
        text.matches("in a control window").count(),
        6,
        "three measures, with and without system calls: {text}"
    );
    // And the machine's floor: every first-started worker timed its busy loop.
    assert!(
        text.contains("machine floor: 300000 timings of a fixed busy loop"),
        "{text}"
    );
}

/// The chaos run in the other coherence modes (50 kills each; `hardware` runs above).
#[test]
fn chaos_kills_recover_in_every_coherence_mode() {
    for (flags, _) in &MODES[1..] {
        let dir = tempfile::tempdir().unwrap();
        let heap = dir.path().join("heap");
        let mut args = vec!["heap", "chaos", heap.to_str().unwrap(), "--kills", "50"];
        args.extend_from_slice(flags);
        let out = podkv(&args);
        let text = text(&out);
        assert!(out.status.success(), "{flags:?}: {text}");
        assert!(
            text.contains("no leak, no loss, no double free"),
            "{flags:?}: {text}"
        );
    }
}

/// A process killed while it holds thread slots leaves them dead: `podkv heap check` names
/// them, `podkv heap recover` finishes their steps and releases them, and the heap is clean.
#[test]
fn recover_releases_the_slots_of_a_killed_process() {
    let dir = tempfile::tempdir().unwrap();
    let heap = dir.path().join("heap");
    let heap = heap.to_str().unwrap();
    create(heap, "1GiB", &[]);
    let mut worker = Command::new(env!("CARGO_BIN_EXE_podkv"))
        .args([
            "heap",
            "stress-worker",
            heap,
            "--threads",
            "2",
            "--ops",
            "100000000",
            "--seed",
            "3",
        ])
        .spawn()
        .unwrap();
    // Kill it once both threads hold their slots (on a loaded machine the second may start
    // well after the first), then a little later, inside their work.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !text(&podkv(&["heap", "info", heap])).contains("threads     2 slot(s) claimed") {
        assert!(
            std::time::Instant::now() < deadline,
            "the worker's threads never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(100));
    worker.kill().unwrap();
    worker.wait().unwrap();
    let out = podkv(&["heap", "info", heap]);
    assert!(text(&out).contains("of dead pid"), "{}", text(&out));
    let out = podkv(&["heap", "recover", heap]);
    let report = text(&out);
    assert!(out.status.success(), "{report}");
    assert_eq!(
        report.matches("slabs given back, slot released").count(),
        2,
        "{report}"
    );
    assert_eq!(report.matches(" µs of CPU time)").count(), 2, "{report}");
    let out = podkv(&["heap", "recover", heap]);
    assert!(text(&out).contains("no dead slot"), "{}", text(&out));
    // The killed workers' blocks still on the hand-over stack or held are the application's:
    // the checker must find the heap consistent, with no slot left claimed.
    let out = podkv(&["heap", "check", heap]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!text(&out).contains("note: slot"), "{}", text(&out));
}

/// Issue 25: `--place` records the heap's placement, which `heap info` shows beside the
/// machine's NUMA nodes (table and JSON); a node that is not online is refused in one line and
/// creates nothing.
#[test]
fn create_with_a_placement_then_info_shows_it_and_the_nodes() {
    let dir = tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .unwrap();
    for place in ["node=0", "interleave=0"] {
        let heap = dir.path().join(place.replace('=', "-"));
        let heap = heap.to_str().unwrap();
        create(heap, "1GiB", &["--place", place]);
        let out = podkv(&["heap", "info", heap]);
        let info = text(&out);
        assert!(out.status.success(), "{info}");
        assert!(info.contains(&format!("placement   {place}\n")), "{info}");
        assert!(
            info.lines()
                .any(|l| l.starts_with("node 0 ") && l.contains("cpus 0")),
            "{info}"
        );
        let out = podkv(&["heap", "info", heap, "--json"]);
        let info: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("info --json is JSON");
        assert_eq!(info["placement"], place);
        assert_eq!(info["nodes"][0]["id"], 0, "{info}");
        assert_eq!(info["nodes"][0]["cpu_less"], false, "{info}");
    }
    let absent = dir.path().join("absent");
    let out = podkv(&[
        "heap",
        "create",
        absent.to_str().unwrap(),
        "--place",
        "node=7",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("node 7 is not online"), "{err}");
    assert!(!absent.exists(), "a refused placement created the heap");
}

/// `podkv heap info HEAP` into a pipe whose reader is gone (as after `| head -1`): the report
/// ends quietly by SIGPIPE, as Unix tools do, not with a panic message on stderr.
#[test]
fn a_report_into_a_closed_pipe_ends_quietly() {
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;

    let dir = tempfile::tempdir().unwrap();
    let heap = dir.path().join("heap");
    let heap = heap.to_str().unwrap();
    create(heap, "1GiB", &[]);
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe(2) writes.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both descriptors are fresh from pipe(2) and owned by nobody else.
    let (reader, writer) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_podkv"))
        .args(["heap", "info", heap])
        .stdout(Stdio::from(writer))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{stderr}");
}
