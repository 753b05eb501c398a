//! The targeted scenarios of the site sweep (`coherence_model.rs`): two-process tests, in
//! this crate's test binaries, that reach sites the stress workload does not reach or cannot
//! see dropped. Each runs as its own test binary process (re-executing itself for its
//! children) with one site off in its whole process tree.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One targeted scenario: test `test` of test binary `binary`, aimed at `sites`.
pub struct Scenario {
    pub binary: &'static str,
    pub test: &'static str,
    /// Extra environment of its run.
    pub env: &'static [(&'static str, &'static str)],
    /// The sites it is meant to catch (the sweep tries it for these only).
    pub sites: &'static [&'static str],
}

const CHECKER: &str = "a_checker_counts_the_blocks_another_process_left_live";
const HAZARD: &str = "a_huge_block_another_process_maps_is_reclaimed_only_after_it_unmapped";

pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        binary: "model_scenarios",
        test: CHECKER,
        env: &[],
        sites: &[
            "alloc.check.invalidate",
            "alloc.huge.allocate.write_back",
            "alloc.huge.check.invalidate_log",
            "alloc.huge.check.invalidate_record",
            "alloc.huge.free.write_back",
            "alloc.huge.log.write_back",
            "alloc.slabs.changed_hands.invalidate",
            "alloc.thread.claim.invalidate_heads",
            "alloc.transition.free_detached.invalidate",
            "alloc.transition.disown.write_back",
            "alloc.remote_free.small.invalidate",
            "alloc.transition.give_back.write_back",
            "alloc.transition.release.write_back",
            "alloc.transition.to_detached.write_back",
            "alloc.global.back_cold.invalidate_desc",
            "alloc.global.back_cold.invalidate_pages",
        ],
    },
    Scenario {
        binary: "model_scenarios",
        test: HAZARD,
        env: &[],
        sites: &[
            "alloc.hazard.claim.cas",
            "alloc.hazard.clear.write_back",
            "alloc.hazard.publish.write_back_cell",
            "alloc.hazard.publish.write_back_high",
            "alloc.hazard.read.invalidate_cells",
            "alloc.hazard.read.invalidate_high",
            "alloc.hazard.release.cas",
            "alloc.hazard.withdraw.write_back",
            "alloc.huge.free.write_back",
            "alloc.huge.unreserve.cas",
        ],
    },
    Scenario {
        binary: "model_scenarios",
        test: "hazards::a_dead_processs_record_is_empty_for_all_once_claimed",
        env: &[],
        sites: &["alloc.hazard.clear.write_back"],
    },
    Scenario {
        binary: "model_scenarios",
        test: "hazards::a_checker_finds_a_record_another_process_corrupted",
        env: &[],
        sites: &["alloc.huge.check.invalidate_record"],
    },
    Scenario {
        binary: "model_scenarios",
        test: "hazards::opening_and_closing_the_heap_again_and_again_never_runs_out_of_records",
        env: &[],
        sites: &["alloc.hazard.release.cas"],
    },
    Scenario {
        binary: "model_scenarios",
        test: "frees::a_remote_free_of_a_block_whose_slab_was_resized_since_is_refused",
        env: &[],
        sites: &["alloc.remote_free.small.invalidate"],
    },
    Scenario {
        binary: "model_scenarios",
        test: "opens_at_once_hold_a_hazard_record_each",
        env: &[],
        sites: &["alloc.hazard.claim.cas", "alloc.hazard.release.cas"],
    },
    Scenario {
        binary: "model_scenarios",
        test: "descs::a_slots_next_holder_reads_the_huge_descriptors_its_last_holder_left",
        env: &[],
        sites: &[
            "alloc.huge.allocate.invalidate_descs",
            "alloc.huge.read.invalidate",
            "alloc.huge.reclaim.write_back",
        ],
    },
    Scenario {
        binary: "model_scenarios",
        test: "slots_claiming_huge_ranges_at_once_never_share_one",
        env: &[],
        sites: &["alloc.huge.reserve.cas", "alloc.huge.unreserve.cas"],
    },
    Scenario {
        binary: "model_scenarios",
        test: "a_slot_has_one_holder_at_a_time",
        env: &[],
        sites: &[
            "alloc.slots.claim.cas",
            "alloc.slots.release.cas",
            "alloc.thread.ack_window.cas",
            "alloc.thread.acknowledge.cas",
            "alloc.thread.claim.invalidate_heads",
        ],
    },
    Scenario {
        binary: "model_scenarios",
        test: "fence::a_fence_and_the_rejoin_after_it_are_read_by_every_process",
        env: &[],
        sites: &["alloc.slots.life.fence.cas", "alloc.slots.rejoin.cas"],
    },
    Scenario {
        binary: "model_scenarios",
        test: "fence::an_owner_that_keeps_beating_is_never_fenced",
        env: &[],
        sites: &[
            "alloc.slots.beat.invalidate",
            "alloc.slots.beat.write_back",
            "alloc.slots.life.fence.cas",
            "alloc.slots.life.invalidate_beat",
            "alloc.slots.rejoin.cas",
        ],
    },
    Scenario {
        binary: "model_scenarios",
        test: "recovery::a_crashed_holders_huge_step_is_recovered_by_its_slots_last_holder",
        env: &[],
        sites: &[
            "alloc.huge.check.invalidate_log",
            "alloc.huge.free.write_back_aux",
            "alloc.huge.log.write_back",
            "alloc.huge.read.invalidate",
            "alloc.huge.recover.invalidate_log",
            "alloc.huge.recover.write_back",
            "alloc.recover.take_over.invalidate",
            "alloc.slots.beat.invalidate",
            "alloc.slots.beat.write_back",
            "alloc.slots.claim.invalidate",
            "alloc.slots.release.write_back",
        ],
    },
    Scenario {
        binary: "tenure",
        test: "a_new_tenure_allocating_beside_the_last_ones_live_blocks_keeps_them_whole",
        env: &[],
        sites: &[
            "alloc.thread.claim.invalidate_data",
            "alloc.thread.claim.invalidate_heads",
            "alloc.transition.free_detached.invalidate",
        ],
    },
    Scenario {
        binary: "huge_lines",
        test: "a_remote_huge_free_keeps_the_owners_next_allocation",
        env: &[],
        sites: &[
            "alloc.huge.allocate.write_back",
            "alloc.huge.free.write_back",
            "alloc.huge.log.write_back",
        ],
    },
    Scenario {
        binary: "model_scenarios",
        test: "morph::another_process_frees_the_blocks_of_a_slab_that_morphed_after_it_looked",
        env: &[],
        sites: &[
            "alloc.morph.free.invalidate",
            "alloc.morph.meta.write_back",
            "alloc.morph.old.write_back",
        ],
    },
    Scenario {
        binary: "model_scenarios",
        test: "morph::the_old_blocks_an_owner_frees_and_its_ended_morph_show_to_another_process",
        env: &[],
        sites: &["alloc.morph.end.write_back"],
    },
];

/// The test binary `name` of this crate: this one, or the newest sibling `name-<hash>` in
/// this one's directory (build it with `--test name`).
pub fn binary(name: &str) -> Result<PathBuf, String> {
    let me = std::env::current_exe().unwrap();
    let dir = me.parent().unwrap();
    let prefix = format!("{name}-");
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            let file = p.file_name().unwrap().to_string_lossy();
            file.strip_prefix(&prefix)
                .is_some_and(|hash| hash.len() == 16 && hash.chars().all(|c| c.is_ascii_hexdigit()))
        })
        .filter_map(|p| Some((p.metadata().ok()?.modified().ok()?, p)))
        .collect();
    found.sort();
    found
        .pop()
        .map(|(_, p)| p)
        .ok_or_else(|| format!("no test binary {name}: build it too (--test {name})"))
}

/// Runs `scenario` in `mode` (`limited` or `mcas`) with `off` switched off (or none);
/// `evict`: the model's random evictions, one SWcc call in `evict` (0: none). Returns why it
/// failed, `None` if it passed.
pub fn run(
    scenario: &Scenario,
    mode: &str,
    off: Option<&str>,
    evict: u32,
    seed: u64,
) -> Option<String> {
    let exe = match binary(scenario.binary) {
        Ok(exe) => exe,
        Err(e) => panic!("{e}"),
    };
    let mut command = Command::new(exe);
    command
        .args(["--exact", scenario.test, "--nocapture", "--test-threads=1"])
        .env("PODKV_COHERENCE_MODEL", "1")
        .env("PODKV_SCENARIO_MODE", mode)
        .env("PODKV_COHERENCE_SITE_OFF", off.unwrap_or(""))
        .env("PODKV_COHERENCE_EVICT", evict.to_string())
        .env("PODKV_COHERENCE_SEED", seed.to_string())
        .envs(scenario.env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let mut child = command.spawn().unwrap();
    let started = Instant::now();
    let hung = loop {
        if child.try_wait().unwrap().is_some() {
            break false;
        }
        if started.elapsed() > Duration::from_secs(240) {
            // The scenario's whole process group: its children too.
            let group = format!("-{}", child.id());
            let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
            break true;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    if hung {
        return Some("hung (240 s)".to_owned());
    }
    if out.status.success() {
        // A filter that matched nothing passes too: that scenario could never fail.
        assert!(
            text.contains("test result: ok. 1 passed"),
            "{}: no such test in {}:\n{text}",
            scenario.test,
            scenario.binary
        );
        return None;
    }
    // The first panic's place and message (the line after it), else the last line said.
    let lines: Vec<&str> = text.lines().collect();
    let why = match lines.iter().position(|l| l.contains("panicked")) {
        Some(at) => format!("{} {}", lines[at], lines.get(at + 1).unwrap_or(&"")),
        None => lines
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or(&"")
            .to_string(),
    };
    Some(format!("{}: {why}", out.status))
}
