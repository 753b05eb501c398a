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
//! # Fields of a record
//! - `owner`: `pid << 32 | generation`, pid zero when free. CAS by claimers (from zero, or from
//!   the word of a dead process); stored by the releasing process.
//! - `start_time`: the low 24 bits of the owner's start time, so a reused pid is not taken for the owner. Written
//!   by the claimer after its CAS.
//! - `high`: one past the highest cell used since the claim (`fetch_max` by publishers); readers
//!   scan cells below it.
//! - `cells`: hazard offsets, zero when empty. Changed by single CAS by the owning process's
//!   threads (the handler among them); read by every process.
//!
//! Invariant: `cells[i] != 0  =>  i < high`; on a quiescent heap every non-zero cell of a live
//! process's record names a live or freed huge descriptor's offset, mapped in that process.
//!
//! Records of dead processes are ignored by readers (their mappings died with them) and taken
//! over by the next claimer that finds no free record.

use crate::process;
use podkv_hw::sync::{AtomicU64, Ordering};

/// Hazard records in a heap: at most this many processes may map one heap at once.
pub const COUNT_HAZARD_RECORDS: u64 = 64;
/// Bytes of one record.
pub const SIZE_HAZARD_RECORD: u64 = 4096;
/// Hazard cells in one record: the most huge allocations one process may have mapped.
pub const COUNT_HAZARDS: usize = (SIZE_HAZARD_RECORD as usize - 24) / 8;

/// One process's hazard offsets.
#[repr(C)]
pub struct HazardRecord {
    /// `pid << 32 | generation`; pid zero means unclaimed.
    pub owner: AtomicU64,
    /// The owner's process start time.
    pub start_time: AtomicU64,
    /// One past the highest cell published since the claim.
    pub high: AtomicU64,
    /// Offsets of huge allocations this process has mapped (zero: empty).
    pub cells: [AtomicU64; COUNT_HAZARDS],
}

const _: () = assert!(std::mem::size_of::<HazardRecord>() as u64 <= SIZE_HAZARD_RECORD);

impl HazardRecord {
    /// Tries to claim this record for `pid`: a free one, or, with `take_dead`, one whose owner
    /// is dead. A taken-over record is emptied after the claim; readers who see the new owner
    /// alive before that only keep a stale offset hazardous a little longer.
    pub fn try_claim(&self, pid: u32, start_time: u64, take_dead: bool) -> bool {
        let cur = self.owner.load(Ordering::Acquire);
        let owner = (cur >> 32) as u32;
        if owner != 0
            && (!take_dead
                || process::is_alive(owner, self.start_time.load(Ordering::Relaxed) as u32))
        {
            return false;
        }
        let claimed = u64::from(pid) << 32 | u64::from((cur as u32).wrapping_add(1));
        if self
            .owner
            .compare_exchange(cur, claimed, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        self.start_time.store(start_time, Ordering::Relaxed);
        self.clear();
        true
    }

    /// Empties every cell (the record's owner only, with nothing mapped any more).
    fn clear(&self) {
        let high = self.high.load(Ordering::Acquire) as usize;
        for cell in &self.cells[..high.min(COUNT_HAZARDS)] {
            cell.store(0, Ordering::Release);
        }
        self.high.store(0, Ordering::Release);
    }

    /// Gives the record back; the process must have unmapped every huge allocation.
    pub fn release(&self) {
        self.clear();
        let cur = self.owner.load(Ordering::Relaxed);
        self.owner
            .store(cur & u64::from(u32::MAX), Ordering::Release);
    }

    /// Rule 1: publishes `offset` before the caller maps it. False when every cell is taken.
    /// Async-signal-safe (loads and CAS only).
    pub fn publish(&self, offset: u64) -> bool {
        debug_assert_ne!(offset, 0);
        for (i, cell) in self.cells.iter().enumerate() {
            if cell.load(Ordering::Relaxed) == 0
                && cell
                    .compare_exchange(0, offset, Ordering::SeqCst, Ordering::Relaxed)
                    .is_ok()
            {
                self.high.fetch_max(i as u64 + 1, Ordering::SeqCst);
                return true;
            }
        }
        false
    }

    /// Rule 2: withdraws every cell naming `offset`, after the caller unmapped it.
    /// Async-signal-safe.
    pub fn withdraw(&self, offset: u64) {
        for cell in self.live_cells() {
            let _ = cell.compare_exchange(offset, 0, Ordering::SeqCst, Ordering::Relaxed);
        }
    }

    /// Whether a cell names `offset`.
    pub fn contains(&self, offset: u64) -> bool {
        self.live_cells()
            .iter()
            .any(|cell| cell.load(Ordering::SeqCst) == offset)
    }

    /// The offsets published now (each once per cell: a duplicate means two threads mapped the
    /// allocation at once).
    pub fn published(&self) -> impl Iterator<Item = u64> + '_ {
        self.live_cells()
            .iter()
            .map(|cell| cell.load(Ordering::Acquire))
            .filter(|&offset| offset != 0)
    }

    fn live_cells(&self) -> &[AtomicU64] {
        let high = self.high.load(Ordering::SeqCst) as usize;
        &self.cells[..high.min(COUNT_HAZARDS)]
    }

    /// The owner's pid (zero: unclaimed).
    pub fn pid(&self) -> u32 {
        (self.owner.load(Ordering::Acquire) >> 32) as u32
    }

    /// Whether the record is claimed by a running process.
    pub fn is_alive(&self) -> bool {
        let pid = self.pid();
        pid != 0 && process::is_alive(pid, self.start_time.load(Ordering::Relaxed) as u32)
    }
}

/// Rule 3's test: whether any live process's record names `offset`. Dead processes' records
/// are skipped: their mappings died with them.
pub fn is_hazard(records: &[HazardRecord], offset: u64) -> bool {
    records
        .iter()
        .any(|r| r.pid() != 0 && r.contains(offset) && r.is_alive())
}

/// Claims a record for this process: a free one first, else one left by a dead process.
pub fn claim(records: &[HazardRecord], pid: u32, start_time: u64) -> Option<usize> {
    [false, true].into_iter().find_map(|take_dead| {
        records
            .iter()
            .position(|r| r.try_claim(pid, start_time, take_dead))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(n: usize) -> Vec<HazardRecord> {
        (0..n)
            // SAFETY: a record is plain atomics, for which all-zero bytes are valid: unclaimed.
            .map(|_| unsafe { std::mem::zeroed() })
            .collect()
    }

    #[test]
    fn publish_withdraw_and_the_reclaim_test() {
        let r = records(2);
        let me = process::me();
        let (pid, start) = (me.pid, u64::from(me.start));
        assert_eq!(claim(&r, pid, start), Some(0));
        assert!(!is_hazard(&r, 0x4000_0000));
        assert!(r[0].publish(0x4000_0000));
        assert!(r[0].publish(0x4000_0000), "a second thread may map it too");
        assert!(r[0].publish(0x8000_0000));
        assert!(is_hazard(&r, 0x4000_0000));
        r[0].withdraw(0x4000_0000);
        assert!(!is_hazard(&r, 0x4000_0000), "withdraw removes every copy");
        assert_eq!(r[0].published().collect::<Vec<_>>(), vec![0x8000_0000]);
        r[0].release();
        assert!(!is_hazard(&r, 0x8000_0000));
        assert_eq!(r[0].pid(), 0);
    }

    #[test]
    fn a_dead_process_record_is_no_hazard_and_is_taken_over() {
        let r = records(1);
        // pid 0x7FFF_FFFF does not run (above pid_max).
        assert!(r[0].try_claim(0x7FFF_FFFF, 1, false));
        assert!(r[0].publish(0x4000_0000));
        assert!(!is_hazard(&r, 0x4000_0000), "its mappings died with it");
        let me = process::me();
        let (pid, start) = (me.pid, u64::from(me.start));
        assert_eq!(claim(&r, pid, start), Some(0), "taken over");
        assert_eq!(r[0].published().count(), 0, "emptied on take-over");
    }

    #[test]
    fn a_full_record_refuses_to_publish() {
        let r = records(1);
        let me = process::me();
        let (pid, start) = (me.pid, u64::from(me.start));
        claim(&r, pid, start).unwrap();
        for i in 0..COUNT_HAZARDS as u64 {
            assert!(r[0].publish((i + 1) << 21));
        }
        assert!(!r[0].publish(1 << 50));
    }
}
