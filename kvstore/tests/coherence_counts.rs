//! What the SWcc reader rule costs a get, counted by `podkv_hw::swcc`'s per-thread counters:
//! an item its own cache domain wrote is read as the cache holds it, told by the hint of the
//! word that names it (README, Coherence, rule 2b); another domain's is made fresh.
//!
//! - `a_get_of_an_item_this_domain_wrote_makes_no_line_fresh`: in a `limited` heap, every
//!   get of items this process wrote (named by bucket words and by block entries, values
//!   from 10 B to 20 KB) invalidates nothing and reads the value written.
//! - `a_get_through_another_mapping_makes_the_item_fresh_under_the_model`: two mappings of
//!   one heap in one process; under the model of non-coherent caches each is a cache domain
//!   of its own (`PODKV_TEST_COHERENCE=limited|mcas`, `PODKV_COHERENCE_MODEL=1`, feature
//!   `coherence-model`), so the second makes what the first wrote fresh, and reads its own
//!   items without; on coherent memory both are this host's domain and neither does.

mod common;

use podkv_hw::swcc;
use podkv_store::{Store, StoreConfig};

const KEYS: u64 = 2000;

fn key(k: u64) -> Vec<u8> {
    format!("key{k}").into_bytes()
}

fn value(k: u64, who: &str) -> Vec<u8> {
    let len = [10, 100, 700, 3000, 20_000][(k % 5) as usize];
    let mut v = format!("{who}:{k}:").into_bytes();
    v.resize(len, b'a' + (k % 26) as u8);
    v
}

/// Lines the calling thread invalidated while `f` ran.
fn invalidated(f: impl FnOnce()) -> u64 {
    let before = swcc::counts();
    f();
    swcc::counts().since(before).lines_invalidated
}

/// Sets every key to `who`'s value through `store`, then gets each one through `reader`,
/// checking the value; the lines those gets invalidated.
fn write_then_read(store: &Store, reader: &Store, who: &str) -> u64 {
    let h = store.handle().unwrap();
    for k in 0..KEYS {
        h.set(&key(k), &value(k, who), 0, 0).unwrap();
    }
    let r = reader.handle().unwrap();
    let mut lines = 0;
    for k in 0..KEYS {
        lines += invalidated(|| {
            let got = r.get(&key(k)).unwrap().expect("present");
            assert_eq!(got.value(), &value(k, who)[..], "key {k}");
        });
    }
    lines
}

#[test]
fn a_get_of_an_item_this_domain_wrote_makes_no_line_fresh() {
    let (_dir, path) = common::heap_path("counts");
    let mut config = StoreConfig {
        heap: common::heap_config(),
        ..StoreConfig::default()
    };
    config.heap.coherence = podkv_hw::Coherence::Limited;
    let store = Store::open(&path, config).unwrap();
    assert_eq!(write_then_read(&store, &store, "me"), 0);
    // And a miss reads nothing fresh either (the bucket's entries are this domain's).
    let h = store.handle().unwrap();
    let lines = invalidated(|| assert!(h.get(b"absent").unwrap().is_none()));
    assert_eq!(lines, 0);
}

#[test]
fn a_get_through_another_mapping_makes_the_item_fresh_under_the_model() {
    let (_dir, path) = common::heap_path("mappings");
    let config = common::config();
    let modelled = cfg!(feature = "coherence-model")
        && std::env::var_os("PODKV_COHERENCE_MODEL").is_some_and(|v| v != "0")
        && config.heap.coherence != podkv_hw::Coherence::Hardware;
    // In an `mcas` heap every load of a shared word through the hook evicts its line too
    // (the bucket word, the flush marks, now and then the epoch): a few per get.
    let mcas = config.heap.coherence == podkv_hw::Coherence::Mcas;
    let first = Store::open(&path, config.clone()).unwrap();
    let second = Store::open(&path, config).unwrap();
    let theirs = write_then_read(&first, &second, "first");
    let own = write_then_read(&second, &second, "second");
    if mcas {
        assert!(own <= 4 * KEYS, "this domain's own items: {own} lines");
    } else {
        assert_eq!(own, 0, "this domain's own items");
    }
    if modelled {
        assert!(
            theirs >= own + KEYS,
            "another domain's items read fresh: {theirs} lines, own {own}"
        );
    } else {
        assert_eq!(theirs, own, "one domain: the host's");
    }
}
