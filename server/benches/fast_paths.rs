//! The fast paths under criterion, each beside its baseline in the same binary:
//!
//! - `alloc`: allocate + free of one 64 B and one 8 B block by the owning thread, and an
//!   allocation freed through another slot (the remote path); mimalloc beside it;
//! - `store`: a get that hits, a get that misses, and a set that replaces, on 100,000 keys of
//!   the embedded store; dashmap beside it;
//! - `protocol`: decoding a `get`, a `set` with its 1 KiB data block, and an `mg` request.
//!
//! Run `cargo bench -p podkv` (a workspace-wide `cargo bench` also builds podkv-alloc's crash
//! tests, whose dev-dependency compiles the allocator's crash points into every crate's build).
//! Benchmarks, not tests: the heaps live in `/dev/shm` and are removed afterwards.

use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use podkv::protocol::{Frame, MemcacheCodec, ProtocolLimits};
use podkv_alloc::{Config, Heap};
use podkv_store::{Store, StoreConfig};
use std::alloc::{GlobalAlloc, Layout};
use std::hint::black_box;
use tokio_util::codec::Decoder;

/// Keys in the store benchmarks.
const COUNT_KEYS: u64 = 100_000;
/// Value bytes in the store and protocol benchmarks.
const SIZE_VALUE: usize = 1024;

fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("podkv-bench")
        .tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .expect("a temporary directory")
}

fn heap_config() -> Config {
    Config {
        small_bytes: 256 << 20,
        large_bytes: 512 << 20,
        slots: 16,
        huge_bytes: 0,
        ..Config::default()
    }
}

fn alloc_pairs(c: &mut Criterion) {
    let dir = tempdir();
    let heap = Heap::open(dir.path().join("heap"), &heap_config()).expect("a fresh heap");
    let thread = heap.thread().expect("a thread slot");
    let mut group = c.benchmark_group("alloc/allocate+free");
    for size in [8usize, 64] {
        let layout = Layout::from_size_align(size, 8).unwrap();
        group.bench_with_input(BenchmarkId::new("podkv", size), &layout, |b, &layout| {
            b.iter(|| {
                let block = thread.allocate(black_box(layout)).expect("room");
                thread.free(black_box(block));
            })
        });
        group.bench_with_input(BenchmarkId::new("mimalloc", size), &layout, |b, &layout| {
            b.iter(|| {
                // SAFETY: a non-zero layout; the block is freed at once with the same layout.
                unsafe {
                    let p = mimalloc::MiMalloc.alloc(black_box(layout));
                    mimalloc::MiMalloc.dealloc(black_box(p), layout);
                }
            })
        });
    }
    group.finish();

    let other = heap.thread().expect("a second thread slot");
    let layout = Layout::from_size_align(64, 8).unwrap();
    c.bench_function("alloc/allocate+remote free/podkv/64", |b| {
        b.iter(|| {
            let block = thread.allocate(black_box(layout)).expect("room");
            // A slot that does not own the block's slab frees it: the remote path.
            other.free(black_box(block));
        })
    });
}

fn key(i: u64) -> Vec<u8> {
    format!("user{i:012}").into_bytes()
}

fn store_ops(c: &mut Criterion) {
    let dir = tempdir();
    let config = StoreConfig {
        heap: heap_config(),
        ..StoreConfig::default()
    };
    let store = Store::open(dir.path().join("heap"), config).expect("a fresh store");
    let h = store.handle().expect("a handle");
    let dash = dashmap::DashMap::<Vec<u8>, Vec<u8>>::new();
    let value = vec![b'v'; SIZE_VALUE];
    for i in 0..COUNT_KEYS {
        h.set(&key(i), &value, 0, 0).expect("room for the keys");
        dash.insert(key(i), value.clone());
    }
    let keys: Vec<Vec<u8>> = (0..COUNT_KEYS).map(key).collect();
    let mut next = 0usize;
    let mut pick = move || {
        // A fixed stride through the keys: every key, no cache-friendly order.
        next = (next + 7919) % COUNT_KEYS as usize;
        next
    };
    let mut group = c.benchmark_group("store");
    group.bench_function("get hit/podkv", |b| {
        b.iter(|| black_box(h.get(&keys[pick()]).unwrap().map(|g| g.value().len())))
    });
    group.bench_function("get hit/dashmap", |b| {
        b.iter(|| black_box(dash.get(&keys[pick()]).map(|v| v.len())))
    });
    group.bench_function("get miss/podkv", |b| {
        b.iter(|| black_box(h.get(b"absent-key").unwrap().is_none()))
    });
    group.bench_function("get miss/dashmap", |b| {
        b.iter(|| black_box(dash.get(&b"absent-key"[..]).is_none()))
    });
    group.bench_function("set replace/podkv", |b| {
        b.iter(|| h.set(&keys[pick()], black_box(&value), 0, 0).unwrap())
    });
    group.bench_function("set replace/dashmap", |b| {
        b.iter(|| dash.insert(keys[pick()].clone(), black_box(value.clone())))
    });
    group.finish();
}

/// Decodes every frame of `input`; returns how many.
fn decode_all(codec: &mut MemcacheCodec, input: &[u8]) -> usize {
    let mut buf = BytesMut::from(input);
    let mut frames = 0;
    while let Some(frame) = codec.decode(&mut buf).unwrap() {
        assert!(matches!(frame, Frame::Request(_)));
        frames += 1;
    }
    frames
}

fn protocol_parse(c: &mut Criterion) {
    let set = [
        &b"set user000000000042 0 0 1024\r\n"[..],
        &vec![b'v'; SIZE_VALUE],
        b"\r\n",
    ]
    .concat();
    let requests: [(&str, &[u8]); 3] = [
        ("get", b"get user000000000042\r\n"),
        ("set", &set),
        ("mg", b"mg user000000000042 v f t c\r\n"),
    ];
    let mut group = c.benchmark_group("protocol/decode");
    for (name, input) in requests {
        let mut codec = MemcacheCodec::new(ProtocolLimits::default());
        assert_eq!(decode_all(&mut codec, input), 1, "{name}");
        group.bench_function(name, |b| {
            b.iter(|| decode_all(&mut codec, black_box(input)))
        });
    }
    group.finish();
}

criterion_group!(benches, alloc_pairs, store_ops, protocol_parse);
criterion_main!(benches);
