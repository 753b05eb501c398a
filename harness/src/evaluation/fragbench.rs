//! The Fragbench page's own sections (NVAlloc Fig. 15b): podkv's slab census by occupancy
//! band after each phase, and what slab morphing saves — podkv's PSS over podkv-nomorph's and
//! over mimalloc's, per workload and phase — plus the page's one-line account.

use super::figures::{Curve, Panels};
use std::collections::BTreeMap;
use std::fmt::Write as _;

const PHASES: [(u64, &str); 3] = [(1, "before"), (2, "delete"), (3, "after")];

/// The median of `metric` of `series` at phase `x`.
fn at(curves: &BTreeMap<String, Curve>, series: &str, metric: &str, x: u64) -> Option<f64> {
    curves
        .get(series)?
        .line(metric)
        .into_iter()
        .find(|&(px, _)| px == x)
        .map(|(_, v)| v)
}

/// `a / b` of PSS at phase `x`, as `0.62×`, or `—`.
fn ratio_cell(curves: &BTreeMap<String, Curve>, a: &str, b: &str, x: u64) -> String {
    match (at(curves, a, "pss", x), at(curves, b, "pss", x)) {
        (Some(va), Some(vb)) if vb > 0.0 => format!("{:.2}×", va / vb),
        _ => "—".into(),
    }
}

/// The occupancy census and the morphing ratios, as Markdown.
pub fn section(panels: &Panels) -> String {
    let mut out = String::from(
        "## Slab occupancy (podkv's census, NVAlloc Fig. 15b)\n\nSlabs holding a size class \
         at each phase's end, by the share of their blocks in use (medians over repeats). \
         Morphing should move slabs out of the 0–30% band.\n\n\
         | workload | heap | phase | 0–30% | 30–70% | 70–100% | slab MiB |\n\
         | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for (workload, curves) in panels {
        for series in ["podkv", "podkv-nomorph"] {
            for (x, phase) in PHASES {
                let cell = |metric: &str, scale: f64| {
                    at(curves, series, metric, x)
                        .map_or("—".into(), |v| format!("{:.0}", v / scale))
                };
                let _ = writeln!(
                    out,
                    "| {workload} | {series} | {phase} | {} | {} | {} | {} |",
                    cell("occupancy_low", 1.0),
                    cell("occupancy_mid", 1.0),
                    cell("occupancy_high", 1.0),
                    cell("slab_bytes", 1024.0 * 1024.0),
                );
            }
        }
    }
    out.push_str(
        "\n## What slab morphing saves\n\nPSS of podkv with morphing over podkv-nomorph \
         (below 1: morphing saves memory) and over mimalloc, at each phase's end.\n\n\
         | workload | podkv / podkv-nomorph: before | delete | after | podkv / mimalloc: after |\n\
         | --- | --- | --- | --- | --- |\n",
    );
    for (workload, curves) in panels {
        let _ = writeln!(
            out,
            "| {workload} | {} | {} | {} | {} |",
            ratio_cell(curves, "podkv", "podkv-nomorph", 1),
            ratio_cell(curves, "podkv", "podkv-nomorph", 2),
            ratio_cell(curves, "podkv", "podkv-nomorph", 3),
            ratio_cell(curves, "podkv", "mimalloc", 3),
        );
    }
    out.push('\n');
    out
}

/// The page's account: PSS after the After phase, podkv against podkv-nomorph and mimalloc.
pub fn why(panels: &Panels) -> Vec<String> {
    let mut parts = Vec::new();
    for other in ["podkv-nomorph", "mimalloc"] {
        let ratios: Vec<(String, f64)> = panels
            .iter()
            .filter_map(|(w, c)| {
                let (a, b) = (at(c, "podkv", "pss", 3)?, at(c, other, "pss", 3)?);
                (b > 0.0).then(|| (w.clone(), a / b))
            })
            .collect();
        if ratios.is_empty() {
            continue;
        }
        let mean = ratios.iter().map(|(_, r)| r).sum::<f64>() / ratios.len() as f64;
        let (best_w, best) = ratios
            .iter()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .cloned()
            .unwrap_or_default();
        parts.push(format!(
            "after the After phase podkv's PSS is {mean:.2}× {other}'s (mean over workloads; \
             {best:.2}× on {best_w})"
        ));
    }
    parts
}
