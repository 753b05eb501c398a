//! Loom models of the link CAS protocol (`list`) and of epoch advancement (`epoch`), run on
//! ordinary memory: `RUSTFLAGS="--cfg podkv_loom" cargo test -p podkv-store --release --test loom`.
//! Capacities are tiny (3–5 nodes, 2 threads); that changes no logic. Run with
//! `LOOM_MAX_PREEMPTIONS=3` (the CI setting) to bound the search.
#![cfg(podkv_loom)]

use podkv_hw::sync::{model, spawn, Arc, AtomicU64, Ordering, UnsafeCell};
use podkv_store::epoch;
use podkv_store::list::{self, Nodes, Position, Probe};
use std::cmp::Ordering as Order;

/// Nodes `1..=N` at offsets `8 * i`; node `i` has key `KEYS[i]` (one byte).
struct Arena {
    head: AtomicU64,
    next: Vec<AtomicU64>,
    keys: Vec<u8>,
    retired: loom::sync::Mutex<Vec<u64>>,
}

impl Arena {
    fn new(keys: &[u8], linked: &[usize]) -> Arena {
        let a = Arena {
            head: AtomicU64::new(0),
            next: (0..=keys.len()).map(|_| AtomicU64::new(0)).collect(),
            keys: std::iter::once(0).chain(keys.iter().copied()).collect(),
            retired: loom::sync::Mutex::new(Vec::new()),
        };
        let mut link = &a.head;
        for &i in linked {
            link.store(8 * i as u64, Ordering::Relaxed);
            link = &a.next[i];
        }
        a
    }

    fn probe(key: &u8) -> Probe<'_> {
        Probe {
            order: u64::from(*key),
            key: std::slice::from_ref(key),
        }
    }

    fn retire(&self, at: u64) {
        self.retired.lock().unwrap().push(at);
    }

    /// Unmarked keys from the head, in order.
    fn keys_now(&self) -> Vec<(u8, u64)> {
        let mut out = Vec::new();
        let mut at = self.head.load(Ordering::Acquire);
        while at != 0 {
            let next = self.next(at).load(Ordering::Acquire);
            if next & list::MARK == 0 {
                out.push((self.keys[at as usize / 8], at));
            }
            at = next & !list::MARK;
        }
        out
    }

    /// The store's write loop, reduced: replace-or-insert `new`.
    fn put(&self, new: u64) {
        let key = self.keys[new as usize / 8];
        let probe = Arena::probe(&key);
        let mut retire = |n| self.retire(n);
        loop {
            let pos: Position<'_> = list::find(self, &self.head, &probe, &mut retire);
            let done = if pos.found {
                list::try_replace(self, &pos, new)
            } else {
                list::try_insert(self, &pos, new)
            };
            if done {
                if pos.found {
                    list::unlink(self, &self.head, &pos, &probe, &mut retire);
                }
                return;
            }
        }
    }

    /// Deletes `key`; whether it was there.
    fn delete(&self, key: u8) -> bool {
        let probe = Arena::probe(&key);
        let mut retire = |n| self.retire(n);
        loop {
            let pos = list::find(self, &self.head, &probe, &mut retire);
            if !pos.found {
                return false;
            }
            if list::try_delete(self, &pos) {
                list::unlink(self, &self.head, &pos, &probe, &mut retire);
                return true;
            }
        }
    }
}

impl Nodes for Arena {
    fn next(&self, at: u64) -> &AtomicU64 {
        &self.next[at as usize / 8]
    }

    fn order(&self, at: u64, probe: &Probe<'_>) -> Order {
        self.keys[at as usize / 8].cmp(&probe.key[0])
    }
}

/// Two replaces of one key race: one wins last, the key is never absent to a reader, and each
/// replaced node is retired exactly once.
#[test]
fn replace_replace_and_lookup() {
    model(|| {
        // node 1: key 5 (linked); nodes 2, 3: key 5 replacements; node 4: key 9 (linked)
        let a = Arc::new(Arena::new(&[5, 5, 5, 9], &[1, 4]));
        let (a1, a2) = (a.clone(), a.clone());
        let t1 = spawn(move || a1.put(16));
        let t2 = spawn(move || a2.put(24));
        let seen = list::lookup(&*a, &a.head, &Arena::probe(&5));
        assert_ne!(seen, 0, "a replace never makes the key absent");
        t1.join().unwrap();
        t2.join().unwrap();
        let keys = a.keys_now();
        assert_eq!(keys.len(), 2, "{keys:?}");
        assert!(keys[0].1 == 16 || keys[0].1 == 24);
        let mut retired = a.retired.lock().unwrap().clone();
        retired.sort();
        let loser = if keys[0].1 == 16 { 24 } else { 16 };
        assert_eq!(
            retired,
            vec![8, loser]
                .into_iter()
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect::<Vec<_>>()
        );
    });
}

/// Replace of one key, then an insert after it, race with the delete of its successor:
/// nothing is lost, nothing resurrects, every unlinked node is retired once.
#[test]
fn replace_delete_insert_neighbours() {
    model(|| {
        // 1: key 3 (linked), 2: key 5 (linked), 3: key 5 (replacement), 4: key 7 (linked), 5: key 6
        let a = Arc::new(Arena::new(&[3, 5, 5, 7, 6], &[1, 2, 4]));
        let a1 = a.clone();
        let t1 = spawn(move || {
            a1.put(24);
            a1.put(40);
        });
        assert!(a.delete(7));
        t1.join().unwrap();
        let keys: Vec<_> = a.keys_now();
        assert_eq!(keys, vec![(3, 8), (5, 24), (6, 40)]);
        let mut retired = a.retired.lock().unwrap().clone();
        retired.sort();
        assert_eq!(
            retired,
            vec![16, 32],
            "each unlinked node retired exactly once"
        );
    });
}

/// Two deletes of one key: exactly one succeeds.
#[test]
fn delete_delete() {
    model(|| {
        let a = Arc::new(Arena::new(&[4, 8], &[1, 2]));
        let a1 = a.clone();
        let t = spawn(move || a1.delete(4));
        let mine = a.delete(4);
        let theirs = t.join().unwrap();
        assert!(mine ^ theirs);
        assert_eq!(a.keys_now(), vec![(8, 16)]);
        assert_eq!(*a.retired.lock().unwrap(), vec![8]);
    });
}

/// A node retired in epoch `r` is freed only when the epoch reaches `r + 2`; a reader pinned
/// before the unlink can still read it (loom reports a race on the cell otherwise).
#[test]
fn epoch_protects_pinned_reader() {
    model(|| {
        let global = Arc::new(AtomicU64::new(2));
        let slots = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let current = Arc::new(AtomicU64::new(1));
        let cells = Arc::new([
            UnsafeCell::new(0u64),
            UnsafeCell::new(11),
            UnsafeCell::new(22),
        ]);
        let (g, s, c, cl) = (
            global.clone(),
            slots.clone(),
            current.clone(),
            cells.clone(),
        );
        let reader = spawn(move || {
            epoch::pin(&g, &s[1]);
            let node = c.load(Ordering::Acquire) as usize;
            // SAFETY (test): the node is reachable or retired after our pin; never freed yet.
            let v = cl[node].with(|p| unsafe { *p });
            assert!(v == 11 || v == 22, "read a freed node: {v}");
            epoch::unpin(&s[1]);
        });
        // writer: unlink node 1 (publish node 2), retire, try to free
        current.store(2, Ordering::Release);
        let retired = epoch::retire_epoch(&global);
        for _ in 0..3 {
            let now = epoch::try_advance(&global, slots.iter());
            if epoch::is_reclaimable(retired, now) {
                // "free": poison the node
                cells[1].with_mut(|p| unsafe { *p = 0xdead });
                break;
            }
            loom::thread::yield_now();
        }
        reader.join().unwrap();
    });
}

/// An unpinned (released) slot never holds the epoch back; a pinned one behind does.
#[test]
fn released_slot_does_not_hold_epoch() {
    model(|| {
        let global = AtomicU64::new(4);
        let slots = [AtomicU64::new(0), AtomicU64::new(0)];
        epoch::pin(&global, &slots[0]);
        assert_eq!(epoch::try_advance(&global, slots.iter()), 5);
        assert_eq!(
            epoch::try_advance(&global, slots.iter()),
            5,
            "slot 0 pinned at 4"
        );
        epoch::unpin(&slots[0]);
        assert_eq!(epoch::try_advance(&global, slots.iter()), 6);
    });
}
