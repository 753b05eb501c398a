//! Get/set mixes (95/5 and 50/50, scrambled zipfian 0.99, 8-byte keys, 960-byte values — the
//! paper's YCSB shape) with 1 and 2 threads: the podkv store vs the same index over mimalloc
//! vs dashmap, all in one run, through `KvMap`; then bytes of heap per item.
//! Do not use the tests as benchmarks; use this:
//!
//! ```text
//! cargo run -p podkv-store --release --example mix -- [KEYS] [OPS_PER_THREAD]
//! ```
//! Prints a table and one NDJSON line per measurement: the median of `MIX_ROUNDS` (default 5)
//! interleaved rounds, with each round's ratios. For profiling, `MIX_ONLY=podkv|local|dashmap`
//! runs one map, `MIX_TABLE=N` a fixed table of 2^N buckets, `MIX_SETS=N` one mix of N% sets
//! and `MIX_THREADS=1|2` one thread count (`0`: only the two-process rows); `MIX_CPU_TIME=1`
//! times threads by their CPU time.

use podkv_store::{DashBaseline, KvHandle, KvMap, LocalStore, Store, StoreConfig};
use std::time::Instant;

const SIZE_VALUE: usize = 960;
/// Interleaved rounds per measurement (`MIX_ROUNDS` overrides); the median is reported.
const ROUNDS: usize = 5;

/// YCSB's ZipfianGenerator (Gray et al.), scrambled with FNV like ScrambledZipfianGenerator.
struct Zipf {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

impl Zipf {
    fn new(n: u64, theta: f64) -> Zipf {
        let zeta = |m: u64| (1..=m).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zetan = zeta(n);
        let zeta2 = zeta(2);
        let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
        Zipf {
            n,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta,
        }
    }

    fn next(&self, u: f64) -> u64 {
        let uz = u * self.zetan;
        let rank = if uz < 1.0 {
            0
        } else if uz < 1.0 + 0.5f64.powf(self.theta) {
            1
        } else {
            (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64
        };
        fnv(rank.min(self.n - 1)) % self.n
    }
}

fn fnv(x: u64) -> u64 {
    let mut h = 0xCBF2_9CE4_8422_2325u64;
    for b in x.to_le_bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01B3);
    }
    h
}

/// One thread's pre-generated operations: (key, is_set).
fn stream(zipf: &Zipf, ops: usize, set_percent: u64, seed: u64) -> Vec<(u64, bool)> {
    let mut x = seed | 1;
    let mut rand = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..ops)
        .map(|_| {
            let u = (rand() >> 11) as f64 / (1u64 << 53) as f64;
            (zipf.next(u), rand() % 100 < set_percent)
        })
        .collect()
}

fn preload<M: KvMap>(map: &M, keys: u64) {
    let mut h = map.handle().unwrap();
    let value = vec![b'v'; SIZE_VALUE];
    for k in 0..keys {
        h.set(&k.to_be_bytes(), &value).unwrap();
    }
}

/// Runs the streams on `threads` threads; returns Mops/s.
fn run<M: KvMap>(map: &M, streams: &[Vec<(u64, bool)>]) -> f64 {
    let barrier = std::sync::Barrier::new(streams.len() + 1);
    std::thread::scope(|s| {
        let workers: Vec<_> = streams
            .iter()
            .map(|ops| {
                let barrier = &barrier;
                s.spawn(move || {
                    let mut h = map.handle().unwrap();
                    let value = vec![b'w'; SIZE_VALUE];
                    let mut sum = 0usize;
                    barrier.wait();
                    let cpu = thread_cpu_time();
                    let start = Instant::now();
                    for &(k, set) in ops {
                        let key = k.to_be_bytes();
                        if set {
                            h.set(&key, &value).unwrap();
                        } else {
                            h.get_with(&key, &mut |v| sum += v[0] as usize).unwrap();
                        }
                    }
                    std::hint::black_box(sum);
                    match std::env::var_os("MIX_CPU_TIME") {
                        Some(_) => thread_cpu_time() - cpu,
                        None => start.elapsed(),
                    }
                })
            })
            .collect();
        barrier.wait();
        let total: usize = streams.iter().map(Vec::len).sum();
        let slowest = workers
            .into_iter()
            .map(|w| w.join().unwrap())
            .max()
            .unwrap();
        total as f64 / slowest.as_secs_f64() / 1e6
    })
}

/// The calling thread's CPU time. `MIX_CPU_TIME=1` times each thread by it instead of the
/// wall clock: for A/B profiling on a machine shared with other work (time other processes
/// take from this thread does not count; a thread spinning on a lock still does).
fn thread_cpu_time() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn config() -> StoreConfig {
    let heap = podkv_alloc::Config {
        small_bytes: 4 << 30,
        large_bytes: 4 << 30,
        slots: 64,
        ..Default::default()
    };
    // MIX_TABLE=N: a fixed table of 2^N buckets instead of the growing one (for comparing
    // load factors).
    let table = match env_number("MIX_TABLE") {
        Some(n) => podkv_store::Table::Fixed(n as u32),
        None => podkv_store::Table::Growing,
    };
    StoreConfig {
        heap,
        table,
        ..StoreConfig::default()
    }
}

/// A child process of the 2-process rows: `PODKV_MIX_CHILD=path,keys,ops,set_percent,seed`.
fn child(spec: &str) {
    let f: Vec<&str> = spec.split(',').collect();
    let store = Store::open(f[0], config()).unwrap();
    let n = |i: usize| f[i].parse::<u64>().unwrap();
    let zipf = Zipf::new(n(1), 0.99);
    let streams = vec![stream(&zipf, n(2) as usize, n(3), n(4))];
    println!("{}", run(&store, &streams));
}

/// Runs one stream in each of two processes on the shared store; total Mops/s (each child
/// times itself, so this assumes the two overlap; zipf set-up dominates their start).
fn run_processes(path: &str, keys: u64, ops: usize, set_percent: u64) -> f64 {
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..2)
        .map(|i| {
            std::process::Command::new(&exe)
                .env(
                    "PODKV_MIX_CHILD",
                    format!("{path},{keys},{ops},{set_percent},{}", 17 + i),
                )
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let rate = |c: std::process::Child| {
        let out = c.wait_with_output().unwrap().stdout;
        String::from_utf8(out)
            .unwrap()
            .trim()
            .parse::<f64>()
            .unwrap()
    };
    children.into_iter().map(rate).sum()
}

/// The median (the mean of the middle two for an even count).
fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

/// A numeric environment variable, if set.
fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.parse().ok()
}

fn main() {
    if let Ok(spec) = std::env::var("PODKV_MIX_CHILD") {
        return child(&spec);
    }
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let keys = args.first().copied().unwrap_or(100_000);
    let ops = args.get(1).copied().unwrap_or(1_000_000) as usize;
    let path = format!("/dev/shm/podkv-mix-{}", std::process::id());
    let config = config();
    let store = Store::open(&path, config.clone()).unwrap();
    let local = LocalStore::new_local(&config).unwrap();
    let dash = DashBaseline::new();
    // MIX_ONLY=podkv|local|dashmap runs one map (for profiling); ratios then read 0 or inf.
    let only = std::env::var("MIX_ONLY").unwrap_or_default();
    let wants = |m: &str| only.is_empty() || only == m;
    preload(&store, keys);
    if wants("local") {
        preload(&local, keys);
    }
    if wants("dashmap") {
        preload(&dash, keys);
    }
    let zipf = Zipf::new(keys, 0.99);
    let rounds = env_number("MIX_ROUNDS").unwrap_or(ROUNDS as u64).max(1) as usize;
    println!(
        "keys {keys}, {ops} ops/thread, 8 B keys, {SIZE_VALUE} B values, zipfian 0.99, median of {rounds} interleaved rounds"
    );
    println!(
        "{:>6} {:>7} {:>10} {:>10} {:>10} {:>9} {:>9}  per-round ratios (local; dashmap)",
        "mix", "threads", "podkv", "local", "dashmap", "vs local", "vs dash"
    );
    let mix_sets = env_number("MIX_SETS");
    let mix_threads = env_number("MIX_THREADS");
    // MIX_SETS=N runs one mix with N% sets instead (for profiling: 0 or 100 isolate an op).
    let mixes: Vec<(String, u64)> = match mix_sets {
        Some(s) => vec![(format!("{}/{}", 100 - s.min(100), s.min(100)), s.min(100))],
        None => vec![("95/5".into(), 5), ("50/50".into(), 50)],
    };
    for (name, set_percent) in mixes {
        for threads in [1usize, 2] {
            if mix_threads.is_some_and(|t| t != threads as u64) {
                continue;
            }
            let streams: Vec<_> = (0..threads)
                .map(|t| stream(&zipf, ops, set_percent, 17 + t as u64))
                .collect();
            // Interleaved rounds: the machine is shared, and interleaving exposes all three
            // maps to the same background load; each round gives one ratio.
            let (mut p, mut l, mut d) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..rounds {
                let once = |m: &str, run: &dyn Fn() -> f64| if wants(m) { run() } else { 0.0 };
                p.push(once("podkv", &|| run(&store, &streams)));
                l.push(once("local", &|| run(&local, &streams)));
                d.push(once("dashmap", &|| run(&dash, &streams)));
            }
            let per_round: Vec<String> = (0..rounds)
                .map(|i| format!("{:.2};{:.2}", p[i] / l[i], p[i] / d[i]))
                .collect();
            let ratio_l = median((0..rounds).map(|i| p[i] / l[i]).collect());
            let ratio_d = median((0..rounds).map(|i| p[i] / d[i]).collect());
            let (p, l, d) = (median(p), median(l), median(d));
            println!(
                "{name:>6} {threads:>7} {p:>10.2} {l:>10.2} {d:>10.2} {ratio_l:>9.2} {ratio_d:>9.2}  {}",
                per_round.join(" ")
            );
            println!(
                "{{\"mix\":\"{name}\",\"threads\":{threads},\"mops\":{{\"podkv\":{p:.3},\"local-mimalloc\":{l:.3},\"dashmap\":{d:.3}}},\"ratio_local\":{ratio_l:.3},\"ratio_dashmap\":{ratio_d:.3}}}"
            );
        }
        if mix_threads.is_some_and(|t| t != 0) || !wants("podkv") {
            continue;
        }
        let p2 = median(
            (0..rounds)
                .map(|_| run_processes(&path, keys, ops, set_percent))
                .collect(),
        );
        println!(
            "{name:>6} {:>7} {p2:>10.2} {:>10} {:>10}",
            "2 procs", "-", "-"
        );
        println!("{{\"mix\":\"{name}\",\"processes\":2,\"mops\":{{\"podkv\":{p2:.3}}}}}");
    }
    // Garbage left in limbo: a slot's next owner frees it. Claim the slots the runs used
    // (the lowest free ones) and collect, so the bytes per item count live data, not garbage
    // whose reclamation a process exiting mid-epoch deferred.
    let handles: Vec<_> = (0..8).map(|_| store.handle().unwrap()).collect();
    for h in handles.iter().chain(&handles) {
        h.collect();
    }
    drop(handles);
    let report = store.check();
    eprintln!(
        "items {} limbo {} bags {} segments {} epoch {} heap live {} B",
        report.store.items,
        report.store.limbo_entries,
        report.store.bags,
        report.store.segments,
        report.store.epoch,
        report.heap_live_bytes
    );
    let ideal = 8 + SIZE_VALUE + podkv_store::item::SIZE_HEADER;
    let per_item = report.heap_bytes_per_item();
    println!(
        "heap bytes/item {per_item:.1} (all live blocks incl. index and limbo) vs key+value+header {ideal} = {:.3}x; item blocks only: {:.1} B; check valid: {}",
        per_item / ideal as f64,
        report.store.item_bytes as f64 / report.store.items as f64,
        report.is_valid()
    );
    let _ = std::fs::remove_file(&path);
}
