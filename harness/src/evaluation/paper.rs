//! The paper's published numbers beside ours: every number here is stated in the text of
//! CXLALLOC (ASPLOS '26), or for Fragbench of NVAlloc (ASPLOS '22), with its section; ours is
//! the same ratio from this report's records (to the same baseline, in one run on one
//! machine).

use super::figures::Panels;
use crate::helpers::median;

/// One comparison line.
pub struct Comparison {
    /// What is compared (`podkv / mimalloc, thread-test`).
    pub what: String,
    /// The paper's number, as a ratio (0.47 for 47%).
    pub paper: f64,
    /// Where the paper states it.
    pub section: &'static str,
    /// Ours, if the records have both sides.
    pub ours: Option<f64>,
    /// Higher is better for us (a throughput ratio), or lower (a latency ratio).
    pub higher_is_better: bool,
}

impl Comparison {
    /// `ahead`, `behind`, `level` (within 5% of the paper), or why there is no number.
    pub fn verdict(&self) -> &'static str {
        match self.ours {
            None => "not measured",
            Some(ours) if (ours / self.paper - 1.0).abs() <= 0.05 => "level",
            Some(ours) if (ours > self.paper) == self.higher_is_better => "ahead",
            Some(_) => "behind",
        }
    }
}

/// The mean over x (and panels named by `panel`) of `series_a / series_b` for `metric`, at
/// x-values where both ran.
pub(super) fn mean_ratio(
    panels: &Panels,
    panel: impl Fn(&str) -> bool,
    a: &str,
    b: &str,
    metric: &str,
) -> Option<f64> {
    let mut ratios = Vec::new();
    for (_, curves) in panels.iter().filter(|(name, _)| panel(name)) {
        let (Some(ca), Some(cb)) = (curves.get(a), curves.get(b)) else {
            continue;
        };
        let lb = cb.line(metric);
        for (x, va) in ca.line(metric) {
            if let Some(&(_, vb)) = lb.iter().find(|(xb, _)| *xb == x) {
                if vb > 0.0 {
                    ratios.push(va / vb);
                }
            }
        }
    }
    (!ratios.is_empty()).then(|| ratios.iter().sum::<f64>() / ratios.len() as f64)
}

/// The value of `series` at its largest x.
pub(super) fn at_max_x(panels: &Panels, series: &str, metric: &str) -> Option<(u64, f64)> {
    panels
        .values()
        .filter_map(|c| c.get(series))
        .flat_map(|c| c.line(metric))
        .max_by_key(|&(x, _)| x)
}

fn cmp(
    what: &str,
    paper: f64,
    section: &'static str,
    ours: Option<f64>,
    higher: bool,
) -> Comparison {
    Comparison {
        what: what.to_owned(),
        paper,
        section,
        ours,
        higher_is_better: higher,
    }
}

/// Panels of the threads sweep of `kind` (fig9).
pub(super) fn threads(kind: &'static str) -> impl Fn(&str) -> bool {
    move |p: &str| p.starts_with(kind) && p.ends_with("threads")
}

/// The comparisons of figure `id` with the paper.
pub fn comparisons(id: &str, panels: &Panels) -> Vec<Comparison> {
    match id {
        "fig8" => vec![cmp(
            "podkv (embedded) / mimalloc throughput, mean over workloads and threads",
            0.939,
            "§5.2.1",
            mean_ratio(panels, |_| true, "embedded", "mimalloc", "throughput"),
            true,
        )],
        "fig9" => vec![
            cmp(
                "podkv / mimalloc throughput, thread-test (mean over sizes and threads)",
                0.47,
                "§5.2.2",
                mean_ratio(
                    panels,
                    threads("threadtest"),
                    "podkv",
                    "mimalloc",
                    "throughput",
                ),
                true,
            ),
            cmp(
                "podkv / mimalloc throughput, xmalloc (mean over sizes and threads)",
                0.81,
                "§5.2.2",
                mean_ratio(
                    panels,
                    threads("xmalloc"),
                    "podkv",
                    "mimalloc",
                    "throughput",
                ),
                true,
            ),
        ],
        "fig11" => fig11(panels),
        "fig12" => fig12(panels),
        "fragbench" => fragbench(panels),
        _ => Vec::new(),
    }
}

/// Fig. 11: the near-memory processor against flush + CAS (§5.4.1).
fn fig11(panels: &Panels) -> Vec<Comparison> {
    let ratio = |metric| {
        let nmp = at_max_x(panels, "nmp", metric)?;
        let flush = at_max_x(panels, "flush-cas", metric)?;
        (nmp.0 == flush.0 && flush.1 > 0.0).then(|| nmp.1 / flush.1)
    };
    let one_thread = |metric| {
        panels
            .values()
            .filter_map(|c| c.get("nmp"))
            .flat_map(|c| c.line(metric))
            .find(|&(x, _)| x == 1)
            .map(|(_, ns)| ns / 1000.0)
    };
    vec![
        cmp(
            "nmp / flush-cas p50 latency at the most threads (paper: 16 threads, 17.4% lower)",
            1.0 - 0.174,
            "§5.4.1",
            ratio("p50"),
            false,
        ),
        cmp(
            "nmp / flush-cas p99 latency at the most threads (paper: 16 threads, 20% lower)",
            0.80,
            "§5.4.1",
            ratio("p99"),
            false,
        ),
        cmp(
            "nmp p50 latency at 1 thread, µs (an absolute number: FPGA vs software)",
            2.3,
            "§5.4.1",
            one_thread("p50"),
            false,
        ),
        cmp(
            "nmp p99 latency at 1 thread, µs",
            2.8,
            "§5.4.1",
            one_thread("p99"),
            false,
        ),
    ]
}

/// Fig. 12: the allocator without coherence against with it (§5.4.2).
fn fig12(panels: &Panels) -> Vec<Comparison> {
    let mcas = |kind: &'static str| {
        let of = |series| {
            mean_ratio(
                panels,
                move |p| p == kind,
                series,
                "podkv-hardware",
                "throughput",
            )
        };
        of("podkv-mcas-nmp").or_else(|| of("podkv-mcas-flush-cas"))
    };
    vec![
        cmp(
            "podkv-mcas / podkv-hardware throughput, thread-test (nmp, else flush-cas)",
            0.80,
            "§5.4.2",
            mcas("threadtest"),
            true,
        ),
        cmp(
            "podkv-mcas / podkv-hardware throughput, xmalloc (nmp, else flush-cas)",
            0.01,
            "§5.4.2",
            mcas("xmalloc"),
            true,
        ),
    ]
}

/// Fragbench: slab morphing against static slab segregation (NVAlloc §6.4).
fn fragbench(panels: &Panels) -> Vec<Comparison> {
    type Curves = std::collections::BTreeMap<String, super::figures::Curve>;
    let at = |curves: &Curves, s: &str, metric: &str, phase: u64| {
        curves
            .get(s)?
            .line(metric)
            .into_iter()
            .find(|&(x, _)| x == phase)
            .map(|(_, v)| v)
            .filter(|&v| v > 0.0)
    };
    let ratio = |c: &Curves, metric: &str, phase: u64| {
        Some(at(c, "podkv", metric, phase)? / at(c, "podkv-nomorph", metric, phase)?)
    };
    let best = panels
        .values()
        .filter_map(|c| ratio(c, "pss", 3))
        .min_by(f64::total_cmp);
    // The allocating phases only: Delete only frees (and W2's frees nothing).
    let speeds: Vec<f64> = panels
        .values()
        .flat_map(|c| [ratio(c, "throughput", 1), ratio(c, "throughput", 3)])
        .flatten()
        .collect();
    let speed = (!speeds.is_empty()).then(|| speeds.iter().sum::<f64>() / speeds.len() as f64);
    vec![
        cmp(
            "podkv / podkv-nomorph PSS after the After phase, best workload (NVAlloc: morphing \
             saves up to 41.9%)",
            1.0 - 0.419,
            "NVAlloc §6.4",
            best,
            false,
        ),
        cmp(
            "podkv / podkv-nomorph throughput, mean over workloads of Before and After \
             (NVAlloc: 4.5% slower on average)",
            1.0 - 0.045,
            "NVAlloc §6.4",
            speed,
            true,
        ),
    ]
}

/// Medians of hwcc / pss for the records of a series.
pub fn hwcc_share(panels: &Panels, series: &str, panel: impl Fn(&str) -> bool) -> Option<f64> {
    let mut shares: Vec<f64> = panels
        .iter()
        .filter(|(name, _)| panel(name))
        .filter_map(|(_, c)| c.get(series))
        .flat_map(|c| c.points.values().flatten())
        .filter_map(|v| Some(v.get("hwcc")? / v.get("pss").filter(|&&p| p > 0.0)?))
        .collect();
    (!shares.is_empty()).then(|| median(&mut shares))
}
