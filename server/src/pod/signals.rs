//! The monitor's one piece of process-global state: whether SIGTERM or SIGINT asked it to stop.
//! Kept here, apart from everything else, as the handler must be.

use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_signal: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Makes SIGTERM and SIGINT set the stop flag instead of killing the process.
pub fn install() {
    for signal in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" action; `on_stop` only
        // stores to an atomic, which is async-signal-safe.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_stop as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// Whether a stop was asked for.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// Sends `signal` to `pid`; returns whether it was delivered.
pub fn send(pid: u32, signal: libc::c_int) -> bool {
    // SAFETY: kill has no memory preconditions; a pid of zero (a process group) is refused.
    pid != 0 && unsafe { libc::kill(pid as libc::pid_t, signal) } == 0
}
