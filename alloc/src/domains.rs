//! The cache domains that have opened a `limited` heap: one header word, so that a heap used
//! from one host only reads slab descriptors from its cache instead of from memory.
//!
//! # Why
//! The SWcc reader rule makes a thread invalidate a descriptor's lines before it reads what
//! another thread may have written there (a remote free reads the owner's class and state),
//! because the writer may sit on another host, whose stores reach memory but not this host's
//! cache. Threads of one host share coherent caches: for them the invalidation only evicts a
//! line both use, so the freer reads it from memory and the owner misses on its next free.
//! On YCSB `a` in a `limited` heap (1 M records, 2 threads, one host) those invalidations were
//! 0.95 lines per operation, and switching them off ran 1.15–1.20× as fast.
//!
//! # The word
//! Header word [`OFFSET_DOMAINS`] (heap format 11), coherent as the whole header is (a CPU
//! CAS; the model maps the header shared):
//! - `0`: no process has opened the heap yet;
//! - a domain: every process that opened the heap did so in that domain;
//! - [`MANY`]: processes of two domains or more have opened it. It never goes back.
//!
//! A domain is the host id ([`crate::process::host_id`]); under the coherence model each
//! heap mapping is a cache, and so a domain, of its own ([`podkv_hw::model::cache_domain`]).
//! Every process joins when it opens the heap ([`join`]), before it writes anything of it.
//!
//! # Why a read from the cache is then fresh
//! A thread that reads a line from its cache, and *then* finds the word naming its own domain
//! only, read what was last written there: every process that had written the line by then
//! had joined before it wrote, so the word would have named a second domain. The check comes
//! after the read for that reason ([`only`] begins with an `Acquire` fence, so the read
//! cannot move past it). The one exception reads a slab this slot owns, whose lines only its
//! earlier owners wrote, before this thread claimed the slot: there the check may come first.
//! Only `limited` heaps use the word: in an `mcas` heap the header is not read coherently
//! without a memory-side request, which would cost what it saves.

use podkv_hw::sync::{fence, AtomicU64, Ordering};

/// Header byte offset of the word (see the module docs).
pub(crate) const OFFSET_DOMAINS: u64 = 288;
/// The word once processes of two domains or more have opened the heap (no domain is this).
pub(crate) const MANY: u64 = u64::MAX;

/// Notes in `word` that a process of `domain` (never zero or [`MANY`]) opens the heap.
pub(crate) fn join(word: &AtomicU64, domain: u64) {
    debug_assert!(domain != 0 && domain != MANY);
    let mut seen = word.load(Ordering::SeqCst);
    loop {
        let next = match seen {
            0 => domain,
            d if d == domain || d == MANY => return,
            _ => MANY,
        };
        match word.compare_exchange(seen, next, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => return,
            Err(now) => seen = now,
        }
    }
}

/// Whether every process that has opened the heap so far is of `domain` (zero: never). The
/// caller's loads before this call are not moved after it (module docs: the check comes after
/// the read).
#[inline]
pub(crate) fn only(word: &AtomicU64, domain: u64) -> bool {
    fence(Ordering::Acquire);
    domain != 0 && word.load(Ordering::SeqCst) == domain
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_word_names_one_domain_until_a_second_joins_and_never_goes_back() {
        let word = AtomicU64::new(0);
        assert!(!only(&word, 7), "nobody has joined");
        join(&word, 7);
        join(&word, 7);
        assert!(only(&word, 7));
        assert!(!only(&word, 9));
        assert!(!only(&word, 0), "a process without a domain trusts nothing");
        join(&word, 9);
        assert_eq!(word.load(Ordering::SeqCst), MANY);
        join(&word, 7);
        assert!(!only(&word, 7) && !only(&word, 9));
    }
}
