//! An `mcas` heap's memory-side CAS (CXLALLOC §4): its region in the heap file, the
//! implementation that serves it, and the hook through which a thread changes a multi-writer
//! word.
//!
//! # Placement
//! The targets are the heap's HWcc region (`Layout::hwcc .. Layout::hwcc_end`): the global
//! lines (both lengths, the cold and warm list heads), every slab's remote word, the huge
//! heap's reservation array, every thread slot's acknowledgement and owner words and every
//! hazard record's owner word, and nothing else lives there. The region's own lines (header,
//! liveness, journal, one `spwr` and one `sprd` line per thread slot and per process line)
//! follow at `Layout::mcas`, page aligned. Both are fixed by the geometry. The region's header
//! is deterministic too, so every opener of a fresh zero-filled file may write it (identical
//! bytes, magic last): any number of processes can open at once.
//!
//! # Implementations
//! The header's format word records which one serves the heap (`Geometry::mcas`):
//! `flush-cas` (evict the line, then CPU CAS; stateless) or `nmp` (the software near-memory
//! processor: a thread of whichever process finds none alive, started at open and again
//! whenever a request finds the processor dead or gone). Thread slot `i` is client `i`;
//! process line `j` is client `slots + j`.
//!
//! # Process lines (`nmp`): requests of a thread that holds no slot
//! A thread's requests go on its slot's line, which it owns while it holds the slot. Claiming
//! a slot (or adopting a dead one, or a sweep taking a released one for a moment) is itself an
//! mCAS, made before the thread owns any line, and so are the claim and release of a process's
//! hazard record. So is a slot's release: once performed, the slot and its line belong to the
//! next claimer, whose first request would overwrite the reply the releaser has yet to read.
//! Those go on a *process line*: each open heap handle borrows one of
//! [`COUNT_PROCESS_LINES`] at open (a borrow word in the header, `OFFSET_PROCESS_LINES`, CASed
//! from zero to the process's owner word: host, start time, pid) and returns it at close; its
//! threads take turns on it under a process-local mutex. So a stalled or dead process blocks
//! no other process's claims: a stalled one holds only its own line, and a dead one's line
//! (its borrow word names a process of this host that is gone) is taken back by the next
//! opener that finds none free. What remains:
//! - the borrow words change by CPU CAS, atomic only among the hosts of one coherence domain
//!   (one host here). A device would give each process its own request lines when it maps
//!   them from the device file, which makes the borrow unnecessary there;
//! - a process of another host is never judged dead by its borrow word (no pid of another
//!   host can be checked), so the lines of crashed processes on other hosts stay borrowed; at
//!   most 64 processes hold an `nmp` heap open at once (the hazard records' limit too), and
//!   one more gets [`HeapError::NoProcessLine`];
//! - within a process, a thread stalled in the middle of a claim delays the claims of the
//!   process's other threads (never their allocations, which use their slots' lines).
//!
//! # A dead processor
//! A request that finds no processor, or one whose heartbeat stopped, comes back as an error
//! from `podkv_hw::mcas` (never a hang). The hook then makes sure a processor serves the region
//! (starting one here if needed) and settles the request. `ProcessorDead` and `NoProcessor`
//! mean no processor took it (the client withdraws it, and a processor takes a request only
//! by journalling it and then finding it still there): it is sent again. `OutcomeUnknown`
//! means a processor took it and died: a word that now holds exactly what the request would
//! have written (its writer tag and version make it unique) means it took effect; otherwise it
//! is sent again. A request that took effect and was overwritten by another thread before that
//! check is the one case this cannot tell apart; it needs the processor to die between taking
//! that very request and answering it.
//!
//! # Multi-writer words
//! Through the hook (`Shared::cas_word`, and `mcas::cas_as_process` for a thread without a
//! slot): the slab heaps' words, the huge reservation array, the help array of detectable CAS
//! (each slot's acknowledgement word, `Layout::slot_acks`), and since format 6 the owner words
//! of the thread slots (`Layout::slot_owners`: claim and adoption by CAS from zero or from a
//! dead owner's word, release by CAS from the owner's word to zero) and of the hazard records
//! (`Layout::hazard_owners`, the same way; a record's owner is a slot's kind of word, host +
//! start time + pid, so a record of another host counts as live). The data those words hand
//! over follows SWcc: a slot is written back by its owner before the releasing CAS and
//! invalidated by the next owner after its claim; its lease, which other hosts read to judge
//! the owner, is on a line of its own, written back at each renewal (and before a claim) and
//! invalidated before each read; a hazard record's cells (one writer: the owning process, a
//! single host) are written back by every publish and withdraw and invalidated by every reader.
//!
//! Still changed by CPU CAS, atomic only among the hosts of one coherence domain (so on this
//! machine, where "hosts" are processes, every test holds; on a pod without coherence they are
//! not safe across hosts):
//! - **the process lines' borrow words** (above): they bootstrap the hook itself.
//! - **the header's format word**: the first opener of a zero file CASes it from 0; it is what
//!   says where (and whether) the region exists, so it cannot go through it.
//! - **the header's backed-ahead words** (`backer.rs`): raised by any process's backer, but
//!   only for a heap on a file, whose processes share one host (a device needs no backing);
//!   a stale value only makes a grow back its slabs itself.
//! - **a slab descriptor's `pages` word** (`slab.rs`, `backer.rs`): the releaser stores it
//!   and a backer CASes its `backed` bit, again only for a heap on a file (one host); a stale
//!   bit is never trusted over a release, since the CAS expects the value read before backing.
//! - **a hazard record's cells and `high`**: CAS and `fetch_max` by the owning process's
//!   threads only (one host), read by others under the reader rule.
//! - Single-writer words need no mCAS: a slot's own lists, pending batch, recovery word (one
//!   writer since format 5), lease and `generation` (bumped by the slot's new owner only), and
//!   huge descriptors (SWcc: written back before ownership moves).
//!
//! A host that crashes loses what its caches held and had not written back: a dead owner's
//! last fast-path steps (its recovery word is stored plainly on the fast paths, written back
//! only when the slot is released) may be missing when another host adopts its slot. On one
//! host (this machine) a dead process's stores are all in memory.

use crate::error::HeapError;
use crate::layout::{Geometry, Layout, COUNT_PROCESS_LINES};
use podkv_hw::mcas::{
    ensure_processor, FlushCas, Liveness, Mcas, McasError, McasKind, NmpOptions, ProcessorHandle,
    Region, Start, Window,
};
use podkv_hw::sync::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The CAS of a thread that holds no slot (or not the one it changes): on the process line of
/// an `mcas` heap's region, one thread of the process at a time in an `nmp` heap; a CPU CAS in
/// other modes. Claims and releases of slots, and of this process's hazard record, go this
/// way.
pub(crate) fn cas_as_process(
    mcas: Option<&HeapMcas>,
    word: &AtomicU64,
    current: u64,
    new: u64,
) -> Result<u64, u64> {
    let off = podkv_hw::model::take_cas_off();
    match mcas {
        Some(_) if off => podkv_hw::model::cpu_cas(word, current, new),
        Some(mcas) => mcas.cas_as_process(word, current, new),
        None => crate::dcas::cpu_cas(word, current, new),
    }
}

/// The one way a multi-writer word changes by CAS, on behalf of thread slot `client`
/// (`Shared::cas_word`): memory-side CAS in an `mcas` heap, CPU CAS otherwise.
#[inline]
pub(crate) fn cas_word(
    mcas: Option<&HeapMcas>,
    client: u32,
    word: &AtomicU64,
    current: u64,
    new: u64,
) -> Result<u64, u64> {
    let off = podkv_hw::model::take_cas_off();
    match mcas {
        Some(_) if off => podkv_hw::model::cpu_cas(word, current, new),
        Some(mcas) => mcas.cas(client, word, current, new),
        None => crate::dcas::cpu_cas(word, current, new),
    }
}

/// The store of [`cas_word`]'s mechanism (`Shared::store_word`).
#[inline]
pub(crate) fn store_word(mcas: Option<&HeapMcas>, client: u32, word: &AtomicU64, value: u64) {
    let off = podkv_hw::model::take_cas_off();
    match mcas {
        Some(_) if off => podkv_hw::model::cpu_store(word, value),
        Some(mcas) => mcas.store(client, word, value),
        None => crate::dcas::cpu_store(word, value),
    }
}

/// Bytes into the header of the process lines' borrow words (`COUNT_PROCESS_LINES` of them).
pub(crate) const OFFSET_PROCESS_LINES: u64 = 1024;

/// Borrows a process line for this heap handle: one whose borrow word is zero, or names a
/// process of this host that is gone, CASed (a CPU CAS: one host) to `me`. Returns its index.
///
/// # Safety
/// `base + OFFSET_PROCESS_LINES .. + 8 * COUNT_PROCESS_LINES` is the mapped, backed header.
unsafe fn borrow_process_line(base: *mut u8, me: u64) -> Result<u32, HeapError> {
    // SAFETY: the caller's contract.
    let words = unsafe { process_line_words(base) };
    let take = |word: &AtomicU64, from: u64| {
        word.compare_exchange(from, me, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    };
    let free = words.iter().position(|w| take(w, 0));
    let found = free.or_else(|| {
        words.iter().position(|w| {
            let seen = w.load(Ordering::Acquire);
            crate::process::is_dead_owner(seen) && take(w, seen)
        })
    });
    found.map(|i| i as u32).ok_or(HeapError::NoProcessLine {
        count: COUNT_PROCESS_LINES,
    })
}

/// The header's process-line borrow words.
///
/// # Safety
/// As [`borrow_process_line`]; the words live as long as the mapping, which the caller keeps.
unsafe fn process_line_words<'a>(base: *const u8) -> &'a [AtomicU64] {
    // SAFETY: the caller's contract; the words are 8-byte aligned in the header page, and an
    // AtomicU64 is valid for any bits.
    unsafe {
        std::slice::from_raw_parts(
            base.add(OFFSET_PROCESS_LINES as usize) as *const AtomicU64,
            COUNT_PROCESS_LINES as usize,
        )
    }
}

/// Gives process line `line` back (its borrow word from `me` to zero).
///
/// # Safety
/// As [`borrow_process_line`].
unsafe fn return_process_line(base: usize, line: u32, me: u64) {
    // SAFETY: the caller's contract.
    let word = &unsafe { process_line_words(base as *const u8) }[line as usize];
    let _ = word.compare_exchange(me, 0, Ordering::AcqRel, Ordering::Relaxed);
}

/// One process's view of an `mcas` heap's region.
pub(crate) struct HeapMcas {
    kind: McasKind,
    /// Client id of process line 0 (the heap's slot count).
    first_process_line: u32,
    /// `nmp`: the process line this heap handle holds (its index) and, held while a request
    /// is on it, the process-local lock that gives it to one thread at a time. `None` for
    /// `flush-cas`, which has no lines.
    process_line: Option<Mutex<u32>>,
    /// This process's owner word, as the process lines' borrow words record it.
    me: u64,
    region: Region,
    options: NmpOptions,
    /// Address of heap offset zero in this process: a word's target is its offset from here.
    base: usize,
    /// The processor this process started (`nmp`): stopped, its pending requests answered,
    /// when the heap closes (the field drops before the mapping does).
    processor: Mutex<Option<ProcessorHandle>>,
    /// `flush-cas`, which is stateless: the one handle every request uses. Built per request
    /// it cost a clone and a drop of the region's `Arc`, two locked instructions on a line
    /// every thread of the process shares.
    flush: Option<FlushCas>,
    /// mCAS operations this process sent (cas and store), for tests and reports: one counter
    /// per client id, on its own line, so that threads do not share one counter's line (a
    /// single counter's locked add was a third of the hook CAS's time with two threads).
    ops: Box<[OpsCount]>,
}

/// One client id's count of mCAS operations, alone on its cache line.
#[repr(align(64))]
#[derive(Default)]
struct OpsCount(AtomicU64);

impl HeapMcas {
    /// Opens (formatting if fresh) the region of the heap mapped at `base`, and for `nmp`
    /// makes sure a processor serves it.
    ///
    /// # Safety
    /// `base .. base + layout.huge_data` is the heap's mapping, backed over the HWcc region
    /// and the mCAS lines, and stays mapped while the returned value lives.
    pub(crate) unsafe fn open(
        base: *mut u8,
        geometry: &Geometry,
        layout: &Layout,
    ) -> Result<HeapMcas, HeapError> {
        let bad = |e: McasError| HeapError::Config(format!("mCAS region: {e}"));
        // SAFETY: the caller's contract; every access to the region's words is atomic.
        let window = unsafe { Window::new(base, layout.huge_data as usize, None) };
        let clients = geometry.mcas_clients();
        let targets = layout.hwcc..layout.hwcc_end;
        let fresh = window
            .word(layout.mcas)
            .is_some_and(|magic| magic.load(Ordering::Acquire) == 0);
        let region = if fresh {
            Region::format(window, layout.mcas, clients, targets.clone()).map_err(bad)?
        } else {
            Region::open(window, layout.mcas).map_err(bad)?
        };
        if region.count_clients() != clients || region.targets() != targets {
            return Err(HeapError::Config(format!(
                "mCAS region serves {} clients on {:?}; the geometry says {clients} on {targets:?}",
                region.count_clients(),
                region.targets()
            )));
        }
        let me = crate::process::me().pack();
        let process_line = if geometry.mcas == McasKind::Nmp {
            // SAFETY: the header is backed and mapped for as long as the heap handle that will
            // hold the returned value; the borrow words are only accessed atomically.
            Some(Mutex::new(unsafe { borrow_process_line(base, me)? }))
        } else {
            None
        };
        let flush = (geometry.mcas == McasKind::FlushCas).then(|| FlushCas::new(region.clone()));
        let mcas = HeapMcas {
            kind: geometry.mcas,
            first_process_line: geometry.slots() as u32,
            process_line,
            me,
            region,
            options: NmpOptions::default(),
            base: base as usize,
            processor: Mutex::new(None),
            flush,
            ops: (0..clients).map(|_| OpsCount::default()).collect(),
        };
        if mcas.kind == McasKind::Nmp {
            mcas.ensure_processor().map_err(bad)?;
        }
        Ok(mcas)
    }

    /// The CAS of [`HeapMcas::cas`] for a thread that holds no slot of its own (a claim of a
    /// slot or hazard record, a release of the hazard record): on this heap handle's process
    /// line, one thread of the process at a time.
    #[cold]
    pub(crate) fn cas_as_process(
        &self,
        word: &AtomicU64,
        current: u64,
        new: u64,
    ) -> Result<u64, u64> {
        match &self.process_line {
            Some(line) => {
                let line = line.lock().unwrap_or_else(|e| e.into_inner());
                self.cas(self.first_process_line + *line, word, current, new)
            }
            // `flush-cas` is stateless: any client id serves.
            None => self.cas(0, word, current, new),
        }
    }

    /// The implementation serving the heap.
    pub(crate) fn kind(&self) -> McasKind {
        self.kind
    }

    /// mCAS operations this process has sent.
    pub(crate) fn ops(&self) -> u64 {
        self.ops.iter().map(|c| c.0.load(Ordering::Relaxed)).sum()
    }

    /// Counts one operation sent on behalf of `client`: a thread slot's index, or a process
    /// line's (`first_process_line + line`), both below the region's client count.
    #[inline]
    fn count(&self, client: u32) {
        self.ops[client as usize].0.fetch_add(1, Ordering::Relaxed);
    }

    /// Starts a processor on a thread of this process unless a live one serves the region.
    fn ensure_processor(&self) -> Result<(), McasError> {
        let mut held = self.processor.lock().unwrap_or_else(|e| e.into_inner());
        if let Liveness::StartedThread(handle) =
            ensure_processor(&self.region, Start::Thread, self.options.timeout)?
        {
            *held = Some(handle);
        }
        Ok(())
    }

    fn target_of(&self, word: &AtomicU64) -> u64 {
        (word as *const AtomicU64 as usize).wrapping_sub(self.base) as u64
    }

    /// Thread slot `client`'s handle on the region: stateless for `flush-cas`; for `nmp` it
    /// reads the slot's request line afresh, so a slot's line passes between owners (and
    /// processes) with no state kept here.
    fn client(&self, client: u32) -> Result<Mcas, McasError> {
        Mcas::open(self.kind, &self.region, client, self.options)
    }

    /// The CAS of [`crate::dcas::Writer::cas_word`], by mCAS on behalf of slot `client`.
    #[cold]
    pub(crate) fn cas(
        &self,
        client: u32,
        word: &AtomicU64,
        current: u64,
        new: u64,
    ) -> Result<u64, u64> {
        let target = self.target_of(word);
        self.count(client);
        loop {
            let sent = match &self.flush {
                Some(m) => m.cas(target, current, new),
                None => self.client(client).and_then(|m| m.cas(target, current, new)),
            };
            match sent {
                Ok(previous) if previous == current => return Ok(previous),
                Ok(previous) => return Err(previous),
                Err(error) => {
                    // Only a request a processor took may have taken effect.
                    let unknown = matches!(error, McasError::OutcomeUnknown);
                    self.settle(error, target);
                    if unknown && word.load(Ordering::Acquire) == new {
                        return Ok(current);
                    }
                }
            }
        }
    }

    /// The store of [`crate::dcas::Writer::store_word`], by mCAS on behalf of slot `client`.
    /// A store is idempotent, so a request whose outcome is unknown is simply sent again.
    #[cold]
    pub(crate) fn store(&self, client: u32, word: &AtomicU64, value: u64) {
        let target = self.target_of(word);
        self.count(client);
        let send = || match &self.flush {
            Some(m) => m.store(target, value),
            None => self.client(client).and_then(|m| m.store(target, value)),
        };
        while let Err(error) = send() {
            self.settle(error, target);
        }
    }

    /// After a failed request: a processor serves the region again when this returns. Errors
    /// that no retry can cure are bugs of the caller (a word outside the HWcc region) or a
    /// region that stopped being one, and panic with the reason.
    fn settle(&self, error: McasError, target: u64) {
        match error {
            McasError::ProcessorDead(_) | McasError::NoProcessor | McasError::OutcomeUnknown => {
                if let Err(why) = self.ensure_processor() {
                    panic!("podkv: no mCAS processor can serve the heap: {why}");
                }
            }
            other => panic!("podkv: mCAS on heap offset {target} failed: {other}"),
        }
    }
}

impl Drop for HeapMcas {
    fn drop(&mut self) {
        // The processor first (its handle answers what is pending), then the line.
        drop(
            self.processor
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take(),
        );
        if let Some(line) = &self.process_line {
            let line = *line.lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: the heap's mapping (header included) outlives this value (`Shared`
            // drops `mcas` before `mapping`).
            unsafe { return_process_line(self.base, line, self.me) };
        }
    }
}

#[cfg(all(test, not(podkv_loom)))]
mod tests {
    use super::*;
    use crate::slot::Owner;

    /// A zeroed header page, 8-byte aligned.
    fn header() -> Vec<u64> {
        vec![0; 512]
    }

    fn words(page: &mut [u64]) -> &[AtomicU64] {
        let at = OFFSET_PROCESS_LINES as usize / 8;
        // SAFETY: `page` is exclusively borrowed, 8-byte aligned and long enough; an AtomicU64
        // has the layout of a u64.
        unsafe {
            std::slice::from_raw_parts(
                page[at..].as_mut_ptr() as *const AtomicU64,
                COUNT_PROCESS_LINES as usize,
            )
        }
    }

    fn owner(host: u16, pid: u32) -> u64 {
        Owner {
            host,
            pid,
            start: 1,
        }
        .pack()
    }

    #[test]
    fn a_process_line_is_borrowed_free_first_then_from_a_dead_process_of_this_host_only() {
        let mut page = header();
        let me = crate::process::me().pack();
        let here = crate::process::host_id();
        let elsewhere = here.wrapping_add(1).max(1);
        let base = page.as_mut_ptr().cast::<u8>();
        // Every line held: by live-looking owners of another host, one by a dead one here.
        for (i, word) in words(&mut page).iter().enumerate() {
            let held = if i == 40 {
                owner(here, 0xFF_FFFE)
            } else {
                owner(elsewhere, 0xFF_FFFE)
            };
            word.store(held, Ordering::Relaxed);
        }
        // SAFETY: `base` is the page's start, which holds the borrow words.
        assert_eq!(unsafe { borrow_process_line(base, me) }.unwrap(), 40);
        assert_eq!(words(&mut page)[40].load(Ordering::Relaxed), me);
        // SAFETY: as above.
        let full = unsafe { borrow_process_line(base, me) };
        assert!(
            matches!(full, Err(HeapError::NoProcessLine { count: 64 })),
            "another host's process is never taken for dead: {full:?}"
        );
        // SAFETY: as above.
        unsafe { return_process_line(base as usize, 40, me) };
        assert_eq!(words(&mut page)[40].load(Ordering::Relaxed), 0);
        words(&mut page)[3].store(0, Ordering::Relaxed);
        // SAFETY: as above.
        let line = unsafe { borrow_process_line(base, me) }.unwrap();
        assert_eq!(line, 3, "a free one first");
    }
}
