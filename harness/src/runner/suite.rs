//! Experiment suites as data: a TOML file whose list-valued parameters are run as a
//! cartesian product, each point one `podkv ycsb` or `podkv replay` command.
//!
//! ```toml
//! command = "ycsb"                       # or "replay"
//! json = "results/ycsb.ndjson"           # --json of every run (optional)
//! [params]
//! workload = ["cxlalloc-a", "cxlalloc-d"]  # a list: one dimension of the product
//! threads = [1, 2, 4]
//! target = ["dashmap", "null"]
//! records = 100000                        # a scalar: the same in every run
//! no-pin = true                           # a boolean: a flag, given when true
//! ```
//!
//! Each parameter becomes `--name value` (`trace` is `podkv replay`'s positional
//! argument). Dimensions vary in alphabetical order of their names, the last fastest.

use super::cli;
use serde::Deserialize;
use std::path::Path;

/// A parsed suite file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Suite {
    /// `ycsb` or `replay`.
    pub command: String,
    /// NDJSON file every run appends to.
    #[serde(default)]
    pub json: Option<String>,
    /// Parameters: scalars, or lists to take the product of.
    pub params: toml::Table,
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
        anyhow::ensure!(
            matches!(suite.command.as_str(), "ycsb" | "replay"),
            "command must be \"ycsb\" or \"replay\", not {:?}",
            suite.command
        );
        Ok(suite)
    }

    /// Every run of the product, as `podkv` arguments (without the program name).
    pub fn expand(&self) -> anyhow::Result<Vec<Vec<String>>> {
        let mut runs: Vec<Vec<(String, toml::Value)>> = vec![Vec::new()];
        for (name, value) in &self.params {
            let choices = match value {
                toml::Value::Array(list) => list.clone(),
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
        runs.iter().map(|run| self.argv(run)).collect()
    }

    fn argv(&self, run: &[(String, toml::Value)]) -> anyhow::Result<Vec<String>> {
        let mut argv = vec![self.command.clone()];
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
            if !self.params.contains_key("json") {
                argv.extend(["--json".into(), json.clone()]);
            }
        }
        Ok(argv)
    }
}

/// `podkv suite FILE`: runs every point of the product in turn (or lists them).
pub fn run(path: &Path, list_only: bool) -> anyhow::Result<()> {
    let suite = Suite::read(path)?;
    let runs = suite.expand()?;
    if let Some(json) = &suite.json {
        if let Some(dir) = Path::new(json)
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
        {
            std::fs::create_dir_all(dir)?;
        }
    }
    for (i, argv) in runs.iter().enumerate() {
        eprintln!("[{}/{}] podkv {}", i + 1, runs.len(), argv.join(" "));
        if list_only {
            continue;
        }
        let run = <SuiteRun as clap::Parser>::try_parse_from(
            std::iter::once("podkv".to_owned()).chain(argv.iter().cloned()),
        )
        .map_err(|e| anyhow::anyhow!("run {} of {}: {e}", i + 1, path.display()))?;
        match run.command {
            SuiteCommand::Ycsb(c) => cli::ycsb(&c)?,
            SuiteCommand::Replay(c) => cli::replay(&c)?,
        }
    }
    Ok(())
}

/// One point of a suite as a `podkv` command line: the two commands a suite runs, parsed
/// with the same flags as `podkv ycsb` and `podkv replay`.
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
        assert!(Suite::parse("command = \"ycsb\"\n[params]\nthreads = []\n")
            .unwrap()
            .expand()
            .is_err());
        let replay = Suite::parse("command = \"replay\"\n[params]\ntrace = \"t.csv\"\n").unwrap();
        assert_eq!(replay.expand().unwrap(), [["replay", "t.csv"]]);
    }
}
