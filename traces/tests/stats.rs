//! `stats` on a hand-made trace whose answers are worked out by hand.

use podkv_traces::{stats, Op, StatsOptions};

/// Six requests over keys a (×3), b, c, d (×1 each).
const TRACE: &str = "\
0,a,1,10,1,get,0
0,b,1,20,1,set,60
1,a,1,10,1,get,0
1,c,1,30,1,set,60
2,a,1,10,1,delete,0
3,d,3,40,2,set,3600
";

fn write_trace() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hand.csv");
    std::fs::write(&path, TRACE).unwrap();
    (dir, path)
}

#[test]
fn counts_sizes_and_mix() {
    let (_dir, path) = write_trace();
    let s = stats(&path, StatsOptions::default()).unwrap();
    assert_eq!((s.requests, s.keys), (6, 4));
    assert_eq!(s.fraction(Op::Get), 2.0 / 6.0);
    assert_eq!(s.fraction(Op::Set), 3.0 / 6.0);
    assert_eq!(s.fraction(Op::Delete), 1.0 / 6.0);
    assert_eq!(s.fraction(Op::Incr), 0.0);
    assert_eq!(s.ops[0].op, Op::Set, "most common first");
    assert_eq!(s.mean_key_size, 8.0 / 6.0);
    assert_eq!(s.mean_value_size, 120.0 / 6.0);
    assert_eq!(s.mean_frequency, 1.5);
    assert_eq!(s.compulsory_miss_ratio, 4.0 / 6.0);
    assert_eq!(s.duration, 3);
}

#[test]
fn one_hit_wonders_whole_trace_and_windowed() {
    let (_dir, path) = write_trace();
    let whole = stats(&path, StatsOptions::default()).unwrap();
    assert_eq!(
        whole.one_hit_wonder_ratio,
        3.0 / 4.0,
        "b, c, d of a, b, c, d"
    );
    // Windows of 3: {a, b, a} → b of {a, b} = 1/2; {c, a, d} → 3/3. Mean 3/4.
    let options = StatsOptions {
        window: Some(3),
        ..StatsOptions::default()
    };
    let windowed = stats(&path, options).unwrap();
    assert_eq!(windowed.one_hit_wonder_ratio, 0.75);
    // Windows of 4: {a, b, a, c} → 2/3; the trailing partial window is not counted.
    let options = StatsOptions {
        window: Some(4),
        ..StatsOptions::default()
    };
    let windowed = stats(&path, options).unwrap();
    assert!((windowed.one_hit_wonder_ratio - 2.0 / 3.0).abs() < 1e-12);
}

#[test]
fn zipf_alpha_is_the_least_squares_slope_over_all_ranks() {
    let (_dir, path) = write_trace();
    let s = stats(&path, StatsOptions::default()).unwrap();
    // Counts by rank: 3, 1, 1, 1. Closed form of the OLS slope of ln f on ln r.
    let x: Vec<f64> = (1..=4).map(|r| f64::from(r).ln()).collect();
    let y = [3f64.ln(), 0.0, 0.0, 0.0];
    let mx = x.iter().sum::<f64>() / 4.0;
    let my = y.iter().sum::<f64>() / 4.0;
    let sxy: f64 = x.iter().zip(&y).map(|(a, b)| (a - mx) * (b - my)).sum();
    let sxx: f64 = x.iter().map(|a| (a - mx) * (a - mx)).sum();
    let zipf = s.zipf.unwrap();
    assert!((zipf.alpha + sxy / sxx).abs() < 1e-12, "{zipf:?}");
    assert_eq!((zipf.rank_first, zipf.rank_last), (1, 4));
    // A narrower rank range fits only the flat part.
    let options = StatsOptions {
        rank_first: 2,
        ..StatsOptions::default()
    };
    let flat = stats(&path, options).unwrap().zipf.unwrap();
    assert!(flat.alpha.abs() < 1e-12, "{flat:?}");
}

#[test]
fn ttl_summary_counts_requests_with_a_ttl() {
    let (_dir, path) = write_trace();
    let s = stats(&path, StatsOptions::default()).unwrap();
    assert_eq!(s.ttl.requests, 3);
    assert_eq!((s.ttl.min, s.ttl.max), (60, 3600));
    assert_eq!(s.ttl.mean, 3720.0 / 3.0);
    assert_eq!(s.ttl.common[0].ttl, 60);
    assert_eq!(s.ttl.common[0].fraction, 2.0 / 3.0);
    assert_eq!(s.ttl.common[1].ttl, 3600);
}

#[test]
fn stats_serialise_to_json_and_print_as_a_table() {
    let (_dir, path) = write_trace();
    let s = stats(&path, StatsOptions::default()).unwrap();
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["requests"], 6);
    assert_eq!(json["ops"][0]["op"], "set");
    let back: podkv_traces::Stats = serde_json::from_value(json).unwrap();
    assert_eq!(back, s);
    let table = s.to_string();
    assert!(
        table.contains("one-hit-wonder ratio (%)    75.00 (whole trace)"),
        "{table}"
    );
    assert!(table.contains("set:0.50 get:0.33 delete:0.17"), "{table}");
    assert!(table.contains("60s:0.67, 1h:0.33"), "{table}");
}
