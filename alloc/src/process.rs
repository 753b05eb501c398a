//! Who this process is, as thread slots record it, and how a slot's owner is judged dead.
//!
//! On one host an owner is dead when its process is gone: its pid no longer runs, or runs with
//! another start time (a reused pid is another process). Hosts sharing real pod memory cannot
//! see each other's processes, so a heap in *lease mode* watches heartbeats: an owner whose
//! beat stops advancing for a lease (by the watcher's own clock) is fenced, and recovered once
//! known stopped ([`crate::lease`]). The mode is fixed when the heap is created ([`Liveness`],
//! recorded in the header).

use crate::slot::Owner;
use std::sync::OnceLock;
use std::time::Duration;

/// How a heap decides that a slot's owner is dead.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Liveness {
    /// By process: pid plus start time, for owners on this host. Owners on other hosts are
    /// never judged dead (use lease mode for a multi-host pod).
    #[default]
    Process,
    /// By lease: owners advance a heartbeat every third of a lease; an owner silent for a lease
    /// is fenced, wherever it runs, and recovered once known stopped ([`crate::lease`]). (On
    /// this host a vanished process is dead at once.)
    Lease,
}

impl Liveness {
    /// The mode's name.
    pub const fn name(self) -> &'static str {
        match self {
            Liveness::Process => "process",
            Liveness::Lease => "lease",
        }
    }
}

impl std::str::FromStr for Liveness {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "process" => Ok(Liveness::Process),
            "lease" => Ok(Liveness::Lease),
            _ => Err(format!("unknown liveness mode {s:?} (process, lease)")),
        }
    }
}

/// How long an owner may stay silent before it is fenced (`Config::lease` by default).
pub const LEASE: Duration = Duration::from_secs(3);

/// This process as a slot owner.
pub fn me() -> Owner {
    static ME: OnceLock<(u32, u64)> = OnceLock::new();
    let pid = std::process::id();
    // After fork the child has another pid: recompute then.
    let &(cached_pid, start) = ME.get_or_init(|| (pid, start_time(pid).unwrap_or(0)));
    let start = if cached_pid == pid {
        start
    } else {
        start_time(pid).unwrap_or(0)
    };
    Owner {
        host: host_id(),
        pid,
        start: (start & 0xFF_FFFF) as u32,
    }
}

static HOST: OnceLock<u16> = OnceLock::new();

/// Sets this process's host id (`podkv serve --host-id`) before anything reads it: false if
/// it was already fixed to another (by `PODKV_HOST_ID`, an earlier call, or a heap opened
/// already).
pub fn set_host_id(id: u16) -> bool {
    id != 0 && *HOST.get_or_init(|| id) == id
}

/// This host's id: 16 bits of a hash of `/etc/machine-id` (else the hostname), never zero;
/// `PODKV_HOST_ID` or [`set_host_id`] overrides it.
pub fn host_id() -> u16 {
    *HOST.get_or_init(|| {
        if let Some(id) = std::env::var("PODKV_HOST_ID")
            .ok()
            .and_then(|v| v.parse::<u16>().ok())
            .filter(|&v| v != 0)
        {
            return id;
        }
        let text = std::fs::read_to_string("/etc/machine-id")
            .or_else(|_| std::fs::read_to_string("/proc/sys/kernel/hostname"))
            .unwrap_or_default();
        let hash = text.trim().bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        ((hash ^ hash >> 16 ^ hash >> 32 ^ hash >> 48) as u16).max(1)
    })
}

/// The calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`): time on a CPU, without the time
/// it waited for one. A system call, not a vDSO read: about a microsecond.
pub fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

pub use podkv_hw::process::start_time;

/// Whether process `pid` whose start time has the low 24 bits `start` is still running.
pub fn is_alive(pid: u32, start: u32) -> bool {
    match start_time(pid) {
        Some(now) => (now & 0xFF_FFFF) as u32 == start,
        None => false,
    }
}

/// Whether the owner word `word` (a slot's, a hazard record's or a process line's: host, start
/// time and pid, [`Owner::pack`]) names a process known to be dead: one of this host that no
/// longer runs (its pid gone, or reused by another start). An owner on another host is never
/// known dead this way (lease mode judges slots by their leases as well).
///
/// Under the coherence model (a test mode), the dead process's dirty cache lines reach memory
/// first ([`podkv_hw::model::settle_dead`]): a judge on its host shares that host's cache.
pub fn is_dead_owner(word: u64) -> bool {
    let dead = Owner::unpack(word).filter(|o| o.host == host_id() && !is_alive(o.pid, o.start));
    if let Some(o) = dead {
        podkv_hw::model::settle_dead(o.pid, o.start);
    }
    dead.is_some()
}

/// What a liveness check says of a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotLife {
    /// Nobody holds it.
    Free,
    /// Its owner lives (or may: an owner on another host in process mode).
    Alive(Owner),
    /// Its owner is known stopped; the word is the owner word to adopt from.
    Dead(u64),
    /// Lease mode: its owner's lease lapsed and the slot is fenced (the word, flag included):
    /// nobody takes it until the owner is known stopped ([`crate::lease`]).
    Fenced(u64),
}

/// Judges the owner of a slot whose owner word holds `word`, without watching it: a local owner
/// whose process is gone is dead (fenced or not: it is known stopped); a fenced one is
/// fenced; anyone else alive. (Lease mode's watch, which fences, is `Slots::life`.)
pub(crate) fn life_of_word(word: u64) -> SlotLife {
    let Some(who) = Owner::unpack(word) else {
        return SlotLife::Free;
    };
    if is_dead_owner(word) {
        return SlotLife::Dead(word);
    }
    if word & crate::lease::FLAG_FENCED != 0 {
        return SlotLife::Fenced(word);
    }
    SlotLife::Alive(who)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_has_a_start_time() {
        let me = me();
        assert!(me.start > 0);
        assert!(is_alive(me.pid, me.start));
        assert!(
            !is_alive(me.pid, me.start + 1),
            "another start time is another process"
        );
        assert_ne!(host_id(), 0);
    }
}
