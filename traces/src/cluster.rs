//! The published per-cluster statistics, parsed from the table itself.
//!
//! Source: `data/twitter-cache-trace-stats-2020Mar.md`, a verbatim copy of the table released
//! with the traces (<https://github.com/twitter/cache-trace>, `stat/2020Mar.md`, CC-BY 4.0,
//! Yang, Yue and Rashmi, OSDI '20). It is embedded with `include_str!` and parsed on first use,
//! columns found by their header names, so the numbers in this crate are the table's numbers.
//!
//! # Reading the table
//!
//! - `one-hit-wonder ratio (%)` and `compulsory miss ratio (%)` are percentages; they are stored
//!   here as fractions.
//! - `common TTL` lists the most common TTLs with their shares (`300s:0.98, 299s:0.02,`), units
//!   `s`, `h` and `d`, possibly fractional (`1.8h`); shares need not sum to 1.
//! - `operation` lists shares rounded to two places (`set:0.80 get:0.20`); they need not sum to 1.
//! - `Zipf alpha` is `NA` for some clusters and exactly `0` for six others (10, 31, 32, 35, 38,
//!   39). A literal `0` is not a fit: every fitted value has four decimals, and a cluster such as
//!   35 (mean frequency 14.8, 31 % one-hit wonders) cannot have a flat popularity curve. Both
//!   spellings are read as "no alpha published".
//! - Rows with `N/A` sizes (cluster 5) are not usable and [`cluster`] reports why.

use std::sync::OnceLock;

use serde::Serialize;

use crate::stats::{format_ttl, Stats};
use crate::{Op, TraceError};

/// The table, as published.
pub const TABLE: &str = include_str!("../data/twitter-cache-trace-stats-2020Mar.md");

/// One cluster's row of the published table.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClusterStats {
    /// Cluster number (`cluster12` is 12).
    pub cluster: u32,
    /// Mean key size, bytes.
    pub key_size: f64,
    /// Mean value size, bytes.
    pub value_size: f64,
    /// Request rate, thousands of requests per second.
    pub request_rate_kqps: f64,
    /// Requests per distinct key.
    pub mean_frequency: f64,
    /// Fraction of keys requested exactly once.
    pub one_hit_wonder_ratio: f64,
    /// Distinct keys / requests.
    pub compulsory_miss_ratio: f64,
    /// Most common TTLs: (seconds, share).
    pub ttls: Vec<(u32, f64)>,
    /// Operation shares as published (rounded to two places).
    pub ops: Vec<(Op, f64)>,
    /// Zipf alpha; `None` when the table shows `NA` or the placeholder `0`.
    pub zipf_alpha: Option<f64>,
}

/// One published figure next to the figure measured on a trace.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Deviation {
    /// What is compared, named as in the table (`op:set`, `key size`, …).
    pub metric: String,
    /// The table's value (fractions for ratios and shares).
    pub published: f64,
    /// The measured value, in the same unit.
    pub measured: f64,
}

impl ClusterStats {
    /// Compares a trace's statistics with this row, metric by metric.
    pub fn compare(&self, s: &Stats) -> Vec<Deviation> {
        let row = |metric: String, published: f64, measured: f64| Deviation {
            metric,
            published,
            measured,
        };
        let mut rows: Vec<Deviation> = self
            .ops
            .iter()
            .map(|&(op, share)| row(format!("op:{op}"), share, s.fraction(op)))
            .collect();
        rows.push(row("key size".into(), self.key_size, s.mean_key_size));
        rows.push(row("value size".into(), self.value_size, s.mean_value_size));
        rows.push(row(
            "mean freq".into(),
            self.mean_frequency,
            s.mean_frequency,
        ));
        rows.push(row(
            "one-hit-wonder ratio".into(),
            self.one_hit_wonder_ratio,
            s.one_hit_wonder_ratio,
        ));
        rows.push(row(
            "compulsory miss ratio".into(),
            self.compulsory_miss_ratio,
            s.compulsory_miss_ratio,
        ));
        if let Some(alpha) = self.zipf_alpha {
            let measured = s.zipf.as_ref().map_or(f64::NAN, |z| z.alpha);
            rows.push(row("Zipf alpha".into(), alpha, measured));
        }
        for &(ttl, share) in &self.ttls {
            let measured = s
                .ttl
                .common
                .iter()
                .find(|t| t.ttl == ttl)
                .map_or(0.0, |t| t.fraction);
            rows.push(row(format!("ttl:{}", format_ttl(ttl)), share, measured));
        }
        rows
    }
}

/// Every row of the table, parsed once: the cluster number and its statistics or the reason
/// the row cannot be used.
pub fn table() -> &'static [(u32, Result<ClusterStats, String>)] {
    static ROWS: OnceLock<Vec<(u32, Result<ClusterStats, String>)>> = OnceLock::new();
    ROWS.get_or_init(|| parse_table(TABLE))
}

/// The published statistics of cluster `n`.
pub fn cluster(n: u32) -> Result<ClusterStats, TraceError> {
    let error = |message: String| TraceError::Cluster {
        cluster: n,
        message,
    };
    let (_, row) = table()
        .iter()
        .find(|(c, _)| *c == n)
        .ok_or_else(|| error("not in the published table (clusters 1 to 54)".into()))?;
    row.clone().map_err(error)
}

fn cells(line: &str) -> Vec<&str> {
    let line = line.trim().trim_start_matches('|').trim_end_matches('|');
    line.split('|').map(str::trim).collect()
}

fn parse_table(text: &str) -> Vec<(u32, Result<ClusterStats, String>)> {
    let mut lines = text.lines().filter(|l| l.trim_start().starts_with('|'));
    let Some(header) = lines.next().map(cells) else {
        return Vec::new();
    };
    lines
        .skip(1) // the alignment row
        .filter_map(|line| {
            let row = cells(line);
            let n = row.first()?.strip_prefix("cluster")?.parse().ok()?;
            Some((n, parse_row(n, &header, &row)))
        })
        .collect()
}

fn parse_row(cluster: u32, header: &[&str], row: &[&str]) -> Result<ClusterStats, String> {
    let get = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .and_then(|i| row.get(i).copied())
            .ok_or_else(|| format!("no `{name}` column"))
    };
    let number = |name: &str| -> Result<f64, String> {
        let cell = get(name)?;
        cell.parse()
            .map_err(|_| format!("`{name}` is {cell:?}, not published"))
    };
    let alpha = get("Zipf alpha")?;
    Ok(ClusterStats {
        cluster,
        key_size: number("key size")?,
        value_size: number("value size")?,
        request_rate_kqps: number("request rate (kqps)")?,
        mean_frequency: number("mean freq")?,
        one_hit_wonder_ratio: number("one-hit-wonder ratio (%)")? / 100.0,
        compulsory_miss_ratio: number("compulsory miss ratio (%)")? / 100.0,
        ttls: parse_ttls(get("common TTL")?)?,
        ops: parse_ops(get("operation")?)?,
        zipf_alpha: alpha.parse().ok().filter(|&a: &f64| a != 0.0),
    })
}

/// `300s:0.98, 299s:0.02,` → `[(300, 0.98), (299, 0.02)]`.
fn parse_ttls(cell: &str) -> Result<Vec<(u32, f64)>, String> {
    cell.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|item| {
            let (duration, share) = item
                .split_once(':')
                .ok_or_else(|| format!("TTL item {item:?}"))?;
            let share = share.parse().map_err(|_| format!("TTL share {item:?}"))?;
            Ok((parse_duration(duration)?, share))
        })
        .collect()
}

/// `300s`, `1.8h`, `5d`, `92.6d` → seconds, rounded.
pub fn parse_duration(text: &str) -> Result<u32, String> {
    let split = text.len().saturating_sub(1);
    let (value, unit) = text.split_at(split);
    let scale = match unit {
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3_600.0,
        "d" => 86_400.0,
        _ => return Err(format!("duration {text:?} has no unit s/m/h/d")),
    };
    let value: f64 = value
        .parse()
        .map_err(|_| format!("duration {text:?} is not a number"))?;
    Ok((value * scale).round() as u32)
}

/// `set:0.80 get:0.20` → `[(Set, 0.8), (Get, 0.2)]`.
fn parse_ops(cell: &str) -> Result<Vec<(Op, f64)>, String> {
    cell.split_whitespace()
        .map(|item| {
            let (name, share) = item
                .split_once(':')
                .ok_or_else(|| format!("operation item {item:?}"))?;
            let op = name.parse::<Op>()?;
            let share = share
                .parse()
                .map_err(|_| format!("operation share {item:?}"))?;
            Ok((op, share))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_write_heavy_clusters_parse_as_published() {
        let c12 = cluster(12).unwrap();
        assert_eq!((c12.key_size, c12.value_size), (44.0, 1030.0));
        assert_eq!(c12.ops, [(Op::Set, 0.80), (Op::Get, 0.20)]);
        assert_eq!(c12.ttls, [(300, 0.98), (299, 0.02)]);
        assert_eq!(c12.zipf_alpha, Some(0.3048));
        assert!((c12.one_hit_wonder_ratio - 0.8143).abs() < 1e-12);
        let c37 = cluster(37).unwrap();
        assert_eq!(c37.ttls[2], (7200, 0.02));
        assert_eq!(cluster(31).unwrap().zipf_alpha, None);
        assert_eq!(cluster(15).unwrap().ops, [(Op::Set, 1.0)]);
    }

    #[test]
    fn every_row_but_the_unpublished_one_parses() {
        let rows = table();
        assert_eq!(rows.len(), 54);
        let failed: Vec<u32> = rows
            .iter()
            .filter(|(_, r)| r.is_err())
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(failed, [5]);
        assert!(cluster(55).is_err());
    }

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("92.6d"), Ok(8_000_640));
        assert_eq!(parse_duration("1.8h"), Ok(6_480));
        assert!(parse_duration("12").is_err());
    }
}
