//! `scripts/evaluate --scale tiny` runs every suite in eval/ and `podkv report`; the report's
//! manifest must account for every panel and series (drawn, or missing with a stated reason),
//! every drawn curve must have at least two x-values, and every record must name the command
//! and the commit that made it.

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The whole tiny evaluation takes about half a minute in a debug build on a quiet machine.
const SECONDS_MAX: u64 = 900;

#[test]
fn the_tiny_evaluation_reports_every_figure_or_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/evaluate");
    // Progress goes to a file: a pipe nobody drains would fill and stall the run.
    let log_path = dir.path().join("evaluate.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = Command::new("bash")
        .arg(&script)
        .args(["--scale", "tiny", "--workdir"])
        .arg(dir.path())
        .arg("-o")
        .arg(&report)
        .env("PODKV_BIN", env!("CARGO_BIN_EXE_podkv"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("bash runs scripts/evaluate");
    let deadline = Instant::now() + Duration::from_secs(SECONDS_MAX);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("scripts/evaluate --scale tiny did not finish in {SECONDS_MAX} s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = child.wait().unwrap();
    let stderr = std::fs::read_to_string(&log_path).unwrap();
    if stderr.contains("no TrueType font") {
        eprintln!("SKIPPING: no TrueType font for the plots (apt-get install fonts-dejavu-core)");
        return;
    }
    let mut from = stderr.len().saturating_sub(4000);
    while !stderr.is_char_boundary(from) {
        from += 1;
    }
    let tail = &stderr[from..];
    assert!(status.success(), "scripts/evaluate failed:\n…{tail}");

    for entry in std::fs::read_dir(dir.path().join("results/tiny")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "ndjson") {
            for line in std::fs::read_to_string(&path).unwrap().lines() {
                let r: Value = serde_json::from_str(line).unwrap();
                for key in ["command", "git_commit"] {
                    assert!(
                        r[key].as_str().is_some_and(|s| !s.is_empty()),
                        "{}: a record without its {key}: {line}",
                        path.display()
                    );
                }
            }
        }
    }

    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(report.join("manifest.json")).unwrap())
            .unwrap();
    for figure in manifest["figures"].as_array().unwrap() {
        let page = figure["page"].as_str().unwrap();
        assert!(report.join(page).is_file(), "page {page} is missing");
    }
    let panels = manifest["panels"].as_array().unwrap();
    for figure in ["fig8", "fig9", "fig10", "fig11", "fig12", "fragbench"] {
        assert!(
            panels.iter().any(|p| p["figure"] == figure),
            "no panel of {figure}"
        );
    }
    // The store's index on boost.interprocess is on every fig8 panel: drawn, or refused with
    // the reason (a binary built without boost).
    let fig8: Vec<&Value> = panels
        .iter()
        .filter(|p| p["figure"] == "fig8" && p["metric"] == "throughput")
        .collect();
    assert_eq!(fig8.len(), 7, "fig8 has 7 panels: {fig8:?}");
    for panel in fig8 {
        let series = panel["series"].as_array().unwrap();
        let boost = series.iter().find(|s| s["name"] == "boost");
        let boost = boost.unwrap_or_else(|| panic!("{}: no boost series", panel["id"]));
        assert!(
            boost["status"] == "ok"
                || boost["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("boost")),
            "{}: boost is neither drawn nor refused with its reason: {boost}",
            panel["id"]
        );
    }
    // Fragbench: PSS after each phase, every workload, podkv with and without morphing.
    for w in ["W1", "W2", "W3", "W4"] {
        let pss = panels
            .iter()
            .find(|p| p["figure"] == "fragbench" && p["panel"] == w && p["metric"] == "pss")
            .unwrap_or_else(|| panic!("no Fragbench PSS panel for {w}"));
        for name in ["podkv", "podkv-nomorph", "mimalloc"] {
            let s = pss["series"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["name"] == name);
            assert!(
                s.is_some_and(|s| s["status"] == "ok"),
                "Fragbench {w}: {name} has no PSS curve: {pss}"
            );
        }
    }
    let fragbench = std::fs::read_to_string(report.join("fragbench.md")).unwrap();
    assert!(
        fragbench.contains("occupancy") && fragbench.contains("podkv-nomorph"),
        "the Fragbench page lacks the occupancy census or the morphing ratio"
    );
    for panel in panels {
        let id = panel["id"].as_str().unwrap();
        match panel["png"].as_str() {
            Some(png) => assert!(report.join(png).is_file(), "{id}: plot {png} is missing"),
            None => assert!(
                panel["reason"].is_string(),
                "{id}: no plot and no reason: {panel}"
            ),
        }
        for series in panel["series"].as_array().unwrap() {
            let name = series["name"].as_str().unwrap();
            let xs = series["x"].as_array().unwrap().len();
            if series["status"] == "ok" {
                assert!(xs >= 2, "{id}: series {name} has {xs} x-values");
            } else {
                assert!(
                    series["reason"].is_string(),
                    "{id}: series {name} is missing without a reason: {series}"
                );
            }
        }
    }
}
