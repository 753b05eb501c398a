//! Chaining SIGSEGV handlers: the disposition found when a handler is installed, and passing a
//! fault that is not the handler's own to it. The heap (`alloc::fault`) and the coherence
//! model (`model::fault`) each install a handler and chain this way.

/// The SIGSEGV disposition found at installation, to chain to.
pub struct Previous(pub libc::sigaction);

// SAFETY: a plain C struct of integers and function pointers, written once before the handler
// that reads it is installed.
unsafe impl Sync for Previous {}
// SAFETY: as above.
unsafe impl Send for Previous {}

/// Passes a fault that is not the caller's to `previous`. For the default (or ignore), or no
/// previous disposition, it restores the default and returns, so the faulting instruction runs
/// again and the kernel kills the process with SIGSEGV, exactly as without the handler.
///
/// # Safety
/// Only from a SIGSEGV handler, with the kernel's arguments.
pub unsafe fn chain(
    previous: Option<&Previous>,
    sig: libc::c_int,
    info: *mut libc::siginfo_t,
    ctx: *mut libc::c_void,
) {
    let Some(Previous(prev)) = previous else {
        return restore_default(sig);
    };
    match prev.sa_sigaction {
        libc::SIG_DFL | libc::SIG_IGN => restore_default(sig),
        handler if prev.sa_flags & libc::SA_SIGINFO != 0 => {
            // SAFETY: a SA_SIGINFO handler has this signature; it was installed for SIGSEGV.
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { std::mem::transmute(handler) };
            f(sig, info, ctx)
        }
        handler => {
            // SAFETY: a plain handler has this signature.
            let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
            f(sig)
        }
    }
}

fn restore_default(sig: libc::c_int) {
    // SAFETY: sigaction is plain data; all-zero with SIG_DFL (0) is the default disposition.
    let mut dfl: libc::sigaction = unsafe { std::mem::zeroed() };
    dfl.sa_sigaction = libc::SIG_DFL;
    // SAFETY: sigaction is async-signal-safe; installing the default disposition.
    unsafe { libc::sigaction(sig, &dfl, std::ptr::null_mut()) };
}
