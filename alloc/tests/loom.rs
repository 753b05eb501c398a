//! Loom models of the two lock-free protocols every process shares: the global free list and
//! the remote-free counter (with a morph's rebase of it). Run with
//! `RUSTFLAGS="--cfg podkv_loom" cargo test -p podkv-alloc --release --test loom`.
//! They build the protocols on ordinary memory (loom cannot see a mapped file); the code under
//! test is the same `free_list` and `remote` the heap uses.
#![cfg(podkv_loom)]

use podkv_alloc::dcas::{self, Tag, Writer};
use podkv_alloc::free_list;
use podkv_alloc::remote::{self, Disown, RemoteFree};
use podkv_hw::sync::{model, spawn, Arc, AtomicU64, Ordering};
use std::cell::Cell;

/// A thread of the model: tid, a version bumped per operation (as `ThreadHandle` does; its
/// recovery word, which only it writes, is the model's `ver`), and the acknowledgement words,
/// one per thread, that serve as the help array (`dcas`'s own encoding and functions).
struct ModelWriter {
    tid: u16,
    ver: Cell<u16>,
    recs: Arc<Vec<AtomicU64>>,
    /// Log and acknowledge (else only tag, as the free-list models need: the acknowledgement
    /// protocol has models of its own, and would multiply their interleavings).
    track: bool,
}

impl ModelWriter {
    fn new(tid: u16, recs: &Arc<Vec<AtomicU64>>) -> ModelWriter {
        ModelWriter {
            tid,
            ver: Cell::new(0),
            recs: recs.clone(),
            track: true,
        }
    }
    fn untracked(tid: u16) -> ModelWriter {
        ModelWriter {
            track: false,
            ..ModelWriter::new(tid, &Arc::new(Vec::new()))
        }
    }
    /// Starts an operation: a fresh version (logged in the thread's own recovery word).
    fn begin(&self) -> &Self {
        self.ver.set(self.ver.get() + 1);
        self
    }
    /// Whether this thread's logged operation took effect on `word`, as a recoverer decides.
    /// The target first, then the acknowledgement word: whoever replaced the target
    /// acknowledged before it did.
    fn took_effect(&self, word: &AtomicU64) -> bool {
        let target = word.load(Ordering::Acquire);
        let ack = self.recs[usize::from(self.tid) - 1].load(Ordering::Acquire);
        dcas::tag(target) == self.tag() || dcas::is_acked(ack, self.ver.get())
    }
}

impl Writer for ModelWriter {
    fn tag(&self) -> Tag {
        Tag {
            tid: self.tid,
            ver: self.ver.get(),
        }
    }
    fn acknowledge(&self, previous: Tag) {
        if !self.track {
            return;
        }
        let ack = &self.recs[usize::from(previous.tid) - 1];
        let mut cur = ack.load(Ordering::Acquire);
        while let Some(new) = dcas::acknowledged(cur, previous.ver) {
            match self.cas_word(ack, cur, new) {
                Ok(_) => return,
                Err(seen) => cur = seen,
            }
        }
    }
}

/// A thread body for `spawn`: writer `tid` frees `times` blocks remotely on `word`; returns
/// what the last free did.
fn remote_freer(
    word: &Arc<AtomicU64>,
    recs: &Arc<Vec<AtomicU64>>,
    tid: u16,
    times: usize,
) -> impl FnOnce() -> RemoteFree + Send + 'static {
    let (word, recs) = (word.clone(), recs.clone());
    move || {
        let w = ModelWriter::new(tid, &recs);
        let mut last = RemoteFree::Counted;
        for _ in 0..times {
            last = remote::free_remote(&word, w.begin());
        }
        last
    }
}

/// `n` threads' acknowledgement words, each with the window its owner sets at claim.
fn recs(n: usize) -> Arc<Vec<AtomicU64>> {
    let claimed = dcas::rebased(0, dcas::ack_base(0));
    Arc::new((0..n).map(|_| AtomicU64::new(claimed)).collect())
}

struct List {
    head: AtomicU64,
    next: Vec<AtomicU64>,
    depth: Vec<AtomicU64>,
}

impl List {
    fn new(slabs: usize) -> Arc<List> {
        Arc::new(List {
            head: AtomicU64::new(0),
            next: (0..slabs).map(|_| AtomicU64::new(0)).collect(),
            depth: (0..slabs).map(|_| AtomicU64::new(0)).collect(),
        })
    }
    fn push_bounded(&self, slab: u32, limit: Option<u32>, w: &ModelWriter) -> bool {
        free_list::push_bounded(
            &self.head,
            slab,
            limit,
            w.begin(),
            |s| self.depth[s as usize].load(Ordering::Relaxed) as u32,
            |s, n, d| {
                self.next[s as usize].store(u64::from(n), Ordering::Relaxed);
                self.depth[s as usize].store(u64::from(d), Ordering::Relaxed);
            },
        )
    }
    fn push(&self, slab: u32, w: &ModelWriter) {
        assert!(self.push_bounded(slab, None, w));
    }
    fn pop(&self, w: &ModelWriter) -> Option<u32> {
        free_list::pop(
            &self.head,
            w.begin(),
            |s| self.next[s as usize].load(Ordering::Relaxed) as u32,
            |_| {},
        )
    }
}

/// Two threads each pop a slab and push it back while a third pops: no slab is lost or
/// handed out twice (the ABA case: a slab popped and pushed back under a racing pop).
#[test]
fn free_list_never_loses_or_duplicates_a_slab() {
    model(|| {
        let list = List::new(3);
        let main = ModelWriter::untracked(4);
        for slab in 0..3 {
            list.push(slab, &main);
        }
        let recyclers: Vec<_> = (0..2)
            .map(|i| {
                let list = list.clone();
                spawn(move || {
                    let w = ModelWriter::untracked(i + 1);
                    if let Some(slab) = list.pop(&w) {
                        list.push(slab, &w);
                    }
                })
            })
            .collect();
        let taker = {
            let list = list.clone();
            spawn(move || list.pop(&ModelWriter::untracked(3)))
        };
        for r in recyclers {
            r.join().unwrap();
        }
        let taken = taker.join().unwrap();
        let mut seen: Vec<u32> = std::iter::from_fn(|| list.pop(&main)).collect();
        seen.extend(taken);
        seen.sort();
        assert_eq!(seen, vec![0, 1, 2]);
    });
}

/// A bounded list never holds more than its limit, whatever the interleaving.
#[test]
fn bounded_list_respects_its_limit() {
    model(|| {
        let recs = recs(2);
        let list = List::new(3);
        let pushers: Vec<_> = (0..2u16)
            .map(|i| {
                let (list, recs) = (list.clone(), recs.clone());
                spawn(move || {
                    list.push_bounded(u32::from(i), Some(1), &ModelWriter::new(i + 1, &recs))
                })
            })
            .collect();
        let pushed: Vec<bool> = pushers.into_iter().map(|p| p.join().unwrap()).collect();
        assert_eq!(pushed.iter().filter(|&&p| p).count(), 1, "exactly one fits");
        let w = ModelWriter::new(1, &recs);
        assert!(list.pop(&w).is_some());
        assert_eq!(list.pop(&w), None);
    });
}

/// A detached slab with two live blocks freed by two remote threads at once: exactly one of
/// them takes the slab.
#[test]
fn exactly_one_remote_freer_takes_a_detached_slab() {
    model(|| {
        let recs = recs(3);
        let owner = ModelWriter::new(3, &recs);
        let word = Arc::new(AtomicU64::new(0));
        remote::reset(&word, 2, owner.begin());
        assert_eq!(remote::detach(&word, owner.begin()), 2);
        let freers: Vec<_> = (1..=2)
            .map(|tid| spawn(remote_freer(&word, &recs, tid, 1)))
            .collect();
        let took: usize = freers
            .into_iter()
            .map(|f| usize::from(f.join().unwrap() == RemoteFree::TookSlab))
            .sum();
        assert_eq!(took, 1);
    });
}

/// The owner frees a block of its detached slab locally (reattach) while a remote thread frees
/// the other: nobody takes the slab, and the owner has it back with one remote free counted.
#[test]
fn reattach_races_a_remote_free_and_nobody_takes_the_slab() {
    model(|| {
        let recs = recs(2);
        let owner = ModelWriter::new(2, &recs);
        let word = Arc::new(AtomicU64::new(0));
        remote::reset(&word, 2, owner.begin());
        let _ = remote::detach(&word, owner.begin());
        let other = spawn(remote_freer(&word, &recs, 1, 1));
        remote::reattach(&word, owner.begin());
        assert_eq!(other.join().unwrap(), RemoteFree::Counted);
        assert_eq!(
            dcas::payload(word.load(Ordering::Relaxed)),
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
        let recs = recs(3);
        let owner = ModelWriter::new(3, &recs);
        let word = Arc::new(AtomicU64::new(0));
        remote::reset(&word, 3, owner.begin());
        let freers: Vec<_> = (1..=2)
            .map(|tid| spawn(remote_freer(&word, &recs, tid, 1)))
            .collect();
        let owner_keeps = remote::disown(&word, 1, owner.begin()) == Disown::Empty;
        let took: usize = freers
            .into_iter()
            .map(|f| usize::from(f.join().unwrap() == RemoteFree::TookSlab))
            .sum();
        assert_eq!(took + usize::from(owner_keeps), 1);
    });
}

/// A morph rebases the remote word (2 old free bits out, 3 new ones in) while the slab's two
/// old blocks are freed remotely, then the owner disowns it: the frees made before and after
/// the rebase all count, so exactly one party ends up owning the empty slab.
#[test]
fn a_morph_rebase_races_remote_frees_of_old_blocks_and_one_party_takes_the_slab() {
    model(|| {
        let recs = recs(3);
        let owner = ModelWriter::new(3, &recs);
        let word = Arc::new(AtomicU64::new(0));
        remote::reset(&word, 4, owner.begin());
        let freers: Vec<_> = (1..=2)
            .map(|tid| spawn(remote_freer(&word, &recs, tid, 1)))
            .collect();
        remote::rebase(&word, 2, 3, owner.begin());
        let owner_keeps = remote::disown(&word, 3, owner.begin()) == Disown::Empty;
        let took: usize = freers
            .into_iter()
            .map(|f| usize::from(f.join().unwrap() == RemoteFree::TookSlab))
            .sum();
        assert_eq!(took + usize::from(owner_keeps), 1);
    });
}

/// Detectable CAS: thread 1 logs and does one remote free, then logs a second it never does
/// (it "dies"), while thread 2 frees twice over its word. Whatever the interleaving, a
/// recoverer reading thread 1's recovery word and the target decides right: its logged
/// operation did not take effect — and, had it stopped after the first, that one did.
#[test]
fn a_recoverer_tells_whether_the_dead_threads_cas_took_effect() {
    model(|| {
        let recs = recs(3);
        let owner = ModelWriter::new(3, &recs);
        let word = Arc::new(AtomicU64::new(0));
        remote::reset(&word, 4, owner.begin());
        let dying = {
            let (word, recs) = (word.clone(), recs.clone());
            spawn(move || {
                let w = ModelWriter::new(1, &recs);
                let _ = remote::free_remote(&word, w.begin());
                let first = w.took_effect(&word);
                w.begin(); // logged, then the thread dies before its CAS
                first
            })
        };
        let other = spawn(remote_freer(&word, &recs, 2, 2));
        assert!(
            dying.join().unwrap(),
            "a CAS that took effect is seen at once"
        );
        let _ = other.join().unwrap();
        let dead = ModelWriter::new(1, &recs);
        dead.ver.set(2);
        assert!(
            !dead.took_effect(&word),
            "a CAS never made is never taken for done: rec {:#x} word {:#x}",
            recs[0].load(Ordering::Relaxed),
            word.load(Ordering::Relaxed)
        );
        assert_eq!(dcas::payload(word.load(Ordering::Relaxed)), 1);
    });
}

/// Thread 1's one remote free is overwritten by thread 2's: the acknowledgement still proves
/// thread 1's CAS took effect after thread 1 is gone.
#[test]
fn an_overwritten_cas_is_acknowledged() {
    model(|| {
        let recs = recs(2);
        let word = Arc::new(AtomicU64::new(dcas::pack(3, Tag { tid: 0, ver: 0 })));
        let first = spawn(remote_freer(&word, &recs, 1, 1));
        let second = spawn(remote_freer(&word, &recs, 2, 1));
        let _ = first.join().unwrap();
        let _ = second.join().unwrap();
        for tid in [1, 2] {
            let w = ModelWriter::new(tid, &recs);
            w.ver.set(1);
            assert!(w.took_effect(&word), "thread {tid}'s CAS is detectable");
        }
    });
}
