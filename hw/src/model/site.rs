//! Named write-back, invalidation and hook-CAS sites, and the switch that turns them off.
//!
//! Each `site!` / `cas_site!` expansion owns one static [`Site`]. The first call pushes it on a
//! lock-free list (so [`sites_hit`] can list what ran) and decides once whether
//! `PODKV_COHERENCE_SITE_OFF` names it. No lock and no allocation after that first decision:
//! sites run inside the huge heap's SIGSEGV handler too (`registry::activate` makes the
//! decision table before any heap is modelled).

use crate::sync::mapped::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, Ordering};
use std::cell::Cell;
use std::sync::OnceLock;

const STATE_UNKNOWN: u8 = 0;
const STATE_ON: u8 = 1;
const STATE_OFF: u8 = 2;

/// One named site.
#[derive(Debug)]
pub struct Site {
    name: &'static str,
    /// `STATE_*`: decided once from the environment, by whichever call comes first.
    state: AtomicU8,
    /// Calls so far in this process.
    hits: AtomicU64,
    /// Set once this site is on the list of sites that ran.
    listed: AtomicBool,
    /// The next site on that list.
    next: AtomicPtr<Site>,
}

static LISTED: AtomicPtr<Site> = AtomicPtr::new(std::ptr::null_mut());

thread_local! {
    // A `cas_site!` that is off arms this; the heap's hook takes it at its next CAS.
    static CAS_OFF: Cell<bool> = const { Cell::new(false) };
}

/// The sites `PODKV_COHERENCE_SITE_OFF` names (comma separated), read once.
pub fn off_sites() -> &'static [String] {
    static OFF: OnceLock<Vec<String>> = OnceLock::new();
    OFF.get_or_init(|| {
        std::env::var("PODKV_COHERENCE_SITE_OFF")
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    })
}

impl Site {
    /// A site named `name`.
    pub const fn new(name: &'static str) -> Site {
        Site {
            name,
            state: AtomicU8::new(STATE_UNKNOWN),
            hits: AtomicU64::new(0),
            listed: AtomicBool::new(false),
            next: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// Counts a call and says whether the site is on.
    pub fn on(&'static self) -> bool {
        self.hits.fetch_add(1, Ordering::Relaxed);
        if !self.listed.swap(true, Ordering::AcqRel) {
            self.list();
        }
        match self.state.load(Ordering::Relaxed) {
            STATE_ON => true,
            STATE_OFF => false,
            _ => {
                let off = off_sites().iter().any(|s| s == self.name);
                let state = if off { STATE_OFF } else { STATE_ON };
                self.state.store(state, Ordering::Relaxed);
                !off
            }
        }
    }

    /// As [`Site::on`]; when off, the calling thread's next hook CAS is made by CPU.
    pub fn arm_cas(&'static self) {
        if !self.on() {
            CAS_OFF.with(|off| off.set(true));
        }
    }

    fn list(&'static self) {
        let me = self as *const Site as *mut Site;
        let mut head = LISTED.load(Ordering::Acquire);
        loop {
            self.next.store(head, Ordering::Relaxed);
            match LISTED.compare_exchange(head, me, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return,
                Err(seen) => head = seen,
            }
        }
    }
}

/// Whether a switched-off `cas_site!` armed this thread's next hook CAS (and disarms it).
#[inline]
pub fn take_cas_off() -> bool {
    CAS_OFF.with(|off| off.replace(false))
}

/// Every site that ran in this process, with its calls so far.
pub fn sites_hit() -> Vec<(&'static str, u64)> {
    let mut out = Vec::new();
    let mut at = LISTED.load(Ordering::Acquire);
    while !at.is_null() {
        // SAFETY: only `&'static Site`s are ever pushed on the list.
        let site = unsafe { &*at };
        out.push((site.name, site.hits.load(Ordering::Relaxed)));
        at = site.next.load(Ordering::Acquire);
    }
    out.sort_unstable();
    out
}

/// Calls of the site `name` in this process so far (zero if it never ran).
pub fn hits(name: &str) -> u64 {
    sites_hit()
        .into_iter()
        .find(|(site, _)| *site == name)
        .map_or(0, |(_, hits)| hits)
}
