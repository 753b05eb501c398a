//! A run's results: one [`RunRecord`], printed as a table and appended as one NDJSON line.

use super::metrics::{Tally, TallyWire};
use super::pacing::Pacing;
use super::spec::{Job, RunSpec};
use super::targets::{ServerTally, TargetSpec};
use crate::helpers::{append_ndjson, human_bytes};
use crate::process_stats;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// What one process measured in the timed phase.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProcessReport {
    /// The process's index.
    pub process: usize,
    /// Its workers' merged measurements.
    pub tally: TallyWire,
    /// Its proportional set size at the end of the timed phase.
    pub pss_bytes: u64,
    /// Its minor page faults during the timed phase.
    pub page_faults: u64,
    /// The target's HWcc bytes, for heap targets.
    pub hwcc_bytes: Option<u64>,
    /// What the timed phase did to keep the heap coherent, for heap targets.
    #[serde(default)]
    pub coherence: Option<CoherenceOps>,
    /// Requests and failures per server (a memcached target with a timeout).
    #[serde(default)]
    pub servers: Vec<ServerTally>,
    /// Its PSS sampled during the run: `(monotonic ns, bytes)`
    /// ([`process_stats::sample_pss`]); empty where nothing sampled.
    #[serde(default)]
    pub pss_samples: Vec<(u64, u64)>,
    /// When its timed phase started (monotonic ns; 0: unknown).
    #[serde(default)]
    pub timed_from_ns: u64,
    /// A server target's answer to `version`.
    #[serde(default)]
    pub server_version: Option<String>,
}

/// What one process's workers did to keep a pod heap coherent during the timed phase: cache
/// lines written back and invalidated by the SWcc rules (`podkv_hw::swcc::counts`, summed
/// over the worker threads) and the mCAS requests the process sent to the heap.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct CoherenceOps {
    /// Cache lines written back.
    pub writebacks: u64,
    /// Cache lines invalidated.
    pub invalidations: u64,
    /// mCAS requests (CAS and store).
    pub mcas: u64,
}

impl CoherenceOps {
    /// Both summed.
    pub fn plus(self, other: CoherenceOps) -> CoherenceOps {
        CoherenceOps {
            writebacks: self.writebacks + other.writebacks,
            invalidations: self.invalidations + other.invalidations,
            mcas: self.mcas + other.mcas,
        }
    }
}

/// Merges the reports of all processes.
pub fn merge(spec: &RunSpec, reports: &[ProcessReport]) -> anyhow::Result<Tally> {
    let mut tally = Tally::new(spec.job.kind_names().len());
    for r in reports {
        tally.merge(&r.tally.decode()?);
    }
    Ok(tally)
}

/// The processes' per-server tallies, summed by server.
fn merge_servers(reports: &[ProcessReport]) -> Vec<ServerTally> {
    let mut all: Vec<ServerTally> = Vec::new();
    for s in reports.iter().flat_map(|r| &r.servers) {
        match all.iter_mut().find(|a| a.server == s.server) {
            Some(a) => {
                a.requests += s.requests;
                a.errors += s.errors;
            }
            None => all.push(s.clone()),
        }
    }
    all
}

/// Latency and outcomes of one operation kind.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct KindSummary {
    /// Operations.
    pub ops: u64,
    /// Hits (found, stored, deleted).
    pub hits: u64,
    /// Misses (absent, not stored).
    pub misses: u64,
    /// Median latency.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Slowest.
    pub max_us: f64,
}

/// One run, as written to NDJSON.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RunRecord {
    /// `ycsb` or `replay`.
    pub kind: String,
    /// YCSB workload name, or trace file name.
    pub workload: String,
    /// The target (`embedded`, `dashmap`, `memcached://…`).
    pub target: String,
    /// The timed phase (`load`, `run`, `replay`).
    pub phase: String,
    /// Worker processes.
    pub processes: usize,
    /// Threads per process.
    pub threads: usize,
    /// `--hosts-apart`: each process had a host id of its own.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hosts_apart: bool,
    /// Operations done in the timed phase.
    pub ops: u64,
    /// Timed seconds (the slowest worker's).
    pub seconds: f64,
    /// `ops / seconds`.
    pub ops_per_sec: f64,
    /// Median latency over all kinds.
    pub p50_us: f64,
    /// 99th percentile over all kinds.
    pub p99_us: f64,
    /// 99.9th percentile over all kinds.
    pub p999_us: f64,
    /// Slowest operation.
    pub max_us: f64,
    /// Hits over all kinds.
    pub hits: u64,
    /// Misses over all kinds.
    pub misses: u64,
    /// PSS summed over the worker processes at the end of the timed phase.
    pub pss_bytes: u64,
    /// Minor page faults during the timed phase, summed over processes.
    pub page_faults: u64,
    /// PSS summed over the worker processes during the run, sampled about every 100 ms
    /// from the workers' start (loads and set-up included): `[seconds, bytes]`.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub pss_over_time: Vec<(f64, u64)>,
    /// Where the timed phase starts on [`RunRecord::pss_over_time`]'s time axis, seconds.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub pss_timed_from_s: Option<f64>,
    /// HWcc bytes of the heap, for heap targets.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub hwcc_bytes: Option<u64>,
    /// Cache lines written back by the SWcc rules per operation of the timed phase, for heap
    /// targets (zero in a `hardware` heap).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub writebacks_per_op: Option<f64>,
    /// Cache lines invalidated by the SWcc rules per operation, for heap targets.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub invalidations_per_op: Option<f64>,
    /// mCAS requests per operation, for heap targets (zero but in an `mcas` heap).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub mcas_per_op: Option<f64>,
    /// `--ab-windows`: time per operation with the A/B switch on over the time with it off.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub ab_on_over_off: Option<f64>,
    /// `--ab-windows`: operations timed with the switch off and on.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub ab_ops: Option<[u64; 2]>,
    /// `--ab-windows`: nanoseconds per operation with the switch off and on (each worker's
    /// time in its operations, not the run's wall time per operation).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub ab_ns_per_op: Option<[f64; 2]>,
    /// `--ab-windows`: latency percentiles (50, 99, 99.9) of the operations timed with the
    /// switch off and on, in microseconds: `[[p50, p99, p99.9] off, [...] on]`. So a tail is
    /// compared inside one run, as the time per operation is.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub ab_latency_us: Option<[[f64; 3]; 2]>,
    /// `--ab-target` (or `--ab-heap`): the target timed while the switch was on (the store in
    /// `--heap` while it was off).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub ab_target: Option<String>,
    /// `--ab-heap`: the heap of that target, when it is the store in a second heap.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub ab_heap: Option<String>,
    /// A server target's answer to `version` (`1.6.21`; podkv serve's says `-podkv-`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub server_version: Option<String>,
    /// Where latencies start: `send` (closed loop: when the operation was sent) or
    /// `intended` (open loop: when it was due, so queueing behind a slow answer counts).
    #[serde(default = "latency_from_send")]
    pub latency_from: String,
    /// The offered load of an open loop at `--target-rate`, operations per second.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub target_rate: Option<f64>,
    /// Per-kind details (kinds that ran).
    pub per_op: BTreeMap<String, KindSummary>,
    /// Requests and failures per server, every phase, summed over processes (a memcached
    /// target with `?timeout_ms=`; failed requests count as misses above).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub servers: Vec<ServerTally>,
    /// CPU nanoseconds the workers' timed loops spent per operation (against
    /// `--target null`: the runner's own cost, immune to other processes' load).
    pub cpu_ns_per_op: f64,
    /// Wall-clock seconds of the whole run, set-up and load included.
    pub wall_seconds: f64,
    /// The commit of the binary.
    pub git_commit: String,
    /// The `podkv` command line that made the record.
    #[serde(default)]
    pub command: String,
    /// The suite that ran it (its file's stem), if any.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub suite: Option<String>,
    /// The paper figure that suite reproduces, if it says.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub figure: Option<String>,
    /// Whether the workers outnumbered the machine's CPUs.
    #[serde(default)]
    pub oversubscribed: bool,
}

/// The processes' PSS samples summed, and where the timed phase starts on their time axis.
fn pss_over_time(reports: &[ProcessReport]) -> (Vec<(f64, u64)>, Option<f64>) {
    let samples: Vec<Vec<(u64, u64)>> = reports.iter().map(|r| r.pss_samples.clone()).collect();
    let (summed, t0) = process_stats::sum_pss_samples(&samples);
    let timed_from = reports
        .iter()
        .map(|r| r.timed_from_ns)
        .filter(|&t| t > 0)
        .min();
    let from_s = timed_from
        .filter(|_| !summed.is_empty())
        .map(|t| t.saturating_sub(t0) as f64 / 1e9);
    (summed, from_s)
}

fn latency_from_send() -> String {
    "send".into()
}

/// Each operation kind's summary, for the kinds that ran.
fn per_kind(spec: &RunSpec, tally: &Tally) -> BTreeMap<String, KindSummary> {
    let us = tally.ns_per_tick() / 1000.0;
    let at = |h: &hdrhistogram::Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 * us;
    let mut per_op = BTreeMap::new();
    for (i, name) in spec.job.kind_names().iter().enumerate() {
        let h = &tally.histograms[i];
        if tally.count(i) > 0 {
            per_op.insert(
                (*name).to_owned(),
                KindSummary {
                    ops: tally.count(i),
                    hits: tally.hits[i],
                    misses: tally.misses[i],
                    p50_us: at(h, 0.5),
                    p99_us: at(h, 0.99),
                    p999_us: at(h, 0.999),
                    max_us: h.max() as f64 * us,
                },
            );
        }
    }
    per_op
}

/// Each A/B side's p50, p99 and p99.9 in microseconds (off, on), when both ran.
fn ab_latency(tally: &Tally) -> Option<[[f64; 3]; 2]> {
    let us = tally.ns_per_tick() / 1000.0;
    match tally.ab_histograms.as_slice() {
        [off, on] if !off.is_empty() && !on.is_empty() => {
            Some([off, on].map(|h| [0.5, 0.99, 0.999].map(|q| h.value_at_quantile(q) as f64 * us)))
        }
        _ => None,
    }
}

impl RunRecord {
    /// Builds the record from every process's report.
    pub fn from_reports(
        spec: &RunSpec,
        reports: &[ProcessReport],
        wall: Duration,
    ) -> anyhow::Result<Self> {
        let tally = merge(spec, reports)?;
        let (pss_over_time, pss_timed_from_s) = pss_over_time(reports);
        let coherence = reports
            .iter()
            .filter_map(|r| r.coherence)
            .reduce(CoherenceOps::plus);
        let context = process_stats::context();
        let us = tally.ns_per_tick() / 1000.0;
        let at = |h: &hdrhistogram::Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 * us;
        let per_op = per_kind(spec, &tally);
        let all = tally.overall();
        let ops = tally.total();
        let seconds = (tally.elapsed_ns_max.max(1)) as f64 / 1e9;
        let phase = match &spec.job {
            Job::Ycsb(j) => j.phases().last().map_or("run", |p| p.as_str()),
            Job::Replay { .. } => "replay",
            Job::Bench(_) => "run",
        };
        Ok(RunRecord {
            kind: spec.job.kind().into(),
            workload: spec.job.workload_name(),
            target: spec.target.name(),
            phase: phase.into(),
            processes: spec.processes,
            threads: spec.threads,
            hosts_apart: spec.hosts_apart,
            ops,
            seconds,
            ops_per_sec: ops as f64 / seconds,
            p50_us: at(&all, 0.5),
            p99_us: at(&all, 0.99),
            p999_us: at(&all, 0.999),
            max_us: all.max() as f64 * us,
            hits: tally.hits.iter().sum(),
            misses: tally.misses.iter().sum(),
            pss_bytes: reports.iter().map(|r| r.pss_bytes).sum(),
            page_faults: reports.iter().map(|r| r.page_faults).sum(),
            pss_over_time,
            pss_timed_from_s,
            hwcc_bytes: reports.iter().find_map(|r| r.hwcc_bytes),
            writebacks_per_op: coherence.map(|c| c.writebacks as f64 / ops.max(1) as f64),
            invalidations_per_op: coherence.map(|c| c.invalidations as f64 / ops.max(1) as f64),
            mcas_per_op: coherence.map(|c| c.mcas as f64 / ops.max(1) as f64),
            ab_on_over_off: tally.ab.on_over_off(),
            ab_ops: spec.ab_windows.map(|_| tally.ab.ops),
            ab_ns_per_op: spec
                .ab_windows
                .map(|_| tally.ab.ticks_per_op().map(|t| t * tally.ns_per_tick())),
            ab_latency_us: ab_latency(&tally),
            ab_target: spec.ab_target.as_ref().map(TargetSpec::name),
            ab_heap: match &spec.ab_target {
                Some(TargetSpec::Embedded { heap }) => Some(heap.display().to_string()),
                _ => None,
            },
            server_version: reports.iter().find_map(|r| r.server_version.clone()),
            latency_from: spec.pacing.latency_from().into(),
            target_rate: match spec.pacing {
                Pacing::Rate { ops_per_sec } => Some(ops_per_sec),
                Pacing::Closed | Pacing::Timestamps { .. } => None,
            },
            per_op,
            servers: merge_servers(reports),
            cpu_ns_per_op: tally.cpu_ns_sum as f64 / ops.max(1) as f64,
            wall_seconds: wall.as_secs_f64(),
            git_commit: process_stats::git_commit().into(),
            command: context.command,
            suite: context.suite,
            figure: context.figure,
            oversubscribed: process_stats::oversubscribed(spec.workers()),
        })
    }

    /// The runner's cost per operation in nanoseconds, meaningful against `--target null`:
    /// timed seconds × workers / ops.
    pub fn ns_per_op_per_worker(&self) -> f64 {
        self.seconds * 1e9 * (self.processes * self.threads) as f64 / self.ops.max(1) as f64
    }

    /// Prints the table on stdout.
    pub fn print_table(&self, kinds: &[&str]) {
        println!(
            "{} {} on {}: {} processes × {} threads{}, {} phase",
            self.kind,
            self.workload,
            self.target,
            self.processes,
            self.threads,
            if self.hosts_apart {
                " (hosts apart)"
            } else {
                ""
            },
            self.phase
        );
        // Rates of no operations would be noise divided by one.
        let rates = if self.ops == 0 {
            "no operations timed (the phase had none)".to_owned()
        } else {
            format!(
                "{} ops in {:.3} s = {:.0} ops/s ({:.1} ns/op per worker, {:.1} CPU ns/op)",
                self.ops,
                self.seconds,
                self.ops_per_sec,
                self.ns_per_op_per_worker(),
                self.cpu_ns_per_op,
            )
        };
        println!(
            "  {rates}; pss {}, {} page faults{}",
            human_bytes(self.pss_bytes),
            self.page_faults,
            self.hwcc_bytes
                .map_or(String::new(), |b| format!(", hwcc {}", human_bytes(b)))
        );
        if let (Some(wb), Some(inv), Some(mcas)) = (
            self.writebacks_per_op,
            self.invalidations_per_op,
            self.mcas_per_op,
        ) {
            println!(
                "  coherence per op: {wb:.2} lines written back, {inv:.2} lines invalidated, {mcas:.2} mCAS"
            );
        }
        self.print_ab();
        if self.latency_from != "send" {
            let offered = self
                .target_rate
                .map_or("at the trace's timestamps".into(), |r| {
                    format!("{r:.0} ops/s offered")
                });
            println!("  open loop, {offered}: latency from each operation's intended send time");
        }
        println!(
            "  {:<10} {:>12} {:>12} {:>12} {:>10} {:>10} {:>10} {:>10}",
            "op", "count", "hits", "misses", "p50 us", "p99 us", "p99.9 us", "max us"
        );
        for name in kinds {
            if let Some(k) = self.per_op.get(*name) {
                println!(
                    "  {:<10} {:>12} {:>12} {:>12} {:>10.2} {:>10.2} {:>10.2} {:>10.1}",
                    name, k.ops, k.hits, k.misses, k.p50_us, k.p99_us, k.p999_us, k.max_us
                );
            }
        }
        println!(
            "  {:<10} {:>12} {:>12} {:>12} {:>10.2} {:>10.2} {:>10.2} {:>10.1}",
            "all",
            self.ops,
            self.hits,
            self.misses,
            self.p50_us,
            self.p99_us,
            self.p999_us,
            self.max_us
        );
        self.print_servers();
    }

    /// Prints the per-server requests and errors, if counted.
    /// The `--ab-windows` line: time per operation with the switch on over off.
    fn print_ab(&self) {
        if let Some([off, on]) = self.ab_ops {
            let ratio = self
                .ab_on_over_off
                .map_or("none (a side ran no operation)".to_owned(), |r| {
                    format!("{r:.4}")
                });
            let [off_ns, on_ns] = self.ab_ns_per_op.unwrap_or_default();
            println!(
                "  ab on/off: {ratio} time per operation ({on} operations on at {on_ns:.0} ns, \
                 {off} off at {off_ns:.0} ns)"
            );
            if let Some([off, on]) = self.ab_latency_us {
                let ratio = |i: usize| on[i] / off[i].max(f64::MIN_POSITIVE);
                println!(
                    "  ab latency on/off: p50 {:.2}/{:.2} µs ({:.2}), p99 {:.2}/{:.2} µs ({:.2}), \
                     p99.9 {:.2}/{:.2} µs ({:.2})",
                    on[0],
                    off[0],
                    ratio(0),
                    on[1],
                    off[1],
                    ratio(1),
                    on[2],
                    off[2],
                    ratio(2)
                );
            }
            match (&self.ab_target, &self.ab_heap) {
                (_, Some(heap)) => {
                    println!("  ab on: the store in {heap}; off: the store in --heap")
                }
                (Some(target), None) => println!("  ab on: {target}; off: the store in --heap"),
                (None, None) => {}
            }
        }
    }

    fn print_servers(&self) {
        for s in &self.servers {
            println!(
                "  server {:<21} {:>12} requests {:>12} errors",
                s.server, s.requests, s.errors
            );
        }
    }

    /// Appends the record as one line of JSON.
    pub fn append_json(&self, path: &Path) -> anyhow::Result<()> {
        append_ndjson(path, self)
    }
}
