//! What a benchmark reports besides time: memory (PSS), page faults, the build's commit, and
//! the context every record carries (the command that made it, the suite and figure it
//! belongs to, whether its workers outnumber the CPUs), and PSS sampled over a run.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Proportional set size of this process in bytes (`/proc/self/smaps_rollup`), 0 if unknown.
pub fn pss_bytes() -> u64 {
    let Ok(text) = std::fs::read_to_string("/proc/self/smaps_rollup") else {
        return 0;
    };
    text.lines()
        .find_map(|line| line.strip_prefix("Pss:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map_or(0, |kb| kb * 1024)
}

/// How often [`sample_pss`] reads PSS at first, at the most.
pub const PSS_SAMPLE_INTERVAL: Duration = Duration::from_millis(100);

/// [`sample_pss`] waits at least this many times its last read's duration, so it takes at
/// most 2% of one CPU from the run it measures. A read of `smaps_rollup` walks the process's
/// page tables page by page: 2–6 ms for mimalloc's 415 MiB of 2 MiB pages, but 15–30 ms for a
/// pod heap's 230–460 MiB of 4 KiB shared pages (measured here), which at a fixed 100 ms took
/// a fifth of a CPU from the embedded target's runs only.
const COUNT_READS_PER_WAIT: u32 = 50;

/// Most samples [`sample_pss`] keeps: past it, every other one is dropped and the interval
/// doubles, so a paper-scale run's record stays small.
pub const PSS_SAMPLES_MAX: usize = 512;

/// This machine's monotonic clock in nanoseconds: the same in every process, so samples of
/// several processes can be summed at common instants.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Samples this process's PSS every [`PSS_SAMPLE_INTERVAL`] or more (see
/// [`COUNT_READS_PER_WAIT`]; thinned past
/// [`PSS_SAMPLES_MAX`]) until `stop` is raised, then once more: `(monotonic ns, bytes)`.
/// Runs on a thread of its own beside the workers.
pub fn sample_pss(stop: &AtomicBool) -> Vec<(u64, u64)> {
    let mut samples = Vec::new();
    let mut interval = PSS_SAMPLE_INTERVAL;
    loop {
        let read = Instant::now();
        samples.push((monotonic_ns(), pss_bytes()));
        let cost = read.elapsed();
        if samples.len() >= PSS_SAMPLES_MAX {
            samples = samples.into_iter().step_by(2).collect();
            interval *= 2;
        }
        let until = read + interval.max(cost * COUNT_READS_PER_WAIT);
        loop {
            if stop.load(Ordering::Acquire) {
                samples.push((monotonic_ns(), pss_bytes()));
                return samples;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            std::thread::sleep(left.min(Duration::from_millis(10)));
        }
    }
}

/// The sum over processes of their sampled PSS, as a step function: at each instant any
/// process sampled, every process's latest sample (0 before its first). Returns
/// `(seconds after the first sample, bytes)`, at most [`PSS_SAMPLES_MAX`] points, and the
/// first sample's instant.
pub fn sum_pss_samples(per_process: &[Vec<(u64, u64)>]) -> (Vec<(f64, u64)>, u64) {
    let mut instants: Vec<u64> = per_process.iter().flatten().map(|&(t, _)| t).collect();
    instants.sort_unstable();
    instants.dedup();
    let Some(&t0) = instants.first() else {
        return (Vec::new(), 0);
    };
    let step = instants.len().div_ceil(PSS_SAMPLES_MAX).max(1);
    let last = instants.len() - 1;
    let summed = instants
        .iter()
        .enumerate()
        .filter(|&(i, _)| i % step == 0 || i == last)
        .map(|(_, &t)| {
            let bytes = per_process
                .iter()
                .map(|s| {
                    s.iter()
                        .take_while(|&&(at, _)| at <= t)
                        .last()
                        .map_or(0, |&(_, b)| b)
                })
                .sum();
            ((t - t0) as f64 / 1e9, bytes)
        })
        .collect();
    (summed, t0)
}

/// Minor page faults of this process so far.
pub fn minor_faults() -> u64 {
    // SAFETY: `rusage` is plain data; getrusage fills it or fails.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid out pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0;
    }
    usage.ru_minflt as u64
}

/// The commit this binary was built from (`unknown` outside a git checkout).
pub fn git_commit() -> &'static str {
    option_env!("PODKV_GIT_COMMIT").unwrap_or("unknown")
}

/// What a record says about the command that made it: set by `podkv suite` for each of its
/// points; a plain command line is its own context.
#[derive(Clone, Debug, Default)]
pub struct RunContext {
    /// The `podkv` command line of the point.
    pub command: String,
    /// The suite file's stem (`alloc-threads`), if run by a suite.
    pub suite: Option<String>,
    /// The paper figure the suite reproduces (`fig9`), if it says.
    pub figure: Option<String>,
}

/// The context of the records being made now; `None`: this process's own command line.
static CONTEXT: Mutex<Option<RunContext>> = Mutex::new(None);

/// Sets (or with `None` clears) the context of the records made from now on.
pub fn set_context(context: Option<RunContext>) {
    *CONTEXT.lock().unwrap_or_else(|e| e.into_inner()) = context;
}

/// The environment variables a suite passes the process of each point: its command line,
/// suite and figure (empty: none).
pub const ENV_COMMAND: &str = "PODKV_RUN_COMMAND";
/// See [`ENV_COMMAND`].
pub const ENV_SUITE: &str = "PODKV_RUN_SUITE";
/// See [`ENV_COMMAND`].
pub const ENV_FIGURE: &str = "PODKV_RUN_FIGURE";

/// The context of a record made now: the one set here, else a suite's (from the
/// environment), else this process's own command line.
pub fn context() -> RunContext {
    let env = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
    CONTEXT
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .or_else(|| {
            Some(RunContext {
                command: env(ENV_COMMAND)?,
                suite: env(ENV_SUITE),
                figure: env(ENV_FIGURE),
            })
        })
        .unwrap_or_else(|| RunContext {
            command: command_line(std::env::args()),
            ..RunContext::default()
        })
}

/// A command line as one shell-readable string (arguments with spaces or quotes quoted).
pub fn command_line(args: impl IntoIterator<Item = String>) -> String {
    let quote = |a: String| {
        if !a.is_empty()
            && a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@+%".contains(c))
        {
            a
        } else {
            format!("'{}'", a.replace('\'', r"'\''"))
        }
    };
    let mut args = args.into_iter();
    let program = args.next().map(|p| {
        std::path::Path::new(&p)
            .file_name()
            .map_or(p.clone(), |n| n.to_string_lossy().into_owned())
    });
    program
        .into_iter()
        .chain(args.map(quote))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The CPUs this process may run on (at least 1): the evaluation's N.
pub fn cores() -> usize {
    podkv_hw::cpus::allowed_to_process().len().max(1)
}

/// Whether `workers` busy threads outnumber the CPUs (such points are marked in records).
pub fn oversubscribed(workers: usize) -> bool {
    workers > cores()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pss_of_a_live_process_is_positive() {
        assert!(pss_bytes() > 0);
    }

    #[test]
    fn sampled_pss_sums_each_process_latest_sample() {
        let a = vec![(100, 10), (300, 30)];
        let b = vec![(200, 5)];
        let (sum, t0) = sum_pss_samples(&[a, b]);
        assert_eq!(t0, 100);
        assert_eq!(sum, [(0.0, 10), (100e-9, 15), (200e-9, 35)]);
        let stop = AtomicBool::new(true);
        let samples = sample_pss(&stop);
        assert_eq!(samples.len(), 2, "one sample, and one when stopped");
        assert!(samples.iter().all(|&(_, b)| b > 0));
    }

    #[test]
    fn command_lines_quote_what_a_shell_would_split() {
        let args = ["/x/podkv", "ycsb", "-p", "a b", "it's"].map(String::from);
        assert_eq!(command_line(args), r"podkv ycsb -p 'a b' 'it'\''s'");
    }
}
