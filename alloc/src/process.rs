//! Who this process is, as thread slots record it: pid plus start time (so a reused pid is not
//! mistaken for the same process).

/// This process's pid and start time (clock ticks after boot, `/proc/self/stat` field 22).
pub fn me() -> (u32, u64) {
    let pid = std::process::id();
    (pid, start_time(pid).unwrap_or(0))
}

/// The start time of process `pid`, if it exists.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: fields resume after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

/// Whether process `pid` that started at `start` is still running.
pub fn is_alive(pid: u32, start: u64) -> bool {
    match start_time(pid) {
        Some(now) => start == 0 || now == start,
        None => false,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_is_alive_and_has_a_start_time() {
        let (pid, start) = super::me();
        assert!(start > 0);
        assert!(super::is_alive(pid, start));
        assert!(
            !super::is_alive(pid, start + 1),
            "another start time is another process"
        );
    }
}
