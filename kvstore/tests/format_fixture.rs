//! A heap and store written by an earlier build open and check clean with this one: the
//! fixture `fixtures/heap11-store7.zst` was written (heap format 11, store format 7) with
//! `write_fixture` below by the build that introduced heap format 11, and every item it
//! holds reads back as written. Heaps of older formats (`fixtures/heap10-store7.zst`, by the
//! build that introduced store format 7; `fixtures/heap6-store3.zst`, written by
//! `main` at 38e26c2; `fixtures/heap7-store5.zst`, by the build that introduced store format
//! 5; `fixtures/heap8-store5.zst`, by the build that introduced heap format 8;
//! `fixtures/heap9-store5.zst`, by the build that introduced heap format 9;
//! `fixtures/heap9-store6.zst`, by the build that introduced store format 6) and stores of
//! older formats in a current heap (`fixtures/heap10-store6.zst`, by the build that
//! introduced heap format 10; `fixtures/heap7-store3.zst`, by `main` at d1f2bbe;
//! `fixtures/heap7-store4.zst`, by the build that introduced store format 4; these three with
//! their heap version byte raised to the current one, as heap formats 8 to 11 only changed
//! what a heap of 7 without a huge heap never holds: morphing slabs, the owner's free of
//! their old blocks, the huge descriptors' lines, and the header word of the cache domains,
//! zero until a process opens the heap) are refused with one line that names the way
//! across: `podkv store dump|load`.
//!
//! Regenerate it (only when the format changes on purpose, with a version bump; keep the
//! old one for the refusal test):
//! `cargo test -p podkv-store --test format_fixture -- --ignored write_fixture`.

use podkv_store::{Mode, Store, StoreConfig};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Items in the fixture: sizes cover the small and the large slab heaps.
const COUNT_ITEMS: u32 = 600;
/// An absolute expiry (2033) that stays in the future for the fixture's life.
const EXPIRY_FAR: i64 = 2_000_000_000;

fn fixture_path() -> PathBuf {
    fixture("heap11-store7.zst")
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn config() -> StoreConfig {
    StoreConfig {
        heap: podkv_alloc::Config {
            small_bytes: 4 << 20,
            large_bytes: 8 << 20,
            slots: 8,
            huge_bytes: 0,
            // The store's HWcc area: small, so the fixture file stays small.
            hwcc_user_bytes: 256 << 10,
            ..podkv_alloc::Config::default()
        },
        ..StoreConfig::default()
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("fixture-key-{i}").into_bytes()
}

/// The value item `i` is written with: 1 B to about 3 KiB.
fn value(i: u32) -> Vec<u8> {
    let len = 1 + (i as usize * 37) % 3000;
    (0..len)
        .map(|j| b'a' + ((i as usize + j) % 26) as u8)
        .collect()
}

/// What item `i` holds at the end: every 7th deleted, every 5th appended to, every 11th
/// given a TTL, the rest as set. `None`: absent.
fn expected(i: u32) -> Option<(Vec<u8>, u32, u32)> {
    if i % 7 == 0 {
        return None;
    }
    let mut v = value(i);
    if i % 5 == 0 {
        v.extend_from_slice(b"+tail");
    }
    let expiry = if i % 11 == 0 { EXPIRY_FAR as u32 } else { 0 };
    Some((v, i, expiry))
}

#[test]
#[ignore = "writes the fixture; run by hand when the format changes on purpose"]
fn write_fixture() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("heap");
    {
        let store = Store::open(&path, config()).unwrap();
        let h = store.handle().unwrap();
        for i in 0..COUNT_ITEMS {
            let exptime = if i % 11 == 0 { EXPIRY_FAR } else { 0 };
            h.set(&key(i), &value(i), i, exptime).unwrap();
        }
        for i in (0..COUNT_ITEMS).filter(|i| i % 5 == 0) {
            h.store(Mode::Append, &key(i), b"+tail", 0, 0).unwrap();
        }
        for i in (0..COUNT_ITEMS).filter(|i| i % 7 == 0) {
            h.delete(&key(i)).unwrap();
        }
        h.set(b"counter", b"41", 0, 0).unwrap();
        assert_eq!(h.incr(b"counter", 1).unwrap(), Some(42));
        assert!(store.check().is_valid(), "{:?}", store.check().problems);
    }
    let mut bytes = Vec::new();
    std::fs::File::open(&path)
        .unwrap()
        .read_to_end(&mut bytes)
        .unwrap();
    let packed = zstd::encode_all(&bytes[..], 19).unwrap();
    std::fs::File::create(fixture_path())
        .unwrap()
        .write_all(&packed)
        .unwrap();
}

/// Unpacks a fixture into a fresh heap file in `dir`.
fn unpack(fixture: &Path, dir: &Path) -> PathBuf {
    let packed = std::fs::read(fixture).expect("the fixture is in the repository");
    let bytes = zstd::decode_all(&packed[..]).unwrap();
    let path = dir.join("heap");
    std::fs::write(&path, &bytes).unwrap();
    path
}

#[test]
fn a_heap_or_store_of_an_older_format_is_refused_with_one_line_naming_dump_and_load() {
    // The third field: the heap format to raise to the current one (the store is what is
    // refused then), or `None`.
    for (old, said, raise_heap) in [
        ("heap6-store3.zst", "heap ", None),
        (
            "heap7-store3.zst",
            "the heap's store has format version 3",
            Some(7),
        ),
        (
            "heap7-store4.zst",
            "the heap's store has format version 4",
            Some(7),
        ),
        ("heap7-store5.zst", "heap ", None),
        ("heap8-store5.zst", "heap ", None),
        ("heap9-store5.zst", "heap ", None),
        ("heap9-store6.zst", "heap ", None),
        (
            "heap10-store6.zst",
            "the heap's store has format version 6",
            Some(10),
        ),
        ("heap10-store7.zst", "heap ", None),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = unpack(&fixture(old), dir.path());
        if let Some(heap) = raise_heap {
            let mut bytes = std::fs::read(&path).unwrap();
            assert_eq!(bytes[3], heap, "{old}: the heap format version byte");
            bytes[3] = podkv_alloc::layout::FORMAT_VERSION as u8;
            std::fs::write(&path, &bytes).unwrap();
        }
        let before = std::fs::read(&path).unwrap();
        let refused = [
            Store::open(&path, config()).map(drop).unwrap_err(),
            podkv_store::check_path(&path).map(drop).unwrap_err(),
        ];
        for err in refused {
            let line = err.to_string();
            assert!(
                line.contains(said)
                    && line.contains("podkv store dump")
                    && line.contains("podkv store load"),
                "{old}: {line}"
            );
            assert_eq!(line.lines().count(), 1, "{line}");
        }
        assert!(
            std::fs::read(&path).unwrap() == before,
            "{old}: nothing written"
        );
    }
}

#[test]
fn a_store_written_by_an_earlier_build_opens_checks_clean_and_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = unpack(&fixture_path(), dir.path());

    let report = podkv_store::check_path(&path).unwrap();
    assert!(report.is_valid(), "{:?}", report.problems);

    let store = Store::open(&path, config()).unwrap();
    let h = store.handle().unwrap();
    for i in 0..COUNT_ITEMS {
        let got = h.get(&key(i)).unwrap();
        match expected(i) {
            None => assert!(got.is_none(), "item {i} was deleted"),
            Some((v, flags, expiry)) => {
                let got = got.unwrap_or_else(|| panic!("item {i} is lost"));
                assert_eq!(got.value(), &v[..], "item {i}");
                assert_eq!((got.flags(), got.expiry()), (flags, expiry), "item {i}");
            }
        }
    }
    assert_eq!(h.incr(b"counter", 1).unwrap(), Some(43));
    // The old store keeps working: writes and a check after them.
    for i in 0..COUNT_ITEMS {
        h.set(&key(i), b"rewritten", 0, 0).unwrap();
    }
    drop(h);
    assert!(store.check().is_valid(), "{:?}", store.check().problems);
}
