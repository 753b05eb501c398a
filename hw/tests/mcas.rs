//! mCAS across real processes: this test binary, re-executed as clients and as the software
//! near-memory processor, shares one region file.
//!
//! - Several client processes × threads increment one shared counter and one counter each by
//!   mCAS; every successful swap's previous value must appear exactly once (the swaps form one
//!   total order), every reply must agree with its previous value, and the counters read N.
//! - The same with `flush-cas`.
//! - A processor process killed with SIGKILL is reported by clients as an error, never a hang;
//!   `ensure_processor` then takes over the stale claim and service resumes.
//! - Of several concurrent `ensure_processor` calls exactly one starts a processor.

use podkv_hw::mcas::processor::{is_beating, Stopped, TAKEOVER_AFTER};
use podkv_hw::mcas::{
    ensure_processor, Liveness, Mcas, McasError, McasKind, NmpClient, NmpOptions, Processor,
    Region, RegionFile, Start,
};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ENV_ROLE: &str = "PODKV_MCAS_CHILD";
const COUNT_PROCESSES: u32 = 3;
const COUNT_THREADS: u32 = 2;
const COUNT_CLIENTS: u32 = 16;
/// Successful increments per thread of each counter.
const COUNT_INCREMENTS: u64 = 1500;
/// The shared counter is the first target; thread `i`'s own counter is target `1 + i`.
const COUNT_TARGETS: u64 = 1 + (COUNT_PROCESSES * COUNT_THREADS) as u64;

fn options() -> NmpOptions {
    NmpOptions {
        timeout: Duration::from_secs(1),
        ..NmpOptions::default()
    }
}

fn target(region: &Region, index: u64) -> u64 {
    region.targets().start + 8 * index
}

fn child_command(role: &str, path: &Path, extra: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(ENV_ROLE, format!("{role}|{}|{extra}", path.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// The children's entry point: runs only when re-executed with the role variable set.
#[test]
fn child() {
    let Ok(spec) = std::env::var(ENV_ROLE) else {
        return;
    };
    let mut parts = spec.split('|');
    let (role, path, extra) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
    );
    let file = RegionFile::open(Path::new(path)).expect("child opens the region file");
    match role {
        "processor" => {
            exit_with_parent();
            let processor = Processor::claim(file.region(), TAKEOVER_AFTER).expect("claim");
            println!("processor claimed");
            let never = podkv_hw::sync::mapped::AtomicBool::new(false);
            processor.run(&never);
        }
        "clients" => {
            let (kind, index) = extra.split_once(',').unwrap();
            clients(file.region(), kind.parse().unwrap(), index.parse().unwrap());
        }
        other => panic!("unknown role {other}"),
    }
}

/// A processor child must not outlive the test that started it, even one that panicked.
fn exit_with_parent() {
    // SAFETY: getppid(2) has no preconditions.
    let parent = unsafe { libc::getppid() };
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_millis(100));
        // SAFETY: as above.
        if unsafe { libc::getppid() } != parent {
            std::process::exit(0);
        }
    });
}

/// A child process killed (SIGKILL) and reaped when dropped, so a failing test leaves none.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One client process: `COUNT_THREADS` threads each increment the shared counter and their own
/// `COUNT_INCREMENTS` times, printing the shared counter's previous values they swapped.
fn clients(region: &Region, kind: McasKind, process: u32) {
    let threads: Vec<_> = (0..COUNT_THREADS)
        .map(|t| {
            let region = region.clone();
            std::thread::spawn(move || {
                let id = process * COUNT_THREADS + t;
                let mcas = Mcas::open(kind, &region, id, options()).unwrap();
                let won = increment(&mcas, target(&region, 0));
                let own = increment(&mcas, target(&region, 1 + u64::from(id)));
                assert_eq!(
                    own,
                    (0..COUNT_INCREMENTS).collect::<Vec<_>>(),
                    "uncontended"
                );
                won
            })
        })
        .collect();
    for thread in threads {
        let won = thread.join().unwrap();
        let text: Vec<_> = won.iter().map(u64::to_string).collect();
        // The harness may have printed "test child ... " on this line already.
        println!("\nwon {}", text.join(","));
    }
}

/// Increments `target` `COUNT_INCREMENTS` times by mCAS; returns the previous values swapped.
fn increment(mcas: &Mcas, target: u64) -> Vec<u64> {
    let mut won = Vec::new();
    let mut seen = mcas.load(target).unwrap();
    while (won.len() as u64) < COUNT_INCREMENTS {
        let previous = cas_checked(mcas, target, seen, seen + 1);
        if previous == seen {
            won.push(previous);
            seen += 1;
        } else {
            assert!(
                previous > seen,
                "a counter never goes back: {previous} after {seen}"
            );
            seen = previous;
        }
    }
    won
}

/// One mCAS whose reply, for `nmp`, must agree with the value it reports.
fn cas_checked(mcas: &Mcas, target: u64, expected: u64, new: u64) -> u64 {
    match mcas {
        Mcas::Nmp(client) => {
            let reply = client.cas(target, expected, new).unwrap();
            assert_eq!(reply.succeeded, reply.previous == expected, "{reply:?}");
            reply.previous
        }
        Mcas::FlushCas(_) => mcas.cas(target, expected, new).unwrap(),
    }
}

fn run_client_processes(path: &Path, kind: McasKind) {
    let children: Vec<_> = (0..COUNT_PROCESSES)
        .map(|i| {
            child_command("clients", path, &format!("{kind},{i}"))
                .spawn()
                .unwrap()
        })
        .collect();
    let mut won = Vec::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "a client process failed ({}):\n{said}",
            out.status
        );
        for line in said
            .lines()
            .filter_map(|l| l.split_once("won ").map(|(_, v)| v))
        {
            won.extend(line.split(',').map(|v| v.parse::<u64>().unwrap()));
        }
    }
    let total = u64::from(COUNT_PROCESSES * COUNT_THREADS) * COUNT_INCREMENTS;
    won.sort_unstable();
    let wrong = won.iter().zip(0..).find(|&(&v, i)| v != i);
    assert!(
        won.len() as u64 == total && wrong.is_none(),
        "each swap of the shared counter once: {} swaps of {total}, first wrong {wrong:?}",
        won.len()
    );
    let file = RegionFile::open(path).unwrap();
    let region = file.region();
    let read = |i| {
        region
            .target(target(region, i))
            .unwrap()
            .load(podkv_hw::sync::mapped::Ordering::SeqCst)
    };
    assert_eq!(read(0), total);
    for i in 1..COUNT_TARGETS {
        assert_eq!(read(i), COUNT_INCREMENTS);
    }
}

#[test]
fn nmp_processor_process_serves_client_processes_linearizably() {
    if std::env::var(ENV_ROLE).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("region");
    let file = RegionFile::create(&path, COUNT_CLIENTS, COUNT_TARGETS).unwrap();
    let started = ensure_processor(
        file.region(),
        Start::Command(child_command("processor", &path, "")),
        TAKEOVER_AFTER,
    )
    .unwrap();
    let Liveness::StartedProcess(processor) = started else {
        panic!("a fresh region has no processor: {started:?}");
    };
    let _processor = Reaped(processor);
    run_client_processes(&path, McasKind::Nmp);
}

#[test]
fn flush_cas_from_client_processes_counts_exactly() {
    if std::env::var(ENV_ROLE).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("region");
    RegionFile::create(&path, COUNT_CLIENTS, COUNT_TARGETS).unwrap();
    run_client_processes(&path, McasKind::FlushCas);
}

#[test]
fn a_killed_processor_is_an_error_not_a_hang_and_a_new_one_takes_over() {
    if std::env::var(ENV_ROLE).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("region");
    let file = RegionFile::create(&path, 4, 4).unwrap();
    let region = file.region().clone();
    let started = ensure_processor(
        &region,
        Start::Command(child_command("processor", &path, "")),
        TAKEOVER_AFTER,
    )
    .unwrap();
    let Liveness::StartedProcess(processor) = started else {
        panic!("expected to start the processor: {started:?}");
    };
    let mut processor = Reaped(processor);
    let counter = target(&region, 0);
    // A client hammers the counter until the processor dies under it.
    let hammer = {
        let region = region.clone();
        std::thread::spawn(move || {
            let client = NmpClient::new(region, 0, options()).unwrap();
            let mut done = 0u64;
            loop {
                match client.cas(counter, done, done + 1) {
                    Ok(reply) if reply.succeeded => done += 1,
                    Ok(reply) => panic!("only this client writes the counter: {reply:?}"),
                    Err(error) => return (done, error, Instant::now()),
                }
            }
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    processor.0.kill().unwrap(); // SIGKILL
    let killed_at = Instant::now();
    processor.0.wait().unwrap();
    let (done, error, failed_at) = hammer.join().unwrap();
    assert!(done > 0, "the processor served before it died");
    // Killed between requests, or before taking the last one: dead, and the request undone.
    // Killed after taking it: its outcome is unknown.
    assert!(
        matches!(
            error,
            McasError::ProcessorDead(_) | McasError::OutcomeUnknown
        ),
        "{error}"
    );
    let waited = failed_at.duration_since(killed_at);
    assert!(waited < Duration::from_secs(5), "detected in {waited:?}");
    // A new client on the dead region fails the same way, after the timeout.
    let late = NmpClient::new(region.clone(), 1, options()).unwrap();
    assert!(matches!(
        late.cas(counter, 0, 1),
        Err(McasError::ProcessorDead(_))
    ));
    // Take over the stale claim on a thread; service resumes where the counter stood.
    let Liveness::StartedThread(handle) =
        ensure_processor(&region, Start::Thread, TAKEOVER_AFTER).unwrap()
    else {
        panic!("the dead processor's claim must be taken over");
    };
    let now = late.load(counter).unwrap();
    if matches!(error, McasError::ProcessorDead(_)) {
        assert_eq!(now, done, "a request no processor took did nothing");
    } else {
        assert!(
            now == done || now == done + 1,
            "at most the in-flight swap is unknown"
        );
    }
    assert!(late.cas(counter, now, now + 1).unwrap().succeeded);
    assert_eq!(handle.stop(), Stopped::Asked);
    assert!(matches!(
        late.cas(counter, now + 1, 0),
        Err(McasError::NoProcessor)
    ));
}

#[test]
fn of_concurrent_starters_exactly_one_starts_a_processor() {
    let dir = tempfile::tempdir().unwrap();
    let file = RegionFile::create(&dir.path().join("region"), 4, 4).unwrap();
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(4));
    let starters: Vec<_> = (0..4)
        .map(|_| {
            let region = file.region().clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                ensure_processor(&region, Start::Thread, TAKEOVER_AFTER).unwrap()
            })
        })
        .collect();
    let outcomes: Vec<_> = starters.into_iter().map(|s| s.join().unwrap()).collect();
    let started = outcomes
        .iter()
        .filter(|o| matches!(o, Liveness::StartedThread(_)))
        .count();
    assert_eq!(started, 1, "{outcomes:?}");
    assert!(is_beating(file.region(), Duration::from_secs(1)));
    let client = NmpClient::new(file.region().clone(), 2, options()).unwrap();
    assert!(
        client
            .cas(target(file.region(), 3), 0, 7)
            .unwrap()
            .succeeded
    );
    // A live processor is found, not duplicated.
    let again = ensure_processor(file.region(), Start::Thread, TAKEOVER_AFTER).unwrap();
    assert!(matches!(again, Liveness::Existing { .. }), "{again:?}");
}

#[test]
fn bad_targets_and_clients_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("region");
    let file = RegionFile::create(&path, 2, 2).unwrap();
    let region = file.region().clone();
    let Liveness::StartedThread(_handle) =
        ensure_processor(&region, Start::Thread, TAKEOVER_AFTER).unwrap()
    else {
        panic!("fresh region");
    };
    let client = NmpClient::new(region.clone(), 0, options()).unwrap();
    for bad in [
        0,
        8,
        region.targets().start + 4,
        region.targets().end,
        u64::MAX - 7,
    ] {
        assert!(matches!(client.cas(bad, 0, 1), Err(McasError::BadTarget(t)) if t == bad));
        assert!(matches!(client.store(bad, 1), Err(McasError::BadTarget(_))));
    }
    assert!(RegionFile::open(&path).is_ok(), "the header survived");
    assert!(matches!(
        NmpClient::new(region.clone(), 2, options()),
        Err(McasError::BadClient {
            client: 2,
            count: 2
        })
    ));
    assert!(matches!(
        Mcas::open(McasKind::Device, &region, 0, options()),
        Err(McasError::DeviceUnavailable(msg)) if msg.contains("not available on this machine")
    ));
    // store goes through the processor and orders with CAS.
    client.store(region.targets().start, 41).unwrap();
    assert_eq!(
        client.cas(region.targets().start, 41, 42).unwrap().previous,
        41
    );
}
