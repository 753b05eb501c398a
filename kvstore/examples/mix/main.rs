//! Get/set mixes (95/5 and 50/50, scrambled zipfian 0.99, 8-byte keys, 960-byte values — the
//! paper's YCSB shape) with 1 and 2 threads: the podkv store vs the same index over mimalloc
//! vs dashmap, all in one run, through `KvMap`; then two processes on the store (compared
//! with the other maps' two-thread rates of the same run, the most they can share one map
//! between), and bytes of heap per item. Do not use the tests as benchmarks; use this:
//!
//! ```text
//! cargo run -p podkv-store --release --features baselines --example mix -- [KEYS] [OPS_PER_THREAD]
//! ```
//!
//! # How a row is measured
//! Each thread's operations (default 10^7 per map) are cut into `MIX_SLICES` slices (default
//! 40). Every worker thread holds a handle on every map for the whole row, and the maps take
//! turns slice by slice (in a shuffled order each slice), so load from other processes on a
//! shared machine falls on all of them alike: a slice is ~30–100 ms, shorter than the
//! swings of the background load. A map's rate is its operations over the sum of its slice
//! times (a slice's time is its slowest thread's); ratios are of those sums. To show how far
//! a ratio can be trusted, the slices are also split into 5 consecutive groups and each
//! group's ratio printed: an A/A run (`MIX_MAPS=podkv,podkv`) shows the noise floor. One
//! warm-up slice per map runs first, untimed (`MIX_WARMUP=0`: none).
//!
//! Prints the machine's huge-page settings and what each map got, a table, and one NDJSON
//! line per row.
//!
//! # Switches (environment)
//! - `MIX_MAPS=podkv,local,dashmap` (default): which maps, in this order; the first is the
//!   one the ratios are of, and a map may repeat (`podkv,podkv`: the noise floor);
//! - `MIX_SETS=N`: one mix of N% sets instead of 5 and 50 (0 or 100 isolate an operation);
//! - `MIX_THREADS=1|2`: one thread count (`0`: only the two-process rows);
//! - `MIX_SLICES=N`: slices per row; `MIX_CPU_TIME=1`: time threads by their CPU time;
//! - `MIX_COHERENCE=limited|mcas|mcas-nmp`: the store's heap in that coherence mode
//!   (default `hardware`; `mcas` is the `flush-cas` implementation);
//! - `MIX_TABLE=N`: a fixed table of 2^N buckets; `MIX_PROCESSES=0` leaves out the
//!   two-process rows;
//! - `MIX_ZIPF=N`: zipfian θ = N/100 (1..=99, default 99) for the threaded rows (the
//!   two-process rows keep 0.99): lower spreads the writes over more keys, which tells
//!   hot-key effects from per-operation cost.
//!
//! - `MIX_OWN_SETS=1`: each thread sets only keys of its own (key ≡ thread mod threads; the
//!   set's zipfian key moved to the nearest such key), gets unchanged: no two threads
//!   rewrite the same item, which tells hot-key write sharing from the rest.
//!
//! Under each row the lock-free maps' lost CAS races (`KvHandle::lost_races`: write-loop
//! passes that lost their link CAS to another writer and searched again) are printed, and the
//! store's recycling (`KvHandle::recycling`): new items that reused a spare vs. went to the
//! allocator, periodic collects that found the epoch stuck (a peer pinned, e.g. preempted
//! inside an operation), and the yields those made for it.
//!
//! For instruction and cache-miss counts per operation (deterministic, unlike time), run one
//! map and one thread under callgrind and count only inside `run_ops`:
//! `MIX_MAPS=dashmap MIX_THREADS=1 MIX_SETS=0 MIX_PROCESSES=0 MIX_WARMUP=0 valgrind
//! --tool=callgrind --cache-sim=yes --toggle-collect='*run_ops*'
//! target/release/examples/mix 100000 200000`, then divide the totals by the operations.

mod pages;
mod zipf;

use podkv_store::{DashBaseline, KvHandle, KvMap, LocalStore, Recycling, Store, StoreConfig};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use zipf::{stream, Op, Zipf};

const SIZE_VALUE: usize = 960;
/// Slices per row (`MIX_SLICES` overrides).
const COUNT_SLICES: usize = 40;
/// Groups of consecutive slices whose ratios show the spread.
const COUNT_GROUPS: usize = 5;

/// One map as a worker thread drives it: runs a slice of operations with its handle.
type Driver<'m> = Box<dyn FnMut(&[Op]) + 'm>;

/// Makes a map's [`Driver`] on the calling worker thread (handles stay on their thread).
type Starter<'m> = Box<dyn Fn() -> Driver<'m> + Sync + 'm>;

/// What a map's handles count, summed over them, for the lines printed under each row.
#[derive(Default)]
struct Counts {
    /// Lost CAS races (`KvHandle::lost_races`).
    lost: AtomicU64,
    /// Recycling (`KvHandle::recycling`), if the map counts it.
    recycling: Mutex<Option<Recycling>>,
}

impl Counts {
    fn reset(&self) {
        self.lost.store(0, Ordering::Relaxed);
        *self.recycling.lock().unwrap() = None;
    }
}

fn starter<'m, M: KvMap>(map: &'m M, counts: &'m Counts) -> Starter<'m> {
    Box::new(move || {
        let mut h = map.handle().unwrap();
        let value = vec![b'w'; SIZE_VALUE];
        let mut seen = 0;
        let mut recycled = h.recycling();
        Box::new(move |ops: &[Op]| {
            run_ops(&mut h, ops, &value);
            if let Some(n) = h.lost_races() {
                counts.lost.fetch_add(n - seen, Ordering::Relaxed);
                seen = n;
            }
            if let (Some(now), Some(before)) = (h.recycling(), recycled) {
                let mut sum = counts.recycling.lock().unwrap();
                *sum = Some(sum.unwrap_or_default() + (now - before));
                recycled = Some(now);
            }
        })
    })
}

/// The measured loop (one symbol per map, for `callgrind --toggle-collect='*run_ops*'`).
#[inline(never)]
fn run_ops<H: KvHandle>(h: &mut H, ops: &[Op], value: &[u8]) {
    let mut sum = 0usize;
    for op in ops {
        let key = op.key().to_be_bytes();
        if op.is_set() {
            h.set(&key, value).unwrap();
        } else {
            h.get_with(&key, &mut |v| sum += v[0] as usize).unwrap();
        }
    }
    std::hint::black_box(sum);
}

/// What a slice is timed by.
#[derive(Clone, Copy, Debug)]
enum Clock {
    /// The wall clock.
    Wall,
    /// The thread's CPU time (`MIX_CPU_TIME=1`): time other processes take from this thread
    /// does not count; a thread spinning on a lock still does.
    Cpu,
}

impl Clock {
    fn now(self) -> Duration {
        match self {
            Clock::Wall => {
                static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
                START.get_or_init(Instant::now).elapsed()
            }
            Clock::Cpu => podkv_alloc::process::thread_cpu_time(),
        }
    }
}

/// Runs the streams (one per thread) on every map, slice by slice in rotating order; returns
/// each map's slice times in seconds (`[map][slice]`, the slowest thread's).
fn measure(
    maps: &[Starter<'_>],
    streams: &[Vec<Op>],
    slices: usize,
    clock: Clock,
) -> Vec<Vec<f64>> {
    let barrier = std::sync::Barrier::new(streams.len());
    let warm_up = env_number("MIX_WARMUP") != Some(0);
    let per_thread: Vec<Vec<Vec<f64>>> = std::thread::scope(|s| {
        let workers: Vec<_> = streams
            .iter()
            .map(|ops| {
                let barrier = &barrier;
                s.spawn(move || {
                    let mut drivers: Vec<Driver<'_>> = maps.iter().map(|m| m()).collect();
                    let chunk = ops.len().div_ceil(slices);
                    let part = |i: usize| {
                        &ops[(i * chunk).min(ops.len())..((i + 1) * chunk).min(ops.len())]
                    };
                    for d in drivers.iter_mut().filter(|_| warm_up) {
                        barrier.wait();
                        d(part(0));
                    }
                    let slice = |i: usize| {
                        let mut times = vec![0.0; maps.len()];
                        for m in order(i, maps.len()) {
                            barrier.wait();
                            let start = clock.now();
                            drivers[m](part(i));
                            times[m] = (clock.now() - start).as_secs_f64();
                        }
                        times
                    };
                    let times: Vec<Vec<f64>> = (0..slices).map(slice).collect();
                    barrier.wait();
                    times
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    (0..maps.len())
        .map(|m| {
            (0..slices)
                .map(|i| per_thread.iter().map(|t| t[i][m]).fold(0.0, f64::max))
                .collect()
        })
        .collect()
}

/// The order the maps take slice `i` in: a pseudo-random permutation, the same in every
/// thread. (A fixed rotation would always put the same map after the same other one, and a map
/// that follows a run over its own memory finds it in cache: an A/A run read 0.93.)
fn order(i: usize, maps: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..maps).collect();
    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (i as u64 + 1).wrapping_mul(0xD6E8_FEB8_6659_FD93);
    for k in (1..maps).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(k, (x % (k as u64 + 1)) as usize);
    }
    order
}

/// One row's figures: each map's Mops/s, the ratio of the first map to each, and each
/// group's ratios.
struct Row {
    mops: Vec<f64>,
    ratios: Vec<f64>,
    group_ratios: Vec<Vec<f64>>,
}

fn summarize(times: &[Vec<f64>], ops_total: usize) -> Row {
    let sum = |m: usize, range: std::ops::Range<usize>| times[m][range].iter().sum::<f64>();
    let slices = times[0].len();
    let all = 0..slices;
    let mops = (0..times.len())
        .map(|m| ops_total as f64 / sum(m, all.clone()) / 1e6)
        .collect();
    let ratios = (0..times.len())
        .map(|m| sum(m, all.clone()) / sum(0, all.clone()))
        .collect();
    let groups = COUNT_GROUPS.min(slices);
    let group = |g: usize| g * slices / groups..(g + 1) * slices / groups;
    let group_ratios = (0..times.len())
        .map(|m| {
            (0..groups)
                .map(|g| sum(m, group(g)) / sum(0, group(g)))
                .collect()
        })
        .collect();
    Row {
        mops,
        ratios,
        group_ratios,
    }
}

fn config(keys: u64) -> StoreConfig {
    // Room for the items twice over (limbo and spares hold old versions), and no huge heap
    // (values are 960 B): a small reservation, which valgrind can map too.
    let heap = podkv_alloc::Config {
        small_bytes: (keys * 2048).next_power_of_two().max(1 << 30),
        large_bytes: 1 << 30,
        huge_bytes: 0,
        slots: 64,
        // MIX_COHERENCE=limited|mcas|mcas-nmp: the store in such a heap (SWcc items and
        // blocks; in `mcas` the store's shared words change by mCAS).
        coherence: match std::env::var("MIX_COHERENCE").as_deref() {
            Ok("limited") => podkv_hw::Coherence::Limited,
            Ok("mcas" | "mcas-nmp") => podkv_hw::Coherence::Mcas,
            _ => podkv_hw::Coherence::Hardware,
        },
        mcas: match std::env::var("MIX_COHERENCE").as_deref() {
            Ok("mcas-nmp") => podkv_hw::mcas::McasKind::Nmp,
            _ => podkv_hw::mcas::McasKind::FlushCas,
        },
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

fn clock() -> Clock {
    match std::env::var_os("MIX_CPU_TIME") {
        Some(_) => Clock::Cpu,
        None => Clock::Wall,
    }
}

/// A child process of the 2-process rows: `PODKV_MIX_CHILD=path,keys,ops,set_percent,seed`;
/// prints its Mops/s.
fn child(spec: &str) {
    let f: Vec<&str> = spec.split(',').collect();
    let n = |i: usize| f[i].parse::<u64>().unwrap();
    let store = Store::open(f[0], config(n(1))).unwrap();
    let zipf = Zipf::new(n(1), 0.99);
    let streams = vec![stream(&zipf, n(2) as usize, n(3), n(4))];
    let counts = Counts::default();
    let times = measure(&[starter(&store, &counts)], &streams, 1, clock());
    println!("{}", n(2) as f64 / times[0][0] / 1e6);
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

/// `MIX_OWN_SETS=1`: moves thread `t`'s sets to keys ≡ `t` mod `threads` (the nearest one
/// at or below the zipfian key, within `keys`); gets keep their keys.
fn own_keys(ops: Vec<Op>, t: u64, threads: u64, keys: u64) -> Vec<Op> {
    ops.into_iter()
        .map(|op| {
            if !op.is_set() {
                return op;
            }
            let mut key = op.key() - op.key() % threads + t;
            if key >= keys {
                key -= threads;
            }
            op.with_key(key)
        })
        .collect()
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

fn preload<M: KvMap>(map: &M, keys: u64) {
    let mut h = map.handle().unwrap();
    let value = vec![b'v'; SIZE_VALUE];
    for k in 0..keys {
        h.set(&k.to_be_bytes(), &value).unwrap();
    }
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
    let ops = args.get(1).copied().unwrap_or(10_000_000) as usize;
    let path = format!("/dev/shm/podkv-mix-{}", std::process::id());
    let config = config(keys);
    let store = Store::open(&path, config.clone()).unwrap();
    let local = LocalStore::new_local(&config).unwrap();
    let dash = DashBaseline::new();
    let names: Vec<String> = std::env::var("MIX_MAPS")
        .unwrap_or_else(|_| "podkv,local,dashmap".into())
        .split(',')
        .map(str::to_string)
        .collect();
    let wants = |m: &str| names.iter().any(|n| n == m);
    println!("pages: {}", pages::settings());
    let mut huge = Vec::new();
    for (name, wanted, load) in [
        ("podkv", true, &(|| preload(&store, keys)) as &dyn Fn()),
        ("local", wants("local"), &|| preload(&local, keys)),
        ("dashmap", wants("dashmap"), &|| preload(&dash, keys)),
    ] {
        if wanted {
            let (bytes, ()) = pages::huge_added_by(load);
            huge.push(format!("{name} {} MiB", bytes >> 20));
        }
    }
    println!(
        "2 MiB pages taken by each map's preload: {}",
        huge.join(", ")
    );
    let counts: Vec<Counts> = names.iter().map(|_| Counts::default()).collect();
    let maps: Vec<Starter<'_>> = names
        .iter()
        .zip(&counts)
        .map(|(n, counts)| match n.as_str() {
            "podkv" => starter(&store, counts),
            "local" => starter(&local, counts),
            "dashmap" => starter(&dash, counts),
            other => panic!("MIX_MAPS: unknown map {other} (podkv, local, dashmap)"),
        })
        .collect();
    let theta = env_number("MIX_ZIPF").map_or(0.99, |p| p.clamp(1, 99) as f64 / 100.0);
    let zipf = Zipf::new(keys, theta);
    let slices = env_number("MIX_SLICES")
        .unwrap_or(COUNT_SLICES as u64)
        .max(1) as usize;
    let clock = clock();
    println!(
        "keys {keys}, {ops} ops/thread/map in {slices} interleaved slices, 8 B keys, {SIZE_VALUE} B values, zipfian {theta}, {clock:?} clock"
    );
    let others = names[1..]
        .iter()
        .map(|n| format!("vs {n}"))
        .collect::<Vec<_>>();
    println!(
        "{:>6} {:>7} {}  {}  per-group ratios",
        "mix",
        "threads",
        names.iter().map(|n| format!("{n:>9}")).collect::<String>(),
        others
            .iter()
            .map(|n| format!("{n:>11}"))
            .collect::<String>()
    );
    let mix_sets = env_number("MIX_SETS");
    let mix_threads = env_number("MIX_THREADS");
    let mixes: Vec<(String, u64)> = match mix_sets {
        Some(s) => vec![(format!("{}/{}", 100 - s.min(100), s.min(100)), s.min(100))],
        None => vec![("95/5".into(), 5), ("50/50".into(), 50)],
    };
    for (name, set_percent) in mixes {
        // The two-thread row's rates, which the two-process row is compared with: the other
        // maps cannot span processes, and two threads is the most they share one map between.
        let mut two_threads: Option<Vec<f64>> = None;
        for threads in [1usize, 2] {
            if mix_threads.is_some_and(|t| t != threads as u64) {
                continue;
            }
            let own_sets = env_number("MIX_OWN_SETS") == Some(1);
            let streams: Vec<_> = (0..threads)
                .map(|t| {
                    let ops = stream(&zipf, ops, set_percent, 17 + t as u64);
                    if own_sets {
                        own_keys(ops, t as u64, threads as u64, keys)
                    } else {
                        ops
                    }
                })
                .collect();
            counts.iter().for_each(Counts::reset);
            let times = measure(&maps, &streams, slices, clock);
            let row = summarize(&times, ops * threads);
            if threads == 2 {
                two_threads = Some(row.mops.clone());
            }
            let groups: Vec<String> = (1..names.len())
                .map(|m| {
                    let g: Vec<String> = row.group_ratios[m]
                        .iter()
                        .map(|r| format!("{r:.2}"))
                        .collect();
                    g.join(" ")
                })
                .collect();
            println!(
                "{name:>6} {threads:>7} {}  {}  {}",
                row.mops
                    .iter()
                    .map(|r| format!("{r:>9.2}"))
                    .collect::<String>(),
                row.ratios[1..]
                    .iter()
                    .map(|r| format!("{r:>11.3}"))
                    .collect::<String>(),
                groups.join(" | ")
            );
            let json = |xs: &[f64]| {
                let parts: Vec<String> = names
                    .iter()
                    .zip(xs)
                    .map(|(n, x)| format!("\"{n}\":{x:.4}"))
                    .collect();
                format!("{{{}}}", parts.join(","))
            };
            let group_json: Vec<String> = row
                .group_ratios
                .iter()
                .map(|g| format!("{g:.4?}"))
                .collect();
            // Sets run: every timed slice, plus the warm-up slice (the first) once per map.
            let sets: u64 = streams
                .iter()
                .map(|ops| {
                    let count = |o: &[Op]| o.iter().filter(|op| op.is_set()).count() as u64;
                    let warm = if env_number("MIX_WARMUP") == Some(0) {
                        0
                    } else {
                        count(&ops[..ops.len().div_ceil(slices).min(ops.len())])
                    };
                    count(ops) + warm
                })
                .sum();
            let races: Vec<String> = names
                .iter()
                .zip(&counts)
                .filter(|(n, _)| n.as_str() != "dashmap")
                .map(|(n, c)| {
                    let l = c.lost.load(Ordering::Relaxed);
                    format!("{n} {l} ({:.2e} per set)", l as f64 / sets.max(1) as f64)
                })
                .collect();
            if !races.is_empty() {
                println!("{:>14}  lost CAS races: {}", "", races.join(", "));
            }
            for (n, c) in names.iter().zip(&counts) {
                if let Some(r) = *c.recycling.lock().unwrap() {
                    let new = (r.spares_taken + r.allocations).max(1) as f64;
                    println!(
                        "{:>14}  {n} recycling: spares {} ({:.1}%), allocator {} ({:.1}%), stuck collects {}, yields {}",
                        "",
                        r.spares_taken,
                        100.0 * r.spares_taken as f64 / new,
                        r.allocations,
                        100.0 * r.allocations as f64 / new,
                        r.stuck_collects,
                        r.yields
                    );
                }
            }
            println!(
                "{{\"mix\":\"{name}\",\"threads\":{threads},\"clock\":\"{clock:?}\",\"mops\":{},\"ratio_of_first\":{},\"group_ratios\":[{}]}}",
                json(&row.mops),
                json(&row.ratios),
                group_json.join(",")
            );
        }
        if mix_threads.is_some_and(|t| t != 0) || env_number("MIX_PROCESSES") == Some(0) {
            continue;
        }
        let p2 = median(
            (0..3)
                .map(|_| run_processes(&path, keys, ops / 4, set_percent))
                .collect(),
        );
        // Against the other maps' two-thread rates of this run (not interleaved: a rough
        // ratio, as the children's own timing is).
        let versus: Vec<String> = two_threads
            .iter()
            .flat_map(|mops| names.iter().zip(mops).filter(|(n, _)| *n != "podkv"))
            .map(|(n, m)| format!("{:.2}x {n} at 2 threads", p2 / m))
            .collect();
        println!(
            "{name:>6} {:>7} {p2:>9.2}  (podkv; median of 3 runs){}{}",
            "2 procs",
            if versus.is_empty() { "" } else { "; " },
            versus.join(", ")
        );
        println!("{{\"mix\":\"{name}\",\"processes\":2,\"mops\":{{\"podkv\":{p2:.3}}}}}");
    }
    // Garbage left in limbo: a slot's next owner frees it. Claim every slot and collect, so
    // the bytes per item count live data, not garbage (up to a handle's spares) whose
    // reclamation a thread or process ending mid-epoch deferred.
    let slots = store.heap().geometry().slots();
    let handles: Vec<_> = (0..slots).map_while(|_| store.handle().ok()).collect();
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
