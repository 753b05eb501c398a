//! Generated traces against the published table, and determinism by seed.
//!
//! Tolerances (absolute unless marked), for 200 000 requests per cluster:
//!
//! | metric | tolerance | why |
//! | --- | --- | --- |
//! | op share | 0.01 | binomial noise is ~0.001 at this size |
//! | mean key size | 3 % relative | uniform `mean ± mean/8` per key |
//! | mean value size | 5 % relative | log-normal `σ = 1` per key, request-weighted: hot keys add noise |
//! | one-hit-wonder ratio | 0.005 | counts are planned exactly; only rounding |
//! | compulsory miss ratio | 0.005 | idem |
//! | mean freq | 0.05 | the table rounds it to one decimal |
//! | Zipf alpha | 0.02 | fitted by the generator to the same estimator; cluster 31 publishes none |
//! | each published TTL share | 0.005 | per-key draws |

use std::path::Path;

use podkv_traces::cluster::cluster;
use podkv_traces::file;
use podkv_traces::{generate, stats, Record, StatsOptions};

const OPS: u64 = 200_000;

fn check_cluster(n: u32, extension: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("cluster{n}.{extension}"));
    assert_eq!(generate(n, OPS, 42, &path).unwrap(), OPS);
    let s = stats(&path, StatsOptions::default()).unwrap();
    let row = cluster(n).unwrap();
    assert_eq!(s.requests, OPS);
    let mut failures = Vec::new();
    for d in row.compare(&s) {
        let tolerance = match d.metric.as_str() {
            m if m.starts_with("op:") => 0.01,
            "key size" => 0.03 * d.published,
            "value size" => 0.05 * d.published,
            "one-hit-wonder ratio" | "compulsory miss ratio" => 0.005,
            "mean freq" => 0.05,
            "Zipf alpha" => 0.02,
            m if m.starts_with("ttl:") => 0.005,
            other => panic!("no tolerance for {other}"),
        };
        let ok = (d.measured - d.published).abs() <= tolerance;
        eprintln!(
            "cluster{n} {:<24} published {:>10.4} measured {:>10.4} tol {:.4} {}",
            d.metric,
            d.published,
            d.measured,
            tolerance,
            if ok { "ok" } else { "FAIL" }
        );
        if !ok {
            failures.push(d.metric);
        }
    }
    assert!(
        failures.is_empty(),
        "cluster{n}: {failures:?} out of tolerance"
    );
}

#[test]
fn cluster12_matches_the_table() {
    check_cluster(12, "parquet");
}

#[test]
fn cluster15_matches_the_table() {
    check_cluster(15, "csv.zst");
}

#[test]
fn cluster31_matches_the_table() {
    check_cluster(31, "csv");
}

#[test]
fn cluster37_matches_the_table() {
    check_cluster(37, "parquet");
}

fn records(path: &Path) -> Vec<Record> {
    file::open(path).unwrap().map(Result::unwrap).collect()
}

#[test]
fn a_seed_fixes_the_trace() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.csv");
    let b = dir.path().join("b.csv");
    let c = dir.path().join("c.csv");
    generate(37, 20_000, 7, &a).unwrap();
    generate(37, 20_000, 7, &b).unwrap();
    generate(37, 20_000, 8, &c).unwrap();
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    let (ra, rc) = (records(&a), records(&c));
    assert_eq!(ra.len(), rc.len());
    assert_ne!(ra, rc);
    // The format does not change the trace.
    let p = dir.path().join("a.parquet");
    generate(37, 20_000, 7, &p).unwrap();
    assert_eq!(records(&p), ra);
}

#[test]
fn generated_keys_are_consistent_per_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.csv");
    generate(12, 20_000, 1, &path).unwrap();
    let mut seen = std::collections::HashMap::new();
    let mut last_timestamp = 0;
    for r in records(&path) {
        assert_eq!(r.key.len() as u32, r.key_size);
        assert!(r.timestamp >= last_timestamp);
        last_timestamp = r.timestamp;
        assert_eq!(r.ttl != 0, r.op.stores_value(), "{r:?}");
        let sizes = *seen
            .entry(r.key.clone())
            .or_insert((r.key_size, r.value_size));
        assert_eq!(
            sizes,
            (r.key_size, r.value_size),
            "sizes change for {}",
            r.key
        );
    }
}

#[test]
fn unusable_clusters_and_sizes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.csv");
    let e = generate(5, 10, 0, &path).unwrap_err().to_string();
    assert!(e.contains("cluster 5"), "{e}");
    assert!(generate(99, 10, 0, &path).is_err());
    assert!(generate(12, u64::from(u32::MAX) + 1, 0, &path).is_err());
}
