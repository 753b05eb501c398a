//! `podkv suite` runs a TOML product and `podkv plot` draws its NDJSON as SVG and PNG.

mod run_support;

use run_support::{records, run, run_ok, s};

#[test]
fn a_suite_runs_its_product_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("suite.ndjson");
    let suite = dir.path().join("suite.toml");
    std::fs::write(
        &suite,
        format!(
            "command = \"ycsb\"\njson = {json:?}\n[params]\nworkload = [\"a\", \"c\"]\n\
             threads = [1, 2]\ntarget = [\"null\", \"dashmap\"]\nrecords = 500\nops = 2000\n"
        ),
    )
    .unwrap();
    run_ok(&["suite", s(&suite)]);
    let lines = records(&json);
    assert_eq!(lines.len(), 8, "2 workloads × 2 thread counts × 2 targets");
    for w in ["a", "c"] {
        for t in [1, 2] {
            for target in ["null", "dashmap"] {
                let n = lines
                    .iter()
                    .filter(|r| r["workload"] == w && r["threads"] == t && r["target"] == target)
                    .count();
                assert_eq!(n, 1, "{w} {t} {target}");
            }
        }
    }
    for ext in ["svg", "png"] {
        let image = dir.path().join(format!("plot.{ext}"));
        let out = run(&["plot", s(&json), "-o", s(&image)]);
        if ext == "png" && String::from_utf8_lossy(&out.stderr).contains("no TrueType font") {
            eprintln!(
                "SKIPPING PNG PLOT: no TrueType font installed (apt-get install fonts-dejavu-core)"
            );
            continue;
        }
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let bytes = std::fs::read(&image).unwrap();
        match ext {
            "svg" => {
                let text = String::from_utf8(bytes).unwrap();
                assert!(
                    text.starts_with("<svg") && text.contains("dashmap") && text.contains("Mops/s")
                );
            }
            _ => assert!(bytes.starts_with(b"\x89PNG") && bytes.len() > 10_000),
        }
    }
}
