//! Recovering a dead member's thread slots, so the pod loses nothing when a host dies.
//!
//! One function, [`recover_member`], is the monitor's only way in: it opens the heap (refusing
//! a foreign or damaged file, constitution rule 8), notes the slots the dead process still
//! holds, and runs [`Heap::recover_dead`], which adopts every dead slot, finishes its logged
//! step and releases it — without stopping or waiting for the members still running. A
//! lease-mode pod's monitor keeps the heap open instead ([`open_heap`]) and watches its
//! members' beats all along ([`recover_member_in`] then recovers in that heap).

use super::error::PodError;
use podkv_alloc::process::SlotLife;
use podkv_alloc::slot::{owner_pid, Owner};
use podkv_alloc::{Config, Heap};
use std::path::Path;
use std::time::Duration;

/// What recovering one dead member did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovery {
    /// The dead member's pid.
    pub pid: u32,
    /// The thread slots it held when it died.
    pub slots: Vec<u64>,
    /// How many of them were recovered and freed for reuse.
    pub recovered: usize,
    /// Each slot recovered, as the allocator reported it.
    pub each: Vec<SlotRecovery>,
}

/// One dead slot recovered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotRecovery {
    /// The slot.
    pub slot: u64,
    /// Who held it when it died.
    pub owner: Owner,
    /// How long the allocator took to recover it, wall clock.
    pub took: Duration,
}

impl std::fmt::Display for Recovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pid {} held {} thread slots; {} recovered",
            self.pid,
            self.slots.len(),
            self.recovered
        )?;
        if self.recovered < self.slots.len() {
            write!(f, " (another process adopted the rest first)")?;
        }
        Ok(())
    }
}

/// Recovers the thread slots of member process `pid`, which has exited, in the heap at
/// `heap_path`, without disturbing the members still running. A member with its own host id
/// (`host`: a lease-mode pod) is another host to the heap: its slots are recovered once
/// its lease has lapsed and they are fenced (watched here for up to two leases), as
/// [`Heap::recover_host`] of a host known stopped — the monitor reaped its process.
pub fn recover_member(heap_path: &Path, pid: u32, host: Option<u16>) -> Result<Recovery, PodError> {
    Ok(recover_member_in(&open_heap(heap_path)?, pid, host))
}

/// Opens the pod's heap (an existing one, with this process's default lease).
pub fn open_heap(heap_path: &Path) -> Result<Heap, PodError> {
    let config = Config {
        create: false,
        ..Config::default()
    };
    Ok(Heap::open(heap_path, &config)?)
}

/// [`recover_member`] in a heap already open: the monitor's own, whose watch has seen the
/// member's beats before it died, so its slots are fenced a lease after its last beat
/// rather than a lease after the monitor noticed the exit.
pub fn recover_member_in(heap: &Heap, pid: u32, host: Option<u16>) -> Recovery {
    if let Some(host) = host {
        return recover_host(heap, pid, host, Config::default().lease);
    }
    let dead = dead_slots(heap, pid);
    let each: Vec<SlotRecovery> = heap
        .recover_dead()
        .iter()
        .filter_map(|r| {
            let slot = u64::from(r.slot);
            let (_, owner) = dead.iter().find(|(s, _)| *s == slot)?;
            Some(SlotRecovery {
                slot,
                owner: *owner,
                took: r.took,
            })
        })
        .collect();
    Recovery {
        pid,
        slots: dead.iter().map(|(slot, _)| *slot).collect(),
        recovered: each.len(),
        each,
    }
}

/// [`recover_member`] for a member on host `host` whose process `pid` the monitor reaped:
/// waits (by this process's clock) until its slots are fenced, then recovers them.
fn recover_host(heap: &Heap, pid: u32, host: u16, lease: Duration) -> Recovery {
    let of_member = |word: u64| Owner::unpack(word).filter(|o| o.host == host && o.pid == pid);
    let deadline = std::time::Instant::now() + 2 * lease + Duration::from_secs(1);
    let mut held: Vec<(u64, Owner)>;
    loop {
        let mut waiting = false;
        held = Vec::new();
        for i in 0..heap.geometry().slots() {
            match heap.slot_life(i) {
                SlotLife::Fenced(word) | SlotLife::Dead(word) => {
                    if let Some(owner) = of_member(word) {
                        held.push((i, owner));
                    }
                }
                SlotLife::Alive(owner) if owner.host == host && owner.pid == pid => {
                    waiting = true;
                    held.push((i, owner));
                }
                _ => {}
            }
        }
        if !waiting || std::time::Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // A member whose host id happens to be this machine's is known dead by its pid instead.
    let mut recovered = heap.recover_host(host);
    recovered.extend(heap.recover_dead());
    let each: Vec<SlotRecovery> = recovered
        .iter()
        .filter_map(|r| {
            let slot = u64::from(r.slot);
            let (_, owner) = held.iter().find(|(s, _)| *s == slot)?;
            Some(SlotRecovery {
                slot,
                owner: *owner,
                took: r.took,
            })
        })
        .collect();
    Recovery {
        pid,
        slots: held.iter().map(|(slot, _)| *slot).collect(),
        recovered: each.len(),
        each,
    }
}

/// The slots `pid` holds while no process with that pid and the slot's start time runs, each
/// with its owner.
fn dead_slots(heap: &Heap, pid: u32) -> Vec<(u64, Owner)> {
    (0..heap.geometry().slots())
        .filter_map(|i| match heap.slot_life(i) {
            SlotLife::Dead(word) if owner_pid(word) == pid => Some((i, Owner::unpack(word)?)),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_child_slots_are_found_and_a_live_process_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("heap");
        let config = Config {
            small_bytes: 1 << 20,
            large_bytes: 1 << 20,
            slots: 16,
            ..Config::default()
        };
        let heap = Heap::open(&path, &config).unwrap();
        let dead = std::process::Command::new("true").spawn().unwrap();
        let dead_pid = dead.id();
        let mut dead = dead;
        dead.wait().unwrap();
        let owner = podkv_alloc::slot::Owner {
            pid: dead_pid,
            ..podkv_alloc::process::me()
        };
        // This thread's slot first: a claim that met the dead slot would adopt it.
        let mine = heap.thread().unwrap();
        let dead_slot = (u64::from(mine.slot_index()) + 1) % heap.geometry().slots();
        assert!(heap.try_claim_slot(dead_slot, 0, owner));
        let report = recover_member(&path, dead_pid, None).unwrap();
        assert_eq!(report.slots, vec![dead_slot]);
        assert_eq!(report.recovered, 1, "recovered and released");
        assert_eq!(report.each.len(), 1);
        assert_eq!(report.each[0].slot, dead_slot);
        assert_eq!(report.each[0].owner.pid, dead_pid);
        assert!(matches!(heap.slot_life(dead_slot), SlotLife::Free));
        let me = recover_member(&path, std::process::id(), None).unwrap();
        assert!(me.slots.is_empty(), "a live process's slots are not dead");
    }

    #[test]
    fn a_foreign_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("heap");
        std::fs::write(&path, vec![0xAB; 8192]).unwrap();
        assert!(recover_member(&path, 1, None).is_err());
    }
}
