//! What a benchmark reports besides time: memory (PSS), page faults, the build's commit, and
//! the context every record carries (the command that made it, the suite and figure it
//! belongs to, whether its workers outnumber the CPUs).

use std::sync::Mutex;

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

/// The context of a record made now.
pub fn context() -> RunContext {
    CONTEXT
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
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
    crate::runner::cpus::allowed_cpus().len().max(1)
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
    fn command_lines_quote_what_a_shell_would_split() {
        let args = ["/x/podkv", "ycsb", "-p", "a b", "it's"].map(String::from);
        assert_eq!(command_line(args), r"podkv ycsb -p 'a b' 'it'\''s'");
    }
}
