//! Splitting one request stream across `W` workers by key, keeping each key's order.
//!
//! Worker of a key: `⌊key_hash(key) · W / 2⁶⁴⌋` (multiply-shift, no modulo bias), with the
//! process-independent [`key_hash`]. All requests for a key go to one worker, so per-key order
//! (a `set` before the `get` that should hit it) survives however the workers interleave.
//!
//! Two ways to plug into a runner:
//!
//! - **[`Partitioner::shard`]**, for worker *processes*: every process reads the whole file and
//!   keeps its own keys. No coordination; the file is decoded `W` times.
//! - **[`Partitioner::fan_out`]**, for worker *threads*: one dispatcher thread reads the file
//!   once and sends batches down one bounded channel per worker. Every lane must be drained (or
//!   dropped, which stops the dispatcher with [`TraceError::WorkerGone`]): a worker that stops
//!   reading without dropping its lane stalls the others once its channel fills.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

use crate::{key_hash, Record, Request, TraceError};

/// Anything with a key to partition on.
pub trait Keyed {
    /// The key bytes.
    fn key(&self) -> &[u8];
}

impl Keyed for Record {
    fn key(&self) -> &[u8] {
        self.key.as_bytes()
    }
}

impl Keyed for Request {
    fn key(&self) -> &[u8] {
        self.key.as_bytes()
    }
}

/// Maps keys to `workers` workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Partitioner {
    workers: usize,
}

impl Partitioner {
    /// A partitioner over `workers ≥ 1` workers.
    pub fn new(workers: usize) -> Result<Self, TraceError> {
        if workers == 0 {
            return Err(TraceError::InvalidArgument("zero workers".into()));
        }
        Ok(Self { workers })
    }

    /// Number of workers.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// The worker that owns `key`, in `0..workers`.
    pub fn worker_of(&self, key: &[u8]) -> usize {
        ((u128::from(key_hash(key)) * self.workers as u128) >> 64) as usize
    }

    /// The part of `source` owned by `worker`, in source order. Errors are passed to every
    /// shard, so each worker sees a bad line.
    pub fn shard<T, I>(&self, source: I, worker: usize) -> impl Iterator<Item = I::Item>
    where
        T: Keyed,
        I: Iterator<Item = Result<T, TraceError>>,
    {
        let this = *self;
        source.filter(move |r| {
            r.as_ref()
                .map_or(true, |t| this.worker_of(t.key()) == worker)
        })
    }

    /// Starts a dispatcher thread that reads `source` once and sends each worker its requests
    /// in batches of `batch`, at most `depth` batches queued per worker. Returns one lane per
    /// worker and the dispatcher, whose [`Dispatcher::join`] gives the number of requests sent
    /// or the first error (reading stops there).
    pub fn fan_out<T, I>(&self, source: I, batch: usize, depth: usize) -> (Vec<Lane<T>>, Dispatcher)
    where
        T: Keyed + Send + 'static,
        I: Iterator<Item = Result<T, TraceError>> + Send + 'static,
    {
        let batch = batch.max(1);
        let (senders, lanes): (Vec<_>, Vec<_>) = (0..self.workers)
            .map(|_| {
                let (tx, rx) = sync_channel(depth.max(1));
                (tx, Lane::new(rx))
            })
            .unzip();
        let this = *self;
        let thread = std::thread::spawn(move || this.dispatch(source, senders, batch));
        (lanes, Dispatcher { thread })
    }

    fn dispatch<T: Keyed, I: Iterator<Item = Result<T, TraceError>>>(
        self,
        source: I,
        senders: Vec<SyncSender<Vec<T>>>,
        batch: usize,
    ) -> Result<u64, TraceError> {
        let mut pending: Vec<Vec<T>> = (0..self.workers)
            .map(|_| Vec::with_capacity(batch))
            .collect();
        let send = |w: usize, items: Vec<T>| {
            senders[w]
                .send(items)
                .map_err(|_| TraceError::WorkerGone { worker: w })
        };
        let mut sent = 0u64;
        for item in source {
            let item = item?;
            let w = self.worker_of(item.key());
            pending[w].push(item);
            sent += 1;
            if pending[w].len() >= batch {
                send(
                    w,
                    std::mem::replace(&mut pending[w], Vec::with_capacity(batch)),
                )?;
            }
        }
        for (w, items) in pending.into_iter().enumerate() {
            if !items.is_empty() {
                send(w, items)?;
            }
        }
        Ok(sent)
    }
}

/// One worker's requests from [`Partitioner::fan_out`], in source order; ends when the
/// dispatcher has sent everything (or stopped on an error, which [`Dispatcher::join`] reports).
pub struct Lane<T> {
    receiver: Receiver<Vec<T>>,
    batch: std::vec::IntoIter<T>,
}

impl<T> Lane<T> {
    fn new(receiver: Receiver<Vec<T>>) -> Self {
        Self {
            receiver,
            batch: Vec::new().into_iter(),
        }
    }
}

impl<T> Iterator for Lane<T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        loop {
            if let Some(item) = self.batch.next() {
                return Some(item);
            }
            self.batch = self.receiver.recv().ok()?.into_iter();
        }
    }
}

/// The dispatcher thread of [`Partitioner::fan_out`].
pub struct Dispatcher {
    thread: JoinHandle<Result<u64, TraceError>>,
}

impl Dispatcher {
    /// Waits for the dispatcher: requests sent, or the error that stopped it.
    pub fn join(self) -> Result<u64, TraceError> {
        self.thread
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_are_in_range_and_all_used() {
        let p = Partitioner::new(7).unwrap();
        let mut seen = [0u32; 7];
        for i in 0..7000 {
            seen[p.worker_of(format!("key{i}").as_bytes())] += 1;
        }
        assert!(seen.iter().all(|&n| n > 700), "{seen:?}");
        assert!(Partitioner::new(0).is_err());
    }
}
