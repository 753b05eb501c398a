//! What a benchmark reports besides time: memory (PSS), page faults, the build's commit.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pss_of_a_live_process_is_positive() {
        assert!(pss_bytes() > 0);
    }
}
