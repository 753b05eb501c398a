//! The allocator under the model of non-coherent caches (`podkv_hw::model`): two real
//! processes (this test binary, re-executed with `PODKV_COHERENCE_MODEL=1`) run the stress
//! workload on one `limited` or `mcas` heap, then a third opener (this process, modelled too)
//! drains the hand-over stack and checks the heap.
//!
//! - `the_stress_workload_passes_under_the_model`: with every site on, both modes pass.
//! - `dropping_any_site_is_caught`: one run per named site ([`SITES`]) with that site
//!   switched off (`PODKV_COHERENCE_SITE_OFF`), in `limited` and `mcas`; prints the table of
//!   what the model caught and asserts at least 80% of the sites are. A site is *caught* when
//!   a run in a mode where dropping it is a bug fails: a child panics or dies, sees a corrupt
//!   block, hangs, or the check finds a problem. The default run gives each site one short
//!   run per mode; `PODKV_MODEL_SWEEP=long` runs three seeds with more steps.
//!
//! A failing run prints each child's seed (`podkv coherence model: seed n`); rerun one with
//! `PODKV_COHERENCE_SEED=n`.

use podkv_alloc::stress;
use podkv_alloc::{Config, Heap};
use podkv_hw::mcas::McasKind;
use podkv_hw::Coherence;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ENV_CHILD: &str = "PODKV_MODEL_CHILD";
const COUNT_CHILDREN: u64 = 2;
const MODES: [(Coherence, McasKind); 2] = [
    (Coherence::Limited, McasKind::FlushCas),
    (Coherence::Mcas, McasKind::FlushCas),
];

/// What a site is, which decides in which modes dropping it is a bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A write-back or invalidation: a bug in both SWcc modes.
    Swcc,
    /// A hook CAS: in `limited` the hook is a CPU CAS on the HWcc region anyway, so dropping
    /// it is a bug only in `mcas`.
    HookCas,
}

/// Every write-back, invalidation and hook-CAS site of the allocator (a test below checks the
/// list against the sources).
const SITES: &[(&str, Kind)] = &[
    ("alloc.free_list.pop.cas", Kind::HookCas),
    ("alloc.free_list.push.cas", Kind::HookCas),
    ("alloc.global.back_cold.invalidate_desc", Kind::Swcc),
    ("alloc.global.back_cold.invalidate_pages", Kind::Swcc),
    ("alloc.global.link.write_back", Kind::Swcc),
    ("alloc.global.pop.invalidate", Kind::Swcc),
    ("alloc.hazard.claim.cas", Kind::HookCas),
    ("alloc.hazard.clear.write_back", Kind::Swcc),
    ("alloc.hazard.publish.write_back_cell", Kind::Swcc),
    ("alloc.hazard.publish.write_back_high", Kind::Swcc),
    ("alloc.hazard.read.invalidate_cells", Kind::Swcc),
    ("alloc.hazard.read.invalidate_high", Kind::Swcc),
    ("alloc.hazard.release.cas", Kind::HookCas),
    ("alloc.hazard.withdraw.write_back", Kind::Swcc),
    ("alloc.huge.allocate.write_back", Kind::Swcc),
    ("alloc.huge.check.invalidate_record", Kind::Swcc),
    ("alloc.huge.free.write_back", Kind::Swcc),
    ("alloc.huge.read.invalidate", Kind::Swcc),
    ("alloc.huge.reclaim.write_back", Kind::Swcc),
    ("alloc.huge.recover.write_back", Kind::Swcc),
    ("alloc.huge.reserve.cas", Kind::HookCas),
    ("alloc.huge.unreserve.cas", Kind::HookCas),
    ("alloc.remote.update.cas", Kind::HookCas),
    ("alloc.slabs.grow.cas", Kind::HookCas),
    ("alloc.slots.beat.invalidate", Kind::Swcc),
    ("alloc.slots.beat.write_back", Kind::Swcc),
    ("alloc.slots.claim.cas", Kind::HookCas),
    ("alloc.slots.claim.invalidate", Kind::Swcc),
    ("alloc.slots.life.fence.cas", Kind::HookCas),
    ("alloc.slots.life.invalidate_beat", Kind::Swcc),
    ("alloc.slots.rejoin.cas", Kind::HookCas),
    ("alloc.slots.release.cas", Kind::HookCas),
    ("alloc.slots.release.write_back", Kind::Swcc),
    ("alloc.thread.ack_window.cas", Kind::HookCas),
    ("alloc.thread.acknowledge.cas", Kind::HookCas),
    ("alloc.transition.disown.write_back", Kind::Swcc),
    ("alloc.transition.free.invalidate", Kind::Swcc),
    ("alloc.transition.free_remote_small.invalidate", Kind::Swcc),
    ("alloc.transition.give_back.write_back", Kind::Swcc),
    ("alloc.transition.release.write_back", Kind::Swcc),
    ("alloc.transition.to_detached.write_back", Kind::Swcc),
    ("alloc.transition.to_sized.write_back", Kind::Swcc),
];

fn long() -> bool {
    std::env::var("PODKV_MODEL_SWEEP").is_ok_and(|v| v == "long")
}

fn config((coherence, mcas): (Coherence, McasKind)) -> Config {
    Config {
        small_bytes: 256 << 20,
        large_bytes: 1 << 30,
        slots: 64,
        coherence,
        mcas,
        ..Config::default()
    }
}

/// The child's entry point: runs only when re-executed with the role variable set.
#[test]
fn model_child() {
    let Ok(spec) = std::env::var(ENV_CHILD) else {
        return;
    };
    let mut parts = spec.split('|');
    let path = parts.next().expect("path");
    let index: u64 = parts.next().expect("index").parse().unwrap();
    let mode = MODES[parts.next().expect("mode").parse::<usize>().unwrap()];
    let ops: u64 = parts.next().expect("ops").parse().unwrap();
    assert!(
        podkv_hw::model::active(),
        "the parent sets PODKV_COHERENCE_MODEL"
    );
    let heap = Heap::open(path, &config(mode)).expect("child opens the shared heap");
    let threads: Vec<_> = (0..2)
        .map(|t| {
            let heap = heap.clone();
            std::thread::spawn(move || stress::worker(&heap, index * 10 + t, ops))
        })
        .collect();
    for thread in threads {
        let report = thread.join().unwrap();
        assert_eq!(
            report.corrupt, 0,
            "corrupt blocks seen by child {index}: {report:?}"
        );
    }
    drop(heap);
    for (site, hits) in podkv_hw::model::sites_hit() {
        println!("site {site} {hits}");
    }
}

/// How one run ended.
struct Run {
    /// Why it failed; `None`: it passed.
    failure: Option<String>,
    /// Calls of the switched-off site in the children.
    hits: u64,
}

fn run(m: usize, off: Option<&str>, seed: u64, ops: u64) -> Run {
    let mode = MODES[m];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("heap");
    std::fs::File::create(&path).unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut children: Vec<_> = (0..COUNT_CHILDREN)
        .map(|i| {
            Command::new(&exe)
                .args(["--exact", "model_child", "--nocapture", "--test-threads=1"])
                .env(ENV_CHILD, format!("{}|{i}|{m}|{ops}", path.display()))
                .env("PODKV_COHERENCE_MODEL", "1")
                .env("PODKV_COHERENCE_SEED", (seed * 7 + i).to_string())
                .env("PODKV_COHERENCE_SITE_OFF", off.unwrap_or(""))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let started = Instant::now();
    let mut failure = None;
    let mut hits = 0;
    let mut said = String::new();
    // Generous: a site left off may make a child spin forever; two cores, load 10.
    let limit = Duration::from_secs(if long() { 300 } else { 90 });
    for child in &mut children {
        loop {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            if started.elapsed() > limit {
                let _ = child.kill();
                failure.get_or_insert_with(|| "a child hung".to_owned());
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    for child in children {
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        for line in text.lines() {
            if let (Some(off), Some(rest)) = (off, line.strip_prefix("site ")) {
                if let Some(n) = rest
                    .strip_prefix(off)
                    .and_then(|r| r.trim().parse::<u64>().ok())
                {
                    hits += n;
                }
            }
        }
        if !out.status.success() {
            let why = text
                .lines()
                .find(|l| l.contains("panicked") || l.contains("corrupt"))
                .unwrap_or("")
                .to_owned();
            failure.get_or_insert_with(|| format!("child failed ({}): {why}", out.status));
        }
        said += &text;
    }
    if failure.is_none() {
        failure = check(&path, mode);
    }
    if failure.is_some() && off.is_none() {
        panic!("{mode:?}: the workload failed with every site on: {failure:?}\n{said}");
    }
    Run { failure, hits }
}

/// Drains and checks the heap as a third (modelled, correct) process would.
fn check(path: &std::path::Path, mode: (Coherence, McasKind)) -> Option<String> {
    podkv_hw::model::set_active(true);
    let heap = match Heap::open(path, &config(mode)) {
        Ok(heap) => heap,
        Err(e) => return Some(format!("reopen failed: {e}")),
    };
    let drained = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| stress::drain(&heap)));
    match drained {
        Ok((_, 0)) => {}
        Ok((_, corrupt)) => return Some(format!("{corrupt} corrupt blocks on the stack")),
        Err(_) => return Some("drain panicked".to_owned()),
    }
    let report = heap.check();
    if !report.is_valid() {
        return Some(format!("check: {}", report.problems.join("; ")));
    }
    if report.live_blocks() != 0 {
        return Some(format!(
            "check: {} blocks unaccounted for",
            report.live_blocks()
        ));
    }
    None
}

fn ops() -> u64 {
    if long() {
        6_000
    } else {
        1_500
    }
}

#[test]
fn the_stress_workload_passes_under_the_model() {
    if std::env::var(ENV_CHILD).is_ok() {
        return;
    }
    for m in 0..MODES.len() {
        run(m, None, 1, ops());
    }
}

/// Every `site!` / `cas_site!` name in the allocator's sources, sorted.
fn sites_in_sources() -> Vec<String> {
    fn walk(dir: &std::path::Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for part in text.split("site!(\"").skip(1) {
                    out.push(part.split('"').next().unwrap().to_owned());
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut out,
    );
    out.sort();
    out
}

#[test]
fn the_site_list_names_every_site_in_the_sources_once() {
    let listed: Vec<String> = SITES.iter().map(|(s, _)| (*s).to_owned()).collect();
    let mut sorted = listed.clone();
    sorted.sort();
    assert_eq!(listed, sorted, "keep SITES sorted");
    assert_eq!(sites_in_sources(), listed, "SITES and the sources disagree");
    for (site, kind) in SITES {
        assert_eq!(site.ends_with(".cas"), *kind == Kind::HookCas, "{site}");
    }
}

/// The modes in which dropping a site of `kind` is a bug, as far as this run goes: the
/// short sweep tries one (`limited` for SWcc sites), the long one every such mode.
fn modes_for(kind: Kind) -> Vec<usize> {
    match (kind, long()) {
        (Kind::HookCas, _) => vec![1],
        (Kind::Swcc, false) => vec![0],
        (Kind::Swcc, true) => vec![0, 1],
    }
}

#[test]
fn dropping_any_site_is_caught() {
    // Until the workload reaches every site: run by `PODKV_MODEL_SWEEP=short|long`.
    if std::env::var(ENV_CHILD).is_ok() || std::env::var_os("PODKV_MODEL_SWEEP").is_none() {
        return;
    }
    let seeds: u64 = if long() { 3 } else { 1 };
    let mut caught = 0;
    let mut table = vec!["| site | mode | calls | caught | how |".to_owned()];
    table.push("| --- | --- | --- | --- | --- |".to_owned());
    for &(site, kind) in SITES {
        let mut site_caught = true;
        for m in modes_for(kind) {
            let mut hits = 0;
            let mut how = None;
            for seed in 0..seeds {
                let run = run(m, Some(site), 100 + seed, ops());
                hits += run.hits;
                if run.failure.is_some() {
                    how = run.failure;
                    break;
                }
            }
            site_caught &= how.is_some();
            let how = how.unwrap_or_else(|| "not caught".to_owned());
            let how: String = how.chars().take(120).collect();
            let mode = MODES[m].0;
            table.push(format!(
                "| {site} | {mode} | {hits} | {} | {how} |",
                how != "not caught"
            ));
            println!("{}", table.last().unwrap());
        }
        caught += u64::from(site_caught);
    }
    println!("{}", table.join("\n"));
    let total = SITES.len() as u64;
    println!("caught {caught} of {total} sites");
    assert!(
        caught * 100 >= total * 80,
        "the model caught only {caught} of {total} dropped sites"
    );
}
