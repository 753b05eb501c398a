//! The model's SIGSEGV handler: fills an untouched cache page on first touch and passes every
//! other fault to the handler installed before it (`alloc::fault`'s, Rust's stack-overflow
//! handler, or the default action). `alloc::fault`'s handler asks [`super::serve_fault`]
//! first as well, so the order in which the two are installed does not matter.

use std::sync::{Once, OnceLock};

static INSTALL: Once = Once::new();
static PREVIOUS: OnceLock<Previous> = OnceLock::new();

struct Previous(libc::sigaction);

// SAFETY: a plain C struct of integers and function pointers, written once before the handler
// that reads it is installed.
unsafe impl Sync for Previous {}
// SAFETY: as above.
unsafe impl Send for Previous {}

pub(super) fn install() {
    INSTALL.call_once(|| {
        // SAFETY: sigaction is plain data; all-zero is a valid empty value to fill in.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: querying the current disposition into a valid out pointer.
        unsafe { libc::sigaction(libc::SIGSEGV, std::ptr::null(), &mut old) };
        let _ = PREVIOUS.set(Previous(old));
        // SAFETY: as above.
        let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
        new.sa_sigaction = on_segv as *const () as usize;
        new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        // SAFETY: `new.sa_mask` is a valid sigset to empty; the handler only reads atomics,
        // copies mapped memory and calls mprotect.
        unsafe {
            libc::sigemptyset(&mut new.sa_mask);
            libc::sigaction(libc::SIGSEGV, &new, std::ptr::null_mut());
        }
    });
}

extern "C" fn on_segv(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for a SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    if super::serve_fault(addr) {
        return;
    }
    let Some(Previous(prev)) = PREVIOUS.get() else {
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
