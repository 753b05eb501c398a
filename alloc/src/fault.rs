//! The process-global part of the pod heap: the SIGSEGV handler that installs huge mappings on
//! first touch (temporal pointer consistency, CXLALLOC §3.3), and the registry of open heaps it
//! consults. Everything process-global lives here, outside the core allocator.
//!
//! # How a fault is served
//! 1. A thread dereferences an offset inside a huge allocation that another process (or this
//!    one, before a free it has not yet noticed) mapped; this process has only the `PROT_NONE`
//!    reservation there, so the load faults.
//! 2. [`on_segv`] looks the address up in each registered heap's huge range
//!    ([`HugeView::map_on_fault`]): the reservation array names the owning slot, whose
//!    descriptors say whether a live allocation covers the address.
//! 3. If one does, the handler publishes the allocation's hazard offset, maps it with
//!    `MAP_FIXED` at its offset, and returns: the faulting instruction runs again and succeeds.
//! 4. Otherwise the fault is not the heap's: the handler passes it to the handler installed
//!    before it (Rust's stack-overflow handler, or the default action), so a real bug still
//!    kills the process with SIGSEGV.
//!
//! # Async-signal safety
//! The handler allocates nothing and takes no lock: it reads atomics, CASes a hazard cell and
//! calls `mmap`. A heap leaves the registry only after every handler using its entry is done
//! (`busy` drains to zero), and the heap's mapping outlives its registry entry.

use crate::huge::HugeView;
use std::cell::UnsafeCell;
use podkv_hw::sync::mapped::{AtomicU64, Ordering::SeqCst};
use podkv_hw::segv::{self, Previous};
use std::sync::{Once, OnceLock};

/// Heaps one process may have open at once with a huge heap.
pub const COUNT_HEAPS_MAX: usize = 64;

const ENTRY_EMPTY: u64 = 0;
const ENTRY_FILLING: u64 = 1;
const ENTRY_LIVE: u64 = 2;
const ENTRY_DRAINING: u64 = 3;

/// One open heap as the handler sees it.
struct Entry {
    /// `ENTRY_*`: EMPTY → FILLING (CAS by a registering heap) → LIVE → DRAINING → EMPTY.
    state: AtomicU64,
    /// Handlers reading `view` now.
    busy: AtomicU64,
    /// Written only while FILLING; read only by handlers that saw LIVE.
    view: UnsafeCell<Option<HugeView>>,
}

// SAFETY: `view` is written only by the one registrar that won the EMPTY → FILLING CAS, and read
// only while the entry is LIVE, after that write (the LIVE store releases it).
unsafe impl Sync for Entry {}

#[allow(clippy::declare_interior_mutable_const)] // used only to initialise REGISTRY
const ENTRY: Entry = Entry {
    state: AtomicU64::new(ENTRY_EMPTY),
    busy: AtomicU64::new(0),
    view: UnsafeCell::new(None),
};

static REGISTRY: [Entry; COUNT_HEAPS_MAX] = [ENTRY; COUNT_HEAPS_MAX];
static INSTALL: Once = Once::new();
static PREVIOUS: OnceLock<Previous> = OnceLock::new();


/// A heap's place in the registry; leaving it (drop) waits for handlers using it.
#[derive(Debug)]
pub struct Registration {
    index: usize,
}

/// Installs the handler (once per process) and registers `view`. `None` when the registry is
/// full (the caller refuses to open the heap).
pub fn register(view: HugeView) -> Option<Registration> {
    install();
    let index = REGISTRY.iter().position(|e| {
        e.state
            .compare_exchange(ENTRY_EMPTY, ENTRY_FILLING, SeqCst, SeqCst)
            .is_ok()
    })?;
    let entry = &REGISTRY[index];
    // SAFETY: this thread won EMPTY → FILLING, so no handler reads `view` and no one else writes.
    unsafe { *entry.view.get() = Some(view) };
    entry.state.store(ENTRY_LIVE, SeqCst);
    Some(Registration { index })
}

impl Drop for Registration {
    fn drop(&mut self) {
        let entry = &REGISTRY[self.index];
        entry.state.store(ENTRY_DRAINING, SeqCst);
        while entry.busy.load(SeqCst) != 0 {
            std::hint::spin_loop();
        }
        entry.state.store(ENTRY_EMPTY, SeqCst);
    }
}

fn install() {
    INSTALL.call_once(|| {
        // SAFETY: sigaction is plain data; all-zero is a valid empty value to fill in.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: querying the current disposition into a valid out pointer.
        unsafe { libc::sigaction(libc::SIGSEGV, std::ptr::null(), &mut old) };
        let _ = PREVIOUS.set(Previous(old));
        // SAFETY: as above.
        let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
        new.sa_sigaction = on_segv as *const () as usize;
        // SA_ONSTACK: Rust's stack-overflow detection runs on the alternate stack, and a fault
        // from a thread whose stack overflowed must reach it. No SA_NODEFER: a fault inside the
        // handler itself finds SIGSEGV blocked and kills the process instead of recursing.
        new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        // SAFETY: `new.sa_mask` is a valid sigset to empty; installing a handler whose code is
        // async-signal-safe (see the module docs).
        unsafe {
            libc::sigemptyset(&mut new.sa_mask);
            libc::sigaction(libc::SIGSEGV, &new, std::ptr::null_mut());
        }
    });
}

/// Serves the fault if it lies in a live huge allocation of a registered heap.
fn serve(addr: usize) -> bool {
    REGISTRY.iter().any(|entry| {
        entry.busy.fetch_add(1, SeqCst);
        let served = entry.state.load(SeqCst) == ENTRY_LIVE && {
            // SAFETY: the entry is LIVE and `busy` holds it there: `view` is written and stays.
            let view = unsafe { *entry.view.get() };
            view.is_some_and(|view| view.map_on_fault(addr))
        };
        entry.busy.fetch_sub(1, SeqCst);
        served
    })
}

extern "C" fn on_segv(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for a SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    // The coherence model's cache pages first: a huge block's page there is already mapped.
    if podkv_hw::model::serve_fault(addr) || serve(addr) {
        return;
    }
    // SAFETY: forwarding the kernel's own arguments to the previous disposition.
    unsafe { segv::chain(PREVIOUS.get(), sig, info, ctx) }
}
