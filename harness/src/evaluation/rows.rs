//! Records as the report sees them: every NDJSON record (a run's, a benchmark's, a suite's
//! skipped point) placed at one (figure, panel, series, x) with its values or its reason.

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// Where a record belongs in the report.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Place {
    /// `fig8` … `fig12`, `server`, `tables`, `fragbench`.
    pub figure: String,
    /// The panel's title without its metric (`YCSB-A`, `xmalloc 64 B, threads`).
    pub panel: String,
    /// The curve (`embedded`, `podkv, 2 processes`, `flush-cas`).
    pub series: String,
    /// Threads, workers or processes: the figure's x axis.
    pub x: u64,
}

/// One record, read.
#[derive(Clone, Debug)]
pub struct Row {
    /// Where it goes.
    pub place: Place,
    /// Its values by metric (`throughput`, `pss`, `p50`, `p99`, `hwcc`); empty when skipped.
    pub values: BTreeMap<&'static str, f64>,
    /// Why it has no values (a skipped point, a timed-out run).
    pub reason: Option<String>,
    /// The command line that made it.
    pub command: Option<String>,
    /// The commit of the binary that made it.
    pub commit: Option<String>,
    /// Its workers outnumbered the CPUs.
    pub oversubscribed: bool,
    /// A trace replay from a generated (not recorded) trace.
    pub synthetic: bool,
    /// PSS sampled during the run, `(seconds, bytes)`; empty when not sampled.
    pub pss_over_time: Vec<(f64, f64)>,
    /// Where its timed phase starts on that time axis, seconds.
    pub timed_from: Option<f64>,
}

/// Reads every record of `inputs`.
pub fn read(inputs: &[impl AsRef<Path>]) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for input in inputs {
        let input = input.as_ref();
        let text = std::fs::read_to_string(input)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", input.display()))?;
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let v: Value = serde_json::from_str(line)
                .map_err(|e| anyhow::anyhow!("{}:{}: {e}", input.display(), n + 1))?;
            rows.extend(row_of(&v));
        }
    }
    Ok(rows)
}

fn str_of<'v>(v: &'v Value, key: &str) -> Option<&'v str> {
    v.get(key).and_then(Value::as_str)
}

fn u64_of(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(|x| {
        x.as_u64()
            .or_else(|| x.as_str().and_then(|s| s.parse().ok()))
    })
}

fn f64_of(v: &Value, key: &str) -> Option<f64> {
    v.get(key).and_then(Value::as_f64)
}

/// The figure of a record: its suite's, or the one its kind belongs to.
fn figure_of(v: &Value, kind: &str) -> Option<String> {
    if let Some(f) = str_of(v, "figure") {
        return Some(f.to_owned());
    }
    let huge = u64_of(v, "size").is_some_and(|s| s > 512 << 10);
    let coherence = str_of(v, "coherence").unwrap_or("hardware");
    Some(
        match kind {
            "ycsb" | "replay" => "fig8",
            "threadtest" | "xmalloc" if huge => "fig10",
            "threadtest" | "xmalloc" if coherence != "hardware" => "fig12",
            "threadtest" | "xmalloc" => "fig9",
            "mcas" => "fig11",
            "recovery" => "tables",
            "frag" => "fragbench",
            _ => return None,
        }
        .to_owned(),
    )
}

/// The panel name of a YCSB workload or a trace file: `YCSB-A`, `MC-12`.
pub fn workload_panel(workload: &str) -> String {
    let stem = workload.split('.').next().unwrap_or(workload);
    let digits: String = stem
        .trim_start_matches("mc")
        .trim_start_matches("cluster")
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    match stem {
        "load" => "YCSB-Load".into(),
        "cxlalloc-a" => "YCSB-A".into(),
        "cxlalloc-d" => "YCSB-D".into(),
        _ if !digits.is_empty() && (stem.starts_with("mc") || stem.starts_with("cluster")) => {
            format!("MC-{digits}")
        }
        other => other.to_owned(),
    }
}

/// Why a record has no values: a skipped point's reason, or a timed-out run.
fn reason_of(v: &Value) -> Option<String> {
    let status = str_of(v, "status").unwrap_or("ok");
    let timed_out = v.get("timed_out").and_then(Value::as_bool) == Some(true);
    let reason = (status != "ok").then(|| str_of(v, "reason").unwrap_or(status).to_owned());
    if timed_out {
        let command = str_of(v, "command").unwrap_or_default();
        return Some(format!(
            "timed out ({})",
            command
                .split_once("--timeout ")
                .map_or("its --duration".into(), |(_, t)| format!(
                    "after {} s",
                    t.split_whitespace().next().unwrap_or("?")
                ))
        ));
    }
    reason
}

/// A server row's place: the workload's panel, the server its `version` names, the offered
/// load.
fn server_place(v: &Value) -> (String, String, u64) {
    let workload = str_of(v, "workload").unwrap_or("?");
    let series = match str_of(v, "server_version") {
        Some(version) if version.contains("podkv") => "podkv serve".to_owned(),
        Some(_) => "memcached".to_owned(),
        None => str_of(v, "target").unwrap_or("?").to_owned(),
    };
    let rate = f64_of(v, "target_rate")
        .or_else(|| f64_of(v, "target-rate"))
        .or_else(|| str_of(v, "target-rate").and_then(|r| r.parse().ok()));
    (workload_panel(workload), series, rate.unwrap_or(0.0) as u64)
}

/// A fig9 record's places: on its threads sweep, its processes sweep, or both (one worker).
fn fig9_places(
    v: &Value,
    kind: &str,
    allocator: &str,
    size: u64,
    threads: u64,
    processes: u64,
) -> Vec<(String, String, u64)> {
    let suite = str_of(v, "suite").unwrap_or_default();
    let by_threads = if suite.contains("processes") {
        false
    } else if suite.contains("threads") {
        true
    } else {
        processes == 1
    };
    let by_processes = suite.contains("processes") || (suite.is_empty() && threads == 1);
    let mut panels = Vec::new();
    if by_threads {
        panels.push((
            format!("{kind} {size} B, threads"),
            allocator.into(),
            threads,
        ));
    }
    if by_processes {
        panels.push((
            format!("{kind} {size} B, processes"),
            allocator.into(),
            processes,
        ));
    }
    panels
}

/// The (panel, series, x) places of a record of `kind` in `figure`.
fn places(
    v: &Value,
    figure: &str,
    kind: &str,
    threads: u64,
    processes: u64,
) -> Vec<(String, String, u64)> {
    let allocator = str_of(v, "allocator").unwrap_or("?");
    let size = u64_of(v, "size").unwrap_or(0);
    let mut panels: Vec<(String, String, u64)> = Vec::new();
    match figure {
        "fig8" => {
            let workload = str_of(v, "workload").unwrap_or("?");
            let target = str_of(v, "target").unwrap_or("?");
            panels.push((workload_panel(workload), target.into(), threads * processes));
        }
        "fig9" => panels.extend(fig9_places(v, kind, allocator, size, threads, processes)),
        "fig10" => {
            let series = if allocator == "podkv" {
                format!(
                    "podkv, {processes} process{}",
                    if processes == 1 { "" } else { "es" }
                )
            } else {
                allocator.to_owned()
            };
            panels.push((kind.to_owned(), series, threads));
        }
        "fig11" => {
            let cas = str_of(v, "cas")
                .or_else(|| str_of(v, "kinds"))
                .unwrap_or("?");
            for cas in cas.split(',') {
                panels.push(("CAS latency".into(), cas.into(), threads));
            }
        }
        "server" => panels.push(server_place(v)),
        "fragbench" => {
            let phase = match str_of(v, "phase").unwrap_or("?") {
                "before" => 1,
                "delete" => 2,
                "after" => 3,
                _ => 0,
            };
            let workload = str_of(v, "workload").unwrap_or("?").to_uppercase();
            panels.push((workload, allocator.into(), phase));
        }
        "tables" if kind == "recovery" => {
            panels.push((
                "recovery time".into(),
                "podkv".into(),
                u64_of(v, "slots").unwrap_or(1),
            ));
        }
        "fig12" => {
            let coherence = str_of(v, "coherence").unwrap_or("hardware");
            let series = match (coherence, str_of(v, "mcas_impl").or(str_of(v, "mcas-impl"))) {
                ("mcas", Some(imp)) => format!("podkv-mcas-{imp}"),
                (mode, _) => format!("podkv-{mode}"),
            };
            panels.push((kind.to_owned(), series, threads));
        }
        _ => {}
    }
    panels
}

/// A measured record's values by metric name.
fn values_of(v: &Value) -> BTreeMap<&'static str, f64> {
    let mut values = BTreeMap::new();
    for (metric, key) in [
        ("throughput", "ops_per_sec"),
        ("pss", "pss_bytes"),
        ("hwcc", "hwcc_bytes"),
        ("p50", "p50_ns"),
        ("p99", "p99_ns"),
        ("p50_us", "p50_us"),
        ("p99_us", "p99_us"),
        ("recovery_ms", "recovery_ms"),
        ("cpu_ns", "cpu_ns_per_op"),
        ("faults", "page_faults"),
        ("live", "live_bytes"),
        ("slab_bytes", "slab_bytes"),
    ] {
        if let Some(x) = f64_of(v, key) {
            values.insert(metric, x);
        }
    }
    if let Some(bands) = v.get("occupancy").and_then(Value::as_array) {
        for (metric, band) in ["occupancy_low", "occupancy_mid", "occupancy_high"]
            .into_iter()
            .zip(bands)
        {
            if let Some(n) = band.as_f64() {
                values.insert(metric, n);
            }
        }
    }
    if let (Some(faults), Some(ops)) = (f64_of(v, "page_faults"), f64_of(v, "ops")) {
        if ops > 0.0 {
            values.insert("faults_per_kop", faults / ops * 1000.0);
        }
    }
    if let (Some(offered), Some(done)) = (f64_of(v, "target_rate"), f64_of(v, "ops_per_sec")) {
        if offered > 0.0 {
            values.insert("kept_up", done / offered);
        }
    }
    values
}

/// The rows of one record (a fig9 record with one worker is on two panels: its threads
/// sweep and its processes sweep).
fn row_of(v: &Value) -> Vec<Row> {
    let kind = str_of(v, "kind")
        .or_else(|| str_of(v, "bench"))
        .unwrap_or("?")
        .to_owned();
    let Some(figure) = figure_of(v, &kind) else {
        return Vec::new();
    };
    let threads = u64_of(v, "threads").unwrap_or(1);
    let processes = u64_of(v, "processes").unwrap_or(1);
    let reason = reason_of(v);
    let panels = places(v, &figure, &kind, threads, processes);
    let values = match reason {
        None => values_of(v),
        Some(_) => BTreeMap::new(),
    };
    let workload = str_of(v, "workload").unwrap_or_default();
    let pss_over_time: Vec<(f64, f64)> = v
        .get("pss_over_time")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p.get(0)?.as_f64()?, p.get(1)?.as_f64()?)))
        .collect();
    panels
        .into_iter()
        .map(|(panel, series, x)| Row {
            place: Place {
                figure: figure.clone(),
                panel,
                series,
                x,
            },
            values: values.clone(),
            reason: reason.clone(),
            command: str_of(v, "command")
                .filter(|c| !c.is_empty())
                .map(str::to_owned),
            commit: str_of(v, "git_commit").map(str::to_owned),
            oversubscribed: v.get("oversubscribed").and_then(Value::as_bool) == Some(true),
            synthetic: kind == "replay" && workload.contains("synthetic"),
            pss_over_time: pss_over_time.clone(),
            timed_from: f64_of(v, "pss_timed_from_s"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn records_find_their_figure_panel_and_series() {
        let run = json!({"kind": "replay", "workload": "mc37-synthetic.parquet",
            "target": "embedded", "threads": 2, "processes": 1, "ops_per_sec": 5.0,
            "command": "podkv replay", "git_commit": "abc"});
        let rows = row_of(&run);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].place.figure, "fig8");
        assert_eq!(rows[0].place.panel, "MC-37");
        assert!(rows[0].synthetic);
        assert_eq!(rows[0].values["throughput"], 5.0);
        let skipped = json!({"kind": "xmalloc", "allocator": "mimalloc", "size": 8,
            "threads": 1, "processes": 3, "status": "skipped", "reason": "cannot span",
            "suite": "fig9-processes", "figure": "fig9"});
        let rows = row_of(&skipped);
        assert_eq!(rows[0].place.panel, "xmalloc 8 B, processes");
        assert_eq!(rows[0].place.x, 3);
        assert_eq!(rows[0].reason.as_deref(), Some("cannot span"));
        let huge = json!({"kind": "threadtest", "allocator": "system", "size": 1u64 << 30,
            "threads": 1, "processes": 1, "timed_out": true,
            "command": "podkv bench huge --timeout 30"});
        let rows = row_of(&huge);
        assert_eq!(rows[0].place.figure, "fig10");
        assert_eq!(rows[0].reason.as_deref(), Some("timed out (after 30 s)"));
    }

    #[test]
    fn server_and_recovery_records_find_their_places() {
        let served = json!({"kind": "ycsb", "workload": "cxlalloc-a", "figure": "server",
            "target": "memcached://127.0.0.1:1", "server_version": "1.6.0-podkv-0.1.0",
            "target_rate": 20000.0, "ops_per_sec": 19000.0, "p99_us": 80.0, "threads": 2,
            "pss_over_time": [[0.0, 1024], [0.1, 2048]], "pss_timed_from_s": 0.05});
        let rows = row_of(&served);
        assert_eq!(
            (
                rows[0].place.panel.as_str(),
                rows[0].place.series.as_str(),
                rows[0].place.x
            ),
            ("YCSB-A", "podkv serve", 20000)
        );
        assert!((rows[0].values["kept_up"] - 0.95).abs() < 1e-9);
        assert_eq!(rows[0].pss_over_time, [(0.0, 1024.0), (0.1, 2048.0)]);
        assert_eq!(rows[0].timed_from, Some(0.05));
        let memcached = json!({"kind": "ycsb", "workload": "cxlalloc-a", "figure": "server",
            "server_version": "1.6.21", "target_rate": 5000.0});
        assert_eq!(row_of(&memcached)[0].place.series, "memcached");
        let frag = json!({"kind": "frag", "workload": "w4", "allocator": "podkv-nomorph",
            "phase": "after", "pss_bytes": 4096, "occupancy": [5, 1, 9]});
        let rows = row_of(&frag);
        assert_eq!(
            (rows[0].place.figure.as_str(), rows[0].place.panel.as_str()),
            ("fragbench", "W4")
        );
        assert_eq!(
            (rows[0].place.series.as_str(), rows[0].place.x),
            ("podkv-nomorph", 3)
        );
        assert_eq!(rows[0].values["occupancy_high"], 9.0);
        let recovery = json!({"kind": "recovery", "slots": 4, "recovery_ms": 3.5});
        let rows = row_of(&recovery);
        assert_eq!(rows[0].place.figure, "tables");
        assert_eq!(rows[0].place.x, 4);
        assert_eq!(rows[0].values["recovery_ms"], 3.5);
    }
}
