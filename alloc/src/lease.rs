//! Lease mode: heartbeats, the observer's watch, and the fence (constitution rule 9).
//!
//! Hosts sharing pod memory cannot see each other's processes, and their clocks disagree. So
//! no clock value is ever written to the heap or compared between hosts:
//!
//! - **Heartbeat.** The owner of a slot advances a counter in the slot's `beat` word every
//!   third of a lease ([`Beat`]: the owner's pid in the tag, so a beat written by anyone else
//!   never counts as the owner's).
//! - **Watch.** An observer keeps, in its own memory, the owner word and beat it last saw for
//!   each slot and the time *by its own clock* ([`clock_ms`]) when either last changed. An
//!   owner whose beat has not advanced for a whole lease of the observer's watching has
//!   *lapsed*. An observer that starts watching judges nobody lapsed before a lease has
//!   passed.
//! - **Fence.** The observer that sees a lapse sets [`FLAG_FENCED`] in the slot's owner word
//!   (one CAS through the heap's hook). A fenced slot is never claimed, adopted or swept, and
//!   nothing it owns is reused, until its owner is *known stopped*: its process is gone (an
//!   owner on this host), or an operator declares its host down
//!   ([`crate::Heap::recover_host`]). Then it is adopted and recovered like any dead slot.
//! - **Rejoin.** An owner that wakes up finds its own owner word fenced at its next renewal,
//!   beats, then clears the flag by CAS: it carries on with the same slot, and nothing it wrote
//!   while fenced touched memory anyone else uses.
//!
//! # Why a stalled owner cannot corrupt (the remaining windows)
//! A stopped owner may wake at any instruction, between any check and any write. So it checks
//! nothing: every write it can make after its stop goes to memory that only it uses (its
//! slot, its slabs, its in-flight block) or is one of the heap's ordinary CASes on shared
//! words, which are correct whoever makes them, whenever. The fence changes only who may
//! *take* the slot, never what the owner may do. The windows that remain, each a named
//! stall point ([`crate::crash::STALL_POINTS`]):
//! - `renew.read`: the renewer read its owner word (unfenced), stops, then beats into a
//!   fenced slot. Harmless: the flag, not the beat, decides; its next renewal rejoins.
//! - `rejoin.beaten`: the renewer beat, stops before clearing the flag: the slot stays fenced
//!   until it runs again, or an operator recovers the host (then the CAS fails: see below).
//! - `claim.beaten`: a claimer wrote its beat into a slot it has not won; another process
//!   claims it meanwhile. Harmless: that beat carries the loser's pid, which is not the
//!   winner's, so no observer counts it, and the winner's next beat replaces it.
//! - `release.written`: an owner wrote its slot back and stops before its releasing CAS; its
//!   slot is fenced meanwhile. Its CAS then finds its own fenced word and clears it to zero.
//! - any crash point of a transition (`crash.rs`): the owner stops mid-step; nothing of its
//!   is reused while it is fenced, so it finishes the step as if never stopped.
//!
//! The one thing the fence cannot make harmless is an operator's mistake: declaring a host
//! down ([`crate::Heap::recover_host`]) while its processes are only paused hands their
//! memory to others while they may still write it. That is the contract of every fencing
//! scheme without a memory that checks tokens (STONITH): power the host off, or make sure its
//! podkv processes are gone, first. A process that wakes to find its slot taken that way sees
//! its rejoin CAS fail and counts it ([`crate::Heap::slots_lost`]).

use podkv_hw::sync::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// The flag an observer sets in a lapsed owner's word (bit 23: a pid's field holds at most
/// Linux's `PID_MAX_LIMIT`, 2^22).
pub const FLAG_FENCED: u64 = 1 << 23;

/// A heartbeat word: bit 63 set (a format-6 reader takes it for a lease deadline far in the
/// future, never for a lapsed one), the beater's pid in bits 40..63, a counter in 0..40.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Beat(pub u64);

const BEAT_TAGGED: u64 = 1 << 63;
const MASK_COUNT: u64 = (1 << 40) - 1;

impl Beat {
    /// The beat after `self`, written by the process `pid`.
    pub fn next(self, pid: u32) -> Beat {
        Beat(BEAT_TAGGED | u64::from(pid & 0x7F_FFFF) << 40 | (self.0.wrapping_add(1) & MASK_COUNT))
    }

    /// Whether the process `pid` wrote this beat.
    pub fn by(self, pid: u32) -> bool {
        self.0 & BEAT_TAGGED != 0 && (self.0 >> 40) & 0x7F_FFFF == u64::from(pid & 0x7F_FFFF)
    }
}

/// What an observer last saw of one slot: its owner word, the owner's beat, and when (by
/// [`clock_ms`]) either changed.
#[derive(Clone, Copy, Default)]
struct Seen {
    owner: u64,
    beat: u64,
    since_ms: u64,
}

/// This process's watch over a heap's slots (process memory, never shared).
pub(crate) struct Watch {
    seen: Mutex<Vec<Seen>>,
}

impl Watch {
    pub(crate) fn new(count: u64) -> Watch {
        Watch {
            seen: Mutex::new(vec![Seen::default(); count as usize]),
        }
    }

    /// Records what slot `i` shows now (owner word `owner`, beat `beat`, counted only if its
    /// owner wrote it) and says whether it has shown the same for at least `lease`.
    pub(crate) fn lapsed(&self, i: u64, owner: u64, beat: Beat, lease: Duration) -> bool {
        let pid = crate::slot::owner_pid(owner);
        let beat = if beat.by(pid) { beat.0 } else { 0 };
        let now = clock_ms();
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let s = &mut seen[i as usize];
        if s.since_ms == 0 || s.owner != owner || s.beat != beat {
            *s = Seen {
                owner,
                beat,
                since_ms: now.max(1),
            };
            return false;
        }
        now.saturating_sub(s.since_ms) >= lease.as_millis() as u64
    }
}

/// This process's clock for liveness, in milliseconds: `CLOCK_MONOTONIC`, never compared with
/// another process's. The one function every lease decision reads; tests replace it through
/// `PODKV_CLOCK` (`skew=<ms>` shifts it, `rate=<n>` runs it `n` times as fast), read once.
pub fn clock_ms() -> u64 {
    static HOOK: OnceLock<(i64, u64)> = OnceLock::new();
    let &(skew, rate) = HOOK.get_or_init(|| {
        let spec = std::env::var("PODKV_CLOCK").unwrap_or_default();
        let value = |key: &str| {
            spec.split(',')
                .find_map(|kv| kv.trim().strip_prefix(key)?.strip_prefix('='))
                .and_then(|v| v.trim_start_matches('+').parse::<i64>().ok())
        };
        (value("skew").unwrap_or(0), value("rate").unwrap_or(1).max(1) as u64)
    });
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let ms = ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000;
    // An offset keeps a clock skewed backwards above zero (zero means "never seen").
    (ms * rate + (1 << 40)).saturating_add_signed(skew)
}

/// Loads a slot's beat word (read fresh by a caller that invalidated its line).
pub(crate) fn beat_of(word: &AtomicU64) -> Beat {
    Beat(word.load(Ordering::Acquire))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_beat_counts_only_for_its_writer_and_always_advances() {
        let b = Beat(0).next(77);
        assert!(b.by(77) && !b.by(78));
        let c = b.next(77);
        assert_ne!(b, c);
        assert!(!Beat(5_000_000_000_000).by(0), "a format-6 deadline counts for nobody");
    }

    #[test]
    fn an_observer_judges_a_lapse_only_after_watching_a_whole_lease() {
        let watch = Watch::new(1);
        let lease = Duration::from_millis(30);
        let beat = Beat(0).next(9);
        assert!(!watch.lapsed(0, 9, beat, lease), "first sight");
        assert!(!watch.lapsed(0, 9, beat.next(9), lease), "it advanced");
        std::thread::sleep(Duration::from_millis(40));
        assert!(watch.lapsed(0, 9, beat.next(9), lease), "silent for a lease");
        assert!(!watch.lapsed(0, 10, beat.next(9), lease), "another owner: watched anew");
    }
}
