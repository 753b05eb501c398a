//! Hand-overs between processes that reach the store's rarer coherence sites on purpose (the
//! sweep, `scripts/model-sweep`, switches each site off and runs these): a store made while
//! another process has the heap open, blocks one process reuses while another holds them
//! cached, a limbo emptied behind a checker's back, the eviction count read across processes,
//! the CAS-token counter raised by flushes and loads while another process reserves tokens.
//! Each child keeps what it cached (`common::children`), so only the store's own calls make a
//! line fresh. Meaningful in a `limited` or `mcas` heap under the model of non-coherent caches
//! (`PODKV_TEST_COHERENCE`, `PODKV_COHERENCE_MODEL=1`, feature `coherence-model`); on coherent
//! memory they pass by construction.
//!
//! - `a_store_made_while_another_process_has_the_heap_open_opens_there`: a process allocates
//!   and frees blocks, then reads the pages of their slabs; another makes the store there; the
//!   first then opens, checks and uses it (`store.open.invalidate`).
//! - `blocks_another_process_reused_are_read_fresh`: a reader reads what a writer wrote and
//!   replaces a third of it (claiming the writer's items and blocks, then freeing them); the
//!   writer deletes the rest, churns and writes keys of the same sizes whose first 32 bytes
//!   are common into the blocks that came free; the reader then checks the store, finds every
//!   new key present to an `add`, and reads every value (`store.item.invalidate`,
//!   `store.item.key_invalidate`, `store.check.invalidate_slot`,
//!   `store.claim.read_invalidate`).
//! - `a_limbo_another_process_emptied_is_checked_fresh`: a writer's deletes wait in its limbo
//!   while the reader is pinned; the reader checks; the writer's slot frees them; the reader
//!   checks again (`store.check.invalidate_bag`).
//! - `evictions_are_counted_across_processes`: a process reads the eviction count, another
//!   evicts, the first reads the count again (`store.evictions.invalidate`).
//! - `cas_tokens_stay_unique_while_processes_flush_and_load`: two processes write, each
//!   flushing and loading an empty dump every few writes; each one's tokens increase, no
//!   token is handed out twice, and a later write's token is above all of them
//!   (`store.token.barrier.cas`, `store.token.raise.cas`, in `mcas`).
//! - `a_flush_in_one_process_hides_items_from_another_at_once`: a process writes and flushes
//!   at once, then writes and flushes two seconds ahead; the other reads every item gone,
//!   the second time once the flush is due (`store.flush.oldest_cas.store`,
//!   `store.flush.oldest_live.store`: a switched-off hook store stays in the flusher's copy
//!   of the line).
//! - `a_store_opened_the_moment_it_is_published_reads_whole`: a process maps a fresh heap
//!   and spins on its root; another makes the store; the first opens it the moment the root
//!   names it, before the maker's own open has made the descriptor fresh, 150 times over
//!   (`store.create.write_back`; the one scenario that takes a few seconds).

mod common;

use common::children::{role, say, wait_go, Child};
use podkv_store::{Eviction, Mode, Outcome, Store, StoreConfig};

/// Two slots: a process that lets its slot go and takes one again while the other process
/// holds the other slot gets its own back (with its slabs and limbo).
fn config() -> StoreConfig {
    let mut config = common::config();
    config.heap.slots = 2;
    config
}

#[test]
fn a_store_made_while_another_process_has_the_heap_open_opens_there() {
    const TEST: &str = "a_store_made_while_another_process_has_the_heap_open_opens_there";
    if let Some((role, heap)) = role() {
        match role.as_str() {
            "early" => {
                // Blocks of every small size, allocated and freed, then every page of the
                // slabs that held them read: this process caches those pages as they are now
                // (zero), and the maker then takes these slabs for the store's first blocks.
                let h = podkv_alloc::Heap::open(&heap, &config().heap).unwrap();
                let mut first = u64::MAX;
                {
                    let t = h.thread().unwrap();
                    let mut blocks = Vec::new();
                    for size in (64..=16_384).step_by(64) {
                        let layout = std::alloc::Layout::from_size_align(size, 64).unwrap();
                        let at = t.allocate(layout).unwrap();
                        first = first.min(at.0);
                        blocks.push(at);
                    }
                    for at in blocks {
                        t.free(at);
                    }
                }
                let mut sum = 0u64;
                for page in (first..first + (8 << 20)).step_by(4096) {
                    // SAFETY: a page of the heap's small slabs, mapped while `h` lives.
                    sum += u64::from(unsafe { h.resolve(podkv_alloc::Offset(page)).read() });
                }
                assert_eq!(sum, 0, "a fresh heap's slabs read zero");
                say("touched", "");
                wait_go();
                let store = Store::open_heap(h, &config()).unwrap();
                assert_valid(&store, "at the first open here");
                let handle = store.handle().unwrap();
                handle.set(b"early", b"was here", 0, 0).unwrap();
            }
            "maker" => {
                // Nothing but the store's making before the other process opens it.
                let store = Store::open(&heap, config()).unwrap();
                say("made", "");
                wait_go();
                let handle = store.handle().unwrap();
                let got = handle.get(b"early").unwrap().map(|i| i.value().to_vec());
                assert_eq!(got.as_deref(), Some(&b"was here"[..]));
            }
            _ => unreachable!(),
        }
        return;
    }
    let (_dir, heap) = common::heap_path("heap");
    let mut early = Child::spawn(TEST, "early", &heap);
    early.wait_for("touched");
    let mut maker = Child::spawn(TEST, "maker", &heap);
    maker.wait_for("made");
    early.go();
    early.succeed("the early process");
    maker.go();
    maker.succeed("the maker");
}

const REUSE_KEYS: u64 = 1_500;

/// Key `i` of generation `gen`: 40 bytes, the first 32 common to all (past an item's header
/// line, a key's tail is what tells two keys of one bucket apart).
fn long_key(gen: u64, i: u64) -> Vec<u8> {
    format!("a-long-common-prefix-0123456789/{gen}-{i:06}").into_bytes()
}

fn reuse_value(gen: u64, i: u64) -> Vec<u8> {
    let mut v = format!("{gen}:{i}:").into_bytes();
    v.resize(100, b'a' + (i % 26) as u8);
    v
}

fn assert_valid(store: &Store, when: &str) {
    let report = store.check();
    assert!(
        report.is_valid(),
        "check {when}: {}",
        report.problems.join("; ")
    );
}

#[test]
fn blocks_another_process_reused_are_read_fresh() {
    const TEST: &str = "blocks_another_process_reused_are_read_fresh";
    if let Some((role, heap)) = role() {
        let store = Store::open(&heap, config()).unwrap();
        match role.as_str() {
            "writer" => {
                let h = store.handle().unwrap();
                for i in 0..REUSE_KEYS {
                    h.set(&long_key(0, i), &reuse_value(0, i), 0, 0).unwrap();
                }
                say("written", "");
                // Until the reader holds a slot: the writer's next handle takes this one
                // again, with the slabs that hold the first generation. The reader is
                // pinned meanwhile, so what this handle retired last stays in its limbo.
                wait_go();
                drop(h);
                say("dropped", "");
                wait_go();
                let h = store.handle().unwrap();
                for i in 0..REUSE_KEYS {
                    h.delete(&long_key(0, i)).unwrap();
                }
                // Churn, so the epoch moves on and the deleted items' blocks come free.
                for round in 0..4 {
                    for i in 0..REUSE_KEYS / 4 {
                        let churn = format!("churn{round}-{i}").into_bytes();
                        h.set(&churn, b"c", 0, 0).unwrap();
                        h.delete(&churn).unwrap();
                    }
                }
                for i in 0..REUSE_KEYS {
                    h.set(&long_key(1, i), &reuse_value(1, i), 0, 0).unwrap();
                }
                for i in 0..REUSE_KEYS / 8 {
                    h.set(&long_key(2, i), b"short-lived", 0, 0).unwrap();
                    h.delete(&long_key(2, i)).unwrap();
                }
                say("second", "");
                wait_go();
                drop(h);
                say("rewritten", "");
                wait_go();
            }
            "reader" => {
                let h = store.handle().unwrap();
                h.set(b"pin", b"", 0, 0).unwrap();
                let pin = h.get(b"pin").unwrap();
                say("holding", "");
                wait_go();
                drop(pin);
                for i in 0..REUSE_KEYS {
                    let got = h.get(&long_key(0, i)).unwrap();
                    assert_eq!(
                        got.map(|item| item.value().to_vec()),
                        Some(reuse_value(0, i))
                    );
                }
                // Replacing a third of them claims the writer's items and blocks here; the
                // collect frees them (the writer is idle), for the writer to reuse. The
                // handle stays: the writer's next handle takes its own slot again, and this
                // process takes no slot whose slabs a new tenure would read fresh.
                for i in (0..REUSE_KEYS).step_by(3) {
                    h.set(&long_key(0, i), &reuse_value(0, i), 0, 0).unwrap();
                }
                h.collect();
                assert_valid(&store, "after the first generation");
                say("cached", "");
                wait_go();
                let pin = h.get(b"pin").unwrap();
                say("pinned", "");
                wait_go();
                drop(pin);
                // The check first: nothing of this process has read the new blocks yet.
                assert_valid(&store, "after the writer reused its blocks");
                for i in 0..REUSE_KEYS {
                    let outcome = h.store(Mode::Add, &long_key(1, i), b"x", 0, 0).unwrap();
                    assert_eq!(outcome, Outcome::NotStored, "add of present key {i}");
                }
                for i in 0..REUSE_KEYS {
                    let got = h.get(&long_key(1, i)).unwrap();
                    assert_eq!(
                        got.map(|item| item.value().to_vec()),
                        Some(reuse_value(1, i)),
                        "key {i} of the second generation"
                    );
                    assert!(h.get(&long_key(0, i)).unwrap().is_none());
                }
            }
            _ => unreachable!(),
        }
        return;
    }
    let (_dir, heap) = common::heap_path("heap");
    let mut writer = Child::spawn(TEST, "writer", &heap);
    writer.wait_for("written");
    let mut reader = Child::spawn(TEST, "reader", &heap);
    reader.wait_for("holding");
    writer.go();
    writer.wait_for("dropped");
    reader.go();
    reader.wait_for("cached");
    writer.go();
    writer.wait_for("second");
    reader.go();
    reader.wait_for("pinned");
    writer.go();
    writer.wait_for("rewritten");
    reader.go();
    reader.succeed("the reader");
    writer.go();
    writer.succeed("the writer");
    let store = Store::open(&heap, config()).unwrap();
    assert_valid(&store, "at the end");
}

#[test]
fn evictions_are_counted_across_processes() {
    const TEST: &str = "evictions_are_counted_across_processes";
    let config = || StoreConfig {
        capacity: Some(1 << 20),
        eviction: Eviction::SampledOldest,
        ..config()
    };
    if let Some((role, heap)) = role() {
        let store = Store::open(&heap, config()).unwrap();
        match role.as_str() {
            "counter" => {
                assert_eq!(store.evictions(), 0);
                say("counted", "");
                let evictions: u64 = wait_go().parse().unwrap();
                assert!(evictions > 0, "the evictor evicted nothing");
                assert_eq!(store.evictions(), evictions);
            }
            "evictor" => {
                {
                    let h = store.handle().unwrap();
                    for i in 0..6_000u32 {
                        h.set(format!("k{i}").as_bytes(), &[7u8; 500], 0, 0)
                            .unwrap();
                    }
                }
                say("evicted", &store.evictions().to_string());
            }
            _ => unreachable!(),
        }
        return;
    }
    let (_dir, heap) = common::heap_path("heap");
    let mut counter = Child::spawn(TEST, "counter", &heap);
    counter.wait_for("counted");
    let mut evictor = Child::spawn(TEST, "evictor", &heap);
    let evictions = evictor.wait_for("evicted");
    evictor.succeed("the evictor");
    counter.tell(&evictions);
    counter.succeed("the counter");
}

#[test]
fn a_limbo_another_process_emptied_is_checked_fresh() {
    const TEST: &str = "a_limbo_another_process_emptied_is_checked_fresh";
    if let Some((role, heap)) = role() {
        let store = Store::open(&heap, config()).unwrap();
        let key = |i: u32| format!("bag{i}").into_bytes();
        match role.as_str() {
            "writer" => {
                let h = store.handle().unwrap();
                for i in 0..100 {
                    h.set(&key(i), &[1u8; 300], 0, 0).unwrap();
                }
                say("written", "");
                wait_go();
                // The reader is pinned: what these deletes retire stays in this slot's
                // limbo, one bag, past the handle's release.
                for i in 0..20 {
                    h.delete(&key(i)).unwrap();
                }
                drop(h);
                say("retired", "");
                wait_go();
                // The same slot again (the reader holds the other): its release frees the
                // limbo, which empties the bag the reader has cached.
                drop(store.handle().unwrap());
                say("freed", "");
                wait_go();
            }
            "reader" => {
                let h = store.handle().unwrap();
                h.set(b"pin", b"", 0, 0).unwrap();
                let pin = h.get(b"pin").unwrap();
                say("pinned", "");
                wait_go();
                drop(pin);
                // The handle stays (unpinned): the writer's next one takes its own slot.
                let report = store.check();
                assert!(report.is_valid(), "check: {}", report.problems.join("; "));
                assert!(
                    report.store.limbo_entries >= 20,
                    "the deletes wait in limbo"
                );
                say("checked", "");
                wait_go();
                let report = store.check();
                assert!(report.is_valid(), "check: {}", report.problems.join("; "));
                assert!(report.store.limbo_entries < 20, "the limbo was freed");
                drop(h);
            }
            _ => unreachable!(),
        }
        return;
    }
    let (_dir, heap) = common::heap_path("heap");
    let mut writer = Child::spawn(TEST, "writer", &heap);
    writer.wait_for("written");
    let mut reader = Child::spawn(TEST, "reader", &heap);
    reader.wait_for("pinned");
    writer.go();
    writer.wait_for("retired");
    reader.go();
    reader.wait_for("checked");
    writer.go();
    writer.wait_for("freed");
    reader.go();
    reader.succeed("the reader");
    writer.go();
    writer.succeed("the writer");
}

const TOKEN_WRITES: u64 = 3_000;

#[test]
fn cas_tokens_stay_unique_while_processes_flush_and_load() {
    const TEST: &str = "cas_tokens_stay_unique_while_processes_flush_and_load";
    if let Some((role, heap)) = role() {
        let store = Store::open(&heap, config()).unwrap();
        let h = store.handle().unwrap();
        let mut empty_dump = Vec::new();
        podkv_store::transfer::dump(&h, &mut empty_dump).unwrap();
        say("ready", "");
        wait_go();
        // Each write reserves tokens after the other's flush (a flush moves `oldest_cas`
        // past every token handed out), and every flush and load raises the one counter.
        let mut tokens = Vec::new();
        for i in 0..TOKEN_WRITES {
            let key = format!("{role}-{i}").into_bytes();
            let (outcome, token) = h
                .store_with(Mode::Set, &key, b"v", 0, 0, Default::default())
                .unwrap();
            assert_eq!(outcome, Outcome::Stored);
            if let Some(&last) = tokens.last() {
                assert!(token > last, "{role}: token {token} after {last}");
            }
            tokens.push(token);
            match i % 8 {
                0 => h.flush_all(0),
                4 => {
                    podkv_store::transfer::load(&h, &empty_dump).unwrap();
                }
                _ => {}
            }
        }
        let list: Vec<String> = tokens.iter().map(u64::to_string).collect();
        say("tokens", &list.join(","));
        return;
    }
    let (_dir, heap) = common::heap_path("heap");
    drop(Store::open(&heap, config()).unwrap());
    let mut writers: Vec<Child> = ["a", "b"]
        .iter()
        .map(|role| Child::spawn(TEST, role, &heap))
        .collect();
    for w in &mut writers {
        w.wait_for("ready");
    }
    for w in &mut writers {
        w.go();
    }
    let mut seen = std::collections::HashMap::new();
    for (w, role) in writers.iter_mut().zip(["a", "b"]) {
        for token in w.wait_for("tokens").split(',') {
            let token: u64 = token.parse().unwrap();
            if let Some(other) = seen.insert(token, role) {
                panic!("token {token} handed out to {other} and {role}");
            }
        }
    }
    for w in writers {
        w.succeed("a writer");
    }
    let store = Store::open(&heap, config()).unwrap();
    let (_, token) = store
        .handle()
        .unwrap()
        .store_with(Mode::Set, b"last", b"v", 0, 0, Default::default())
        .unwrap();
    let highest = seen.keys().max().copied().unwrap();
    assert!(token > highest, "a new token {token}, not above {highest}");
}

const FLUSH_KEYS: u32 = 50;

#[test]
fn a_flush_in_one_process_hides_items_from_another_at_once() {
    const TEST: &str = "a_flush_in_one_process_hides_items_from_another_at_once";
    if let Some((role, heap)) = role() {
        let store = Store::open(&heap, config()).unwrap();
        let h = store.handle().unwrap();
        let key = |round: &str, i: u32| format!("{round}-{i}").into_bytes();
        match role.as_str() {
            "flusher" => {
                // Written and flushed within one second of the store's clock: only the
                // token barrier (`oldest_cas`) hides these, since `oldest_live` is the
                // second before.
                loop {
                    let second = store.now();
                    for i in 0..FLUSH_KEYS {
                        h.set(&key("now", i), b"v", 0, 0).unwrap();
                    }
                    h.flush_all(0);
                    if store.now() == second {
                        break;
                    }
                }
                // Nothing here reads the flush marks again until the reader has looked.
                say("flushed", "");
                wait_go();
                // A flush two seconds ahead sets `oldest_live` alone: it hides these by
                // their time once it is due.
                for i in 0..FLUSH_KEYS {
                    h.set(&key("later", i), b"v", 0, 0).unwrap();
                }
                h.flush_all(2);
                say("flushed", "");
                wait_go();
            }
            "reader" => {
                wait_go();
                for i in 0..FLUSH_KEYS {
                    assert!(
                        h.get(&key("now", i)).unwrap().is_none(),
                        "an item written before an immediate flush in another process is seen"
                    );
                }
                say("checked", "");
                wait_go();
                std::thread::sleep(std::time::Duration::from_millis(3_100));
                for i in 0..FLUSH_KEYS {
                    assert!(
                        h.get(&key("later", i)).unwrap().is_none(),
                        "an item written before a due delayed flush in another process is seen"
                    );
                }
            }
            _ => unreachable!(),
        }
        return;
    }
    let (_dir, heap) = common::heap_path("heap");
    drop(Store::open(&heap, config()).unwrap());
    let mut reader = Child::spawn(TEST, "reader", &heap);
    let mut flusher = Child::spawn(TEST, "flusher", &heap);
    flusher.wait_for("flushed");
    reader.go();
    reader.wait_for("checked");
    flusher.go();
    flusher.wait_for("flushed");
    reader.go();
    reader.succeed("the reader");
    flusher.go();
    flusher.succeed("the flusher");
}

const OPEN_ROUNDS: u32 = 150;

#[test]
fn a_store_opened_the_moment_it_is_published_reads_whole() {
    const TEST: &str = "a_store_opened_the_moment_it_is_published_reads_whole";
    if let Some((role, heap)) = role() {
        match role.as_str() {
            "watcher" => {
                // Maps the heap first, then opens the store as soon as the root names it:
                // before its maker's own open has made the descriptor fresh (an
                // invalidation, which writes a dirty line back first).
                let h = podkv_alloc::Heap::open(&heap, &config().heap).unwrap();
                say("mapped", "");
                let t0 = std::time::Instant::now();
                while h.root(0).load(podkv_hw::sync::mapped::Ordering::Acquire) == 0 {
                    assert!(t0.elapsed().as_secs() < 60, "no store was made");
                    std::hint::spin_loop();
                }
                // Its maker is still opening (its slot's allocator state is its own until
                // it lets the slot go), so no `check` here: the descriptor must read whole.
                let store = Store::open_heap(h, &config()).unwrap();
                assert_eq!(store.key_max(), config().key_max);
                assert_eq!(store.value_max(), config().value_max);
            }
            "maker" => {
                wait_go();
                drop(Store::open(&heap, config()).unwrap());
            }
            _ => unreachable!(),
        }
        return;
    }
    for _ in 0..OPEN_ROUNDS {
        let (_dir, heap) = common::heap_path("heap");
        drop(podkv_alloc::Heap::open(&heap, &config().heap).unwrap());
        let mut maker = Child::spawn(TEST, "maker", &heap);
        let mut watcher = Child::spawn(TEST, "watcher", &heap);
        watcher.wait_for("mapped");
        maker.go();
        watcher.succeed("the watcher");
        maker.succeed("the maker");
    }
}
