//! One line per figure on where podkv stands and what explains it, computed from the
//! measured records: the ratio to the baseline, where along the sweep it is best and worst,
//! and the quantity the records carry that accounts for a gap (CPU time per operation,
//! page faults and the PSS each fault brought, points that timed out or could not keep up).
//! Nothing here is chosen by verdict; a quantity no record has is left out of the line.

use super::figures::{Curve, Panels};
use super::paper::{at_max_x, mean_ratio, threads, Comparison};
use crate::helpers::{human_bytes, median};

/// Every value of `metric` of `series` over the panels `panel` names.
fn values(panels: &Panels, panel: &dyn Fn(&str) -> bool, series: &str, metric: &str) -> Vec<f64> {
    panels
        .iter()
        .filter(|(name, _)| panel(name))
        .filter_map(|(_, curves)| curves.get(series))
        .flat_map(|c| c.line(metric).into_iter().map(|(_, v)| v))
        .collect()
}

fn median_of(
    panels: &Panels,
    panel: &dyn Fn(&str) -> bool,
    series: &str,
    metric: &str,
) -> Option<f64> {
    let mut v = values(panels, panel, series, metric);
    (!v.is_empty()).then(|| median(&mut v))
}

/// `a / b` of `metric` at every (panel, x) both have.
fn ratios(
    panels: &Panels,
    panel: &dyn Fn(&str) -> bool,
    a: &str,
    b: &str,
    metric: &str,
) -> Vec<(String, u64, f64)> {
    let mut out = Vec::new();
    for (name, curves) in panels.iter().filter(|(name, _)| panel(name)) {
        let (Some(ca), Some(cb)) = (curves.get(a), curves.get(b)) else {
            continue;
        };
        let lb = cb.line(metric);
        for (x, va) in ca.line(metric) {
            if let Some(&(_, vb)) = lb.iter().find(|(xb, _)| *xb == x).filter(|p| p.1 > 0.0) {
                out.push((name.clone(), x, va / vb));
            }
        }
    }
    out
}

/// "from 0.61× (YCSB-A, 4) to 1.02× (MC-12, 1)": the spread of `ratios`.
fn spread(ratios: &[(String, u64, f64)]) -> Option<String> {
    let cmp = |p: &&(String, u64, f64), q: &&(String, u64, f64)| p.2.total_cmp(&q.2);
    let lo = ratios.iter().min_by(cmp)?;
    let hi = ratios.iter().max_by(cmp)?;
    Some(format!(
        "from {:.2}× ({}, {}) to {:.2}× ({}, {})",
        lo.2, lo.0, lo.1, hi.2, hi.0, hi.1
    ))
}

/// What the page faults of `series` say: faults per 1000 operations and the PSS per fault
/// (a fault that brings in a 2 MiB huge page zeroes it all at once).
fn faults(panels: &Panels, panel: &dyn Fn(&str) -> bool, series: &str) -> Option<String> {
    let per_kop = median_of(panels, panel, series, "faults_per_kop")?;
    let pss = median_of(panels, panel, series, "pss")?;
    let faults = median_of(panels, panel, series, "faults").filter(|&f| f > 0.0)?;
    let per_fault = pss / faults;
    let huge = if per_fault >= 1024.0 * 1024.0 {
        ": huge pages, each zeroed whole at its first touch"
    } else {
        ""
    };
    Some(format!(
        "{series} {per_kop:.1} faults per 1000 ops, {} of PSS per fault{huge}",
        human_bytes(per_fault as u64)
    ))
}

/// How much of `a`'s throughput gap to `b` the CPU time per operation accounts for.
fn cpu_account(panels: &Panels, a: &str, b: &str, throughput: f64) -> Option<String> {
    let all = |_: &str| true;
    let ca = median_of(panels, &all, a, "cpu_ns")?;
    let cb = median_of(panels, &all, b, "cpu_ns")?;
    let predicted = cb / ca;
    let verdict = if (throughput / predicted - 1.0).abs() <= 0.2 {
        "accounts for the gap".to_owned()
    } else {
        format!(
            "alone predicts {predicted:.2}×; the rest is time off the CPU (waits, and \
             scheduling on a shared machine)"
        )
    };
    Some(format!(
        "CPU per operation {a} {ca:.0} ns, {b} {cb:.0} ns ({predicted:.2}×), which {verdict}"
    ))
}

fn paper_of(comparisons: &[Comparison], what: &str) -> String {
    comparisons
        .iter()
        .find(|c| c.what.contains(what))
        .map_or(String::new(), |c| {
            format!(" (paper {:.2}, {})", c.paper, c.section)
        })
}

fn fig8(panels: &Panels, comparisons: &[Comparison]) -> Vec<String> {
    let all = |_: &str| true;
    let mut parts = Vec::new();
    let r = ratios(panels, &all, "embedded", "mimalloc", "throughput");
    if let Some(t) = mean_ratio(panels, all, "embedded", "mimalloc", "throughput") {
        parts.push(format!(
            "embedded runs at {t:.2}× mimalloc's throughput{}, {}",
            paper_of(comparisons, "embedded"),
            spread(&r).unwrap_or_default()
        ));
        parts.extend(cpu_account(panels, "embedded", "mimalloc", t));
    }
    parts.extend(faults(panels, &all, "embedded"));
    parts.extend(faults(panels, &all, "mimalloc"));
    if let Some(p) = mean_ratio(panels, all, "embedded", "dashmap", "pss") {
        parts.push(format!("embedded's PSS is {p:.2}× dashmap's"));
    }
    if let Some(t) = mean_ratio(panels, all, "embedded", "boost", "throughput") {
        parts.push(format!(
            "embedded runs at {t:.2}× the same index on boost.interprocess, whose every \
             allocation and free takes one global mutex (the paper: unscalable, §5.2.1)"
        ));
    }
    parts
}

fn fig9(panels: &Panels, comparisons: &[Comparison]) -> Vec<String> {
    let mut parts = Vec::new();
    for (kind, label) in [("threadtest", "thread-test"), ("xmalloc", "xmalloc")] {
        let on = threads(kind);
        let r = ratios(panels, &on, "podkv", "mimalloc", "throughput");
        if let Some(t) = mean_ratio(panels, &on, "podkv", "mimalloc", "throughput") {
            parts.push(format!(
                "{label}: podkv at {t:.2}× mimalloc{}, {}",
                paper_of(comparisons, label),
                spread(&r).unwrap_or_default()
            ));
        }
        if let Some(p) = mean_ratio(panels, &on, "podkv", "mimalloc", "pss") {
            parts.push(format!("{label}: podkv's PSS {p:.2}× mimalloc's"));
        }
    }
    let procs = |p: &str| p.ends_with("processes");
    if let Some(t) = mean_ratio(panels, procs, "podkv", "boost", "throughput") {
        parts.push(format!(
            "across processes podkv runs at {t:.2}× boost.interprocess"
        ));
    }
    parts
}

fn fig10(panels: &Panels) -> Vec<String> {
    let mut parts = Vec::new();
    for kind in ["threadtest", "xmalloc"] {
        let on = |p: &str| p == kind;
        if let Some(t) = mean_ratio(panels, on, "podkv, 1 process", "system", "throughput") {
            parts.push(format!(
                "{kind}: podkv (1 process) at {t:.2}× the system allocator"
            ));
        }
    }
    let timed_out: usize = panels
        .values()
        .flat_map(|c| c.iter())
        .filter(|(name, _)| !name.starts_with("podkv"))
        .map(|(_, c)| {
            c.reasons
                .values()
                .filter(|r| r.contains("timed out"))
                .count()
        })
        .sum();
    if timed_out > 0 {
        parts.push(format!("{timed_out} baseline points timed out"));
    }
    parts
}

fn fig11(panels: &Panels, comparisons: &[Comparison]) -> Vec<String> {
    let mut parts = Vec::new();
    if let (Some(n), Some(f)) = (
        at_max_x(panels, "nmp", "p50"),
        at_max_x(panels, "flush-cas", "p50"),
    ) {
        if n.0 == f.0 && f.1 > 0.0 {
            parts.push(format!(
                "at {} threads nmp's p50 is {:.2}× flush-cas's{}",
                n.0,
                n.1 / f.1,
                paper_of(comparisons, "p50 latency at the most")
            ));
        }
    }
    let at_one = |series: &str| {
        panels
            .values()
            .filter_map(|c| c.get(series))
            .flat_map(|c| c.line("p50"))
            .find(|&(x, _)| x == 1)
            .map(|(_, ns)| ns)
    };
    if let (Some(n), Some(c)) = (at_one("nmp"), at_one("cpu")) {
        parts.push(format!(
            "at 1 thread an nmp CAS takes {n:.0} ns, {:.0}× a CPU CAS ({c:.0} ns): the round \
             trip to the processor thread, where the paper's FPGA takes 2.3 µs",
            n / c.max(1.0)
        ));
    }
    parts
}

fn fig12(panels: &Panels) -> Vec<String> {
    let mut parts = Vec::new();
    for kind in ["threadtest", "xmalloc"] {
        let on = |p: &str| p == kind;
        let of = |s| mean_ratio(panels, on, s, "podkv-hardware", "throughput");
        let modes: Vec<String> = [
            ("limited", of("podkv-limited")),
            ("mcas flush-cas", of("podkv-mcas-flush-cas")),
            ("mcas nmp", of("podkv-mcas-nmp")),
        ]
        .into_iter()
        .filter_map(|(m, r)| r.map(|r| format!("{m} {r:.2}×")))
        .collect();
        if !modes.is_empty() {
            parts.push(format!("{kind} against all-coherent: {}", modes.join(", ")));
        }
    }
    parts
}

/// A server kept up with an offered load when it completed at least this share of it …
pub const KEPT_UP_DONE_MIN: f64 = 0.95;

/// … and its p99, timed from each request's intended send time, stayed at most this (µs). A
/// server that falls behind an open-loop client sees its queue, and so this p99, grow over
/// the run (to hundreds of ms); a served request takes tens to hundreds of µs here.
pub const KEPT_UP_P99_US_MAX: f64 = 5000.0;

/// Whether one point of a server curve kept up: both rules.
fn kept_up(curve: &Curve, x: u64) -> bool {
    let at = |metric| curve.line(metric).into_iter().find(|&(px, _)| px == x);
    matches!(
        (at("kept_up"), at("p99_us")),
        (Some((_, done)), Some((_, p99))) if done >= KEPT_UP_DONE_MIN && p99 <= KEPT_UP_P99_US_MAX
    )
}

fn server(panels: &Panels) -> Vec<String> {
    let mut parts = Vec::new();
    // The highest offered load up to which each server kept up with every offered load.
    let kept = |series: &str| {
        panels
            .values()
            .filter_map(|c| c.get(series))
            .filter_map(|c| {
                c.points
                    .keys()
                    .copied()
                    .take_while(|&x| kept_up(c, x))
                    .last()
            })
            .max()
    };
    // The lowest offered load of a series, with its share done and p99.
    let lowest = |series: &str| {
        let c = panels.values().find_map(|c| c.get(series))?;
        let x = *c.points.keys().next()?;
        let at = |m| {
            c.line(m)
                .into_iter()
                .find(|&(px, _)| px == x)
                .map(|(_, v)| v)
        };
        Some((x, at("kept_up")?, at("p99_us")?))
    };
    let (a, b) = (kept("podkv serve"), kept("memcached"));
    let rule = format!(
        "≥ {:.0}% of the offered load done, p99 ≤ {:.0} ms",
        KEPT_UP_DONE_MIN * 100.0,
        KEPT_UP_P99_US_MAX / 1000.0
    );
    for (name, k) in [("podkv serve", a), ("memcached", b)] {
        match (k, lowest(name)) {
            (Some(k), _) => parts.push(format!(
                "{name} kept up ({rule}) with offered loads up to {k} ops/s"
            )),
            (None, Some((x, done, p99))) => parts.push(format!(
                "{name} kept up ({rule}) with none of the offered loads: at the lowest, {x} \
                 ops/s, {:.0}% was done and p99 was {p99:.0} µs",
                done * 100.0
            )),
            (None, None) => {}
        }
    }
    if let Some(x) = a.zip(b).map(|(a, b)| a.min(b)) {
        let p99 = |series: &str| {
            panels
                .values()
                .filter_map(|c| c.get(series))
                .flat_map(|c| c.line("p99_us"))
                .find(|&(px, _)| px == x)
                .map(|(_, v)| v)
        };
        if let (Some(pa), Some(pb)) = (p99("podkv serve"), p99("memcached")) {
            parts.push(format!(
                "at {x} ops/s p99 is {pa:.0} µs for podkv serve against {pb:.0} µs for memcached"
            ));
        }
    }
    parts
}

/// The figure's line: verdicts against the paper, then what the records say explains them.
pub fn why(id: &str, panels: &Panels, comparisons: &[Comparison]) -> String {
    let verdicts: Vec<&str> = comparisons.iter().map(Comparison::verdict).collect();
    let parts = match id {
        "fig8" => fig8(panels, comparisons),
        "fig9" => fig9(panels, comparisons),
        "fig10" => fig10(panels),
        "fig11" => fig11(panels, comparisons),
        "fig12" => fig12(panels),
        "server" => server(panels),
        "fragbench" => super::fragbench::why(panels),
        _ => Vec::new(),
    };
    let measured = if parts.is_empty() {
        "the records hold nothing to compare".to_owned()
    } else {
        parts.join("; ")
    };
    if verdicts.is_empty() {
        format!("{measured}.")
    } else {
        format!("{} against the paper: {measured}.", verdicts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn point(done: f64, p99_us: f64) -> Vec<BTreeMap<&'static str, f64>> {
        vec![BTreeMap::from([("kept_up", done), ("p99_us", p99_us)])]
    }

    /// Keeping up takes both rules: nearly all of the load done, and p99 under the bound.
    #[test]
    fn kept_up_counts_p99_too() {
        let mut curve = Curve::default();
        curve.points.insert(5000, point(1.0, 300.0));
        curve.points.insert(10000, point(0.99, 9000.0));
        curve.points.insert(20000, point(0.90, 400.0));
        curve.points.insert(40000, point(1.0, 400.0));
        assert!(kept_up(&curve, 5000));
        assert!(!kept_up(&curve, 10000), "p99 over the bound");
        assert!(!kept_up(&curve, 20000), "too little of the load done");
        let panels: Panels = BTreeMap::from([(
            "YCSB-A".into(),
            BTreeMap::from([("podkv serve".into(), curve)]),
        )]);
        let line = server(&panels).join("; ");
        assert!(
            line.contains("up to 5000 ops/s") && line.contains("p99 ≤ 5 ms"),
            "a load kept up after one that was not does not count: {line}"
        );
        let mut slow = Curve::default();
        slow.points.insert(5000, point(1.0, 8000.0));
        let panels: Panels = BTreeMap::from([(
            "YCSB-A".into(),
            BTreeMap::from([("memcached".into(), slow)]),
        )]);
        let line = server(&panels).join("; ");
        assert!(
            line.contains("none of the offered loads") && line.contains("8000 µs"),
            "{line}"
        );
    }
}
