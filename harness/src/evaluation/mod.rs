//! `podkv report RESULTS.ndjson… -o docs/results/`: the CXLALLOC paper's evaluation from
//! podkv's records — one Markdown page per figure (Figs. 8–12, the server rows, NVAlloc's
//! Fragbench) and one of tables, one PNG per
//! panel and metric, and `manifest.json` listing every panel, series and x-value. A curve a
//! reader expects but the records lack is listed with the reason its records give (a point
//! a suite skipped, a run that timed out), or with none when nothing says why.
//!
//! # Map
//! - [`rows`]: each NDJSON record placed at (figure, panel, series, x);
//! - [`figures`]: the figures' panels, axes and expected curves;
//! - [`paper`]: the paper's published ratios (with sections) beside ours; [`why`]: one
//!   line per figure on where we stand and which measured quantity explains it;
//! - [`page`]: the Markdown pages and the manifest; [`timeline`]: memory over time;
//!   [`fragbench`]: the Fragbench page's occupancy census and morphing ratios.

pub mod figures;
pub mod fragbench;
pub mod page;
pub mod paper;
pub mod rows;
pub mod timeline;
pub mod why;

use std::path::{Path, PathBuf};

/// `podkv report`.
#[derive(clap::Args, Clone, Debug)]
pub struct ReportCommand {
    /// NDJSON records (from `podkv suite`, `ycsb`, `replay`, `bench … --json`).
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// The directory to write the pages, plots and manifest.json into.
    #[arg(short, long, value_name = "DIR")]
    pub output: PathBuf,
}

/// Runs `podkv report`.
pub fn run(c: &ReportCommand) -> anyhow::Result<()> {
    let rows = rows::read(&c.inputs)?;
    anyhow::ensure!(!rows.is_empty(), "no records in the inputs");
    std::fs::create_dir_all(&c.output)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", c.output.display()))?;
    let context = page::Context::now(&rows);
    let manifest = page::write_all(&c.output, &rows, &context)?;
    let path = c.output.join("manifest.json");
    std::fs::write(&path, serde_json::to_string_pretty(&manifest)? + "\n")?;
    eprintln!(
        "wrote {} pages and {} ({} panels)",
        figures::FIGURES.len() + 1,
        path.display(),
        manifest["panels"].as_array().map_or(0, Vec::len)
    );
    Ok(())
}

/// A file name for a panel's plot: lower case, words joined by `-`.
pub fn slug(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_owned()
}

/// The path of `file` relative to the output directory, for links.
fn relative(file: &Path, dir: &Path) -> String {
    file.strip_prefix(dir).unwrap_or(file).display().to_string()
}
