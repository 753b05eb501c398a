//! Loom models of the two lock-free protocols every process shares: the global free list and
//! the remote-free counter. Run with
//! `RUSTFLAGS="--cfg podkv_loom" cargo test -p podkv-alloc --release --test loom`.
//! They build the protocols on ordinary memory (loom cannot see a mapped file); the code under
//! test is the same `free_list` and `remote` the heap uses.
#![cfg(podkv_loom)]

use podkv_alloc::free_list;
use podkv_alloc::remote::{self, Disown, RemoteFree};
use podkv_hw::sync::{model, spawn, Arc, AtomicU64, Ordering};

struct List {
    head: AtomicU64,
    next: Vec<AtomicU64>,
}

impl List {
    fn new(slabs: usize) -> Arc<List> {
        Arc::new(List {
            head: AtomicU64::new(0),
            next: (0..slabs).map(|_| AtomicU64::new(0)).collect(),
        })
    }
    fn push(&self, slab: u32) {
        free_list::push(&self.head, slab, |s, n| {
            self.next[s as usize].store(u64::from(n), Ordering::Relaxed)
        });
    }
    fn pop(&self) -> Option<u32> {
        free_list::pop(&self.head, |s| {
            self.next[s as usize].load(Ordering::Relaxed) as u32
        })
    }
}

/// Two threads each pop a slab and push it back while a third pops: no slab is lost or
/// handed out twice (the ABA case: a slab popped and pushed back under a racing pop).
#[test]
fn free_list_never_loses_or_duplicates_a_slab() {
    model(|| {
        let list = List::new(3);
        for slab in 0..3 {
            list.push(slab);
        }
        let recyclers: Vec<_> = (0..2)
            .map(|_| {
                let list = list.clone();
                spawn(move || {
                    if let Some(slab) = list.pop() {
                        list.push(slab);
                    }
                })
            })
            .collect();
        let taker = {
            let list = list.clone();
            spawn(move || list.pop())
        };
        for r in recyclers {
            r.join().unwrap();
        }
        let taken = taker.join().unwrap();
        let mut seen: Vec<u32> = std::iter::from_fn(|| list.pop()).collect();
        seen.extend(taken);
        seen.sort();
        assert_eq!(seen, vec![0, 1, 2]);
    });
}

/// A bounded list never holds more than its limit, whatever the interleaving.
#[test]
fn bounded_list_respects_its_limit() {
    model(|| {
        let list = List::new(3);
        let pushers: Vec<_> = (0..2)
            .map(|slab| {
                let list = list.clone();
                spawn(move || {
                    free_list::push_bounded(&list.head, slab, Some(1), |s, n| {
                        list.next[s as usize].store(u64::from(n), Ordering::Relaxed)
                    })
                })
            })
            .collect();
        let pushed: Vec<bool> = pushers.into_iter().map(|p| p.join().unwrap()).collect();
        assert_eq!(pushed.iter().filter(|&&p| p).count(), 1, "exactly one fits");
        assert_eq!(free_list::len_of(list.head.load(Ordering::Relaxed)), 1);
    });
}

/// A detached slab with two live blocks freed by two remote threads at once: exactly one of
/// them takes the slab.
#[test]
fn exactly_one_remote_freer_takes_a_detached_slab() {
    model(|| {
        let word = Arc::new(AtomicU64::new(0));
        remote::reset(&word, 2);
        assert_eq!(remote::detach(&word), 2);
        let freers: Vec<_> = (0..2)
            .map(|_| {
                let word = word.clone();
                spawn(move || remote::free_remote(&word) == RemoteFree::TookSlab)
            })
            .collect();
        let took: usize = freers
            .into_iter()
            .map(|f| usize::from(f.join().unwrap()))
            .sum();
        assert_eq!(took, 1);
    });
}

/// The owner frees a block of its detached slab locally (reattach) while a remote thread frees
/// the other: nobody takes the slab, and the owner has it back with one remote free counted.
#[test]
fn reattach_races_a_remote_free_and_nobody_takes_the_slab() {
    model(|| {
        let word = Arc::new(AtomicU64::new(0));
        remote::reset(&word, 2);
        let _ = remote::detach(&word);
        let other = {
            let word = word.clone();
            spawn(move || remote::free_remote(&word))
        };
        remote::reattach(&word);
        assert_eq!(other.join().unwrap(), RemoteFree::Counted);
        assert_eq!(
            word.load(Ordering::Relaxed),
            1,
            "one block still counted: the owner's free bit"
        );
    });
}

/// The owner disowns a slab (3 blocks: 1 free bit, 2 live) while both live blocks are freed
/// remotely: exactly one party ends up owning the empty slab.
#[test]
fn disown_and_remote_frees_leave_exactly_one_owner() {
    model(|| {
        let word = Arc::new(AtomicU64::new(0));
        remote::reset(&word, 3);
        let freers: Vec<_> = (0..2)
            .map(|_| {
                let word = word.clone();
                spawn(move || remote::free_remote(&word) == RemoteFree::TookSlab)
            })
            .collect();
        let owner_keeps = remote::disown(&word, 1) == Disown::Empty;
        let took: usize = freers
            .into_iter()
            .map(|f| usize::from(f.join().unwrap()))
            .sum();
        assert_eq!(took + usize::from(owner_keeps), 1);
    });
}
