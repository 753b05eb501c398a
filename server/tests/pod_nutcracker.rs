//! Beyond one pod: keys sharded over two pods by Debian's nutcracker (twemproxy), configured by
//! `podkv pod shard`. Every key set through the proxy is readable through it and lives on
//! exactly one pod (read through a member the proxy does not use), and both pods hold many.
//! Skipped, loudly, when nutcracker is not installed (`apt-get install nutcracker`;
//! `scripts/setup` installs it).

mod pod_support;

use pod_support::{client, free_ports, get, set, text, Pod};
use podkv_harness::runner::memcached::Reply;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

const COUNT_KEYS: usize = 1000;

/// The nutcracker process, killed on drop.
struct Proxy(Child);

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn nutcracker_installed() -> bool {
    std::process::Command::new("nutcracker")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

fn up_two_members(pod: &Pod) {
    let base = free_ports(2).to_string();
    pod.up(&["--hosts", "2", "--net", "loopback", "--base-port", &base]);
}

#[test]
fn nutcracker_spreads_keys_over_two_pods() {
    if !nutcracker_installed() {
        eprintln!("\n!!! SKIPPING nutcracker test: nutcracker is not installed (apt-get install nutcracker) !!!\n");
        return;
    }
    let a = Pod::new();
    let b = a.sibling();
    up_two_members(&a);
    up_two_members(&b);
    let root = a.root.path().display().to_string();

    let ports = free_ports(2);
    let listen = format!("127.0.0.1:{ports}");
    let pods = format!("{},{}", a.name, b.name);
    let config = a.root.path().join("proxy.yml");
    let shard = pod_support::podkv()
        .args([
            "pod",
            "shard",
            "--state-dir",
            &root,
            "--pods",
            &pods,
            "--listen",
            &listen,
        ])
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    assert!(shard.status.success(), "{}", text(&shard));
    let check = std::process::Command::new("nutcracker")
        .arg("-t")
        .arg("-c")
        .arg(&config)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "nutcracker accepts the config: {}",
        text(&check)
    );

    let proxy = Proxy(
        pod_support::podkv()
            .args([
                "pod",
                "shard",
                "--state-dir",
                &root,
                "--pods",
                &pods,
                "--listen",
                &listen,
            ])
            .args(["--run", "--stats-port", &(ports + 1).to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(&listen).is_err() {
        assert!(
            Instant::now() < deadline,
            "nutcracker did not listen on {listen}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let mut via_proxy = client(&listen);
    let keys: Vec<String> = (0..COUNT_KEYS).map(|i| format!("user:{i:05}")).collect();
    for k in &keys {
        assert_eq!(
            set(&mut via_proxy, k.as_bytes(), k.as_bytes()).unwrap(),
            Reply::Stored
        );
    }
    // The proxy talks to member 0 of each pod; read each pod through its member 1.
    let (mut on_a, mut on_b) = (client(&a.addrs()[1]), client(&b.addrs()[1]));
    let (mut count_a, mut count_b) = (0, 0);
    for k in &keys {
        let value = Some(k.as_bytes().to_vec());
        assert_eq!(
            get(&mut via_proxy, k.as_bytes()).unwrap(),
            value,
            "{k} via the proxy"
        );
        let (in_a, in_b) = (
            get(&mut on_a, k.as_bytes()).unwrap(),
            get(&mut on_b, k.as_bytes()).unwrap(),
        );
        match (in_a == value, in_b == value) {
            (true, false) if in_b.is_none() => count_a += 1,
            (false, true) if in_a.is_none() => count_b += 1,
            other => panic!("{k} must be on exactly one pod: {other:?}"),
        }
    }
    eprintln!(
        "{COUNT_KEYS} keys through nutcracker: {count_a} on pod {}, {count_b} on pod {}",
        a.name, b.name
    );
    assert!(
        count_a > COUNT_KEYS / 4 && count_b > COUNT_KEYS / 4,
        "spread: {count_a} / {count_b}"
    );
    drop(proxy);
}

#[test]
fn the_nutcracker_demo_script_runs_up_check_down() {
    if !nutcracker_installed() {
        eprintln!("\n!!! SKIPPING nutcracker demo test: nutcracker is not installed (apt-get install nutcracker) !!!\n");
        return;
    }
    let a = Pod::new();
    let b = a.sibling();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/nutcracker-demo");
    let ports = free_ports(6);
    let demo = |step: &str| {
        std::process::Command::new(script)
            .arg(step)
            .env("PODKV", env!("CARGO_BIN_EXE_podkv"))
            .env("PODKV_STATE_DIR", a.root.path())
            .env("NAMES", format!("{} {}", a.name, b.name))
            .env("NET", "loopback")
            .env("BASE_PORT", ports.to_string())
            .env("PROXY", format!("127.0.0.1:{}", ports + 4))
            .env("STATS_PORT", (ports + 5).to_string())
            .env("KEYS", "100")
            .output()
            .unwrap()
    };
    let up = demo("up");
    assert!(up.status.success(), "{}", text(&up));
    let check = demo("check");
    let down = demo("down");
    assert!(check.status.success(), "{}", text(&check));
    assert!(
        String::from_utf8_lossy(&check.stdout).contains("0 misplaced"),
        "{}",
        text(&check)
    );
    assert!(down.status.success(), "{}", text(&down));
    assert!(!a.root.path().join(&a.name).join("pod.json").exists());
    for pod in [&a, &b] {
        let heap = format!("/dev/shm/podkv-pod-{}", pod.name);
        assert!(
            !std::path::Path::new(&heap).exists(),
            "down --purge removed {heap}"
        );
    }
}
