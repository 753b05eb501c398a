//! Hazard offsets: which huge allocations each process has mapped (CXLALLOC §3.3.2).
//!
//! A huge allocation's pages, address range and descriptor may be reused only once no process
//! has it mapped. Mappings belong to a process, not a thread, so each process that opens the
//! heap claims one [`HazardRecord`] and lists there the offset of every huge allocation it
//! maps. Three rules, as in the paper:
//! 1. publish the offset before mapping the allocation (allocation, the SIGSEGV handler);
//! 2. withdraw it after unmapping (free, the lazy unmap pass);
//! 3. reclaim a freed allocation only when no live process's record names its offset.
//!
//! No validation step follows a publish: a process maps an allocation only while it is live,
//! and a free racing with a dereference is a use-after-free of the program.
//!
//! # The owner word (in the HWcc region since format 6)
//! Who holds record `i` is word `i` of `Layout::hazard_owners`, among the mCAS targets: a
//! [`crate::slot::Owner`] packed (host, process start time, pid; zero when free), so a reused
//! pid is another owner and liveness is judged as a slot's ([`process::is_dead_owner`]: a
//! process of this host that is gone is dead; an owner on another host counts as live).
//! Changed only through the heap's one hook ([`Hazards::claim`], [`Hazards::release`]): CAS
//! from zero, or from the word of a dead process, by claimers; from the owner's word to zero
//! by the releasing process.
//!
//! # Fields of a record (written by its owning process only, one host)
//! - `high`: one past the highest cell used since the claim (`fetch_max` by publishers); readers
//!   scan cells below it.
//! - `cells`: hazard offsets, zero when empty. Changed by single CAS by the owning process's
//!   threads (the handler among them); read by every process.
//!
//! In `limited` and `mcas` heaps the cells follow SWcc: a publish and a withdraw write the
//! changed cell's line and `high`'s back before the caller maps (or after it unmapped), and a
//! reader (a freer deciding rule 3, the checker) invalidates `high` and the cells below it
//! before reading them.
//!
//! Invariant: `cells[i] != 0  =>  i < high`; on a quiescent heap every non-zero cell of a live
//! process's record names a live or freed huge descriptor's offset, mapped in that process.
//!
//! Records of dead processes are ignored by readers (their mappings died with them) and taken
//! over by the next claimer that finds no free record.

use crate::process;
use crate::slot::Owner;
use podkv_hw::sync::{AtomicU64, Ordering};
use podkv_hw::Coherence;

/// Hazard records in a heap: at most this many processes may map one heap at once.
pub const COUNT_HAZARD_RECORDS: u64 = 64;
/// Bytes of one record.
pub const SIZE_HAZARD_RECORD: u64 = 4096;
/// Hazard cells in one record: the most huge allocations one process may have mapped.
pub const COUNT_HAZARDS: usize = (SIZE_HAZARD_RECORD as usize - 24) / 8;

/// One process's hazard offsets.
#[repr(C)]
pub struct HazardRecord {
    /// Zero (format 5 kept the owner and its start time here).
    reserved: [AtomicU64; 2],
    /// One past the highest cell published since the claim.
    pub high: AtomicU64,
    /// Offsets of huge allocations this process has mapped (zero: empty).
    pub cells: [AtomicU64; COUNT_HAZARDS],
}

const _: () = assert!(std::mem::size_of::<HazardRecord>() as u64 <= SIZE_HAZARD_RECORD);

/// The SWcc writer rule for one word of a record.
fn write_back(coherence: Coherence, word: &AtomicU64) {
    coherence.write_back((word as *const AtomicU64).cast(), 8);
}

impl HazardRecord {
    /// Empties every cell (the record's owner only, with nothing mapped any more, or a claimer
    /// taking over a dead process's record), reading `high` fresh and writing it all back.
    fn clear(&self, coherence: Coherence) {
        let high = self.fresh_high(coherence);
        for cell in &self.cells[..high] {
            cell.store(0, Ordering::Release);
        }
        self.high.store(0, Ordering::Release);
        let len = (std::mem::offset_of!(HazardRecord, cells) + 8 * high).max(24);
        if podkv_hw::site!("alloc.hazard.clear.write_back") {
            coherence.write_back((self as *const HazardRecord).cast(), len);
        }
    }

    /// `high`, read after the reader rule on its line (capped at the cell count).
    fn fresh_high(&self, coherence: Coherence) -> usize {
        if podkv_hw::site!("alloc.hazard.read.invalidate_high") {
            coherence.invalidate((&self.high as *const AtomicU64).cast(), 8);
        }
        (self.high.load(Ordering::SeqCst) as usize).min(COUNT_HAZARDS)
    }

    /// Rule 1: publishes `offset` before the caller maps it, written back (SWcc) before this
    /// returns. False when every cell is taken. Async-signal-safe (loads, CAS, flushes).
    pub fn publish(&self, offset: u64, coherence: Coherence) -> bool {
        debug_assert_ne!(offset, 0);
        for (i, cell) in self.cells.iter().enumerate() {
            if cell.load(Ordering::Relaxed) == 0
                && cell
                    .compare_exchange(0, offset, Ordering::SeqCst, Ordering::Relaxed)
                    .is_ok()
            {
                self.high.fetch_max(i as u64 + 1, Ordering::SeqCst);
                if podkv_hw::site!("alloc.hazard.publish.write_back_cell") {
                    write_back(coherence, cell);
                }
                if podkv_hw::site!("alloc.hazard.publish.write_back_high") {
                    write_back(coherence, &self.high);
                }
                return true;
            }
        }
        false
    }

    /// Rule 2: withdraws every cell naming `offset`, after the caller unmapped it; each cell
    /// changed is written back. Async-signal-safe.
    pub fn withdraw(&self, offset: u64, coherence: Coherence) {
        let high = (self.high.load(Ordering::SeqCst) as usize).min(COUNT_HAZARDS);
        for cell in &self.cells[..high] {
            if cell
                .compare_exchange(offset, 0, Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
                && podkv_hw::site!("alloc.hazard.withdraw.write_back")
            {
                write_back(coherence, cell);
            }
        }
    }

    /// Whether a cell names `offset`, read fresh (SWcc reader rule).
    pub fn contains(&self, offset: u64, coherence: Coherence) -> bool {
        self.fresh_cells(coherence)
            .iter()
            .any(|cell| cell.load(Ordering::SeqCst) == offset)
    }

    /// The offsets published now, read fresh (each once per cell: a duplicate means two
    /// threads mapped the allocation at once).
    pub fn published(&self, coherence: Coherence) -> impl Iterator<Item = u64> + '_ {
        self.fresh_cells(coherence)
            .iter()
            .map(|cell| cell.load(Ordering::Acquire))
            .filter(|&offset| offset != 0)
    }

    /// The cells below `high`, both read after the reader rule.
    fn fresh_cells(&self, coherence: Coherence) -> &[AtomicU64] {
        let high = self.fresh_high(coherence);
        let cells = &self.cells[..high];
        if podkv_hw::site!("alloc.hazard.read.invalidate_cells") {
            coherence.invalidate(cells.as_ptr().cast(), 8 * high);
        }
        cells
    }
}

/// A heap's hazard records with their owner words (in the HWcc region) and its coherence mode.
#[derive(Clone, Copy)]
pub struct Hazards<'a> {
    /// The records (`COUNT_HAZARD_RECORDS` of them).
    pub records: &'a [HazardRecord],
    /// Record `i`'s owner word is `owners[i]`.
    pub owners: &'a [AtomicU64],
    /// The heap's coherence mode (SWcc for the cells unless `Hardware`).
    pub coherence: Coherence,
}

impl Hazards<'_> {
    /// Record `i`'s owner word (zero: free).
    pub fn owner(&self, i: usize) -> u64 {
        self.owners[i].load(Ordering::Acquire)
    }

    /// Whether record `i` is held by a process not known dead: one running on this host, or
    /// any on another host.
    pub fn is_live(&self, i: usize) -> bool {
        let word = self.owner(i);
        word != 0 && !process::is_dead_owner(word)
    }

    /// Rule 3's test: whether any live process's record names `offset`. Dead processes'
    /// records are skipped: their mappings died with them.
    pub fn is_hazard(&self, offset: u64) -> bool {
        self.records.iter().enumerate().any(|(i, r)| {
            self.owner(i) != 0 && r.contains(offset, self.coherence) && self.is_live(i)
        })
    }

    /// Claims a record for `me` by `cas` (the heap's hook): a free one first, else one left by
    /// a dead process, which is then emptied (readers who see the new owner alive before that
    /// only keep a stale offset hazardous a little longer). Returns its index.
    pub fn claim(
        &self,
        me: Owner,
        cas: impl Fn(&AtomicU64, u64, u64) -> Result<u64, u64>,
    ) -> Option<usize> {
        [false, true].into_iter().find_map(|take_dead| {
            (0..self.records.len()).find(|&i| {
                let cur = self.owner(i);
                let takeable = if take_dead {
                    process::is_dead_owner(cur)
                } else {
                    cur == 0
                };
                podkv_hw::cas_site!("alloc.hazard.claim.cas");
                if !takeable || cas(&self.owners[i], cur, me.pack()).is_err() {
                    return false;
                }
                self.records[i].clear(self.coherence);
                true
            })
        })
    }

    /// Gives record `i`, held by `me`, back by `cas`; the process must have unmapped every
    /// huge allocation.
    pub fn release(
        &self,
        i: usize,
        me: Owner,
        cas: impl Fn(&AtomicU64, u64, u64) -> Result<u64, u64>,
    ) {
        self.records[i].clear(self.coherence);
        podkv_hw::cas_site!("alloc.hazard.release.cas");
        let _ = cas(&self.owners[i], me.pack(), 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use podkv_hw::swcc;

    fn zeroed<T>(n: usize) -> Vec<T> {
        (0..n)
            // SAFETY: records and owner words are plain atomics, for which all-zero bytes are
            // valid: unclaimed.
            .map(|_| unsafe { std::mem::zeroed() })
            .collect()
    }

    fn cpu_cas(word: &AtomicU64, current: u64, new: u64) -> Result<u64, u64> {
        crate::dcas::cpu_cas(word, current, new)
    }

    /// `n` records and owner words in `coherence`.
    struct Fixture {
        records: Vec<HazardRecord>,
        owners: Vec<AtomicU64>,
        coherence: Coherence,
    }

    impl Fixture {
        fn new(n: usize, coherence: Coherence) -> Fixture {
            Fixture {
                records: zeroed(n),
                owners: zeroed(n),
                coherence,
            }
        }

        fn hazards(&self) -> Hazards<'_> {
            Hazards {
                records: &self.records,
                owners: &self.owners,
                coherence: self.coherence,
            }
        }
    }

    /// An owner no process of this host is: pid 0xFF_FFFE does not run (above pid_max).
    fn dead(host: u16) -> Owner {
        Owner {
            host,
            pid: 0xFF_FFFE,
            start: 1,
        }
    }

    #[test]
    fn publish_withdraw_and_the_reclaim_test() {
        let f = Fixture::new(2, Coherence::Hardware);
        let h = f.hazards();
        let me = process::me();
        assert_eq!(h.claim(me, cpu_cas), Some(0));
        let r = &f.records[0];
        let c = f.coherence;
        assert!(!h.is_hazard(0x4000_0000));
        assert!(r.publish(0x4000_0000, c));
        assert!(r.publish(0x4000_0000, c), "a second thread may map it too");
        assert!(r.publish(0x8000_0000, c));
        assert!(h.is_hazard(0x4000_0000));
        r.withdraw(0x4000_0000, c);
        assert!(!h.is_hazard(0x4000_0000), "withdraw removes every copy");
        assert_eq!(r.published(c).collect::<Vec<_>>(), vec![0x8000_0000]);
        h.release(0, me, cpu_cas);
        assert!(!h.is_hazard(0x8000_0000));
        assert_eq!(h.owner(0), 0);
    }

    #[test]
    fn a_dead_process_record_is_no_hazard_and_is_taken_over() {
        let f = Fixture::new(1, Coherence::Hardware);
        let h = f.hazards();
        assert_eq!(h.claim(dead(process::host_id()), cpu_cas), Some(0));
        assert!(f.records[0].publish(0x4000_0000, f.coherence));
        assert!(!h.is_hazard(0x4000_0000), "its mappings died with it");
        assert_eq!(h.claim(process::me(), cpu_cas), Some(0), "taken over");
        assert_eq!(h.owner(0), process::me().pack());
        assert_eq!(f.records[0].published(f.coherence).count(), 0, "emptied");
    }

    #[test]
    fn a_hazard_record_of_another_host_counts_as_live() {
        let f = Fixture::new(1, Coherence::Hardware);
        let h = f.hazards();
        let other_host = dead(process::host_id().wrapping_add(1).max(1));
        assert_eq!(h.claim(other_host, cpu_cas), Some(0));
        assert!(f.records[0].publish(0x4000_0000, f.coherence));
        assert!(h.is_live(0), "no pid of another host can be checked here");
        assert!(h.is_hazard(0x4000_0000));
        assert_eq!(h.claim(process::me(), cpu_cas), None, "not taken over");
    }

    #[test]
    fn a_full_record_refuses_to_publish() {
        let f = Fixture::new(1, Coherence::Hardware);
        f.hazards().claim(process::me(), cpu_cas).unwrap();
        for i in 0..COUNT_HAZARDS as u64 {
            assert!(f.records[0].publish((i + 1) << 21, f.coherence));
        }
        assert!(!f.records[0].publish(1 << 50, f.coherence));
    }

    #[test]
    fn publishing_and_withdrawing_write_back_and_reading_invalidates_only_without_coherence() {
        for (coherence, swcc) in [
            (Coherence::Hardware, false),
            (Coherence::Limited, true),
            (Coherence::Mcas, true),
        ] {
            let f = Fixture::new(2, coherence);
            let h = f.hazards();
            h.claim(process::me(), cpu_cas).unwrap();
            let r = &f.records[0];
            let before = swcc::counts();
            assert!(r.publish(0x4000_0000, coherence));
            let publish = swcc::counts().since(before);
            assert_eq!(
                publish.lines_written_back > 0,
                swcc,
                "{coherence:?}: {publish:?}"
            );
            assert_eq!(publish.lines_invalidated, 0, "{coherence:?}: {publish:?}");
            let before = swcc::counts();
            assert!(h.is_hazard(0x4000_0000));
            let read = swcc::counts().since(before);
            assert_eq!(read.lines_invalidated > 0, swcc, "{coherence:?}: {read:?}");
            assert_eq!(read.lines_written_back, 0, "{coherence:?}: {read:?}");
            let before = swcc::counts();
            r.withdraw(0x4000_0000, coherence);
            let withdraw = swcc::counts().since(before);
            assert_eq!(
                withdraw.lines_written_back > 0,
                swcc,
                "{coherence:?}: {withdraw:?}"
            );
        }
    }
}
