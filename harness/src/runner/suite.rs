//! Experiment suites as data: a TOML file whose list-valued parameters are run as a
//! cartesian product, each point one `podkv` command (`ycsb`, `replay`, or `bench
//! threadtest|xmalloc|huge|mcas|recovery|frag`).
//!
//! ```toml
//! command = "ycsb"                       # or a list: ["bench threadtest", "bench xmalloc"]
//! figure = "fig8"                        # the paper figure it reproduces (optional)
//! json = "results/ycsb.ndjson"           # --json of every run (optional)
//! [params]
//! workload = ["cxlalloc-a", "cxlalloc-d"]  # a list: one dimension of the product
//! threads = "1..=cores"                   # a sweep up to this machine's CPUs (see below)
//! target = ["embedded", "mimalloc", "dashmap"]
//! no-pin = true                           # a boolean: a flag, given when true
//! [scale.quick]                           # `podkv suite FILE --scale quick`: these win
//! records = 100000
//! [scale.paper]
//! records = 8400000
//! ```
//!
//! Each parameter becomes `--name value` (`trace` is `podkv replay`'s positional
//! argument). Dimensions vary in alphabetical order of their names, the last fastest; the
//! command, when a list, is the outermost. A string `"A..=B"`, `"A..=cores"` or
//! `"A..=cores*K"` is a sweep of worker counts ([`sweep`]): every count up to 4, then
//! powers of two, then the bound; `cores` is the CPUs this process may use, and points past
//! it are marked `oversubscribed` in their records.
//!
//! Each point is announced on stderr with the time spent and an estimate of the time left
//! (the runner's own progress bar shows within a run, on a terminal only).
//!
//! A point that fails (a baseline that cannot span processes, a run that errs) does not
//! stop the suite: its reason is appended to the NDJSON as a record with `"status":
//! "skipped"`, so a report can say why a series is missing.

use super::cli;
use crate::bench;
use crate::process_stats::{self, RunContext};
use serde::Deserialize;
use std::path::Path;

/// The commands a suite may run.
const COMMANDS: [&str; 8] = [
    "ycsb",
    "replay",
    "bench threadtest",
    "bench xmalloc",
    "bench huge",
    "bench mcas",
    "bench recovery",
    "bench frag",
];

/// The scale a suite with `[scale.*]` tables runs at when none is asked for.
pub const SCALE_DEFAULT: &str = "quick";

/// A parsed suite file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Suite {
    /// One command, or a list of them (the outermost dimension).
    pub command: toml::Value,
    /// The paper figure the suite reproduces (`fig9`), written into every record.
    #[serde(default)]
    pub figure: Option<String>,
    /// NDJSON file every run appends to.
    #[serde(default)]
    pub json: Option<String>,
    /// Parameters: scalars, or lists to take the product of.
    pub params: toml::Table,
    /// Named scales: parameters that replace `params`' at that scale.
    #[serde(default)]
    pub scale: toml::Table,
}

/// One point of the product.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    /// `podkv` arguments (without the program name).
    pub argv: Vec<String>,
    /// The point's parameters (sweeps and lists resolved to one value each).
    pub params: Vec<(String, toml::Value)>,
    /// The command (`bench xmalloc`).
    pub command: String,
}

impl Suite {
    /// Reads a suite file.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read suite {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| anyhow::anyhow!("suite {}: {e}", path.display()))
    }

    /// Parses suite text.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let suite: Suite = toml::from_str(text)?;
        for command in suite.commands()? {
            anyhow::ensure!(
                COMMANDS.contains(&command.as_str()),
                "command must be one of {COMMANDS:?}, not {command:?}"
            );
        }
        for (name, table) in &suite.scale {
            anyhow::ensure!(table.is_table(), "scale.{name} must be a table");
        }
        Ok(suite)
    }

    /// The commands, in order.
    pub fn commands(&self) -> anyhow::Result<Vec<String>> {
        match &self.command {
            toml::Value::String(s) => Ok(vec![s.clone()]),
            toml::Value::Array(list) if !list.is_empty() => list
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| anyhow::anyhow!("command lists hold strings"))
                })
                .collect(),
            other => anyhow::bail!("command must be a string or a list of them, not {other}"),
        }
    }

    /// The parameters at `scale` (`None`: the default scale if the suite has scales).
    pub fn params_at(&self, scale: Option<&str>) -> anyhow::Result<toml::Table> {
        let mut params = self.params.clone();
        if self.scale.is_empty() {
            return Ok(params);
        }
        let name = scale.unwrap_or(SCALE_DEFAULT);
        let Some(toml::Value::Table(over)) = self.scale.get(name) else {
            anyhow::bail!(
                "no scale {name:?} (this suite has {:?})",
                self.scale.keys().collect::<Vec<_>>()
            );
        };
        params.extend(over.clone());
        Ok(params)
    }

    /// Every run of the product at the default scale, as `podkv` arguments.
    pub fn expand(&self) -> anyhow::Result<Vec<Vec<String>>> {
        Ok(self.points(None)?.into_iter().map(|p| p.argv).collect())
    }

    /// Every point of the product at `scale`.
    pub fn points(&self, scale: Option<&str>) -> anyhow::Result<Vec<Point>> {
        let params = self.params_at(scale)?;
        let mut runs: Vec<Vec<(String, toml::Value)>> = vec![Vec::new()];
        for (name, value) in &params {
            let choices = match value {
                toml::Value::Array(list) => list.clone(),
                toml::Value::String(s) if s.contains("..=") => sweep(s, process_stats::cores())
                    .map_err(|e| anyhow::anyhow!("parameter {name}: {e}"))?
                    .into_iter()
                    .map(|n| toml::Value::Integer(n as i64))
                    .collect(),
                scalar => vec![scalar.clone()],
            };
            anyhow::ensure!(!choices.is_empty(), "parameter {name} has an empty list");
            runs = runs
                .into_iter()
                .flat_map(|run| {
                    choices.iter().map(move |c| {
                        let mut run = run.clone();
                        run.push((name.clone(), c.clone()));
                        run
                    })
                })
                .collect();
        }
        let mut points = Vec::new();
        for command in self.commands()? {
            for run in &runs {
                points.push(Point {
                    argv: self.argv(&command, run, params.contains_key("json"))?,
                    params: run.clone(),
                    command: command.clone(),
                });
            }
        }
        Ok(points)
    }

    fn argv(
        &self,
        command: &str,
        run: &[(String, toml::Value)],
        has_json: bool,
    ) -> anyhow::Result<Vec<String>> {
        let mut argv: Vec<String> = command.split_whitespace().map(str::to_owned).collect();
        for (name, value) in run {
            let text = match value {
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Float(f) => f.to_string(),
                toml::Value::Boolean(true) => {
                    argv.push(format!("--{name}"));
                    continue;
                }
                toml::Value::Boolean(false) => continue,
                other => anyhow::bail!("parameter {name}: unsupported value {other}"),
            };
            if name == "trace" {
                argv.push(text);
            } else {
                argv.push(format!("--{name}"));
                argv.push(text);
            }
        }
        if let Some(json) = &self.json {
            if !has_json {
                argv.extend(["--json".into(), json.clone()]);
            }
        }
        Ok(argv)
    }
}

/// The worker counts of a sweep `"A..=B"`, `"A..=cores"` or `"A..=cores*K"` on a machine
/// of `cores` CPUs: every count from A up to 4, then powers of two, then B itself.
pub fn sweep(text: &str, cores: usize) -> anyhow::Result<Vec<usize>> {
    let bad = || anyhow::anyhow!("{text:?} is not a sweep (A..=B, A..=cores, A..=cores*K)");
    let (lo, hi) = text.split_once("..=").ok_or_else(bad)?;
    let lo: usize = lo.trim().parse().map_err(|_| bad())?;
    let hi = match hi.trim().strip_prefix("cores") {
        Some("") => cores,
        Some(times) => {
            let k: usize = times
                .trim()
                .strip_prefix('*')
                .and_then(|k| k.trim().parse().ok())
                .ok_or_else(bad)?;
            cores * k
        }
        None => hi.trim().parse().map_err(|_| bad())?,
    };
    anyhow::ensure!(lo >= 1 && lo <= hi, "{text:?}: need 1 <= A <= B");
    let mut points: Vec<usize> = (lo..=hi.min(4)).collect();
    let mut p = 8;
    while p < hi {
        if p >= lo {
            points.push(p);
        }
        p *= 2;
    }
    if !points.contains(&hi) {
        points.push(hi);
    }
    Ok(points)
}

/// `podkv suite FILE`: runs every point of the product in turn (or lists them).
pub fn run(c: &cli::SuiteCommand) -> anyhow::Result<()> {
    let path = &c.file;
    let mut suite = Suite::read(path)?;
    if let Some(json) = &c.json {
        suite.json = Some(json.display().to_string());
    }
    let points = suite.points(c.scale.as_deref())?;
    if let Some(json) = &suite.json {
        if let Some(dir) = Path::new(json)
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
        {
            std::fs::create_dir_all(dir)?;
        }
    }
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
    let mut skipped = 0;
    let started = std::time::Instant::now();
    for (i, point) in points.iter().enumerate() {
        let shown = process_stats::command_line(
            std::iter::once("podkv".to_owned()).chain(point.argv.iter().cloned()),
        );
        eprintln!(
            "[{}/{}{}] {shown}",
            i + 1,
            points.len(),
            eta(started, i, points.len())
        );
        if c.list {
            continue;
        }
        let context = RunContext {
            command: shown,
            suite: stem.clone(),
            figure: suite.figure.clone(),
        };
        let result = run_point(point, &context);
        if let Err(e) = result {
            skipped += 1;
            eprintln!("  skipped: {e:#}");
            if let Some(json) = &suite.json {
                let record = skipped_record(point, &context, &format!("{e:#}"));
                crate::helpers::append_ndjson(Path::new(json), &record)?;
            }
        }
    }
    if skipped > 0 {
        eprintln!(
            "{skipped} of {} points did not run (each reason is in the NDJSON as a skipped record)",
            points.len()
        );
    }
    Ok(())
}

/// `, 12 s, ~40 s left` after `done` of `all` points (nothing before the first finishes).
fn eta(started: std::time::Instant, done: usize, all: usize) -> String {
    if done == 0 {
        return String::new();
    }
    let spent = started.elapsed().as_secs_f64();
    let left = spent / done as f64 * (all - done) as f64;
    format!(", {spent:.0} s, ~{left:.0} s left")
}

/// Runs a point in a process of its own (this binary, with the point's arguments and the
/// suite's context in the environment): a single-process run measures the PSS of the process
/// it runs in, which would otherwise hold what earlier points' allocators kept. A failure's
/// reason is the last line the point wrote on stderr.
fn run_point(point: &Point, context: &RunContext) -> anyhow::Result<()> {
    <SuiteRun as clap::Parser>::try_parse_from(
        std::iter::once("podkv".to_owned()).chain(point.argv.iter().cloned()),
    )
    .map_err(|e| anyhow::anyhow!("{}", e.to_string().trim()))?;
    let out = std::process::Command::new(std::env::current_exe()?)
        .args(&point.argv)
        .env(process_stats::ENV_COMMAND, &context.command)
        .env(
            process_stats::ENV_SUITE,
            context.suite.as_deref().unwrap_or(""),
        )
        .env(
            process_stats::ENV_FIGURE,
            context.figure.as_deref().unwrap_or(""),
        )
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprint!("{stderr}");
    if out.status.success() {
        return Ok(());
    }
    let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
    anyhow::bail!(
        "{}",
        last.map_or(format!("the point failed: {}", out.status), |l| l
            .trim_start_matches("podkv: ")
            .to_owned())
    )
}

/// The record of a point that did not run: its parameters, the reason, and the context.
fn skipped_record(point: &Point, context: &RunContext, reason: &str) -> serde_json::Value {
    let mut record = serde_json::Map::new();
    for (name, value) in &point.params {
        let json = match value {
            toml::Value::String(s) => serde_json::json!(s),
            toml::Value::Integer(i) => serde_json::json!(i),
            toml::Value::Float(f) => serde_json::json!(f),
            toml::Value::Boolean(b) => serde_json::json!(b),
            other => serde_json::json!(other.to_string()),
        };
        record.insert(name.clone(), json);
    }
    let kind = match point.command.as_str() {
        "bench huge" => record
            .get("pattern")
            .and_then(|p| p.as_str())
            .unwrap_or("huge")
            .to_owned(),
        other => other.trim_start_matches("bench ").to_owned(),
    };
    if let Some(size) = record.get("size").and_then(|s| s.as_str()) {
        if let Ok(bytes) = crate::helpers::parse_bytes(size) {
            record.insert("size".into(), serde_json::json!(bytes));
        }
    }
    if point.command == "bench huge" && !record.contains_key("size") {
        record.insert("size".into(), serde_json::json!(1u64 << 30));
    }
    if let Some(trace) = record.remove("trace") {
        let name = trace.as_str().map_or_else(String::new, |t| {
            Path::new(t)
                .file_name()
                .map_or(t.to_owned(), |n| n.to_string_lossy().into_owned())
        });
        record.insert("workload".into(), serde_json::json!(name));
    }
    record.insert("kind".into(), serde_json::json!(kind));
    record.insert("status".into(), serde_json::json!("skipped"));
    record.insert("reason".into(), serde_json::json!(reason));
    record.insert("command".into(), serde_json::json!(context.command));
    record.insert("suite".into(), serde_json::json!(context.suite));
    record.insert("figure".into(), serde_json::json!(context.figure));
    record.insert(
        "git_commit".into(),
        serde_json::json!(process_stats::git_commit()),
    );
    serde_json::Value::Object(record)
}

/// One point of a suite as a `podkv` command line: the commands a suite runs, parsed with
/// the same flags as `podkv ycsb`, `podkv replay` and `podkv bench`.
#[derive(clap::Parser, Debug)]
#[command(name = "podkv")]
struct SuiteRun {
    #[command(subcommand)]
    command: SuiteCommand,
}

#[derive(clap::Subcommand, Debug)]
enum SuiteCommand {
    Ycsb(cli::YcsbCommand),
    Replay(cli::ReplayCommand),
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(clap::Subcommand, Debug)]
enum BenchCommand {
    Threadtest(bench::BenchArgs),
    Xmalloc(bench::BenchArgs),
    Huge(bench::huge::HugeArgs),
    Mcas(bench::mcas::BenchMcasArgs),
    Recovery(bench::recovery::RecoveryArgs),
    Frag(bench::frag::FragArgs),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_multiply_and_scalars_repeat() {
        let suite = Suite::parse(
            r#"
            command = "ycsb"
            json = "out.ndjson"
            [params]
            workload = ["a", "b"]
            threads = [1, 2, 4]
            records = 100
            no-pin = true
            dry-run = false
            "#,
        )
        .unwrap();
        let runs = suite.expand().unwrap();
        assert_eq!(runs.len(), 6);
        let joined: Vec<String> = runs.iter().map(|r| r.join(" ")).collect();
        for w in ["a", "b"] {
            for t in [1, 2, 4] {
                let (wl, th) = (format!("--workload {w} "), format!("--threads {t} "));
                let n = joined
                    .iter()
                    .filter(|j| j.contains(&wl) && j.contains(&th))
                    .count();
                assert_eq!(n, 1, "{joined:?}");
            }
        }
        assert!(joined.iter().all(|j| j.starts_with("ycsb ")
            && j.contains("--records 100")
            && j.contains("--no-pin")
            && !j.contains("dry-run")
            && j.ends_with("--json out.ndjson")));
    }

    #[test]
    fn bad_suites_are_refused() {
        assert!(Suite::parse("command = \"bench\"\n[params]\n").is_err());
        assert!(Suite::parse("command = \"bench nope\"\n[params]\n").is_err());
        assert!(Suite::parse("command = \"ycsb\"\n[params]\nthreads = []\n")
            .unwrap()
            .expand()
            .is_err());
        let replay = Suite::parse("command = \"replay\"\n[params]\ntrace = \"t.csv\"\n").unwrap();
        assert_eq!(replay.expand().unwrap(), [["replay", "t.csv"]]);
    }

    #[test]
    fn sweeps_reach_the_cores_and_beyond() {
        assert_eq!(sweep("1..=cores", 2).unwrap(), [1, 2]);
        assert_eq!(sweep("1..=cores*2", 2).unwrap(), [1, 2, 3, 4]);
        assert_eq!(
            sweep("1..=cores", 80).unwrap(),
            [1, 2, 3, 4, 8, 16, 32, 64, 80]
        );
        assert_eq!(sweep("2..=6", 1).unwrap(), [2, 3, 4, 6]);
        assert!(sweep("0..=4", 2).is_err());
        assert!(sweep("1..=many", 2).is_err());
    }

    #[test]
    fn scales_override_params_and_commands_multiply() {
        let suite = Suite::parse(
            r#"
            command = ["bench threadtest", "bench xmalloc"]
            figure = "fig9"
            [params]
            ops = 100
            threads = "2..=3"
            [scale.paper]
            ops = 9000
            "#,
        )
        .unwrap();
        assert!(suite.points(Some("huge")).is_err());
        let quick = suite.points(None);
        assert!(quick.is_err(), "a suite with scales has no quick one here");
        let paper = suite.points(Some("paper")).unwrap();
        let joined: Vec<String> = paper.iter().map(|p| p.argv.join(" ")).collect();
        assert_eq!(
            joined,
            [
                "bench threadtest --ops 9000 --threads 2",
                "bench threadtest --ops 9000 --threads 3",
                "bench xmalloc --ops 9000 --threads 2",
                "bench xmalloc --ops 9000 --threads 3",
            ]
        );
    }
}
