//! A lease-mode pod (issue 20 items 3 and 4): each member is a host of its own (`serve
//! --host-id`), `pod status` shows the mode and the ids, a killed member's slots are recovered
//! once its lease has lapsed, and a member stopped (SIGSTOP) for two leases under `podkv ycsb`
//! spread over the pod resumes and carries on: no client error at the live members, and the
//! heap and the store check clean afterwards.

mod pod_support;

use pod_support::{client, free_ports, get, run, set, text, Pod};
use podkv_harness::runner::memcached::Reply;
use std::time::{Duration, Instant};

/// The members' lease (`podkv_alloc::process::LEASE`, the default every member opens with).
const LEASE: Duration = podkv_alloc::process::LEASE;

fn up_lease(pod: &Pod, hosts: u16) -> Vec<String> {
    let base = free_ports(hosts);
    pod.up(&[
        "--hosts",
        &hosts.to_string(),
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

#[test]
fn a_lease_pod_gives_members_host_ids_and_recovers_a_killed_member_after_its_lease() {
    let pod = Pod::new();
    let addrs = up_lease(&pod, 2);
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
    let killed_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    // SAFETY: kill has no memory preconditions; `victim` is a member of the test's pod.
    assert_eq!(unsafe { libc::kill(victim, libc::SIGKILL) }, 0);
    let (recovery, recovered_ms) = loop {
        let m0 = &pod.status()["members"][0];
        if let (Some(r), Some(ms)) = (m0["last_recovery"].as_str(), m0["recovered_ms"].as_u64()) {
            break (r.to_owned(), ms);
        }
        assert!(
            killed.elapsed() < 10 * LEASE,
            "no recovery in {:?}",
            10 * LEASE
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // The monitor's record of when it recovered, so this test's polling adds nothing. The
    // member beat last up to a third of a lease before the kill, and the lease runs from
    // then: within a lease of the kill, plus the watch's granularity.
    let took = Duration::from_millis(recovered_ms.saturating_sub(killed_ms));
    eprintln!(
        "member 0 (host 1) SIGKILLed: its slots recovered {took:?} after the kill (lease \
         {LEASE:?}): {recovery}"
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

/// Issue 20's figure: `podkv ycsb --target memcached://…` spread over a 3-member lease pod
/// while member 0 is stopped (SIGSTOP) for two leases and resumed. The target's timeout
/// counts each failed request against its member: the live members see none, the stopped
/// one sees its requests fail while stopped and succeed again once resumed.
#[test]
fn a_lease_pod_member_stopped_for_two_leases_fails_only_its_own_requests_under_ycsb() {
    let pod = Pod::new();
    let addrs = up_lease(&pod, 3);
    let victim = member_pid(&pod, 0);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("ycsb.ndjson");
    let target = format!("memcached://{}?timeout_ms=500", addrs.join(","));
    let stopped_for = 2 * LEASE;
    let lead = Duration::from_millis(1500);
    let duration = lead + stopped_for + Duration::from_millis(2500);
    let ycsb = pod_support::podkv()
        .args(["ycsb", "--workload", "a", "--records", "1000"])
        .args(["--ops", "1000000000", "--threads", "2", "--no-pin"])
        .args(["--duration", &duration.as_secs_f64().to_string()])
        .args(["--target", &target, "--json"])
        .arg(&json)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(lead);
    // SAFETY: kill has no memory preconditions; `victim` is a member of the test's pod.
    assert_eq!(unsafe { libc::kill(victim, libc::SIGSTOP) }, 0);
    std::thread::sleep(stopped_for);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(victim, libc::SIGCONT) }, 0);
    let out = ycsb.wait_with_output().unwrap();
    assert!(out.status.success(), "ycsb: {}", text(&out));
    let record: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&json).unwrap().trim()).unwrap();
    let servers = record["servers"].as_array().expect("per-server tallies");
    let tally = |addr: &str| {
        let s = servers.iter().find(|s| s["server"] == addr).unwrap();
        (
            s["requests"].as_u64().unwrap(),
            s["errors"].as_u64().unwrap(),
        )
    };
    eprintln!(
        "ycsb over {} members, member 0 stopped {stopped_for:?}: {}",
        addrs.len(),
        addrs
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let (requests, errors) = tally(a);
                format!("member {i}: {requests} requests, {errors} errors")
            })
            .collect::<Vec<_>>()
            .join("; ")
    );
    for live in &addrs[1..] {
        let (requests, errors) = tally(live);
        assert!(requests > 0 && errors == 0, "live member {live}: {record}");
    }
    // The stopped member answers again, as the same process.
    let mut c = client(&addrs[0]);
    assert_eq!(set(&mut c, b"resumed", b"yes").unwrap(), Reply::Stored);
    assert_eq!(
        get(&mut c, b"resumed").unwrap().as_deref(),
        Some(&b"yes"[..])
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
