//! The partitioner keeps per-key order and hands every request to exactly one worker.

use std::collections::HashMap;

use podkv_traces::generate::Generator;
use podkv_traces::{cluster::cluster, Partitioner, Request, TraceError};

/// A skewed stream (cluster 37) whose requests are numbered by their `timestamp` field.
fn numbered(n: u32) -> Vec<Request> {
    Generator::new(&cluster(37).unwrap(), n, 3)
        .enumerate()
        .map(|(i, mut r)| {
            r.timestamp = i as u64;
            Request::from(r)
        })
        .collect()
}

/// Every request once, each key on one worker, each key's requests in source order.
fn check_split(source: &[Request], lanes: &[Vec<Request>], p: Partitioner) {
    let mut seen = vec![false; source.len()];
    let mut owner: HashMap<&str, usize> = HashMap::new();
    for (w, lane) in lanes.iter().enumerate() {
        let mut last: HashMap<&str, u64> = HashMap::new();
        for r in lane {
            let i = r.timestamp as usize;
            assert!(!seen[i], "request {i} delivered twice");
            seen[i] = true;
            assert_eq!(&source[i], r);
            assert_eq!(*owner.entry(&r.key).or_insert(w), w, "key {} split", r.key);
            assert_eq!(p.worker_of(r.key.as_bytes()), w);
            if let Some(prev) = last.insert(&r.key, r.timestamp) {
                assert!(prev < r.timestamp, "key {} reordered", r.key);
            }
        }
    }
    assert!(seen.iter().all(|&s| s), "a request was lost");
}

#[test]
fn fan_out_keeps_order_and_covers_everything() {
    let source = numbered(30_000);
    for workers in [1, 3, 8] {
        let p = Partitioner::new(workers).unwrap();
        let items: Vec<Result<Request, TraceError>> = source.iter().cloned().map(Ok).collect();
        let (lanes, dispatcher) = p.fan_out(items.into_iter(), 64, 2);
        // Drain the lanes concurrently, as worker threads would.
        let handles: Vec<_> = lanes
            .into_iter()
            .map(|lane| std::thread::spawn(move || lane.collect::<Vec<_>>()))
            .collect();
        let lanes: Vec<Vec<Request>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(dispatcher.join().unwrap(), source.len() as u64);
        check_split(&source, &lanes, p);
        if workers > 1 {
            assert!(lanes.iter().all(|l| !l.is_empty()));
        }
    }
}

#[test]
fn shards_keep_order_and_cover_everything() {
    let source = numbered(10_000);
    let p = Partitioner::new(4).unwrap();
    let lanes: Vec<Vec<Request>> = (0..4)
        .map(|w| {
            p.shard(source.iter().cloned().map(Ok), w)
                .map(Result::unwrap)
                .collect()
        })
        .collect();
    check_split(&source, &lanes, p);
}

#[test]
fn a_read_error_stops_the_dispatcher_and_is_reported() {
    let p = Partitioner::new(2).unwrap();
    let mut items: Vec<Result<Request, TraceError>> = numbered(100).into_iter().map(Ok).collect();
    items.insert(
        50,
        Err(TraceError::UnknownOp {
            line: 51,
            op: "x".into(),
        }),
    );
    let (lanes, dispatcher) = p.fan_out(items.into_iter(), 8, 64);
    let delivered: usize = lanes.into_iter().map(|l| l.count()).sum();
    assert!(delivered <= 50);
    assert!(matches!(
        dispatcher.join(),
        Err(TraceError::UnknownOp { line: 51, .. })
    ));
}

#[test]
fn a_dropped_lane_stops_the_dispatcher() {
    let p = Partitioner::new(2).unwrap();
    let items: Vec<Result<Request, TraceError>> = numbered(5_000).into_iter().map(Ok).collect();
    let (mut lanes, dispatcher) = p.fan_out(items.into_iter(), 4, 1);
    drop(lanes.remove(1));
    let kept = std::thread::spawn(move || lanes.remove(0).count());
    assert!(matches!(
        dispatcher.join(),
        Err(TraceError::WorkerGone { worker: 1 })
    ));
    kept.join().unwrap();
}
