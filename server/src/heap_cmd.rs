//! `podkv heap create|info|check PATH`: make a heap, show its geometry and statistics, and
//! verify every metadata invariant.

use podkv_alloc::census::BAND_NAMES;
use podkv_alloc::{Census, Config, Heap, HeapReport, Kind};
use podkv_harness::helpers::{human_bytes, parse_bytes};
use podkv_hw::topology::{Placement, Topology};
use std::path::PathBuf;

mod recover;

/// The `podkv heap` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum HeapCommand {
    /// Create a heap file (or adopt a zero-filled one) with the given geometry.
    Create {
        /// Heap file, e.g. /dev/shm/podkv-main or a file on a shared mount.
        path: PathBuf,
        #[command(flatten)]
        geometry: GeometryArgs,
        /// Where the heap's pages live: `local`, `node=N` (bind), `interleave=N,M` or
        /// `preferred=N` (NUMA nodes, `podkv heap info` lists them; a CXL expander is a
        /// CPU-less node). Recorded in the heap, so every process that opens it applies it;
        /// refused for a DAX device, whose memory is the device's. Default: the kernel's.
        #[arg(long)]
        place: Option<Placement>,
    },
    /// Print a heap's geometry, regions and statistics, the heap's placement and the
    /// machine's NUMA nodes.
    Info {
        /// Heap file.
        path: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Torture a heap from several processes: random sizes in both slab heaps, most blocks
    /// handed to other processes through a stack in the heap and freed there; then check it.
    Stress {
        /// Heap file (created if missing).
        path: PathBuf,
        /// Separate processes.
        #[arg(long, default_value_t = 4)]
        processes: u64,
        /// Threads per process.
        #[arg(long, default_value_t = 2)]
        threads: u64,
        /// Steps per thread.
        #[arg(long, default_value_t = 50_000)]
        ops: u64,
        /// Seed of the first thread (each thread derives its own).
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// One process of `podkv heap stress` (started by it).
    #[command(hide = true)]
    StressWorker {
        /// Heap file.
        path: PathBuf,
        /// Threads.
        #[arg(long)]
        threads: u64,
        /// Steps per thread.
        #[arg(long)]
        ops: u64,
        /// Seed of this process's first thread.
        #[arg(long)]
        seed: u64,
    },
    /// Recover every thread slot whose owner died: finish its logged step, give its slabs
    /// back, release it; prints what each recovery did. In a lease heap it first watches every
    /// slot for a lease, fencing owners silent that long, and lists the fenced slots: another
    /// host's are recovered only with `--host-down`.
    Recover {
        /// Heap file.
        path: PathBuf,
        /// Also recover the fenced slots of host HOST (lease mode), which you know is stopped:
        /// powered off, or none of its podkv processes left. A host only paused would wake up
        /// writing into memory others reuse.
        #[arg(long, value_name = "HOST")]
        host_down: Option<u16>,
    },
    /// Kill worker processes with SIGKILL at random moments while they allocate, free and hand
    /// blocks to each other; after each kill recover, restart, and prove nothing leaked, was
    /// lost or freed twice, and that the living never stalled.
    Chaos(podkv_harness::chaos::ChaosArgs),
    /// One process of `podkv heap chaos` (started by it).
    #[command(hide = true)]
    ChaosWorker {
        /// Heap file.
        path: PathBuf,
        /// This worker's index.
        #[arg(long)]
        worker: u64,
        /// Workers in all.
        #[arg(long)]
        workers: u64,
        /// Seed.
        #[arg(long)]
        seed: u64,
        /// Timings of the machine's floor to take first (`podkv heap chaos --floor-timings`).
        #[arg(long, default_value_t = 0)]
        floor: u64,
    },
    /// Verify every metadata invariant; exits non-zero naming each violation.
    Check {
        /// Heap file.
        path: PathBuf,
        /// Also fail if any block is still allocated (for tests that freed everything).
        #[arg(long)]
        expect_empty: bool,
    },
}

/// Geometry of a new heap.
#[derive(clap::Args, Debug)]
pub struct GeometryArgs {
    /// Most bytes of small (8 B – 1 KiB) slabs, e.g. 64GiB.
    #[arg(long, default_value = "64GiB", value_parser = parse_bytes)]
    pub small_bytes: u64,
    /// Most bytes of large (1 – 512 KiB) slabs.
    #[arg(long, default_value = "64GiB", value_parser = parse_bytes)]
    pub large_bytes: u64,
    /// Thread slots (at most 16384).
    #[arg(long, default_value_t = 1024)]
    pub slots: u64,
    /// How a dead slot owner is recognised: `process` (pid and start time, one host) or
    /// `lease` (owners renew a lease in the heap; for hosts sharing pod memory).
    #[arg(long, default_value = "process")]
    pub liveness: podkv_alloc::Liveness,
    /// Coherence across hosts: `hardware` (all memory coherent), `limited` (only the HWcc
    /// region; descriptors follow the SWcc protocol), `mcas` (nothing coherent: every
    /// multi-writer word changes by memory-side CAS, in its own region).
    #[arg(long, default_value = "hardware")]
    pub coherence: podkv_hw::Coherence,
    /// With `--coherence mcas`: the mCAS implementation, `flush-cas` (evict the line, then
    /// CPU CAS) or `nmp` (a software near-memory processor, started as a thread by whichever
    /// process opens the heap and finds none alive). Recorded in the heap's header.
    #[arg(long, default_value = "flush-cas")]
    pub mcas_impl: podkv_hw::mcas::McasKind,
    /// Address space of the huge heap (blocks over 512 KiB), 2GiB to 16TiB; 0: none.
    #[arg(long, default_value = "1TiB", value_parser = parse_bytes)]
    pub huge_bytes: u64,
    /// The store's HWcc area (its multi-writer words: HWcc in a `limited` heap, mCAS targets
    /// in an `mcas` one), 4KiB to 1TiB, a power of two; 0: none. Address space: only what
    /// the store uses is backed and counted in `hwcc_bytes`.
    #[arg(long, default_value = "256MiB", value_parser = parse_bytes)]
    pub hwcc_bytes: u64,
}

/// Runs a `podkv heap` subcommand.
pub fn run(command: &HeapCommand) -> anyhow::Result<()> {
    match command {
        HeapCommand::Create {
            path,
            geometry,
            place,
        } => {
            let config = Config {
                small_bytes: geometry.small_bytes,
                large_bytes: geometry.large_bytes,
                slots: geometry.slots,
                liveness: geometry.liveness,
                coherence: geometry.coherence,
                huge_bytes: geometry.huge_bytes,
                hwcc_user_bytes: geometry.hwcc_bytes,
                mcas: geometry.mcas_impl,
                placement: place.clone().unwrap_or_default(),
                ..Config::default()
            };
            let heap = Heap::open(path, &config)?;
            print_geometry(&heap);
            Ok(())
        }
        HeapCommand::Info { path, json } => {
            let heap = open_existing(path)?;
            let report = heap.check();
            if *json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report_json(&heap, &report))?
                );
            } else {
                print_geometry(&heap);
                print_nodes();
                print_stats(&report);
            }
            Ok(())
        }
        HeapCommand::Check { path, expect_empty } => check(path, *expect_empty),
        HeapCommand::Recover { path, host_down } => recover::recover(path, *host_down),
        HeapCommand::Chaos(args) => podkv_harness::chaos::run(args),
        HeapCommand::ChaosWorker {
            path,
            worker,
            workers,
            seed,
            floor,
        } => podkv_harness::chaos::worker(path, *worker, *workers, *seed, *floor),
        HeapCommand::Stress {
            path,
            processes,
            threads,
            ops,
            seed,
        } => stress(path, *processes, *threads, *ops, *seed),
        HeapCommand::StressWorker {
            path,
            threads,
            ops,
            seed,
        } => stress_worker(path, *threads, *ops, *seed),
    }
}

fn stress(path: &PathBuf, processes: u64, threads: u64, ops: u64, seed: u64) -> anyhow::Result<()> {
    let heap = Heap::open(path, &Config::default())?;
    let exe = std::env::current_exe()?;
    let start = std::time::Instant::now();
    let children = (0..processes)
        .map(|p| {
            std::process::Command::new(&exe)
                .args(["heap", "stress-worker"])
                .arg(path)
                .args(["--threads", &threads.to_string(), "--ops", &ops.to_string()])
                .args(["--seed", &(seed + p * threads).to_string()])
                .spawn()
        })
        .collect::<Result<Vec<_>, _>>()?;
    for mut child in children {
        let status = child.wait()?;
        anyhow::ensure!(status.success(), "a stress process failed: {status}");
    }
    let (left, corrupt) = podkv_alloc::stress::drain(&heap);
    anyhow::ensure!(corrupt == 0, "{corrupt} handed-over blocks were corrupt");
    println!(
        "stress: {processes} processes × {threads} threads × {ops} steps in {:.1} s; {left} blocks drained from the stack",
        start.elapsed().as_secs_f64()
    );
    drop(heap);
    check(path, true)
}

fn stress_worker(path: &PathBuf, threads: u64, ops: u64, seed: u64) -> anyhow::Result<()> {
    let heap = open_existing(path)?;
    let reports: Vec<_> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let heap = &heap;
                s.spawn(move || podkv_alloc::stress::worker(heap, seed + t, ops))
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("stress thread"))
            .collect()
    });
    let corrupt: u64 = reports.iter().map(|r| r.corrupt).sum();
    anyhow::ensure!(
        corrupt == 0,
        "pid {}: {corrupt} corrupt blocks",
        std::process::id()
    );
    Ok(())
}

fn open_existing(path: &PathBuf) -> anyhow::Result<Heap> {
    Ok(Heap::open(
        path,
        &Config {
            create: false,
            ..Config::default()
        },
    )?)
}

fn check(path: &PathBuf, expect_empty: bool) -> anyhow::Result<()> {
    let heap = open_existing(path)?;
    let report = heap.check();
    for problem in &report.problems {
        eprintln!("violation: {problem}");
    }
    let dead: Vec<_> = report.claimed_slots.iter().filter(|s| !s.alive).collect();
    for slot in &dead {
        eprintln!(
            "note: slot {} is claimed by pid {}, which is dead, in step {} (`podkv heap recover` finishes it)",
            slot.index, slot.pid, slot.step
        );
    }
    anyhow::ensure!(
        report.is_valid(),
        "{} invariant violation(s) in {}",
        report.problems.len(),
        path.display()
    );
    if expect_empty {
        anyhow::ensure!(
            report.huge.live == 0,
            "{} huge blocks ({}) are still allocated",
            report.huge.live,
            human_bytes(report.huge.live_bytes)
        );
        anyhow::ensure!(
            report.live_blocks() == 0,
            "{} blocks ({}) are still allocated",
            report.live_blocks(),
            human_bytes(report.live_bytes())
        );
    }
    println!(
        "ok: {} small + {} large slabs checked; {} live blocks ({}); every slab's free + live + remote-freed = capacity",
        report.heaps[0].len,
        report.heaps[1].len,
        report.live_blocks(),
        human_bytes(report.live_bytes())
    );
    if report.huge.enabled {
        println!(
            "ok: huge heap: {} runs over {} ranges, {} live and {} freed blocks; runs whole, blocks inside their slot's runs and disjoint, every hazard offset names a block",
            report.huge.runs, report.huge.ranges_claimed, report.huge.live, report.huge.freed
        );
    }
    Ok(())
}

fn print_geometry(heap: &Heap) {
    let g = heap.geometry();
    let l = heap.layout();
    println!("heap        {}", heap.path().display());
    println!("coherence   {}", g.coherence.name());
    if let Some(kind) = heap.mcas_kind() {
        println!(
            "mcas        {kind}: targets {:#x}..{:#x}, lines at offset {} ({} B; \
             `podkv mcas-nmp --heap PATH --offset {}` serves them)",
            l.hwcc, l.hwcc_end, l.mcas, l.mcas_bytes, l.mcas
        );
    }
    if g.hwcc_user_log2 != 0 {
        let area = heap.hwcc_user();
        println!(
            "hwcc area   {} for the store at {:#x} ({} backed)",
            human_bytes(area.len()),
            l.hwcc_user,
            human_bytes(area.backed())
        );
    }
    println!("liveness    {}", g.liveness.name());
    println!("placement   {}", heap.placement());
    println!("slots       {}", g.slots());
    for kind in Kind::ALL {
        let h = heap.slab_heap(kind);
        println!(
            "{:<11} {} of {} slabs of {} (data at {:#x}, up to {})",
            kind.name(),
            heap.len(h),
            h.max,
            human_bytes(h.slab_bytes()),
            h.data_at,
            human_bytes(h.max << h.shift)
        );
    }
    if g.huge_log2 != 0 {
        let range = 1u64 << g.huge_range_shift();
        println!(
            "huge        {} ranges of {} (data at {:#x}, up to {}), one mapping per block",
            podkv_alloc::layout::COUNT_HUGE_RANGES,
            human_bytes(range),
            l.huge_data,
            human_bytes(g.huge_bytes())
        );
    }
    println!(
        "reservation {} of address space per process: {} mapped at open (slab heaps and metadata), {} mapped block by block",
        human_bytes(l.total),
        human_bytes(l.huge_data),
        human_bytes(l.total - l.huge_data)
    );
    println!(
        "file        {} long, {} stored",
        human_bytes(heap.file_len().unwrap_or(0)),
        human_bytes(heap.file_allocated_bytes().unwrap_or(0))
    );
}

/// This machine's NUMA nodes, one line each (a placement names them).
fn print_nodes() {
    match Topology::discover() {
        Ok(topology) => {
            for node in &topology.nodes {
                println!(
                    "node {:<6} {} memory, cpus {}{}",
                    node.id,
                    human_bytes(node.memory_bytes),
                    cpu_list(&node.cpus),
                    if node.is_cpu_less() {
                        " (CPU-less)"
                    } else {
                        ""
                    }
                );
            }
        }
        Err(e) => println!("nodes       unknown: {e}"),
    }
}

/// `0-3,8` for CPUs 0, 1, 2, 3 and 8; `none` for no CPU.
fn cpu_list(cpus: &[u32]) -> String {
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for &cpu in cpus {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == cpu => *end = cpu,
            _ => runs.push((cpu, cpu)),
        }
    }
    if runs.is_empty() {
        return "none".to_owned();
    }
    let run = |&(a, b): &(u32, u32)| {
        if a == b {
            a.to_string()
        } else {
            format!("{a}-{b}")
        }
    };
    runs.iter().map(run).collect::<Vec<_>>().join(",")
}

/// This machine's NUMA nodes for `heap info --json` (empty if sysfs cannot be read).
fn nodes_json() -> serde_json::Value {
    let nodes = Topology::discover().map(|t| t.nodes).unwrap_or_default();
    nodes
        .iter()
        .map(|n| {
            serde_json::json!({"id": n.id, "cpus": n.cpus, "memory_bytes": n.memory_bytes,
                "cpu_less": n.is_cpu_less(), "distances": n.distances})
        })
        .collect()
}

fn print_stats(report: &HeapReport) {
    println!(
        "in use      {} in {} blocks",
        human_bytes(report.live_bytes()),
        report.live_blocks()
    );
    println!(
        "hwcc        {} = {:.4}% of the {} the file holds{}",
        human_bytes(report.hwcc_bytes),
        100.0 * report.hwcc_bytes as f64 / report.file_bytes.max(1) as f64,
        human_bytes(report.file_bytes),
        if report.huge.enabled {
            format!(
                " (of which {} the huge reservation array and {} the hazard records' owner words)",
                human_bytes(8 * podkv_alloc::layout::COUNT_HUGE_RANGES),
                human_bytes(8 * podkv_alloc::hazard::COUNT_HAZARD_RECORDS)
            )
        } else {
            String::new()
        }
    );
    if report.huge.enabled {
        print_huge(report);
    }
    println!("threads     {} slot(s) claimed", report.claimed_slots.len());
    for slot in report.claimed_slots.iter().filter(|s| !s.alive) {
        println!(
            "  slot {} of dead pid {}: {} (run `podkv heap recover`)",
            slot.index, slot.pid, slot.step
        );
    }
    for (kind, stats) in Kind::ALL.iter().zip(&report.heaps) {
        let states: Vec<String> = stats
            .slabs_by_state
            .iter()
            .map(|(s, n)| format!("{s} {n}"))
            .collect();
        println!(
            "{:<11} slabs: {}{}",
            kind.name(),
            if states.is_empty() {
                "none".into()
            } else {
                states.join(", ")
            },
            match stats.morphing {
                0 => String::new(),
                n => format!(" ({n} of them morphing)"),
            }
        );
        for stats in stats.classes.values() {
            let [low, mid, high] = stats.occupancy.slabs;
            println!(
                "  class {:>7} B: {:>6} slabs, {:>9} live, {:>9} free; slabs by occupancy {low}/{mid}/{high}",
                stats.block_bytes, stats.slabs, stats.live_blocks, stats.free_blocks
            );
        }
    }
    println!("occupancy   {}", Census::of_report(report));
    if !report.is_valid() {
        println!(
            "problems    {} (run `podkv heap check` for the list)",
            report.problems.len()
        );
    }
}

/// The huge heap's blocks, address space and mappers.
fn print_huge(report: &HeapReport) {
    let h = &report.huge;
    println!(
        "huge blocks {} live ({}), {} freed ({}), {} of them awaiting unmap by a process, {} in released slots (reclaimed by the next sweep once unmapped)",
        h.live,
        human_bytes(h.live_bytes),
        h.freed,
        human_bytes(h.freed_bytes),
        h.awaiting_unmap,
        h.freed_in_released
    );
    println!(
        "huge space  {} of {} ranges claimed in {} runs ({} of {} address space)",
        h.ranges_claimed,
        podkv_alloc::layout::COUNT_HUGE_RANGES,
        h.runs,
        human_bytes(h.ranges_claimed * h.range_bytes),
        human_bytes(h.reserved_bytes)
    );
    println!(
        "mappers     {} process(es) hold hazard records, this one included ({} left by dead processes)",
        h.processes, h.dead_records
    );
}

fn report_json(heap: &Heap, report: &HeapReport) -> serde_json::Value {
    let census = Census::of_report(report);
    let heaps: Vec<serde_json::Value> = Kind::ALL
        .iter()
        .zip(&report.heaps)
        .map(|(kind, s)| {
            let classes: Vec<serde_json::Value> = s
                .classes
                .values()
                .map(|c| serde_json::json!({"block_bytes": c.block_bytes, "slabs": c.slabs, "live_blocks": c.live_blocks, "free_blocks": c.free_blocks, "occupancy": c.occupancy.slabs}))
                .collect();
            serde_json::json!({"kind": kind.name(), "len": s.len, "max": s.max, "slabs_by_state": s.slabs_by_state,
                "morphing": s.morphing, "live_bytes": s.live_bytes, "live_blocks": s.live_blocks, "classes": classes})
        })
        .collect();
    serde_json::json!({
        "path": heap.path(),
        "coherence": heap.geometry().coherence.name(),
        "mcas_impl": heap.mcas_kind().map(|kind| kind.name()),
        "liveness": heap.geometry().liveness.name(),
        "placement": heap.placement().to_string(),
        "nodes": nodes_json(),
        "dead_slots": report.claimed_slots.iter().filter(|s| !s.alive).map(|s| serde_json::json!({"slot": s.index, "pid": s.pid, "step": s.step})).collect::<Vec<_>>(),
        "slots": heap.geometry().slots(),
        "claimed_slots": report.claimed_slots.len(),
        "reservation_bytes": heap.layout().total,
        "eager_mapped_bytes": heap.layout().huge_data,
        "huge": {
            "enabled": report.huge.enabled,
            "reserved_bytes": report.huge.reserved_bytes,
            "range_bytes": report.huge.range_bytes,
            "ranges_claimed": report.huge.ranges_claimed,
            "runs": report.huge.runs,
            "live": report.huge.live,
            "live_bytes": report.huge.live_bytes,
            "freed": report.huge.freed,
            "freed_bytes": report.huge.freed_bytes,
            "awaiting_unmap": report.huge.awaiting_unmap,
            "freed_in_released": report.huge.freed_in_released,
            "processes": report.huge.processes,
            "dead_records": report.huge.dead_records,
        },
        "file_bytes": report.file_bytes,
        "hwcc_bytes": report.hwcc_bytes,
        "live_bytes": report.live_bytes(),
        "live_blocks": report.live_blocks(),
        "heaps": heaps,
        "occupancy_bands": BAND_NAMES,
        "occupancy": census.occupancy.slabs,
        "slab_bytes": census.slab_bytes,
        "problems": report.problems,
    })
}
