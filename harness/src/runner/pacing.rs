//! Open-loop load: when each operation is *meant* to be sent, and latency measured from then.
//!
//! A closed loop (the default) sends the next operation when the last one answered, so a slow
//! answer also delays every operation behind it, and those delays are never measured
//! (coordinated omission). An open loop fixes each operation's intended send time in advance,
//! waits for it, and records latency from it: time spent queued behind a slow answer counts.
//!
//! - [`Pacing::Rate`] (`--target-rate OPS`, as YCSB's `-target`): the run's offered load,
//!   shared evenly by its workers; worker operation `i` is due at `start + i / rate`.
//! - [`Pacing::Timestamps`] (`podkv replay --pace timestamps`): each request at its recorded
//!   time, divided by `--speed`. Trace timestamps are whole seconds, so the requests a worker
//!   has within one second are spread evenly over it rather than sent as one burst.

use super::metrics::ticks;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// How a run's operations are sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub enum Pacing {
    /// The next operation when the last one answered; latency from the send.
    #[default]
    Closed,
    /// Open loop at this many operations per second over the whole run.
    Rate {
        /// Offered load of the run (all workers).
        ops_per_sec: f64,
    },
    /// Open loop at each trace request's recorded time, `speed` times faster.
    Timestamps {
        /// Replay speed (1 = as recorded).
        speed: f64,
    },
}

impl Pacing {
    /// What the run's latencies measure, for its record.
    pub fn latency_from(&self) -> &'static str {
        match self {
            Pacing::Closed => "send",
            Pacing::Rate { .. } | Pacing::Timestamps { .. } => "intended",
        }
    }

    /// Whether operations wait for an intended send time.
    pub fn is_open(&self) -> bool {
        !matches!(self, Pacing::Closed)
    }
}

/// Gaps longer than this are slept (less a margin), not spun: the workers share the cores
/// with the target, and a spinning client would steal the server's CPU. The worker's timer
/// slack is set to 1 ns ([`Schedule::start`]), so a sleep ends within a few microseconds of
/// its deadline instead of the default 50 µs late.
const NS_SLEEP_MIN: u64 = 20_000;
/// What a sleep leaves to the spin, for the scheduler's lateness.
const NS_SLEEP_MARGIN: u64 = 5_000;

/// One worker's schedule: intended send times as nanoseconds after its start, kept on the
/// monotonic clock (so they never drift from the wall), and lateness converted to the
/// recorder's ticks by a short calibration (whose small error scales only the lateness).
pub struct Schedule {
    start: Instant,
    ticks_per_ns: f64,
    /// Nanoseconds between two operations of a rate-paced worker.
    ns_per_op: f64,
    /// Nanoseconds of replay per nanosecond of trace time (1 / speed).
    ns_per_trace_ns: f64,
}

impl Schedule {
    /// Calibrates the tick clock against [`Instant`] (a few milliseconds) and starts the
    /// schedule now, for a worker that is one of `workers` (and is the calling thread).
    pub fn start(pacing: &Pacing, workers: usize) -> Schedule {
        // SAFETY: PR_SET_TIMERSLACK only changes this thread's timer slack; failure leaves
        // the default (sleeps end later, so the spin does more of the wait).
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
        let ticks_per_ns = calibrate();
        let (ns_per_op, ns_per_trace_ns) = match *pacing {
            Pacing::Closed => (0.0, 0.0),
            Pacing::Rate { ops_per_sec } => (1e9 * workers as f64 / ops_per_sec, 0.0),
            Pacing::Timestamps { speed } => (0.0, 1.0 / speed),
        };
        Schedule {
            start: Instant::now(),
            ticks_per_ns,
            ns_per_op,
            ns_per_trace_ns,
        }
    }

    /// When this worker's operation `i` is due, or a request recorded `trace_ns` after the
    /// trace's start: nanoseconds after the schedule's start.
    #[inline]
    pub fn due(&self, i: u64, trace_ns: Option<f64>) -> u64 {
        match trace_ns {
            Some(t) if self.ns_per_trace_ns > 0.0 => (t * self.ns_per_trace_ns) as u64,
            _ => (i as f64 * self.ns_per_op) as u64,
        }
    }

    /// Waits until `due` (returns at once when late); how late it is then, in ticks, to add
    /// to the operation's own time.
    #[inline]
    pub fn wait_until(&self, due: u64) -> u64 {
        loop {
            let now = self.start.elapsed().as_nanos() as u64;
            if now >= due {
                return ((now - due) as f64 * self.ticks_per_ns) as u64;
            }
            let gap = due - now;
            if gap > NS_SLEEP_MIN {
                std::thread::sleep(Duration::from_nanos(gap - NS_SLEEP_MARGIN));
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

/// Ticks per nanosecond, measured over a short interval.
fn calibrate() -> f64 {
    let (t0, i0) = (ticks(), Instant::now());
    std::thread::sleep(Duration::from_millis(5));
    let (t1, i1) = (ticks(), Instant::now());
    let ns = i1.duration_since(i0).as_nanos().max(1) as f64;
    (t1.wrapping_sub(t0)) as f64 / ns
}

/// Intended offsets (ns after second `origin`, the trace's first) of requests with these
/// whole-second timestamps, in order: the requests of one second spread evenly over it.
pub fn spread_seconds(origin: u64, timestamps: impl IntoIterator<Item = u64>) -> Vec<f64> {
    let stamps: Vec<u64> = timestamps.into_iter().collect();
    let mut out = Vec::with_capacity(stamps.len());
    let mut i = 0;
    while i < stamps.len() {
        let second = stamps[i];
        let run = stamps[i..].iter().take_while(|&&s| s == second).count();
        let base = second.saturating_sub(origin) as f64 * 1e9;
        out.extend((0..run).map(|j| base + j as f64 * 1e9 / run as f64));
        i += run;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_of_one_second_are_spread_over_it() {
        let at = spread_seconds(10, [10, 10, 10, 10, 11, 13]);
        assert_eq!(at, vec![0.0, 0.25e9, 0.5e9, 0.75e9, 1e9, 3e9]);
        assert!(spread_seconds(0, []).is_empty());
        assert_eq!(spread_seconds(8, [9]), vec![1e9]);
    }

    #[test]
    fn a_rate_schedule_spaces_a_workers_operations_by_workers_over_rate() {
        let s = Schedule::start(
            &Pacing::Rate {
                ops_per_sec: 1000.0,
            },
            2,
        );
        assert_eq!(s.due(0, None), 0);
        assert_eq!(s.due(3, None), 6_000_000);
    }

    #[test]
    fn a_timestamp_schedule_divides_trace_time_by_the_speed() {
        let s = Schedule::start(&Pacing::Timestamps { speed: 4.0 }, 3);
        assert_eq!(s.due(7, Some(2e9)), 500_000_000);
    }

    #[test]
    fn waiting_reaches_the_due_time_and_a_late_one_returns_at_once() {
        let s = Schedule::start(&Pacing::Rate { ops_per_sec: 100.0 }, 1);
        let due = s.due(1, None);
        s.wait_until(due);
        assert!(s.start.elapsed() >= Duration::from_nanos(due));
        let t = Instant::now();
        let late = s.wait_until(s.due(0, None));
        assert!(t.elapsed() < Duration::from_millis(5));
        assert!(late as f64 / s.ticks_per_ns >= 1e7, "10 ms late at least");
    }
}
