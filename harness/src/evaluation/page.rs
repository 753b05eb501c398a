//! The report's files: a Markdown page per figure with its plots, a page of tables, an
//! index, and the manifest (every panel, series and x-value, and why a missing one is).

use super::figures::{self, Curve, Figure, Panels};
use super::paper::{self, Comparison};
use super::rows::Row;
use super::{relative, slug};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

/// What every page says about where and how it was made.
pub struct Context {
    /// CPU model, CPUs, memory, kernel.
    pub machine: String,
    /// When the report was made (UTC).
    pub date: String,
    /// The commits of the binaries that made the records.
    pub commits: BTreeSet<String>,
    /// The report's own command line.
    pub command: String,
}

impl Context {
    /// The context of a report made now from `rows`.
    pub fn now(rows: &[Row]) -> Self {
        Self {
            machine: machine(),
            date: utc_now(),
            commits: rows.iter().filter_map(|r| r.commit.clone()).collect(),
            command: crate::process_stats::command_line(std::env::args()),
        }
    }

    fn header(&self, out: &mut String) {
        let commits: Vec<&str> = self.commits.iter().map(String::as_str).collect();
        let _ = writeln!(out, "| | |\n| --- | --- |");
        let _ = writeln!(out, "| machine | {} |", self.machine);
        let _ = writeln!(out, "| date | {} |", self.date);
        let _ = writeln!(out, "| git commit | {} |", commits.join(", "));
        let _ = writeln!(out, "| report command | `{}` |\n", self.command);
    }
}

fn machine() -> String {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_else(|| "unknown CPU".into());
    let mem_kb: u64 = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|l| l.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    format!(
        "{cpu}, {} CPUs available, {} memory, Linux {}",
        crate::process_stats::cores(),
        crate::helpers::human_bytes(mem_kb * 1024),
        read("/proc/sys/kernel/osrelease").trim()
    )
}

fn utc_now() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// Writes every page and plot under `dir`; returns the manifest.
pub fn write_all(dir: &Path, rows: &[Row], context: &Context) -> anyhow::Result<Value> {
    let mut index = String::from("# podkv against the CXLALLOC paper's evaluation\n\n");
    context.header(&mut index);
    let mut manifest_figures = Vec::new();
    let mut manifest_panels = Vec::new();
    let mut all_panels = Vec::new();
    for figure in &figures::FIGURES {
        let panels = figures::panels(figure, rows);
        let comparisons = paper::comparisons(figure.id, &panels);
        let why = super::why::why(figure.id, &panels, &comparisons);
        let (page, entries) = figure_page(dir, figure, &panels, &comparisons, &why, rows, context)?;
        let name = format!("{}.md", figure.id);
        std::fs::write(dir.join(&name), page)?;
        let _ = writeln!(index, "- [{}]({name}): {why}", figure.title);
        manifest_figures.push(json!({
            "id": figure.id, "title": figure.title, "page": name, "why": why,
            "comparisons": comparisons.iter().map(comparison_json).collect::<Vec<_>>(),
        }));
        manifest_panels.extend(entries);
        all_panels.push((figure.id, panels));
    }
    let (tables_page, tables) = tables(&all_panels, rows, context);
    std::fs::write(dir.join("tables.md"), tables_page)?;
    let _ = writeln!(
        index,
        "- [Tables: HWcc share, the cost of recoverability, recovery time](tables.md)"
    );
    std::fs::write(dir.join("README.md"), index)?;
    Ok(json!({
        "date": context.date, "machine": context.machine, "command": context.command,
        "commits": context.commits, "figures": manifest_figures, "panels": manifest_panels,
        "tables": tables,
    }))
}

fn comparison_json(c: &Comparison) -> Value {
    json!({"what": c.what, "paper": c.paper, "section": c.section, "ours": c.ours,
           "verdict": c.verdict()})
}

#[allow(clippy::too_many_arguments)]
fn figure_page(
    dir: &Path,
    figure: &Figure,
    panels: &Panels,
    comparisons: &[Comparison],
    why: &str,
    rows: &[Row],
    context: &Context,
) -> anyhow::Result<(String, Vec<Value>)> {
    let mut out = format!("# {}\n\n{}\n\n", figure.title, figure.about);
    context.header(&mut out);
    out.push_str(
        "## Against the paper\n\n| comparison | paper | ours | |\n| --- | --- | --- | --- |\n",
    );
    for c in comparisons {
        let ours = c.ours.map_or("—".into(), |o| format!("{o:.3}"));
        let _ = writeln!(
            out,
            "| {} | {:.3} ({}) | {ours} | {} |",
            c.what,
            c.paper,
            c.section,
            c.verdict()
        );
    }
    let _ = writeln!(out, "\n**Where we stand:** {why}\n\n## Panels\n");
    let plots = dir.join(figure.id);
    std::fs::create_dir_all(&plots)?;
    let mut entries = Vec::new();
    for (panel, curves) in panels {
        let synthetic = curves.values().any(|c| c.synthetic);
        let title = if synthetic {
            format!("{panel} (synthetic trace)")
        } else {
            panel.clone()
        };
        let _ = writeln!(out, "### {title}\n");
        for metric in figure.metrics {
            let entry = panel_plot(dir, &plots, figure, &title, curves, metric)?;
            if let Some(png) = entry["png"].as_str() {
                let _ = writeln!(out, "![{title}: {}]({png})\n", metric.label);
            }
            values_table(&mut out, curves, metric, &entry);
            entries.push(entry);
        }
    }
    if figure.id == "fragbench" {
        out.push_str(&super::fragbench::section(panels));
    }
    let (memory, memory_entries) = super::timeline::section(dir, &plots, figure.id, rows)?;
    out.push_str(&memory);
    entries.extend(memory_entries);
    out.push_str("## Commands\n\nEvery command whose records are on this page:\n\n```\n");
    let commands: BTreeSet<&str> = rows
        .iter()
        .filter(|r| r.place.figure == figure.id)
        .filter_map(|r| r.command.as_deref())
        .collect();
    for c in commands {
        let _ = writeln!(out, "{c}");
    }
    out.push_str("```\n");
    Ok((out, entries))
}

/// Draws one panel's metric (if any curve has a point) and returns its manifest entry.
fn panel_plot(
    dir: &Path,
    plots: &Path,
    figure: &Figure,
    title: &str,
    curves: &std::collections::BTreeMap<String, Curve>,
    metric: &figures::Metric,
) -> anyhow::Result<Value> {
    let mut series = Vec::new();
    let mut drawn = Vec::new();
    let mut over_from: Option<u64> = None;
    for (name, curve) in curves {
        let line = curve.line(metric.key);
        let xs: Vec<u64> = line.iter().map(|&(x, _)| x).collect();
        if let Some(&x) = curve.oversubscribed.iter().next() {
            over_from = Some(over_from.map_or(x, |o| o.min(x)));
        }
        let ok = xs.len() >= 2;
        series.push(json!({
            "name": name, "x": xs, "status": if ok { "ok" } else { "missing" },
            "reason": if ok { None } else { curve.reason() },
            "oversubscribed_x": curve.oversubscribed,
            "skipped_x": curve.reasons.keys().collect::<Vec<_>>(),
        }));
        if !line.is_empty() {
            let points = line
                .iter()
                .map(|&(x, y)| (x as f64, y / metric.scale))
                .collect();
            drawn.push((name.clone(), points));
        }
    }
    let id = format!("{}/{}-{}", figure.id, slug(title), metric.key);
    let reasons: BTreeSet<String> = curves.values().filter_map(Curve::reason).collect();
    let png = if drawn.is_empty() {
        None
    } else {
        let path = plots.join(format!("{}-{}.png", slug(title), metric.key));
        crate::runner::plot::chart(
            &path,
            &format!("{title}: {}", metric.label),
            figure.x_label,
            metric.label,
            &drawn,
            over_from.map(|x| x as f64 - 0.5),
        )?;
        Some(relative(&path, dir))
    };
    let reason = png.is_none().then(|| {
        if reasons.is_empty() {
            Value::Null
        } else {
            json!(reasons.into_iter().collect::<Vec<_>>().join("; "))
        }
    });
    Ok(json!({
        "id": id, "figure": figure.id, "panel": title, "metric": metric.key,
        "x_label": figure.x_label, "y_label": metric.label, "png": png,
        "status": if png.is_some() { "ok" } else { "missing" }, "reason": reason,
        "series": series,
    }))
}

/// The panel's numbers under its plot: one row per series, one column per x (`*`: past the
/// machine's CPUs); a missing series says why.
fn values_table(
    out: &mut String,
    curves: &std::collections::BTreeMap<String, Curve>,
    metric: &figures::Metric,
    entry: &Value,
) {
    let xs: BTreeSet<u64> = curves
        .values()
        .flat_map(|c| c.line(metric.key).into_iter().map(|(x, _)| x))
        .collect();
    let over: BTreeSet<u64> = curves
        .values()
        .flat_map(|c| c.oversubscribed.clone())
        .collect();
    let _ = write!(out, "| {} |", metric.label);
    for x in &xs {
        let _ = write!(out, " {x}{} |", if over.contains(x) { "*" } else { "" });
    }
    let _ = writeln!(out, "\n|---|{}", "---|".repeat(xs.len()));
    for (name, curve) in curves {
        let line = curve.line(metric.key);
        let _ = write!(out, "| {name} |");
        for x in &xs {
            let cell = line
                .iter()
                .find(|(lx, _)| lx == x)
                .map_or("—".into(), |(_, y)| format!("{:.3}", y / metric.scale));
            let _ = write!(out, " {cell} |");
        }
        out.push('\n');
    }
    let missing: Vec<String> = entry["series"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["status"] == "missing")
        .map(|s| {
            format!(
                "- {} is missing: {}",
                s["name"].as_str().unwrap_or("?"),
                s["reason"]
                    .as_str()
                    .unwrap_or("no record says why (not run)")
            )
        })
        .collect();
    let _ = writeln!(
        out,
        "\n{}{}\n",
        if over.is_empty() {
            ""
        } else {
            "`*`: more workers than CPUs (oversubscribed).\n"
        },
        missing.join("\n")
    );
}

/// A row of the tables page: measure, where, the paper's value (NaN: none stated), its
/// section, ours, and why ours is missing when the report knows.
type TableRow = (
    &'static str,
    String,
    f64,
    &'static str,
    Option<f64>,
    Option<&'static str>,
);

/// The recovery-time rows: the median time per count of killed live slots
/// (`podkv bench recovery` records), or one row saying none was measured.
fn recovery_rows(rows: &[Row]) -> Vec<TableRow> {
    let mut by_slots: std::collections::BTreeMap<u64, Vec<f64>> = Default::default();
    for row in rows.iter().filter(|r| r.place.figure == "tables") {
        if let Some(&ms) = row.values.get("recovery_ms") {
            by_slots.entry(row.place.x).or_default().push(ms);
        }
    }
    const MEASURE: &str = "recovery time, ms (median): open the store, settle the dead slots";
    const SECTION: &str = "§5.2.1 (Fig. 7, no number in the text)";
    if by_slots.is_empty() {
        return vec![(
            MEASURE,
            "after a writer's kill -9".into(),
            f64::NAN,
            SECTION,
            None,
            Some("no `podkv bench recovery` records (eval/tables-recovery.toml)"),
        )];
    }
    by_slots
        .into_iter()
        .map(|(slots, mut ms)| {
            let n = ms.len();
            (
                MEASURE,
                format!("kill -9 of a writer with {slots} live slots ({n} runs)"),
                f64::NAN,
                SECTION,
                Some(crate::helpers::median(&mut ms)),
                None,
            )
        })
        .collect()
}

/// The tables page: HWcc share, the cost of recoverability, recovery time.
fn tables(panels: &[(&str, Panels)], records: &[Row], context: &Context) -> (String, Value) {
    let of = |id: &str| panels.iter().find(|(f, _)| *f == id).map(|(_, p)| p);
    let fig8 = of("fig8");
    let fig9 = of("fig9");
    let threads = |kind: &'static str| move |p: &str| p.starts_with(kind) && p.ends_with("threads");
    let hwcc = |p: Option<&Panels>, series: &str, kind: Option<&'static str>| {
        p.and_then(|p| {
            paper::hwcc_share(p, series, |name| kind.is_none_or(|k| name.starts_with(k)))
        })
    };
    let recover = |kind: &'static str| {
        fig9.and_then(|p| {
            let on = p
                .iter()
                .filter(|(n, _)| threads(kind)(n))
                .flat_map(|(_, c)| c.get("podkv"));
            let off: Vec<&Curve> = p
                .iter()
                .filter(|(n, _)| threads(kind)(n))
                .filter_map(|(_, c)| c.get("podkv-nonrecoverable"))
                .collect();
            let mut ratios = Vec::new();
            for (a, b) in on.zip(off) {
                let lb = b.line("throughput");
                for (x, va) in a.line("throughput") {
                    if let Some(&(_, vb)) = lb.iter().find(|(xb, _)| *xb == x) {
                        ratios.push(va / vb);
                    }
                }
            }
            (!ratios.is_empty()).then(|| ratios.iter().sum::<f64>() / ratios.len() as f64)
        })
    };
    #[rustfmt::skip]
    let mut rows: Vec<TableRow> = vec![
        ("HWcc share of PSS", "key-value store (podkv embedded)".into(), 0.0002, "§5.2.1", hwcc(fig8, "embedded", None), None),
        ("HWcc share of PSS", "thread-test (podkv)".into(), 0.025, "§5.2.2", hwcc(fig9, "podkv", Some("threadtest")), None),
        ("HWcc share of PSS", "xmalloc (podkv)".into(), 0.0009, "§5.2.2", hwcc(fig9, "podkv", Some("xmalloc")), None),
        ("recoverable / non-recoverable throughput", "thread-test".into(), 0.947, "§5.2.2", recover("threadtest"), None),
        ("recoverable / non-recoverable throughput", "xmalloc".into(), 0.884, "§5.2.2", recover("xmalloc"), None),
        ("recoverable / non-recoverable throughput", "key-value store".into(), 0.997, "§5.2.1", None,
         Some("the store has no non-recoverable mode to run against")),
    ];
    rows.extend(recovery_rows(records));
    let mut out =
        String::from("# Tables: HWcc share, the cost of recoverability, recovery time\n\n");
    context.header(&mut out);
    out.push_str("| measure | where | paper | ours |\n| --- | --- | --- | --- |\n");
    let mut entries = Vec::new();
    for (measure, place, paper_value, section, ours, why) in rows {
        let paper_cell = if paper_value.is_nan() {
            format!("— ({section})")
        } else {
            format!("{paper_value} ({section})")
        };
        let reason = match (ours, why) {
            (Some(_), _) => None,
            (None, Some(w)) => Some(w.to_owned()),
            (None, None) => None,
        };
        let ours_cell = ours.map_or_else(
            || {
                format!(
                    "missing: {}",
                    reason.clone().unwrap_or_else(|| "no records".into())
                )
            },
            |o| format!("{o:.4}"),
        );
        let _ = writeln!(out, "| {measure} | {place} | {paper_cell} | {ours_cell} |");
        entries.push(
            json!({"measure": measure, "where": place, "section": section,
            "paper": (!paper_value.is_nan()).then_some(paper_value), "ours": ours,
            "status": if ours.is_some() { "ok" } else { "missing" }, "reason": reason}),
        );
    }
    (out, Value::Array(entries))
}
