//! What `podkv heap chaos` found: the recoveries' times, every live worker's progress through
//! each window, and the latency distributions of the three phases against each other and
//! against the machine's floor. Latencies are summed over every worker's histograms in the
//! record and read as one hdrhistogram per measure and phase.

use super::record::{
    Record, MEASURES, MEASURE_NAMES, PHASE_CALM, PHASE_CONTROL, PHASE_FLOOR, PHASE_WINDOW,
    WORKERS_MAX,
};
use super::ChaosArgs;
use crate::runner::metrics;
use hdrhistogram::Histogram;
use std::sync::atomic::Ordering::Acquire;
use std::time::Duration;

/// What the coordinator saw over the run, besides the record's histograms.
#[derive(Default)]
pub(super) struct Observed {
    /// Per recovered slot: its recovery's wall and CPU time.
    pub(super) recoveries: Vec<(Duration, Duration)>,
    /// Allocations nobody took, freed while settling.
    pub(super) settled_allocs: u64,
    /// Frees a dead worker left unfinished, finished while settling.
    pub(super) settled_frees: u64,
    /// Per kill window: operations the living finished in it.
    pub(super) window_beats: Vec<u64>,
    /// Per control window: operations the living finished in it.
    pub(super) control_beats: Vec<u64>,
    /// How long the kill windows were open, in all.
    pub(super) window_time: Duration,
    /// How long the control windows were open, in all.
    pub(super) control_time: Duration,
}

/// A latency distribution (ns) summed over the workers, with its exact maximum.
pub(super) struct Latencies {
    histogram: Histogram<u64>,
    max: u64,
}

impl Latencies {
    /// The latencies of `measure` in `phase` over every worker.
    fn of(record: &Record, measure: usize, phase: usize) -> Self {
        let mut counts = vec![0u64; metrics::COUNT_INDEXES];
        let mut max = 0;
        for w in 0..WORKERS_MAX {
            let h = record.histogram(w, measure, phase);
            max = max.max(h[0].load(Acquire));
            for (count, b) in counts.iter_mut().zip(&h[1..]) {
                *count += b.load(Acquire);
            }
        }
        Latencies {
            histogram: metrics::histogram_of(&counts),
            max,
        }
    }

    fn len(&self) -> u64 {
        self.histogram.len()
    }

    /// The latency (ns) at quantile `q`: the top of the bucket holding it (at most the maximum).
    fn quantile(&self, q: f64) -> u64 {
        self.histogram.value_at_quantile(q).min(self.max)
    }

    /// Operations in buckets above the one holding `ns`.
    fn above(&self, ns: u64) -> u64 {
        self.len() - self.histogram.count_between(0, ns)
    }

    /// Operations per million in buckets above the one holding `ns`.
    fn per_million_above(&self, ns: u64) -> f64 {
        self.above(ns) as f64 * 1e6 / self.len().max(1) as f64
    }
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

/// Prints the run's findings (`elapsed`: since the first round).
pub(super) fn print(args: &ChaosArgs, record: &Record, observed: &Observed, elapsed: Duration) {
    println!(
        "chaos: {} kills of {} processes in {:.1} s: no leak, no loss, no double free; {} untaken allocations and {} unfinished frees settled",
        args.kills,
        args.processes,
        elapsed.as_secs_f64(),
        observed.settled_allocs,
        observed.settled_frees
    );
    print_recoveries(record, observed);
    print_windows(args, record, observed);
    for measure in 0..MEASURES {
        print_measure(record, observed, measure);
    }
    print_floor(args, record);
}

/// The recoveries' times, and the slowest operation of the run.
fn print_recoveries(record: &Record, observed: &Observed) {
    let (mut wall, mut cpu): (Vec<Duration>, Vec<Duration>) =
        observed.recoveries.iter().copied().unzip();
    wall.sort();
    cpu.sort();
    // The quantile `p` of `sorted`, in µs.
    let pct = |sorted: &[Duration], p: f64| {
        sorted[((sorted.len() - 1) as f64 * p) as usize].as_secs_f64() * 1e6
    };
    println!(
        "recovery of one dead slot ({} recoveries): median {:.1} µs, p99 {:.1} µs, max {:.1} µs (its CPU time: median {:.1}, p99 {:.1}, max {:.1} µs); slowest operation of any worker {:.2} ms",
        wall.len(),
        pct(&wall, 0.5),
        pct(&wall, 0.99),
        pct(&wall, 1.0),
        pct(&cpu, 0.5),
        pct(&cpu, 0.99),
        pct(&cpu, 1.0),
        [PHASE_CALM, PHASE_WINDOW, PHASE_CONTROL]
            .map(|phase| Latencies::of(record, 0, phase).max)
            .into_iter()
            .max()
            .unwrap_or(0) as f64
            / 1e6
    );
}

/// How the living progressed through the kill windows and the control windows.
fn print_windows(args: &ChaosArgs, record: &Record, observed: &Observed) {
    let mut window_beats = observed.window_beats.clone();
    let mut control_beats = observed.control_beats.clone();
    window_beats.sort_unstable();
    control_beats.sort_unstable();
    let ops = |phase| Latencies::of(record, 0, phase).len();
    let total = ops(PHASE_CALM) + ops(PHASE_WINDOW) + ops(PHASE_CONTROL);
    println!(
        "while a process was dead and recovered ({} ms or more, then recovery; {} windows): every live worker kept finishing operations ({} to {} per window, median {}); {} of {} operations overlapped a kill window (open {:.2} s in all)",
        args.dead_ms,
        window_beats.len(),
        window_beats.first().copied().unwrap_or(0),
        window_beats.last().copied().unwrap_or(0),
        window_beats.get(window_beats.len() / 2).copied().unwrap_or(0),
        ops(PHASE_WINDOW),
        total,
        observed.window_time.as_secs_f64(),
    );
    println!(
        "control: as many windows as long with nobody killed (the victim rests, or stays dead and recovered; {} to {} operations per window, median {}; {} operations, open {:.2} s in all): what the same statistics give without a kill",
        control_beats.first().copied().unwrap_or(0),
        control_beats.last().copied().unwrap_or(0),
        control_beats.get(control_beats.len() / 2).copied().unwrap_or(0),
        ops(PHASE_CONTROL),
        observed.control_time.as_secs_f64(),
    );
}

/// One measure's tails: kill windows against control windows against the calm p99.9.
fn print_measure(record: &Record, observed: &Observed, m: usize) {
    let name = MEASURE_NAMES[m];
    let [calm, window, control] =
        [PHASE_CALM, PHASE_WINDOW, PHASE_CONTROL].map(|phase| Latencies::of(record, m, phase));
    let p999 = calm.quantile(0.999).max(1);
    println!(
        "  {name}: slowest operation in a kill window {:.1} µs = {:.2}x the normal p99.9, in a control window {:.1} µs = {:.2}x (kill / control {:.2}x); normal p50 {:.1}, p99 {:.1}, p99.9 {:.1}, p99.99 {:.1}, max {:.1} µs; p99.9 in kill windows {:.1}, in control windows {:.1} µs",
        us(window.max),
        window.max as f64 / p999 as f64,
        us(control.max),
        control.max as f64 / p999 as f64,
        window.max as f64 / control.max.max(1) as f64,
        us(calm.quantile(0.5)),
        us(calm.quantile(0.99)),
        us(p999),
        us(calm.quantile(0.9999)),
        us(calm.max),
        us(window.quantile(0.999)),
        us(control.quantile(0.999)),
    );
    // The tail's density, steadier than one maximum: if kill windows made operations wait,
    // more of theirs would pass the calm p99.99 than the control windows'. Per operation
    // and per second, as the machine's own slow moments come per second: kill windows,
    // where the dead process's exit takes CPU, hold fewer operations per second.
    let p9999 = calm.quantile(0.9999);
    let [in_window, in_control] = [&window, &control].map(|d| d.above(p9999));
    println!(
        "    over the normal p99.99 ({:.1} µs): {in_window} in kill windows ({:.0} per million operations, {:.0} per second), {in_control} in control windows ({:.0}, {:.0}); calm {:.0} per million",
        us(p9999),
        window.per_million_above(p9999),
        in_window as f64 / observed.window_time.as_secs_f64().max(1e-9),
        control.per_million_above(p9999),
        in_control as f64 / observed.control_time.as_secs_f64().max(1e-9),
        calm.per_million_above(p9999),
    );
    let [(calm_backs, calm_releases, _), (window_backs, window_releases, window_quiet), (control_backs, control_releases, control_quiet)] =
        [PHASE_CALM, PHASE_WINDOW, PHASE_CONTROL].map(|phase| record.calls_and_quiet_max(m, phase));
    println!(
        "    without the operations that backed or released pages themselves (backed / released: {window_backs} / {window_releases} in kill windows, {control_backs} / {control_releases} in control windows, {calm_backs} / {calm_releases} calm): slowest in a kill window {:.1} µs = {:.2}x the normal p99.9, in a control window {:.1} µs = {:.2}x",
        us(window_quiet),
        window_quiet as f64 / p999 as f64,
        us(control_quiet),
        control_quiet as f64 / p999 as f64,
    );
}

/// The machine's floor, when the workers timed it.
fn print_floor(args: &ChaosArgs, record: &Record) {
    let floor = Latencies::of(record, 0, PHASE_FLOOR).len();
    if floor == 0 {
        return;
    }
    let ratios: Vec<String> = MEASURE_NAMES
        .iter()
        .enumerate()
        .map(|(m, name)| {
            let d = Latencies::of(record, m, PHASE_FLOOR);
            format!(
                "{name} {:.0}x (p50 {:.2}, p99.9 {:.2}, max {:.1} µs)",
                d.max as f64 / d.quantile(0.999).max(1) as f64,
                us(d.quantile(0.5)),
                us(d.quantile(0.999)),
                us(d.max)
            )
        })
        .collect();
    println!(
        "machine floor: {floor} timings of a fixed busy loop that never waits, taken the same way by the {} workers at once before the first kill; the slowest against their p99.9: {}",
        args.processes,
        ratios.join("; ")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Latencies of these values, with their exact maximum.
    fn latencies(values: &[(u64, u64)]) -> Latencies {
        let mut counts = vec![0u64; metrics::COUNT_INDEXES];
        for &(ns, n) in values {
            counts[metrics::index_of(ns)] += n;
        }
        Latencies {
            histogram: metrics::histogram_of(&counts),
            max: values.iter().map(|&(ns, _)| ns).max().unwrap_or(0),
        }
    }

    #[test]
    fn a_latency_falls_in_a_bucket_whose_top_is_within_1_percent_above_it() {
        let mut v = 1u64;
        while v < 1 << 40 {
            let d = latencies(&[(v, 1), (u64::MAX >> 8, 1)]);
            let high = d.quantile(0.5);
            assert!(high >= v, "{v} in a bucket topped at {high}");
            assert!(high - v <= v / 100, "{v}: bucket top {high} too far");
            v = v + 1 + v / 7;
        }
    }

    #[test]
    fn quantiles_come_from_the_summed_counts_and_never_exceed_the_maximum() {
        let d = latencies(&[(500, 998), (40_000, 1), (900_000, 1)]);
        let top = |ns| latencies(&[(ns, 1), (u64::MAX >> 8, 1)]).quantile(0.5);
        assert_eq!(d.len(), 1000);
        assert_eq!(d.quantile(0.5), top(500));
        assert_eq!(d.quantile(0.999), top(40_000));
        assert_eq!(d.quantile(1.0), 900_000);
        assert_eq!(d.above(500), 2);
        assert_eq!(d.per_million_above(500), 2000.0);
        assert_eq!(d.per_million_above(40_000), 1000.0);
        assert_eq!(d.per_million_above(900_000), 0.0);
    }
}
