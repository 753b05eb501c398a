//! `podkv plot RESULTS.ndjson -o OUT.svg|png`: throughput and memory against worker count,
//! one column of panels per workload, one line per target (or allocator), as in the
//! CXLALLOC paper's Figures 8–10.
//!
//! Reads any NDJSON the runner or `podkv bench` writes: `workload` (or the benchmark
//! `kind`), `target` (or `allocator`), `processes × threads`, `ops_per_sec`, `pss_bytes`.
//! Several records of one point (repeats) are drawn as their median. SVG needs no font;
//! PNG renders text with a TrueType font found on the system (DejaVu Sans, or the file
//! named by `PODKV_FONT`). [`chart`] draws one panel of `podkv report`.

use crate::helpers::median;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One series: workers → (ops/s, PSS bytes) of each repeat.
type Series = BTreeMap<u64, (Vec<f64>, Vec<f64>)>;

/// Every point: panel → series name → [`Series`].
type Points = BTreeMap<String, BTreeMap<String, Series>>;

/// Fonts tried for PNG output, in order.
const FONT_PATHS: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

/// Reads the records of `input` into points.
pub fn read_points(input: &Path) -> anyhow::Result<Points> {
    let text = std::fs::read_to_string(input)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", input.display()))?;
    let mut points = Points::new();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let v: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| anyhow::anyhow!("{}:{}: {e}", input.display(), n + 1))?;
        let s = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_owned);
        let u = |k: &str| v.get(k).and_then(|x| x.as_u64());
        let panel = s("workload")
            .or_else(|| s("kind"))
            .unwrap_or_else(|| "?".into());
        let series = s("target")
            .or_else(|| s("allocator"))
            .unwrap_or_else(|| "?".into());
        let workers = u("processes").unwrap_or(1) * u("threads").unwrap_or(1);
        let ops = v.get("ops_per_sec").and_then(|x| x.as_f64()).unwrap_or(0.0);
        let pss = u("pss_bytes").unwrap_or(0) as f64;
        let entry = points
            .entry(panel)
            .or_default()
            .entry(series)
            .or_default()
            .entry(workers)
            .or_default();
        entry.0.push(ops);
        entry.1.push(pss);
    }
    anyhow::ensure!(!points.is_empty(), "{} has no records", input.display());
    Ok(points)
}

/// Draws `input`'s records to `output` (`.svg` or `.png`).
pub fn plot(input: &Path, output: &Path) -> anyhow::Result<()> {
    let points = read_points(input)?;
    let size = (420 * points.len() as u32 + 40, 760);
    match output.extension().and_then(|e| e.to_str()) {
        Some("svg") => {
            register_font()?;
            let root = SVGBackend::new(output, size).into_drawing_area();
            draw(&root, &points)?;
            root.present()?;
        }
        Some("png") => {
            register_font()?;
            let root = BitMapBackend::new(output, size).into_drawing_area();
            draw(&root, &points)?;
            root.present()?;
        }
        _ => anyhow::bail!("{}: the output must end in .svg or .png", output.display()),
    }
    eprintln!("wrote {}", output.display());
    Ok(())
}

/// One curve of a [`chart`]: its name and (x, y) points, x ascending.
pub type Curve = (String, Vec<(f64, f64)>);

/// Draws one panel of the report as a PNG: `curves` against `x_label`, every point marked,
/// a legend; `oversubscribed_from` shades the x-values past the machine's CPUs.
pub fn chart(
    output: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    curves: &[Curve],
    oversubscribed_from: Option<f64>,
) -> anyhow::Result<()> {
    register_font()?;
    let root = BitMapBackend::new(output, (640, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let points = curves.iter().flat_map(|(_, p)| p.iter());
    let x_max = points.clone().map(|p| p.0).fold(1.0f64, f64::max);
    let y_max = points.map(|p| p.1).fold(0.0f64, f64::max).max(1e-9) * 1.15;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..x_max + 0.5, 0.0..y_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .x_label_formatter(&|x| {
            if x.fract() == 0.0 {
                format!("{x:.0}")
            } else {
                String::new()
            }
        })
        .draw()
        .map_err(err)?;
    if let Some(from) = oversubscribed_from.filter(|&f| f < x_max + 0.5) {
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(from, 0.0), (x_max + 0.5, y_max)],
                RGBColor(200, 200, 200).mix(0.4).filled(),
            )))
            .map_err(err)?;
    }
    for (index, (name, line)) in curves.iter().enumerate() {
        let color = Palette99::pick(index).to_rgba();
        chart
            .draw_series(LineSeries::new(line.clone(), color.stroke_width(2)))
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
        chart
            .draw_series(line.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(err)?;
    }
    if !curves.is_empty() {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
    }
    root.present()?;
    Ok(())
}

/// Registers a TrueType font as `sans-serif` (text layout needs one, also for SVG).
fn register_font() -> anyhow::Result<()> {
    static DONE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let found = *DONE.get_or_init(|| {
        let candidates = std::env::var_os("PODKV_FONT")
            .map(PathBuf::from)
            .into_iter()
            .chain(FONT_PATHS.iter().map(PathBuf::from));
        for path in candidates {
            if let Ok(bytes) = std::fs::read(&path) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return true;
                }
            }
        }
        false
    });
    anyhow::ensure!(
        found,
        "no TrueType font found for text (tried $PODKV_FONT and {}): install fonts-dejavu-core",
        FONT_PATHS.join(", ")
    );
    Ok(())
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, points: &Points) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(err)?;
    let columns = root.split_evenly((2, points.len()));
    let (rows_top, rows_bottom) = columns.split_at(points.len());
    let series_names: Vec<&String> = {
        let mut all: Vec<&String> = points.values().flat_map(|s| s.keys()).collect();
        all.sort();
        all.dedup();
        all
    };
    for (i, (panel, series)) in points.iter().enumerate() {
        draw_panel(&rows_top[i], panel, series, &series_names, "Mops/s", |v| {
            median(&mut v.0.clone()) / 1e6
        })?;
        draw_panel(
            &rows_bottom[i],
            panel,
            series,
            &series_names,
            "PSS (MiB)",
            |v| median(&mut v.1.clone()) / (1024.0 * 1024.0),
        )?;
    }
    Ok(())
}

fn err<E: std::error::Error + Send + Sync + 'static>(e: DrawingAreaErrorKind<E>) -> anyhow::Error {
    anyhow::anyhow!("plot: {e}")
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &str,
    series: &BTreeMap<String, Series>,
    names: &[&String],
    y_label: &str,
    value: impl Fn(&(Vec<f64>, Vec<f64>)) -> f64,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let x_max = series
        .values()
        .flat_map(|p| p.keys())
        .copied()
        .max()
        .unwrap_or(1);
    let y_max = series
        .values()
        .flat_map(|p| p.values().map(&value))
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption(panel, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(0u64..x_max + 1, 0.0..y_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("workers (processes × threads)")
        .y_desc(y_label)
        .draw()
        .map_err(err)?;
    for (name, points) in series {
        let index = names.iter().position(|n| *n == name).unwrap_or(0);
        let color = Palette99::pick(index).to_rgba();
        let line: Vec<(u64, f64)> = points.iter().map(|(&x, v)| (x, value(v))).collect();
        chart
            .draw_series(LineSeries::new(line.clone(), color.stroke_width(2)))
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
        chart
            .draw_series(line.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    Ok(())
}
