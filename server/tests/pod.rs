//! `podkv pod up|status|down` as separate OS processes: a pod of two members on one heap,
//! a member killed with SIGKILL and restarted by the monitor while the other keeps answering,
//! stale state after the monitor dies, the foreground monitor on SIGTERM, and (as root with a
//! working `ip netns`) a member per network namespace.

mod pod_support;

use pod_support::{client, free_ports, get, is_running, run, set, text, Pod};
use podkv_harness::runner::memcached::Reply;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How soon a killed member must answer again.
const BOUND_RESTART: Duration = Duration::from_secs(10);

fn pids(pod: &Pod) -> Vec<u64> {
    pod.status()["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["pid"].as_u64().unwrap())
        .collect()
}

#[test]
fn two_members_on_loopback_share_one_heap() {
    let pod = Pod::new();
    let base = free_ports(2);
    let out = pod.up(&[
        "--hosts",
        "2",
        "--net",
        "loopback",
        "--base-port",
        &base.to_string(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("loopback ports"),
        "the mode is said: {stderr}"
    );
    let status = pod.status();
    assert_eq!(status["coherence"], "hardware", "{status}");
    assert!(status["mcas_impl"].is_null(), "{status}");
    let addrs = pod.addrs();
    assert_eq!(
        addrs,
        [
            format!("127.0.0.1:{base}"),
            format!("127.0.0.1:{}", base + 1)
        ]
    );
    let mode = std::fs::metadata(&pod.heap).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o600
    );

    let (mut m0, mut m1) = (client(&addrs[0]), client(&addrs[1]));
    assert_eq!(set(&mut m0, b"shared", b"one heap").unwrap(), Reply::Stored);
    assert_eq!(
        get(&mut m1, b"shared").unwrap().as_deref(),
        Some(&b"one heap"[..])
    );
    assert_eq!(set(&mut m1, b"back", b"too").unwrap(), Reply::Stored);
    assert_eq!(get(&mut m0, b"back").unwrap().as_deref(), Some(&b"too"[..]));
    drop((m0, m1));

    let members = pids(&pod);
    let out = pod.pod("down", &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(members.iter().all(|&p| !is_running(p)), "members stopped");
    assert!(!pod.dir().join("pod.json").exists(), "state removed");
    assert!(pod.heap.exists(), "the heap is kept without --purge");
    let again = pod.pod("status", &[]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("is not up"));
}

#[test]
fn pod_up_refuses_a_coherence_other_than_its_heaps_and_mcas_impl_without_mcas() {
    let pod = Pod::new();
    let heap = pod.heap.display().to_string();
    let misuse = pod.pod(
        "up",
        &[
            "--heap",
            &heap,
            "--detach",
            "--coherence",
            "hardware",
            "--mcas-impl",
            "nmp",
        ],
    );
    assert_eq!(misuse.status.code(), Some(1), "{}", text(&misuse));
    assert!(
        String::from_utf8_lossy(&misuse.stderr)
            .contains("--mcas-impl nmp applies only to --coherence mcas"),
        "{}",
        text(&misuse)
    );
    assert!(!pod.heap.exists(), "nothing made");

    let made = run(&[
        "heap",
        "create",
        &heap,
        "--small-bytes",
        "4MiB",
        "--large-bytes",
        "4MiB",
    ]);
    assert!(made.status.success(), "{}", text(&made));
    let other = pod.pod(
        "up",
        &["--heap", &heap, "--detach", "--coherence", "limited"],
    );
    assert_eq!(other.status.code(), Some(1), "{}", text(&other));
    let err = String::from_utf8_lossy(&other.stderr);
    assert!(
        err.contains("was created with --coherence hardware, not limited"),
        "{}",
        text(&other)
    );
    assert!(!pod.dir().join("pod.json").exists(), "no pod started");
}

/// Sets and gets on `addr` until `stop`; returns (operations, errors).
fn hammer(addr: String, stop: Arc<AtomicBool>) -> (u64, Vec<String>) {
    let mut c = client(&addr);
    let (mut ops, mut errors) = (0u64, Vec::new());
    while !stop.load(Ordering::Relaxed) {
        let key = format!("h{}", ops % 500);
        match set(&mut c, key.as_bytes(), key.as_bytes()) {
            Ok(Reply::Stored) => {}
            other => errors.push(format!("set {key}: {other:?}")),
        }
        match get(&mut c, key.as_bytes()) {
            Ok(Some(v)) if v == key.as_bytes() => {}
            other => errors.push(format!("get {key}: {other:?}")),
        }
        ops += 2;
    }
    (ops, errors)
}

#[test]
fn a_killed_member_is_restarted_while_the_other_keeps_answering() {
    let pod = Pod::new();
    let base = free_ports(2);
    pod.up(&[
        "--hosts",
        "2",
        "--net",
        "loopback",
        "--base-port",
        &base.to_string(),
    ]);
    let addrs = pod.addrs();
    assert_eq!(
        set(&mut client(&addrs[0]), b"before", b"kill").unwrap(),
        Reply::Stored
    );

    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (addr, stop) = (addrs[1].clone(), stop.clone());
        std::thread::spawn(move || hammer(addr, stop))
    };
    std::thread::sleep(Duration::from_millis(200));
    let victim = pids(&pod)[0];
    let killed = Instant::now();
    // SAFETY: kill has no memory preconditions; `victim` is member 0, a child of the monitor.
    assert_eq!(unsafe { libc::kill(victim as i32, libc::SIGKILL) }, 0);
    let answered = loop {
        assert!(
            killed.elapsed() < BOUND_RESTART,
            "member 0 not back in {BOUND_RESTART:?}"
        );
        let back = pod.status()["members"][0]["restarts"].as_u64() == Some(1);
        if back {
            if let Ok(Some(v)) =
                podkv_harness::runner::memcached::Client::connect(&[addrs[0].clone()])
                    .and_then(|mut c| get(&mut c, b"before"))
            {
                break (killed.elapsed(), v);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let (ops, errors) = load.join().unwrap();
    eprintln!(
        "member 0 answered again {:?} after SIGKILL; member 1 served {ops} ops meanwhile",
        answered.0
    );
    assert_eq!(
        answered.1, b"kill",
        "the restarted member sees what was stored before"
    );
    assert!(
        errors.is_empty(),
        "member 1 failed during the restart: {errors:?}"
    );
    assert!(ops > 0);

    let status = pod.status();
    let m0 = &status["members"][0];
    assert_eq!(m0["alive"], true);
    assert_ne!(m0["pid"].as_u64(), Some(victim), "a new incarnation");
    assert!(
        m0["last_exit"].as_str().unwrap().contains("SIGKILL"),
        "{m0}"
    );
    assert!(
        m0["last_recovery"]
            .as_str()
            .unwrap()
            .contains(&format!("pid {victim}")),
        "{m0}"
    );
    assert_eq!(status["members"][1]["restarts"], 0);
    let table = String::from_utf8_lossy(&pod.pod("status", &[]).stdout).into_owned();
    assert!(
        table.lines().nth(2).unwrap().split_whitespace().nth(5) == Some("1"),
        "{table}"
    );
}

/// Kills `pid` with SIGKILL, then takes `addr` before its restart can, retrying as needed.
fn kill_and_squat(pod: &Pod, index: usize, addr: &str) -> std::net::TcpListener {
    for _ in 0..5 {
        let pid = pids(pod)[index];
        // SAFETY: kill has no memory preconditions; `pid` is a member of the test's pod.
        assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            if let Ok(squatter) = std::net::TcpListener::bind(addr) {
                return squatter;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        // The restart won the race for the port; wait for it to be counted and try again.
        wait_for(pod, index, |m| {
            m["alive"] == true && m["pid"].as_u64() != Some(pid)
        });
    }
    panic!("could not take {addr} from the member's restart");
}

/// Polls `pod status` until member `index` satisfies `ok`, within the restart bound.
fn wait_for(pod: &Pod, index: usize, ok: impl Fn(&serde_json::Value) -> bool) -> Duration {
    let start = Instant::now();
    loop {
        if ok(&pod.status()["members"][index]) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < BOUND_RESTART,
            "member {index} not as expected in time"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_member_that_cannot_restart_does_not_hold_up_the_others() {
    let pod = Pod::new();
    let base = free_ports(2);
    pod.up(&[
        "--hosts",
        "2",
        "--net",
        "loopback",
        "--base-port",
        &base.to_string(),
    ]);
    let addrs = pod.addrs();
    // Member 0's address is taken by someone else: its restarts fail (and are backed off), and
    // the squatter listening there is never mistaken for the member.
    let squatter = kill_and_squat(&pod, 0, &addrs[0]);
    let restarts_0 = pod.status()["members"][0]["restarts"].as_u64().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let m0 = &pod.status()["members"][0];
    assert_eq!(m0["alive"], false, "{m0}");
    assert_eq!(
        m0["restarts"].as_u64(),
        Some(restarts_0),
        "a failed start is not a restart"
    );

    let victim = pids(&pod)[1];
    // SAFETY: kill has no memory preconditions; `victim` is member 1 of the test's pod.
    assert_eq!(unsafe { libc::kill(victim as i32, libc::SIGKILL) }, 0);
    let took = wait_for(&pod, 1, |m| m["restarts"] == 1 && m["alive"] == true);
    eprintln!("member 1 restarted {took:?} after SIGKILL while member 0 could not start");
    assert_eq!(get(&mut client(&addrs[1]), b"nothing").unwrap(), None);

    drop(squatter);
    wait_for(&pod, 0, |m| {
        m["alive"] == true && m["restarts"].as_u64() == Some(restarts_0 + 1)
    });
    assert_eq!(
        set(&mut client(&addrs[0]), b"back", b"again").unwrap(),
        Reply::Stored
    );
    let log = std::fs::read_to_string(pod.dir().join("monitor.log")).unwrap();
    assert!(
        log.contains("retrying in"),
        "failed starts are backed off:\n{log}"
    );
}

#[test]
fn stale_state_is_reported_and_cleaned_by_down() {
    let pod = Pod::new();
    let base = free_ports(1);
    pod.up(&[
        "--hosts",
        "1",
        "--net",
        "loopback",
        "--base-port",
        &base.to_string(),
    ]);
    let monitor = pod.status()["monitor_pid"].as_u64().unwrap();
    let member = pids(&pod)[0];
    // SAFETY: kill has no memory preconditions; `monitor` is the pod's detached monitor.
    assert_eq!(unsafe { libc::kill(monitor as i32, libc::SIGKILL) }, 0);
    let deadline = Instant::now() + Duration::from_secs(5);
    while is_running(monitor) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let status = pod.pod("status", &["--json"]);
    assert!(!status.status.success(), "stale state is an error");
    assert!(String::from_utf8_lossy(&status.stderr).contains("stale state"));
    let json: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(json["stale"], true);
    let up = pod.pod(
        "up",
        &["--net", "loopback", "--base-port", &base.to_string()],
    );
    assert!(!up.status.success(), "up refuses stale state");
    assert!(
        String::from_utf8_lossy(&up.stderr).contains("pod down"),
        "{}",
        text(&up)
    );

    assert!(is_running(member), "members outlive their monitor");
    let down = pod.pod("down", &["--purge"]);
    assert!(down.status.success(), "{}", text(&down));
    assert!(String::from_utf8_lossy(&down.stderr).contains("gone"));
    let deadline = Instant::now() + Duration::from_secs(5);
    while is_running(member) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!is_running(member), "down stops the orphaned member");
    assert!(!pod.heap.exists(), "--purge removes the heap");
}

#[test]
fn the_foreground_monitor_stops_the_pod_on_sigterm() {
    let pod = Pod::new();
    let base = free_ports(2);
    let heap = pod.heap.display().to_string();
    let mut up = pod_support::podkv()
        .args(["pod", "up"])
        .args(pod.args())
        .args(["--hosts", "2", "--net", "loopback", "--heap", &heap])
        .args(["--base-port", &base.to_string(), "--", "--threads", "1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let members = loop {
        assert!(Instant::now() < deadline, "the pod did not come up");
        let out = pod.pod("status", &["--json"]);
        if out.status.success() {
            let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            if json["phase"] == "up" {
                break pids(&pod);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // SAFETY: kill has no memory preconditions; `up` is our child.
    assert_eq!(unsafe { libc::kill(up.id() as i32, libc::SIGTERM) }, 0);
    let status = up.wait().unwrap();
    assert!(
        status.success(),
        "pod up exits cleanly on SIGTERM: {status}"
    );
    assert!(members.iter().all(|&p| !is_running(p)));
    assert!(!pod.dir().join("pod.json").exists());
}

#[test]
fn one_network_namespace_per_member_when_root() {
    let probe = run(&["pod", "up", "--net", "netns", "--name", "bad name"]);
    assert!(!probe.status.success());
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("\n!!! SKIPPING the netns pod test: not root !!!\n");
        return;
    }
    let pod = Pod::new();
    let out = pod.pod(
        "up",
        &[
            "--detach",
            "--net",
            "netns",
            "--hosts",
            "2",
            "--heap",
            &pod.heap.display().to_string(),
            "--",
            "--threads",
            "1",
        ],
    );
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr);
        assert!(why.contains("not usable"), "{}", text(&out));
        eprintln!("\n!!! SKIPPING the netns pod test: {} !!!\n", why.trim());
        return;
    }
    let status = pod.status();
    assert_eq!(status["mode"], "netns");
    let addrs = pod.addrs();
    assert!(
        addrs
            .iter()
            .all(|a| a.starts_with("10.77.") && a.ends_with(":11211")),
        "{addrs:?}"
    );
    assert_ne!(addrs[0], addrs[1], "each member has its own address");
    let ns0 = status["members"][0]["netns"].as_str().unwrap().to_owned();
    assert!(std::path::Path::new("/run/netns").join(&ns0).exists());

    let (mut m0, mut m1) = (client(&addrs[0]), client(&addrs[1]));
    assert_eq!(set(&mut m0, b"ns", b"hosts").unwrap(), Reply::Stored);
    assert_eq!(get(&mut m1, b"ns").unwrap().as_deref(), Some(&b"hosts"[..]));
    drop((m0, m1));

    let victim = pids(&pod)[1];
    // SAFETY: kill has no memory preconditions; `victim` is member 1 of the test's pod.
    assert_eq!(unsafe { libc::kill(victim as i32, libc::SIGKILL) }, 0);
    wait_for(&pod, 1, |m| m["restarts"] == 1 && m["alive"] == true);
    let netns_of = |pid: u64| std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap();
    let pids = pids(&pod);
    assert_ne!(
        netns_of(pids[0]),
        netns_of(pids[1]),
        "restarted in its own namespace"
    );
    assert_ne!(netns_of(pids[1]), netns_of(std::process::id().into()));
    assert_eq!(
        get(&mut client(&addrs[1]), b"ns").unwrap().as_deref(),
        Some(&b"hosts"[..])
    );

    let down = pod.pod("down", &["--purge"]);
    assert!(down.status.success(), "{}", text(&down));
    assert!(
        !std::path::Path::new("/run/netns").join(&ns0).exists(),
        "namespaces removed"
    );
    let bridge = format!("pkv-{}", pod.name);
    assert!(
        !std::path::Path::new("/sys/class/net").join(bridge).exists(),
        "bridge removed"
    );
}

/// Brings `pod` up (one member, `RUST_LOG` as given or unset), kills its member with SIGKILL,
/// waits for the restart and returns (the killed pid, `pod up`'s stderr, the monitor's log).
fn kill_one_and_read_logs(pod: &Pod, rust_log: Option<&str>) -> (u64, String, String) {
    let heap = pod.heap.display().to_string();
    let mut up = pod_support::podkv();
    up.env_remove("RUST_LOG")
        .args(["pod", "up"])
        .args(pod.args())
        .args([
            "--detach", "--hosts", "1", "--net", "loopback", "--heap", &heap,
        ])
        .args([
            "--base-port",
            &free_ports(1).to_string(),
            "--",
            "--threads",
            "1",
        ]);
    if let Some(filter) = rust_log {
        up.env("RUST_LOG", filter);
    }
    let out = up.output().unwrap();
    assert!(out.status.success(), "pod up failed:\n{}", text(&out));
    let victim = pids(pod)[0];
    // SAFETY: kill has no memory preconditions; `victim` is the member of the test's pod.
    assert_eq!(unsafe { libc::kill(victim as i32, libc::SIGKILL) }, 0);
    wait_for(pod, 0, |m| m["restarts"] == 1 && m["alive"] == true);
    // The monitor counts the restart in the state file just before it logs it.
    std::thread::sleep(Duration::from_millis(200));
    let log = std::fs::read_to_string(pod.dir().join("monitor.log")).unwrap();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    (victim, said, log)
}

/// The one line of `log` with `event` and all of `fields` (`name=value`), if any.
fn event<'a>(log: &'a str, event: &str, fields: &[&str]) -> Option<&'a str> {
    log.lines().find(|l| {
        l.contains(event)
            && fields.iter().all(|f| {
                l.split_whitespace()
                    .any(|word| word == *f || (f.ends_with('=') && word.starts_with(f)))
            })
    })
}

#[test]
fn the_monitor_logs_exit_recovery_and_restart_under_rust_log() {
    let pod = Pod::new();
    let (victim, up_said, log) = kill_one_and_read_logs(&pod, None);
    let pid = format!("pid={victim}");
    assert!(
        up_said.contains(" INFO ") && up_said.contains("loopback ports"),
        "pod up says what it does at info by default:\n{up_said}"
    );
    for (name, fields) in [
        ("member started", vec!["member=0", pid.as_str()]),
        (
            "member exited",
            vec!["member=0", pid.as_str(), "how=signal:"],
        ),
        ("member restarted", vec!["member=0", "restart=1", "pid="]),
    ] {
        assert!(
            event(&log, name, &fields).is_some(),
            "no `{name}` event with {fields:?}:\n{log}"
        );
    }
    let owner = format!("owner.pid={victim}");
    let recovered: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("slot recovered") && l.contains(&owner))
        .collect();
    assert!(
        !recovered.is_empty(),
        "each slot of the killed member is recovered, one event each:\n{log}"
    );
    for line in &recovered {
        assert!(
            event(
                line,
                "slot recovered",
                &["member=0", "slot=", "owner.host=", "us="]
            )
            .is_some(),
            "slot, owner and µs: {line}"
        );
    }
    let exited = log.find("member exited").unwrap();
    let restarted = log.find("member restarted").unwrap();
    let first_recovery = log.find(recovered[0]).unwrap();
    assert!(
        exited < first_recovery && first_recovery < restarted,
        "exit, recovery, restart in order:\n{log}"
    );
    let down = pod.pod("down", &[]);
    assert!(down.status.success(), "{}", text(&down));

    let quiet = pod.sibling();
    let (victim, up_said, log) = kill_one_and_read_logs(&quiet, Some("warn"));
    assert!(
        !up_said.contains(" INFO ") && !log.contains(" INFO "),
        "RUST_LOG=warn silences the info events:\n{up_said}\n{log}"
    );
    assert!(
        event(&log, "member exited", &[&format!("pid={victim}")]).is_some(),
        "an exit is a warning, still shown:\n{log}"
    );
    let member_log = std::fs::read_to_string(quiet.dir().join("member-0.log")).unwrap();
    assert_eq!(
        member_log
            .lines()
            .filter(|l| l.starts_with("podkv serve: listening on "))
            .count(),
        2,
        "the ready line is not a log event: no filter hides it:\n{member_log}"
    );
}
