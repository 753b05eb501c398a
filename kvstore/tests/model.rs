//! Proptest state machine: the store against a `HashMap` model of memcached 1.6, with a fake
//! clock (expiry, flush_all delays), CAS tokens, incr/decr edges, and the meta state
//! (recache tokens `mg R`, stale items `md I` / `ms I`) through every other command.

mod common;

use podkv_store::{Delete, Mode, Outcome, Rank, Read, StoreError, StoreExtra, StoreHandle};
use proptest::prelude::*;
use std::collections::HashMap;
use std::sync::atomic::Ordering;

const T0: u64 = 1_700_000_000;
const DAYS_30: i64 = 60 * 60 * 24 * 30;

#[derive(Clone, Debug)]
enum Op {
    Store(Mode, usize, Vec<u8>, u32, i64),
    Cas(usize, Vec<u8>, bool),
    Get(usize),
    Delete(usize),
    Incr(usize, u64),
    Decr(usize, u64),
    SetNumber(usize, u64),
    Touch(usize, i64),
    Gat(usize, i64),
    Flush(i64),
    Advance(u64),
    /// `mg` with `R<exptime>` if given.
    MetaGet(usize, Option<i64>),
    /// `md I` with `T<exptime>` if given.
    Invalidate(usize, Option<i64>),
    /// `ms I` with a token one below the item's.
    StaleStore(usize, Vec<u8>),
}

#[derive(Clone, Debug)]
struct Item {
    value: Vec<u8>,
    flags: u32,
    expiry: u64,
    time: u64,
    cas: u64,
    /// memcached's `ITEM_TOKEN_SENT`.
    sent: bool,
    /// memcached's `ITEM_STALE`.
    stale: bool,
}

/// The reference: memcached's rules written out plainly, independent of the store's code.
#[derive(Default)]
struct Model {
    items: HashMap<usize, Item>,
    now: u64,
    oldest_live: u64,
    last_cas: u64,
}

impl Model {
    fn expiry(&self, exptime: i64) -> u64 {
        if exptime == 0 {
            0
        } else if exptime < 0 {
            1
        } else if exptime > DAYS_30 {
            if exptime as u64 <= self.now {
                1
            } else {
                exptime as u64
            }
        } else {
            self.now + exptime as u64
        }
    }

    fn live(&self, k: usize) -> Option<&Item> {
        let it = self.items.get(&k)?;
        let expired = it.expiry != 0 && it.expiry <= self.now;
        let flushed =
            self.oldest_live != 0 && self.oldest_live <= self.now && it.time <= self.oldest_live;
        (!expired && !flushed).then_some(it)
    }
}

fn key(k: usize) -> Vec<u8> {
    format!("key:{k}").into_bytes()
}

/// memcached's `safe_strtoull` on item data: leading spaces, digits, then the end or a space
/// (whatever follows that space is ignored: `1 a` counts as 1).
fn parse(v: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(v).ok()?.trim_start_matches(' ');
    let digits = &s[..s.bytes().take_while(u8::is_ascii_digit).count()];
    let rest = &s[digits.len()..];
    if digits.is_empty() || !(rest.is_empty() || rest.starts_with(' ')) {
        return None;
    }
    digits.parse().ok()
}

fn exptime() -> impl Strategy<Value = i64> {
    prop_oneof![
        4 => Just(0i64),
        1 => Just(1),
        1 => Just(5),
        1 => Just(-1),
        1 => Just(DAYS_30),
        1 => Just(DAYS_30 + 1),
        1 => Just((T0 + 3) as i64),
        1 => Just((T0 - 1) as i64),
    ]
}

fn number() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(9),
        Just(99),
        Just(u64::MAX),
        Just(u64::MAX - 1),
        Just(10u64.pow(19)),
        any::<u64>()
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0usize..4;
    let v = prop::collection::vec(prop_oneof![Just(b'1'), Just(b'a'), Just(b' ')], 0..6);
    let mode = prop_oneof![
        Just(Mode::Set),
        Just(Mode::Add),
        Just(Mode::Replace),
        Just(Mode::Append),
        Just(Mode::Prepend)
    ];
    prop_oneof![
        4 => (mode, k.clone(), v.clone(), 0u32..3, exptime()).prop_map(|(m, k, v, f, e)| Op::Store(m, k, v, f, e)),
        2 => (k.clone(), v, any::<bool>()).prop_map(|(k, v, s)| Op::Cas(k, v, s)),
        4 => k.clone().prop_map(Op::Get),
        2 => k.clone().prop_map(Op::Delete),
        2 => (k.clone(), number()).prop_map(|(k, d)| Op::Incr(k, d)),
        2 => (k.clone(), number()).prop_map(|(k, d)| Op::Decr(k, d)),
        2 => (k.clone(), number()).prop_map(|(k, n)| Op::SetNumber(k, n)),
        1 => (k.clone(), exptime()).prop_map(|(k, e)| Op::Touch(k, e)),
        1 => (k.clone(), exptime()).prop_map(|(k, e)| Op::Gat(k, e)),
        3 => (k.clone(), prop::option::of(prop_oneof![Just(3i64), Just(100)])).prop_map(|(k, r)| Op::MetaGet(k, r)),
        2 => (k.clone(), prop::option::of(exptime())).prop_map(|(k, e)| Op::Invalidate(k, e)),
        1 => (k, prop::collection::vec(Just(b'9'), 0..3)).prop_map(|(k, v)| Op::StaleStore(k, v)),
        1 => prop_oneof![Just(0i64), Just(2), Just(10)].prop_map(Op::Flush),
        2 => prop_oneof![Just(1u64), Just(2), Just(5), Just(DAYS_30 as u64)].prop_map(Op::Advance),
    ]
}

/// Records the token of a write the model says happened, checking tokens only grow.
fn written(h: &StoreHandle, m: &mut Model, k: usize, item: Item) {
    let token = h.get(&key(k)).unwrap().map(|g| g.cas());
    let mut item = item;
    if let Some(t) = token {
        assert!(
            t > m.last_cas,
            "CAS tokens increase: {t} after {}",
            m.last_cas
        );
        m.last_cas = t;
        item.cas = t;
    }
    m.items.insert(k, item);
}

/// An item written in the very second a delayed flush came due is invisible at once, so its
/// CAS token could not be read; a later delayed `flush_all` moves the deadline and revives it
/// (memcached overwrites `oldest_live` the same way). Learn the token now that it shows.
fn learn_revived_tokens(h: &StoreHandle, m: &mut Model) {
    let unknown: Vec<usize> = m
        .items
        .iter()
        .filter(|(_, it)| it.cas == 0)
        .map(|(&k, _)| k)
        .collect();
    for k in unknown {
        if m.live(k).is_some() {
            let token = h.get(&key(k)).unwrap().map(|g| g.cas());
            let token = token.expect("a revived item is visible in the store too");
            m.items.get_mut(&k).unwrap().cas = token;
        }
    }
}

fn step(h: &StoreHandle, m: &mut Model, op: &Op, clock: &std::sync::atomic::AtomicU64) {
    let now = m.now;
    match op.clone() {
        Op::Store(mode, k, v, flags, e) => {
            let cur = m.live(k).cloned();
            let expect = match (mode, &cur) {
                (Mode::Add, Some(_)) | (Mode::Replace | Mode::Append | Mode::Prepend, None) => {
                    Outcome::NotStored
                }
                _ => Outcome::Stored,
            };
            assert_eq!(
                h.store(mode, &key(k), &v, flags, e).unwrap(),
                expect,
                "{op:?}"
            );
            if expect == Outcome::Stored {
                let item = match (mode, cur) {
                    // memcached's append makes a new item: the meta state starts clear.
                    (Mode::Append, Some(c)) => Item {
                        value: [c.value, v].concat(),
                        time: now,
                        sent: false,
                        stale: false,
                        ..c
                    },
                    (Mode::Prepend, Some(c)) => Item {
                        value: [v, c.value].concat(),
                        time: now,
                        sent: false,
                        stale: false,
                        ..c
                    },
                    _ => Item {
                        value: v,
                        flags,
                        expiry: m.expiry(e),
                        time: now,
                        cas: 0,
                        sent: false,
                        stale: false,
                    },
                };
                written(h, m, k, item);
            }
        }
        Op::Cas(k, v, stale) => {
            let cur = m.live(k).cloned();
            let token = cur
                .as_ref()
                .map_or(12345, |c| if stale { c.cas + 1_000_000 } else { c.cas });
            let expect = match &cur {
                None => Outcome::NotFound,
                Some(_) if stale => Outcome::Exists,
                Some(_) => Outcome::Stored,
            };
            assert_eq!(
                h.store(Mode::Cas(token), &key(k), &v, 1, 0).unwrap(),
                expect,
                "{op:?}"
            );
            if expect == Outcome::Stored {
                written(
                    h,
                    m,
                    k,
                    Item {
                        value: v,
                        flags: 1,
                        expiry: 0,
                        time: now,
                        cas: 0,
                        sent: false,
                        stale: false,
                    },
                );
            }
        }
        Op::Get(k) => {
            let got = h
                .get(&key(k))
                .unwrap()
                .map(|g| (g.value().to_vec(), g.flags(), g.cas()));
            // A token is unknown (0) when the item was invisible right after its write (a
            // delayed flush_all landing in the same second) and a later flush revived it.
            if let (Some(item), Some(g)) = (m.items.get_mut(&k), &got) {
                if item.cas == 0 {
                    item.cas = g.2;
                }
            }
            let want = m.live(k).map(|i| (i.value.clone(), i.flags, i.cas));
            assert_eq!(got, want, "{op:?}");
        }
        Op::Delete(k) => {
            let expect = if m.live(k).is_some() {
                Outcome::Deleted
            } else {
                Outcome::NotFound
            };
            assert_eq!(h.delete(&key(k)).unwrap(), expect);
            if expect == Outcome::Deleted {
                m.items.remove(&k);
            }
        }
        Op::Incr(k, d) | Op::Decr(k, d) => {
            let incr = matches!(op, Op::Incr(..));
            let got = if incr {
                h.incr(&key(k), d)
            } else {
                h.decr(&key(k), d)
            };
            let Some(cur) = m.live(k).cloned() else {
                assert!(matches!(got, Ok(None)), "{op:?}: {got:?}");
                return;
            };
            let Some(n) = parse(&cur.value) else {
                assert!(
                    matches!(got, Err(StoreError::NonNumeric)),
                    "{op:?}: {got:?}"
                );
                return;
            };
            let new = if incr {
                n.wrapping_add(d)
            } else {
                n.saturating_sub(d)
            };
            assert_eq!(got.unwrap(), Some(new), "{op:?}");
            let mut text = new.to_string().into_bytes();
            if text.len() < cur.value.len() {
                text.resize(cur.value.len(), b' ');
            }
            // In place (the result fits) keeps the meta state; a longer one is a new item.
            let in_place = text.len() == cur.value.len();
            written(
                h,
                m,
                k,
                Item {
                    value: text,
                    time: now,
                    sent: cur.sent && in_place,
                    stale: cur.stale && in_place,
                    ..cur
                },
            );
        }
        Op::SetNumber(k, n) => {
            h.set(&key(k), n.to_string().as_bytes(), 0, 0).unwrap();
            let item = Item {
                value: n.to_string().into_bytes(),
                flags: 0,
                expiry: 0,
                time: now,
                cas: 0,
                sent: false,
                stale: false,
            };
            written(h, m, k, item);
        }
        Op::Touch(k, e) | Op::Gat(k, e) => {
            let cur = m.live(k).cloned();
            let got = match op {
                Op::Touch(..) => h.touch(&key(k), e).unwrap() == Outcome::Touched,
                _ => h.gat(&key(k), e).unwrap().is_some(),
            };
            assert_eq!(got, cur.is_some(), "{op:?}");
            if let Some(c) = cur {
                // touch keeps the CAS token: the next Get compares it.
                let item = Item {
                    expiry: m.expiry(e),
                    time: now,
                    ..c
                };
                m.items.insert(k, item);
            }
        }
        Op::Flush(delay) => {
            h.flush_all(delay);
            if delay == 0 {
                m.items.clear();
                m.oldest_live = m.now - 1;
            } else {
                m.oldest_live = m.expiry(delay) - 1;
                learn_revived_tokens(h, m);
            }
        }
        Op::Advance(s) => {
            m.now += s;
            clock.store(m.now, Ordering::Relaxed);
        }
        Op::MetaGet(k, r) => meta_get(h, m, k, r),
        Op::Invalidate(k, e) => invalidate(h, m, k, e),
        Op::StaleStore(k, v) => stale_store(h, m, k, v),
    }
}

/// `mg [R<r>]`: `W` to the first reader under the threshold or of a stale item, once.
fn meta_get(h: &StoreHandle, m: &mut Model, k: usize, r: Option<i64>) {
    let read = Read {
        recache: r.map(|r| (r, Rank(0))),
        ..Read::default()
    };
    let got = h.meta_get(&key(k), read).unwrap().map(|g| {
        let l = g.lease;
        (g.guard.value().to_vec(), l.won, l.token_sent, l.stale)
    });
    let threshold = r.map(|r| m.expiry(r));
    let now = m.now;
    let Some(cur) = m.live(k).cloned() else {
        assert_eq!(got, None, "mg {k}");
        return;
    };
    let under = threshold.is_some_and(|t| cur.expiry != 0 && cur.expiry < t);
    let won = !cur.sent && (under || cur.stale);
    assert_eq!(
        got,
        Some((cur.value.clone(), won, cur.sent, cur.stale)),
        "mg {k} R{r:?}"
    );
    if won {
        let item = Item {
            sent: true,
            time: now,
            ..cur
        };
        m.items.insert(k, item);
    }
}

/// `md I [T<e>]`: stale, token released, a new CAS, maybe a new TTL.
fn invalidate(h: &StoreHandle, m: &mut Model, k: usize, e: Option<i64>) {
    let delete = Delete {
        invalidate: Some(e),
        ..Delete::default()
    };
    let got = h.meta_delete(&key(k), delete).unwrap();
    let Some(cur) = m.live(k).cloned() else {
        assert_eq!(got, Outcome::NotFound);
        return;
    };
    assert_eq!(got, Outcome::Deleted);
    let item = Item {
        expiry: e.map_or(cur.expiry, |e| m.expiry(e)),
        time: m.now,
        sent: false,
        stale: true,
        ..cur
    };
    written(h, m, k, item);
}

/// `ms I C<older>`: stored stale, keeping TTL and a sent token.
fn stale_store(h: &StoreHandle, m: &mut Model, k: usize, v: Vec<u8>) {
    let cur = m.live(k).cloned();
    let token = cur.as_ref().map_or(1, |c| c.cas - 1);
    let extra = StoreExtra {
        invalidate: true,
        ..StoreExtra::default()
    };
    let got = h
        .store_with(Mode::Cas(token), &key(k), &v, 2, 0, extra)
        .unwrap()
        .0;
    let Some(cur) = cur else {
        assert_eq!(got, Outcome::NotFound);
        return;
    };
    if token == 0 {
        assert_eq!(got, Outcome::Exists, "a zero token matches nothing");
        return;
    }
    assert_eq!(got, Outcome::Stored);
    let item = Item {
        value: v,
        flags: 2,
        time: m.now,
        stale: true,
        ..cur
    };
    written(h, m, k, item);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn store_matches_memcached_model(ops in prop::collection::vec(op(), 1..80)) {
        let (_d, store, clock) = common::fake_store(T0);
        let h = store.handle().unwrap();
        let mut m = Model { now: T0, ..Model::default() };
        for op in &ops {
            step(&h, &mut m, op, &clock);
        }
        for k in 0..4 {
            step(&h, &mut m, &Op::Get(k), &clock);
        }
        drop(h);
        let report = store.check();
        prop_assert!(report.is_valid(), "{:#?}", report.problems);
    }
}
