//! The `podkv trace …` arguments, mounted the way the server mounts them.

use clap::{CommandFactory, Parser};
use podkv_traces::{run_convert, run_generate, run_stats, TraceCommand};

#[derive(Debug, Parser)]
#[command(name = "podkv")]
enum Podkv {
    /// Trace tools.
    #[command(subcommand)]
    Trace(TraceCommand),
}

fn parse(args: &[&str]) -> TraceCommand {
    let Podkv::Trace(cmd) = Podkv::try_parse_from(args).unwrap();
    cmd
}

#[test]
fn the_argument_definitions_are_consistent_and_documented() {
    Podkv::command().debug_assert();
    let mut cmd = Podkv::command();
    let help = cmd
        .find_subcommand_mut("trace")
        .and_then(|t| t.find_subcommand_mut("generate"))
        .unwrap()
        .render_long_help()
        .to_string();
    assert!(help.contains("--cluster"), "{help}");
    assert!(help.contains("same seed"), "{help}");
}

#[test]
fn generate_stats_and_convert_run_from_their_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("g.csv").display().to_string();
    let parquet = dir.path().join("g.parquet").display().to_string();

    let TraceCommand::Generate(g) = parse(&[
        "podkv",
        "trace",
        "generate",
        "--cluster",
        "31",
        "--ops",
        "5000",
        "--seed",
        "9",
        &csv,
    ]) else {
        panic!("not generate")
    };
    assert_eq!((g.cluster, g.ops, g.seed), (31, 5000, 9));
    assert_eq!(run_generate(g).unwrap().requests, 5000);

    let TraceCommand::Convert(c) = parse(&["podkv", "trace", "convert", &csv, &parquet]) else {
        panic!("not convert")
    };
    assert_eq!(run_convert(c).unwrap().records, 5000);

    let TraceCommand::Stats(s) = parse(&[
        "podkv",
        "trace",
        "stats",
        &parquet,
        "--json",
        "--compare",
        "31",
    ]) else {
        panic!("not stats")
    };
    let report = run_stats(s).unwrap();
    assert_eq!(report.stats.requests, 5000);
    assert!(report
        .published
        .unwrap()
        .iter()
        .any(|d| d.metric == "op:set"));
}

#[test]
fn bad_arguments_are_refused_by_the_parser() {
    assert!(Podkv::try_parse_from(["podkv", "trace", "generate", "--ops", "5", "o.csv"]).is_err());
    assert!(Podkv::try_parse_from(["podkv", "trace", "stats", "f.csv", "--window", "0"]).is_err());
}

#[test]
fn bad_lines_can_be_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("bad.csv");
    std::fs::write(
        &csv,
        "1,k,3,4,5,get,0\n2,k,3,4,5,nope,0\n3,k,3,4,5,set,60\n",
    )
    .unwrap();
    let path = csv.display().to_string();
    let TraceCommand::Stats(s) = parse(&["podkv", "trace", "stats", &path]) else {
        panic!()
    };
    assert!(run_stats(s).is_err());
    let TraceCommand::Stats(s) = parse(&["podkv", "trace", "stats", &path, "--skip-bad-lines"])
    else {
        panic!()
    };
    let report = run_stats(s).unwrap();
    assert_eq!((report.stats.requests, report.skipped_lines), (2, 1));
}
