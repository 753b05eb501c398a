//! Memory over time: the PSS each run sampled while it ran (the runner's sampler,
//! `process_stats::sample_pss`), one plot per panel with one curve per series, at the
//! panel's largest worker count that does not outnumber the CPUs.

use super::rows::Row;
use super::{relative, slug};
use crate::helpers::human_bytes;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// One run's samples: `(seconds, bytes)` and when its timed phase starts.
struct Run<'r> {
    x: u64,
    samples: &'r [(f64, f64)],
    timed_from: Option<f64>,
}

/// The runs drawn for each panel of `figure`: per panel, the series' runs at one x.
fn chosen<'r>(figure: &str, rows: &'r [Row]) -> BTreeMap<&'r str, BTreeMap<&'r str, Run<'r>>> {
    let mut by_panel: BTreeMap<&str, Vec<&Row>> = BTreeMap::new();
    for row in rows
        .iter()
        .filter(|r| r.place.figure == figure && !r.pss_over_time.is_empty())
    {
        by_panel.entry(&row.place.panel).or_default().push(row);
    }
    by_panel
        .into_iter()
        .map(|(panel, rows)| {
            // The largest x every series reached without oversubscription, else the largest.
            let fits = rows.iter().filter(|r| !r.oversubscribed).map(|r| r.place.x);
            let x = fits
                .max()
                .or_else(|| rows.iter().map(|r| r.place.x).max())
                .unwrap_or(1);
            let runs = rows
                .iter()
                .filter(|r| r.place.x == x)
                .map(|r| {
                    (
                        r.place.series.as_str(),
                        Run {
                            x,
                            samples: &r.pss_over_time,
                            timed_from: r.timed_from,
                        },
                    )
                })
                .collect();
            (panel, runs)
        })
        .collect()
}

/// The "Memory over time" section of `figure`'s page (empty when no record sampled PSS)
/// and its manifest entries.
pub fn section(
    dir: &Path,
    plots: &Path,
    figure: &str,
    rows: &[Row],
) -> anyhow::Result<(String, Vec<Value>)> {
    let panels = chosen(figure, rows);
    if panels.is_empty() {
        return Ok((String::new(), Vec::new()));
    }
    let mut out = String::from(
        "## Memory over time\n\nPSS summed over the run's processes, sampled about every 100 ms \
         from the workers' start (a YCSB run's untimed load and a replay's set-up included), \
         at the panel's most workers within the CPUs.\n\n",
    );
    let mut entries = Vec::new();
    for (panel, runs) in panels {
        let title = format!("{panel}: PSS over time");
        let curves: Vec<(String, Vec<(f64, f64)>)> = runs
            .iter()
            .map(|(name, run)| {
                let points = run
                    .samples
                    .iter()
                    .map(|&(s, b)| (s, b / (1024.0 * 1024.0)))
                    .collect();
                ((*name).to_owned(), points)
            })
            .collect();
        let path = plots.join(format!("{}-pss-over-time.png", slug(panel)));
        crate::runner::plot::chart(&path, &title, "seconds", "PSS (MiB)", &curves, None)?;
        let png = relative(&path, dir);
        let _ = writeln!(out, "### {title}\n\n![{title}]({png})\n");
        out.push_str(
            "| series | workers | samples | timed phase from | peak PSS | PSS at the end |\n\
             |---|---|---|---|---|---|\n",
        );
        for (name, run) in &runs {
            let peak = run.samples.iter().map(|&(_, b)| b).fold(0.0, f64::max);
            let end = run.samples.last().map_or(0.0, |&(_, b)| b);
            let _ = writeln!(
                out,
                "| {name} | {} | {} | {} | {} | {} |",
                run.x,
                run.samples.len(),
                run.timed_from.map_or("—".into(), |t| format!("{t:.2} s")),
                human_bytes(peak as u64),
                human_bytes(end as u64)
            );
        }
        out.push('\n');
        entries.push(json!({
            "id": format!("{figure}/{}-pss-over-time", slug(panel)), "figure": figure,
            "panel": panel, "metric": "pss_over_time", "x_label": "seconds",
            "y_label": "PSS (MiB)", "png": png, "status": "ok", "reason": Value::Null,
            "series": runs.iter().map(|(name, run)| json!({
                "name": name, "workers": run.x,
                "x": run.samples.iter().map(|&(t, _)| (t * 100.0).round() / 100.0)
                    .collect::<Vec<_>>(),
                "status": if run.samples.len() >= 2 { "ok" } else { "missing" },
                "reason": (run.samples.len() < 2).then_some("fewer than 2 samples"),
            })).collect::<Vec<_>>(),
        }));
    }
    Ok((out, entries))
}
