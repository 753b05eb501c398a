//! The model's SIGSEGV handler: fills an untouched cache page on first touch and passes every
//! other fault to the handler installed before it (`alloc::fault`'s, Rust's stack-overflow
//! handler, or the default action). `alloc::fault`'s handler asks [`super::serve_fault`]
//! first as well, so the order in which the two are installed does not matter.

use crate::segv::{self, Previous};
use std::sync::{Once, OnceLock};

static INSTALL: Once = Once::new();
static PREVIOUS: OnceLock<Previous> = OnceLock::new();

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
    // SAFETY: forwarding the kernel's own arguments to the previous disposition.
    unsafe { segv::chain(PREVIOUS.get(), sig, info, ctx) }
}
