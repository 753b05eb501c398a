//! The dump format end to end: golden lines, read-modify-write halves, phase markers,
//! reproducibility by seed, and `dry_run` over property files.

use std::io::Write;

use clap::Parser;
use podkv_ycsb::dump::dump_phase;
use podkv_ycsb::{dry_run, OpStream, Phase, Properties, Workload, YcsbArgs};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    ycsb: YcsbArgs,
}

fn args(list: &[&str]) -> YcsbArgs {
    Cli::try_parse_from(std::iter::once("ycsb").chain(list.iter().copied()))
        .unwrap()
        .ycsb
}

fn workload(name: &str, extra: &str) -> Workload {
    let mut props = Properties::named(name).unwrap();
    props.merge_text("test", extra).unwrap();
    Workload::from_properties(&props).unwrap()
}

fn dump(w: &Workload, phase: Phase, threads: usize) -> String {
    let mut out = Vec::new();
    dump_phase(
        &mut out,
        phase,
        OpStream::streams(w, phase, threads).unwrap(),
        "memory",
    )
    .unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn load_phase_golden_ordered_and_hashed() {
    let ordered = workload("a", "recordcount=3\ninsertorder=ordered\nzeropadding=4");
    assert_eq!(
        dump(&ordered, Phase::Load, 1),
        "# phase load\ninsert user0000\ninsert user0001\ninsert user0002\n"
    );
    let hashed = workload("a", "recordcount=3");
    assert_eq!(
        dump(&hashed, Phase::Load, 2),
        "# phase load\ninsert user6284781860667377211\ninsert user8517097267634966620\ninsert user1820151046732198393\n"
    );
}

#[test]
fn read_modify_write_is_two_tagged_halves_on_one_key() {
    let w = workload("f", "recordcount=50\noperationcount=400");
    let text = dump(&w, Phase::Run, 1);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "# phase run");
    let mut rmw = 0;
    let mut i = 1;
    while i < lines.len() {
        if let Some(key) = lines[i]
            .strip_prefix("read ")
            .and_then(|l| l.strip_suffix(" rmw"))
        {
            assert_eq!(lines[i + 1], format!("update {key} rmw"));
            rmw += 1;
            i += 2;
        } else {
            let parts: Vec<&str> = lines[i].split(' ').collect();
            assert!(parts.len() == 2 && parts[0] == "read", "{}", lines[i]);
            i += 1;
        }
    }
    assert!(rmw > 150 && rmw < 250, "{rmw}");
}

#[test]
fn scans_and_deletes_have_their_shapes() {
    let e = dump(
        &workload("e", "recordcount=100\noperationcount=200"),
        Phase::Run,
        1,
    );
    for line in e.lines().skip(1) {
        let parts: Vec<&str> = line.split(' ').collect();
        match parts[0] {
            "scan" => assert!(
                parts.len() == 3 && parts[2].parse::<usize>().is_ok(),
                "{line}"
            ),
            "insert" => assert_eq!(parts.len(), 2),
            other => panic!("unexpected {other}"),
        }
    }
    let a = dump(
        &workload("cxlalloc-a", "recordcount=100\noperationcount=200"),
        Phase::Run,
        1,
    );
    let deletes: Vec<&str> = a.lines().filter(|l| l.starts_with("delete ")).collect();
    assert!(!deletes.is_empty());
    assert!(
        deletes.iter().all(|l| l.len() == "delete ".len() + 8),
        "8-byte keys"
    );
}

#[test]
fn same_seed_same_dump_other_seed_other_dump() {
    let base = "recordcount=200\noperationcount=2000";
    for name in ["a", "d", "e", "cxlalloc-a"] {
        let one = dump(
            &workload(name, &format!("{base}\npodkv.seed=5")),
            Phase::Run,
            3,
        );
        let two = dump(
            &workload(name, &format!("{base}\npodkv.seed=5")),
            Phase::Run,
            3,
        );
        let other = dump(
            &workload(name, &format!("{base}\npodkv.seed=6")),
            Phase::Run,
            3,
        );
        assert_eq!(one, two, "{name}");
        assert_ne!(one, other, "{name}");
    }
}

#[test]
fn dry_run_writes_the_dump_and_counts_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ops.txt");
    let a = args(&[
        "--workload",
        "f",
        "--records",
        "30",
        "--ops",
        "100",
        "--seed",
        "9",
        "--dump-ops",
        path.to_str().unwrap(),
    ]);
    let summary = dry_run(&a).unwrap();
    let load = summary.load.unwrap();
    let run = summary.run.unwrap();
    assert_eq!(load.insert, 30);
    assert_eq!(run.total(), 100);
    let text = std::fs::read_to_string(&path).unwrap();
    let lines = text.lines().count() as u64;
    assert_eq!(
        lines,
        2 + load.total() + run.total() + run.read_modify_write
    );
    assert_eq!(text.lines().next(), Some("# phase load"));
    assert!(text.contains("\n# phase run\n"));

    let only_run = dry_run(&args(&[
        "--workload",
        "f",
        "--records",
        "30",
        "--ops",
        "100",
        "--phase",
        "run",
    ]))
    .unwrap();
    assert!(only_run.load.is_none());
    assert_eq!(only_run.run.unwrap().total(), 100);
}

#[test]
fn property_files_layer_then_p_then_flags() {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first");
    let second = dir.path().join("second");
    std::fs::File::create(&first)
        .unwrap()
        .write_all(b"# base\nrecordcount=10\nreadproportion=1\nupdateproportion=0\nthreadcount=8\n")
        .unwrap();
    std::fs::File::create(&second)
        .unwrap()
        .write_all(b"recordcount=20\noperationcount=40\n")
        .unwrap();
    let a = args(&[
        "-P",
        first.to_str().unwrap(),
        "-P",
        second.to_str().unwrap(),
        "-p",
        "operationcount=50",
        "--ops",
        "60",
    ]);
    let summary = dry_run(&a).unwrap();
    assert_eq!(summary.workload, "core");
    assert_eq!(summary.load.unwrap().insert, 20);
    assert_eq!(summary.run.unwrap().read, 60);
    assert_eq!(summary.ignored_keys, ["threadcount"]);

    std::fs::write(&second, "requestdistribution=pareto\n").unwrap();
    let err = dry_run(&args(&["-P", second.to_str().unwrap()])).unwrap_err();
    assert!(err.to_string().contains("pareto"), "{err}");
    let err = dry_run(&args(&["-P", "/nonexistent/podkv"])).unwrap_err();
    assert!(err.to_string().contains("/nonexistent/podkv"), "{err}");
}
