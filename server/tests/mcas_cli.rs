//! `podkv mcas-nmp` as its own process: it serves clients, refuses to run twice, is detected
//! when SIGKILLed, is replaced by the next one, and releases its claim on SIGTERM.

use podkv_hw::mcas::processor::is_beating;
use podkv_hw::mcas::{McasError, NmpClient, NmpOptions, RegionFile};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn podkv(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_podkv"));
    command
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// A `podkv mcas-nmp` child, SIGKILLed and reaped when dropped so a failing test leaves none.
struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(path: &Path, extra: &[&str]) -> Served {
    let mut args = vec!["mcas-nmp", "--heap", path.to_str().unwrap()];
    args.extend_from_slice(extra);
    Served(podkv(&args).spawn().unwrap())
}

/// Waits until the region file exists and a processor beats in it.
fn wait_served(path: &Path) -> RegionFile {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(file) = RegionFile::open(path) {
            if is_beating(file.region(), Duration::from_millis(50)) {
                return file;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no processor started on {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_processor_process_serves_refuses_a_twin_dies_visibly_and_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("region");
    let mut first = serve(&path, &["--create", "--clients", "4", "--targets", "8"]);
    let file = wait_served(&path);
    let region = file.region().clone();
    let counter = region.targets().start;
    let options = NmpOptions {
        timeout: Duration::from_secs(1),
        ..NmpOptions::default()
    };
    let client = NmpClient::new(region.clone(), 0, options).unwrap();
    for i in 0..100 {
        assert!(client.cas(counter, i, i + 1).unwrap().succeeded);
    }

    let twin = podkv(&["mcas-nmp", "--heap", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        !twin.status.success(),
        "a second processor must not serve the same region"
    );
    let said = String::from_utf8_lossy(&twin.stderr);
    assert!(said.contains("already serves"), "{said}");
    assert_eq!(said.trim().lines().count(), 1, "one clear line: {said}");

    first.0.kill().unwrap(); // SIGKILL
    first.0.wait().unwrap();
    let asked = Instant::now();
    assert!(matches!(
        client.cas(counter, 100, 101),
        Err(McasError::ProcessorDead(_))
    ));
    assert!(asked.elapsed() < Duration::from_secs(5));

    let mut second = serve(&path, &[]);
    wait_served(&path);
    assert_eq!(client.load(counter).unwrap(), 100);
    assert!(client.cas(counter, 100, 101).unwrap().succeeded);

    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(second.0.id() as libc::pid_t, libc::SIGTERM) };
    assert!(
        second.0.wait().unwrap().success(),
        "SIGTERM is a clean stop"
    );
    assert!(matches!(
        client.cas(counter, 101, 102),
        Err(McasError::NoProcessor)
    ));
}

#[test]
fn a_missing_or_foreign_region_is_one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let out = podkv(&["mcas-nmp", "--heap", missing.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let foreign = dir.path().join("foreign");
    std::fs::write(&foreign, vec![7u8; 8192]).unwrap();
    let out = podkv(&["mcas-nmp", "--heap", foreign.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("no mCAS region"), "{said}");
    assert_eq!(
        std::fs::read(&foreign).unwrap(),
        vec![7u8; 8192],
        "untouched"
    );
    let out = podkv(&["mcas-nmp", "--heap", foreign.to_str().unwrap(), "--create"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "--create never overwrites a file");
}

#[test]
fn bench_mcas_reports_every_kind_and_refuses_the_device() {
    let dir = tempfile::tempdir().unwrap();
    let dir_arg = dir.path().to_str().unwrap();
    let out = podkv(&[
        "bench", "mcas", "--ops", "2000", "--repeat", "1", "--dir", dir_arg,
    ])
    .output()
    .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for kind in ["cpu", "flush-cas", "nmp"] {
        assert_eq!(
            said.lines()
                .filter(|l| l.split_whitespace().nth(2) == Some(kind))
                .count(),
            2,
            "{kind} uncontended and contended:\n{said}"
        );
    }
    let out = podkv(&["bench", "mcas", "--kinds", "device", "--dir", dir_arg])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not available on this machine"));
}
