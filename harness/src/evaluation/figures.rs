//! The paper's figures as the report lays them out: which panels and curves each has, what
//! its axes are, and which curves a reader expects even when a run could not make them.

use super::rows::Row;
use std::collections::{BTreeMap, BTreeSet};

/// One figure of the paper.
pub struct Figure {
    /// `fig8`.
    pub id: &'static str,
    /// The page's title.
    pub title: &'static str,
    /// What the paper's figure shows, and where (section).
    pub about: &'static str,
    /// The panels a reader expects (more appear if the records have them).
    pub panels: &'static [&'static str],
    /// The metrics drawn for every panel (one PNG each).
    pub metrics: &'static [Metric],
    /// The x axis.
    pub x_label: &'static str,
    /// The curves a reader expects in every panel (more appear if the records have them).
    pub series: &'static [&'static str],
}

/// A metric drawn on a y axis.
pub struct Metric {
    /// Key in [`Row::values`].
    pub key: &'static str,
    /// Axis label.
    pub label: &'static str,
    /// Divides the raw value for the axis.
    pub scale: f64,
}

const THROUGHPUT: Metric = Metric {
    key: "throughput",
    label: "Mops/s",
    scale: 1e6,
};
const PSS: Metric = Metric {
    key: "pss",
    label: "PSS (MiB)",
    scale: 1024.0 * 1024.0,
};
const P50: Metric = Metric {
    key: "p50",
    label: "p50 latency (ns)",
    scale: 1.0,
};
const P99: Metric = Metric {
    key: "p99",
    label: "p99 latency (ns)",
    scale: 1.0,
};

const P50_US: Metric = Metric {
    key: "p50_us",
    label: "p50 latency (µs)",
    scale: 1.0,
};
const P99_US: Metric = Metric {
    key: "p99_us",
    label: "p99 latency (µs)",
    scale: 1.0,
};

/// Every figure the report writes, in order.
pub const FIGURES: [Figure; 7] = [
    Figure {
        id: "fig8",
        title: "Figure 8: key-value store workloads (YCSB and Twitter memcached traces)",
        about: "Throughput and summed PSS of a key-value store over threads, podkv's store in a \
                pod heap (`embedded`) against the same index on mimalloc (`mimalloc`), the same \
                index on boost.interprocess (`boost`: a managed_shared_memory segment, one \
                global mutex) and a dashmap (CXLALLOC §5.2.1, Fig. 8).",
        panels: &[
            "YCSB-Load",
            "YCSB-A",
            "YCSB-D",
            "MC-12",
            "MC-15",
            "MC-31",
            "MC-37",
        ],
        metrics: &[THROUGHPUT, PSS],
        x_label: "workers (processes × threads)",
        series: &["embedded", "mimalloc", "boost", "dashmap"],
    },
    Figure {
        id: "fig9",
        title: "Figure 9: allocator microbenchmarks (thread-test, xmalloc)",
        about: "Throughput and summed PSS of thread-test and xmalloc with 8-byte and 64-byte \
                blocks, over threads of one process and over processes sharing one heap \
                (CXLALLOC §5.2.2, Fig. 9).",
        panels: &[
            "threadtest 8 B, threads",
            "threadtest 64 B, threads",
            "xmalloc 8 B, threads",
            "xmalloc 64 B, threads",
            "threadtest 8 B, processes",
            "threadtest 64 B, processes",
            "xmalloc 8 B, processes",
            "xmalloc 64 B, processes",
        ],
        metrics: &[THROUGHPUT, PSS],
        x_label: "threads (or processes)",
        series: &["podkv", "boost", "mimalloc", "jemalloc", "system"],
    },
    Figure {
        id: "fig10",
        title: "Figure 10: huge allocations (1 GiB blocks)",
        about: "Throughput and summed PSS of thread-test and xmalloc with 1 GiB blocks over \
                threads, one curve per process count (CXLALLOC §5.3, Fig. 10).",
        panels: &["threadtest", "xmalloc"],
        metrics: &[THROUGHPUT, PSS],
        x_label: "threads per process",
        series: &[
            "podkv, 1 process",
            "podkv, 2 processes",
            "mimalloc",
            "system",
        ],
    },
    Figure {
        id: "fig11",
        title: "Figure 11: CAS latency (CPU CAS, flush + CAS, near-memory mCAS)",
        about: "Latency p50 and p99 of a CAS on one shared word over threads: CPU CAS (`cpu`, \
                the paper's sw_cas), write-back then CAS (`flush-cas`, sw_flush_cas), and the \
                near-memory processor (`nmp`, hw_cas; emulated in software here) \
                (CXLALLOC §5.4.1, Fig. 11).",
        panels: &["CAS latency"],
        metrics: &[P50, P99],
        x_label: "threads",
        series: &["cpu", "flush-cas", "nmp"],
    },
    Figure {
        id: "fig12",
        title: "Figure 12: the allocator in each coherence mode",
        about: "Throughput of thread-test and xmalloc (64-byte blocks) over threads with all \
                memory coherent (`hardware`), only the HWcc region coherent (`limited`), and \
                none (`mcas`: every shared word by mCAS) (CXLALLOC §5.4.2, Fig. 12).",
        panels: &["threadtest", "xmalloc"],
        metrics: &[THROUGHPUT],
        x_label: "threads",
        series: &[
            "podkv-hardware",
            "podkv-limited",
            "podkv-mcas-flush-cas",
            "podkv-mcas-nmp",
        ],
    },
    Figure {
        id: "server",
        title: "Server rows: open-loop latency against offered load",
        about: "p50 and p99 latency of `podkv serve` and memcached under the same open-loop \
                client (`podkv ycsb --target memcached://… --target-rate R`): each request is \
                due at its scheduled time and its latency runs from then, so queueing behind a \
                slow answer is counted (corrected for coordinated omission). A server *kept up* \
                with an offered load when it completed at least 95% of it and its p99 stayed \
                at most 5 ms (a server that falls behind sees its queue, and this p99, grow \
                over the run). Not a figure of the paper, which has no server; issue 22 asks \
                for it beside the paper's rows.",
        panels: &["YCSB-A"],
        metrics: &[P50_US, P99_US, THROUGHPUT],
        x_label: "offered load (ops/s)",
        series: &["podkv serve", "memcached"],
    },
    Figure {
        id: "fragbench",
        title: "Fragbench: memory after each phase (NVAlloc Fig. 15)",
        about: "PSS and throughput of NVAlloc's Fragbench W1–W4 (NVAlloc §3 Table 1, §6.4, \
                Fig. 15): Before allocates one size distribution with the live data capped, \
                Delete frees a share of it, After allocates a second distribution. podkv's heap \
                with slab morphing (`podkv`) and without (`podkv-nomorph`) against mimalloc, \
                jemalloc and the system allocator; each run a process of its own. Not a figure \
                of CXLALLOC: the heap's slab morphing follows NVAlloc.",
        panels: &["W1", "W2", "W3", "W4"],
        metrics: &[PSS, THROUGHPUT],
        x_label: "phase (1 before, 2 delete, 3 after)",
        series: &["podkv", "podkv-nomorph", "mimalloc", "jemalloc", "system"],
    },
];

/// One curve of one panel: median values per x, and the reasons of x-values without one.
#[derive(Clone, Debug, Default)]
pub struct Curve {
    /// x → every repeat's row values.
    pub points: BTreeMap<u64, Vec<BTreeMap<&'static str, f64>>>,
    /// x → why it has no value.
    pub reasons: BTreeMap<u64, String>,
    /// x-values past the machine's CPUs.
    pub oversubscribed: BTreeSet<u64>,
    /// Made from a generated trace.
    pub synthetic: bool,
}

impl Curve {
    /// The median of `metric` at each x that has it.
    pub fn line(&self, metric: &str) -> Vec<(u64, f64)> {
        self.points
            .iter()
            .filter_map(|(&x, repeats)| {
                let mut v: Vec<f64> = repeats
                    .iter()
                    .filter_map(|r| r.get(metric))
                    .copied()
                    .collect();
                (!v.is_empty()).then(|| (x, crate::helpers::median(&mut v)))
            })
            .collect()
    }

    /// Why the curve has fewer than two points, if its records say.
    pub fn reason(&self) -> Option<String> {
        let mut reasons: Vec<&String> = self.reasons.values().collect();
        reasons.sort();
        reasons.dedup();
        (!reasons.is_empty()).then(|| {
            reasons
                .iter()
                .map(|r| r.lines().next().unwrap_or_default())
                .collect::<Vec<_>>()
                .join("; ")
        })
    }
}

/// Panel → series → curve, for one figure.
pub type Panels = BTreeMap<String, BTreeMap<String, Curve>>;

/// The rows of `figure`, by panel and series, with every expected panel and series present
/// (empty when no record made it).
pub fn panels(figure: &Figure, rows: &[Row]) -> Panels {
    let mut panels = Panels::new();
    for &p in figure.panels {
        let curves = panels.entry(p.to_owned()).or_default();
        for &s in figure.series {
            curves.entry(s.to_owned()).or_default();
        }
    }
    for row in rows.iter().filter(|r| r.place.figure == figure.id) {
        let curves = panels.entry(row.place.panel.clone()).or_insert_with(|| {
            figure
                .series
                .iter()
                .map(|&s| (s.to_owned(), Curve::default()))
                .collect()
        });
        let curve = curves.entry(row.place.series.clone()).or_default();
        let x = row.place.x;
        match &row.reason {
            Some(reason) => {
                curve.reasons.insert(x, reason.clone());
            }
            None => curve.points.entry(x).or_default().push(row.values.clone()),
        }
        if row.oversubscribed {
            curve.oversubscribed.insert(x);
        }
        curve.synthetic |= row.synthetic;
    }
    panels
}
