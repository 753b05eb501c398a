//! Who a process is across its life: its pid plus its start time, so that a reused pid is
//! another process. A leaf fact the layers above judge liveness by (`alloc::process`) and the
//! coherence model names a process's cache by ([`crate::model`]).

/// The start time of process `pid`, if it exists (clock ticks after boot, `/proc/PID/stat`
/// field 22).
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: fields resume after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}
