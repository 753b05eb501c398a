//! A lease-mode pod (issue 20 items 3 and 4): each member is a host of its own (`serve
//! --host-id`), `pod status` shows the mode and the ids, a killed member's slots are recovered
//! once its lease has lapsed, and a member stopped (SIGSTOP) for two leases while the other
//! serves resumes and carries on: no client error at the live member, nothing lost, and the
//! heap checks clean afterwards.

mod pod_support;

use pod_support::{client, free_ports, get, run, set, text, Pod};
use podkv_harness::runner::memcached::Reply;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The members' lease (`podkv_alloc::process::LEASE`, the default every member opens with).
const LEASE: Duration = podkv_alloc::process::LEASE;

fn up_lease(pod: &Pod) -> Vec<String> {
    let base = free_ports(2);
    pod.up(&[
        "--hosts",
        "2",
        "--net",
        "loopback",
        "--liveness",
        "lease",
        "--base-port",
        &base.to_string(),
    ]);
    pod.addrs()
}

fn member_pid(pod: &Pod, i: usize) -> i32 {
    pod.status()["members"][i]["pid"].as_u64().unwrap() as i32
}

/// Sets and reads back keys on `addr` until `stop`; every failure is returned.
fn hammer(addr: String, tag: &'static str, stop: Arc<AtomicBool>) -> (u64, Vec<String>) {
    let mut c = client(&addr);
    let (mut ops, mut errors) = (0u64, Vec::new());
    while !stop.load(Ordering::Relaxed) {
        let key = format!("{tag}{}", ops % 300);
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
fn a_lease_pod_gives_members_host_ids_and_recovers_a_killed_member_after_its_lease() {
    let pod = Pod::new();
    let addrs = up_lease(&pod);
    let status = pod.status();
    assert_eq!(status["liveness"], "lease", "{status}");
    assert_eq!(status["members"][0]["host_id"], 1, "{status}");
    assert_eq!(status["members"][1]["host_id"], 2, "{status}");
    let table = text(&pod.pod("status", &[]));
    assert!(table.contains("liveness lease"), "{table}");

    assert_eq!(
        set(&mut client(&addrs[0]), b"before", b"kill").unwrap(),
        Reply::Stored
    );
    let victim = member_pid(&pod, 0);
    let killed = Instant::now();
    // SAFETY: kill has no memory preconditions; `victim` is a member of the test's pod.
    assert_eq!(unsafe { libc::kill(victim, libc::SIGKILL) }, 0);
    let recovery = loop {
        let m0 = &pod.status()["members"][0];
        if let Some(r) = m0["last_recovery"].as_str() {
            break r.to_owned();
        }
        assert!(
            killed.elapsed() < 4 * LEASE,
            "no recovery in {:?}",
            4 * LEASE
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = killed.elapsed();
    eprintln!("member 0 (host 1) SIGKILLed: its slots recovered after {took:?}: {recovery}");
    assert!(
        took >= LEASE,
        "another host's slots wait for the lease: {took:?}"
    );
    assert!(
        recovery.contains(&format!("pid {victim}")) && !recovery.contains(" 0 recovered"),
        "{recovery}"
    );
    let deadline = Instant::now() + 2 * LEASE;
    loop {
        if let Ok(Some(v)) = podkv_harness::runner::memcached::Client::connect(&[addrs[0].clone()])
            .and_then(|mut c| get(&mut c, b"before"))
        {
            assert_eq!(v, b"kill");
            break;
        }
        assert!(Instant::now() < deadline, "member 0 not back");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_lease_pod_member_stopped_for_two_leases_resumes_while_the_other_serves() {
    let pod = Pod::new();
    let addrs = up_lease(&pod);
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (addr, stop) = (addrs[1].clone(), stop.clone());
        std::thread::spawn(move || hammer(addr, "live", stop))
    };
    let before = {
        let (addr, stop) = (addrs[0].clone(), Arc::new(AtomicBool::new(false)));
        let s = stop.clone();
        let t = std::thread::spawn(move || hammer(addr, "stopped", s));
        std::thread::sleep(Duration::from_millis(300));
        stop.store(true, Ordering::Relaxed);
        t.join().unwrap()
    };
    assert!(before.1.is_empty(), "{:?}", before.1);
    let victim = member_pid(&pod, 0);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(victim, libc::SIGSTOP) }, 0);
    std::thread::sleep(2 * LEASE + Duration::from_millis(500));
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(victim, libc::SIGCONT) }, 0);
    let after = {
        let (addr, stop) = (addrs[0].clone(), Arc::new(AtomicBool::new(false)));
        let s = stop.clone();
        let t = std::thread::spawn(move || hammer(addr, "resumed", s));
        std::thread::sleep(Duration::from_secs(1));
        stop.store(true, Ordering::Relaxed);
        t.join().unwrap()
    };
    stop.store(true, Ordering::Relaxed);
    let (ops, errors) = load.join().unwrap();
    eprintln!(
        "member 1 served {ops} ops while member 0 was stopped {:?} and resumed; member 0 \
         served {} ops after",
        2 * LEASE,
        after.0
    );
    assert!(
        errors.is_empty(),
        "the live member failed meanwhile: {errors:?}"
    );
    assert!(
        after.1.is_empty() && after.0 > 0,
        "the resumed member: {:?}",
        after.1
    );
    assert_eq!(member_pid(&pod, 0), victim, "it resumed, not restarted");
    let out = pod.pod("down", &[]);
    assert!(out.status.success(), "{}", text(&out));
    let heap = pod.heap.display().to_string();
    let out = run(&["heap", "check", &heap]);
    assert!(out.status.success(), "{}", text(&out));
    let out = run(&["store", "check", &heap]);
    assert!(out.status.success(), "{}", text(&out));
}

/// The runbook's steps for a dead host: `heap recover` lists the fenced slots of a stopped
/// server of another host and leaves them; with `--host-down` it recovers them.
#[test]
fn heap_recover_lists_a_stopped_hosts_fenced_slots_and_recovers_them_when_told_it_is_down() {
    let dir = tempfile::tempdir().unwrap();
    let heap = dir.path().join("heap").display().to_string();
    let out = run(&[
        "heap",
        "create",
        &heap,
        "--liveness",
        "lease",
        "--huge-bytes",
        "0",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let port = free_ports(1);
    let mut server = pod_support::podkv()
        .args(["serve", "--heap", &heap, "--threads", "1", "--host-id", "7"])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut c = loop {
        if let Ok(c) =
            podkv_harness::runner::memcached::Client::connect(&[format!("127.0.0.1:{port}")])
        {
            break c;
        }
        assert!(Instant::now() < deadline, "the server never listened");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(set(&mut c, b"k", b"v").unwrap(), Reply::Stored);
    // SAFETY: stopping our own child.
    assert_eq!(unsafe { libc::kill(server.id() as i32, libc::SIGSTOP) }, 0);
    let out = run(&["heap", "recover", &heap]);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("fenced (host 7") && said.contains("--host-down 7"),
        "{said}"
    );
    server.kill().unwrap();
    server.wait().unwrap();
    let out = run(&["heap", "recover", &heap, "--host-down", "7"]);
    let said = text(&out);
    assert!(
        out.status.success() && said.contains("slot released"),
        "{said}"
    );
    let out = run(&["heap", "check", &heap]);
    assert!(out.status.success(), "{}", text(&out));
    let out = run(&["store", "check", &heap]);
    assert!(out.status.success(), "{}", text(&out));
}
