//! Loom models of the copy-on-write bucket protocol (`index`) and of epoch advancement
//! (`epoch`), run on ordinary memory:
//! `RUSTFLAGS="--cfg podkv_loom" cargo test -p podkv-store --release --test loom`.
//! Capacities are tiny (4 buckets, a few items, 2 threads and a reader); that changes no
//! logic. Run with `LOOM_MAX_PREEMPTIONS=3` (the CI setting) to bound the search.
#![cfg(podkv_loom)]

use podkv_hw::sync::{model, spawn, Arc, AtomicU64, Ordering, UnsafeCell};
use podkv_store::epoch;
use podkv_store::index::{self, Change, Memory, EMPTY, TAG_ITEM};
use std::collections::BTreeSet;

/// Buckets in the model.
const COUNT_BUCKETS: usize = 4;
/// Offsets of blocks start here (items are `8 * i` for small `i`).
const BLOCKS_AT: u64 = 8 * 1000;

/// Items `1..` at offsets `8 * i`, each with a key and a hash; blocks made by `make` at
/// `BLOCKS_AT + 8 * k`; what was retired and freed.
struct Table {
    words: Vec<AtomicU64>,
    /// log2 of the table's size, for the models where it doubles.
    size: AtomicU64,
    keys: Vec<(u8, u64)>,
    blocks: loom::sync::Mutex<Vec<Vec<(u64, u64)>>>,
    retired: loom::sync::Mutex<Vec<u64>>,
    freed: loom::sync::Mutex<Vec<u64>>,
}

impl Table {
    /// Items of `(key, hash)`; bucket 0 holds `linked` (by index), the others are unmade.
    fn new(items: &[(u8, u64)], linked: &[usize]) -> Table {
        let t = Table {
            words: (0..COUNT_BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            size: AtomicU64::new(0),
            keys: std::iter::once((0, 0))
                .chain(items.iter().copied())
                .collect(),
            blocks: loom::sync::Mutex::new(Vec::new()),
            retired: loom::sync::Mutex::new(Vec::new()),
            freed: loom::sync::Mutex::new(Vec::new()),
        };
        let entries: Vec<(u64, u64)> = linked
            .iter()
            .map(|&i| (index::tag(t.keys[i].1), 8 * i as u64))
            .collect();
        let word = match entries.len() {
            0 => EMPTY,
            1 => entries[0].1 | TAG_ITEM,
            _ => {
                let mut blocks = t.blocks.lock().unwrap();
                blocks.push(entries);
                BLOCKS_AT + 8 * (blocks.len() as u64 - 1)
            }
        };
        t.words[0].store(word, Ordering::Relaxed);
        t
    }

    fn key(&self, item: u64) -> u8 {
        self.keys[item as usize / 8].0
    }

    fn hash(&self, item: u64) -> u64 {
        self.keys[item as usize / 8].1
    }

    /// The write loop, reduced: put `new` (replacing its key's item) or, with `new == 0`,
    /// delete `key`; whether it changed anything.
    fn write(&self, key: u8, hash: u64, new: u64, log2: u32) -> bool {
        self.write_at(key, hash, new, || log2)
    }

    /// [`write`](Self::write) at the size `log2()` says (read as the store reads it).
    fn write_at(&self, key: u8, hash: u64, new: u64, log2: impl Fn() -> u32) -> bool {
        let tag = index::tag(hash);
        loop {
            let Ok((word, w)) = index::write_target(self, hash, log2(), &log2);
            let found = index::find(self, w, tag, |at| self.key(at) == key);
            let mut change = Change::of(w);
            match (found, new) {
                (0, 0) => return false,
                (old, 0) => change.drop = old,
                (0, new) => change.add = Some((tag, new)),
                (old, new) => change.swap = Some((old, new)),
            }
            let Ok(next) = index::make(self, &change);
            self.replacing(w);
            let won = self.cas(word, w, next);
            self.replaced(w, next, won);
            if won {
                if found != 0 {
                    self.retired.lock().unwrap().push(found);
                }
                return true;
            }
        }
    }

    /// A lookup: the item of `key`, or 0.
    fn get(&self, key: u8, hash: u64, log2: u32) -> u64 {
        let (_, w) = index::read(self, hash, log2, || log2);
        index::find(self, w, index::tag(hash), |at| self.key(at) == key)
    }

    /// The table's size now.
    fn log2(&self) -> u32 {
        self.size.load(Ordering::Acquire) as u32
    }

    /// [`get`](Self::get) at the size the table has when asked.
    fn get_now(&self, key: u8, hash: u64) -> u64 {
        let (_, w) = index::read(self, hash, self.log2(), || self.log2());
        index::find(self, w, index::tag(hash), |at| self.key(at) == key)
    }

    /// `(key, item)` of every item owned by a made bucket, sorted; and whether any word is
    /// still frozen.
    fn contents(&self) -> (Vec<(u8, u64)>, bool) {
        let mut out = Vec::new();
        let mut frozen = false;
        for b in 0..COUNT_BUCKETS as u64 {
            let w = self.words[b as usize].load(Ordering::Acquire);
            if w == 0 {
                continue;
            }
            frozen |= index::is_frozen(w);
            index::owned(self, b, w, |_, at| {
                out.push((self.key(at), at));
                true
            });
        }
        out.sort();
        (out, frozen)
    }
}

impl Memory for Table {
    type Error = std::convert::Infallible;

    fn bucket(&self, b: u64, _make: bool) -> Option<&AtomicU64> {
        self.words.get(b as usize)
    }

    fn load(&self, word: &AtomicU64) -> u64 {
        word.load(Ordering::Acquire)
    }

    fn cas(&self, word: &AtomicU64, old: u64, new: u64) -> bool {
        word.compare_exchange(old, new, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    fn entries(&self, word: u64, mut f: impl FnMut(u64, u64) -> bool) {
        let at = index::object(word);
        if word & EMPTY != 0 || at == 0 {
            return;
        }
        if index::is_item(word) {
            f(index::tag(self.hash(at)), at);
            return;
        }
        let entries = self.blocks.lock().unwrap()[((at - BLOCKS_AT) / 8) as usize].clone();
        for (tag, item) in entries {
            if !f(tag, item) {
                return;
            }
        }
    }

    fn make(&self, change: &Change) -> Result<u64, Self::Error> {
        let mut entries = Vec::new();
        self.entries(change.from, |tag, item| {
            if change.keeps(tag, item) {
                let item = match change.swap {
                    Some((old, new)) if old == item => new,
                    _ => item,
                };
                entries.push((tag, item));
            }
            true
        });
        entries.extend(change.add);
        Ok(match entries.len() {
            0 => EMPTY,
            1 => entries[0].1 | TAG_ITEM,
            _ => {
                let mut blocks = self.blocks.lock().unwrap();
                blocks.push(entries);
                BLOCKS_AT + 8 * (blocks.len() as u64 - 1)
            }
        })
    }

    fn replacing(&self, _old: u64) {}

    fn replaced(&self, old: u64, new: u64, won: bool) {
        if won && index::is_block(old) {
            self.retired.lock().unwrap().push(index::object(old));
        }
        if !won && index::is_block(new) {
            self.freed.lock().unwrap().push(index::object(new));
        }
    }
}

/// Nothing was retired twice, and nothing both retired and freed unpublished.
fn assert_each_once(t: &Table) {
    let retired = t.retired.lock().unwrap().clone();
    let freed = t.freed.lock().unwrap().clone();
    let all: BTreeSet<u64> = retired.iter().chain(&freed).copied().collect();
    assert_eq!(
        all.len(),
        retired.len() + freed.len(),
        "{retired:?} {freed:?}"
    );
}

/// Two replaces of one key in a bucket of two race: one wins last, the key is never absent
/// to a reader, the replaced item and each replaced block are retired exactly once.
#[test]
fn replace_replace_and_lookup() {
    model(|| {
        // item 1: key 5 (linked); items 2, 3: key 5 replacements; item 4: key 9 (linked)
        let t = Arc::new(Table::new(&[(5, 0), (5, 0), (5, 0), (9, 4)], &[1, 4]));
        let (t1, t2) = (t.clone(), t.clone());
        let a = spawn(move || assert!(t1.write(5, 0, 16, 0)));
        let b = spawn(move || assert!(t2.write(5, 0, 24, 0)));
        assert_ne!(t.get(5, 0, 0), 0, "a replace never makes the key absent");
        a.join().unwrap();
        b.join().unwrap();
        let (keys, _) = t.contents();
        assert_eq!(keys.len(), 2, "{keys:?}");
        let winner = keys[0].1;
        assert!(winner == 16 || winner == 24);
        let loser = 40 - winner;
        let retired = t.retired.lock().unwrap().clone();
        assert!(
            retired.contains(&8) && retired.contains(&loser),
            "{retired:?}"
        );
        assert_each_once(&t);
    });
}

/// A write that splits bucket 1 off bucket 0 (the table doubled) races a write to bucket 0
/// and a reader of a key that moves: nothing is lost, the moving key is never absent, the
/// split finishes, and each block is retired once.
#[test]
fn split_races_write_and_lookup() {
    model(|| {
        // items 1, 2: keys 1 and 3 in bucket 1 (hash 1, 3); item 3: key 2 in bucket 0;
        // item 4: a new key 4 for bucket 0; item 5: a new value of key 3
        let items = [(1, 1), (3, 3), (2, 2), (4, 4), (3, 3)];
        let t = Arc::new(Table::new(&items, &[1, 2, 3]));
        let (t1, t2) = (t.clone(), t.clone());
        let a = spawn(move || assert!(t1.write(3, 3, 40, 1)));
        let b = spawn(move || assert!(t2.write(4, 4, 32, 1)));
        let seen = t.get(1, 1, 1);
        assert_eq!(seen, 8, "key 1 is never absent while it moves");
        a.join().unwrap();
        b.join().unwrap();
        let (keys, frozen) = t.contents();
        assert!(!frozen, "every split met was finished");
        assert_eq!(keys, vec![(1, 8), (2, 24), (3, 40), (4, 32)]);
        assert_ne!(t.words[1].load(Ordering::Acquire), 0, "bucket 1 made");
        assert_each_once(&t);
    });
}

/// A write that read the table's size before it doubled races the doubling and the split of
/// its key's new bucket (bucket 1 off an empty bucket 0, so the split puts back a parent word
/// with the same entries: only the split count tells it apart), and a reader that also
/// started at the old size: the key lands where a reader at the new size finds it, and the
/// racing reader sees either nothing or the key's item.
#[test]
fn a_write_at_a_stale_size_races_a_doubling_and_its_split() {
    model(|| {
        // item 1: key 1 (hash 1), not yet linked; bucket 0 made and empty
        let t = Arc::new(Table::new(&[(1, 1)], &[]));
        let t1 = t.clone();
        let a = spawn(move || assert!(t1.write_at(1, 1, 8, || t1.log2())));
        t.size.store(1, Ordering::Release);
        let Ok(_) = index::write_target(&*t, 1, 1, || 1); // the split the doubling owes
        let seen = t.get_now(1, 1);
        assert!(seen == 0 || seen == 8, "{seen}");
        a.join().unwrap();
        assert_eq!(t.get_now(1, 1), 8, "the key is where the new size puts it");
        let (keys, frozen) = t.contents();
        assert!(!frozen);
        assert_eq!(keys, vec![(1, 8)]);
    });
}

/// At 4 buckets, bucket 2 is split off bucket 0 before bucket 1 is made (splits are owed and
/// made lazily, in any order): bucket 0 keeps the keys of bucket 1 and 3, which readers of
/// those still find there, and bucket 1's later split takes them.
#[test]
fn a_split_at_a_higher_bit_keeps_the_keys_of_unmade_siblings() {
    model(|| {
        // items 1..4: keys 1..4 with hashes 0..3, all in bucket 0
        let items = [(1, 0), (2, 1), (3, 2), (4, 3)];
        let t = Arc::new(Table::new(&items, &[1, 2, 3, 4]));
        let t1 = t.clone();
        let a = spawn(move || {
            let Ok(_) = index::write_target(&*t1, 2, 2, || 2);
        });
        for (key, hash) in items {
            assert_eq!(t.get(key, hash, 2), 8 * u64::from(key), "key {key}");
        }
        a.join().unwrap();
        let Ok(_) = index::write_target(&*t, 1, 2, || 2);
        let Ok(_) = index::write_target(&*t, 3, 2, || 2);
        for (key, hash) in items {
            assert_eq!(t.get(key, hash, 2), 8 * u64::from(key), "key {key}");
        }
        let (keys, frozen) = t.contents();
        assert!(!frozen);
        assert_eq!(keys.len(), 4, "{keys:?}");
    });
}

/// Two deletes of one key: exactly one succeeds.
#[test]
fn delete_delete() {
    model(|| {
        let t = Arc::new(Table::new(&[(7, 0), (8, 0)], &[1, 2]));
        let t1 = t.clone();
        let a = spawn(move || t1.write(7, 0, 0, 0));
        let mine = t.write(7, 0, 0, 0);
        let theirs = a.join().unwrap();
        assert!(mine ^ theirs, "exactly one delete wins");
        assert_eq!(t.contents().0, vec![(8, 16)]);
        assert_eq!(
            t.retired
                .lock()
                .unwrap()
                .iter()
                .filter(|&&x| x == 8)
                .count(),
            1
        );
        assert_each_once(&t);
    });
}

/// A node retired in epoch `r` is freed only when the epoch reaches `r + 2`; a reader pinned
/// before the unlink can still read it (loom reports a race on the cell otherwise).
#[test]
fn epoch_protects_pinned_reader() {
    a_pinned_reader_reads_no_freed_node(false);
}

/// The advancer reads only the announcements of owned slots (`reclaim::reclaimer::
/// try_advance`): a reader that claims its slot (CAS of the owner word from zero) and then
/// pins is still protected, whether the scan saw its slot owned or not.
#[test]
fn a_slot_claimed_after_the_scan_skipped_it_pins_too_late_to_be_missed() {
    a_pinned_reader_reads_no_freed_node(true);
}

/// A reader in slot 1 pins (after claiming the slot from zero if `claims`, else it is owned
/// from the start) and reads the current node, while the writer unlinks node 1, retires it
/// and frees it once the epoch allows, advancing over the owned slots' announcements.
fn a_pinned_reader_reads_no_freed_node(claims: bool) {
    model(move || {
        let global = Arc::new(AtomicU64::new(2));
        let slots = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let owners = Arc::new([AtomicU64::new(1), AtomicU64::new(u64::from(!claims))]);
        let current = Arc::new(AtomicU64::new(1));
        let cells = Arc::new([
            UnsafeCell::new(0u64),
            UnsafeCell::new(11),
            UnsafeCell::new(22),
        ]);
        let (g, s, o, c, cl) = (
            global.clone(),
            slots.clone(),
            owners.clone(),
            current.clone(),
            cells.clone(),
        );
        let reader = spawn(move || {
            if claims {
                o[1].compare_exchange(0, 7, Ordering::AcqRel, Ordering::Relaxed)
                    .unwrap();
            }
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
            let owned = slots
                .iter()
                .zip(owners.iter())
                .filter(|(_, owner)| owner.load(Ordering::Relaxed) != 0)
                .map(|(slot, _)| slot);
            let now = epoch::try_advance(&global, owned);
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
