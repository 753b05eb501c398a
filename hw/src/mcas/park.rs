//! Parking for the software processor and its clients: sleep on a shared word until another
//! process changes it, instead of spinning or yielding.
//!
//! Not part of the FPGA protocol (hardware needs no CPU): it exists because a software
//! processor shares CPUs with its clients. A spinning or yielding thread on a busy machine
//! waits for a whole scheduler quantum (milliseconds) per round trip; a thread blocked on a
//! futex is woken, with wake-up preference, the moment the other side rings. The futex is the
//! low 32 bits of a `u64` in the shared mapping, so it works across processes (no
//! `FUTEX_PRIVATE_FLAG`).

use crate::sync::mapped::AtomicU64;
use std::time::Duration;

/// Sleeps until `word`'s low 32 bits differ from `expected`'s, `wake` is called on it, or
/// `timeout` passes (spurious returns are allowed: callers re-check).
pub fn wait(word: &AtomicU64, expected: u64, timeout: Duration) {
    #[cfg(target_os = "linux")]
    {
        let timeout = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: the address is a live, 8-byte aligned word of a shared mapping (its low half
        // on little-endian x86-64); FUTEX_WAIT only reads it and sleeps.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr().cast::<u32>(),
                libc::FUTEX_WAIT,
                expected as u32,
                &timeout as *const libc::timespec,
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (word, expected);
        std::thread::sleep(timeout.min(Duration::from_micros(50)));
    }
}

/// Wakes every thread of any process waiting on `word`.
pub fn wake(word: &AtomicU64) {
    #[cfg(target_os = "linux")]
    // SAFETY: as in `wait`; FUTEX_WAKE does not touch the word.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr().cast::<u32>(),
            libc::FUTEX_WAKE,
            i32::MAX,
        );
    }
    #[cfg(not(target_os = "linux"))]
    let _ = word;
}
