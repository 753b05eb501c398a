//! The store's maintenance thread: it makes the table whole soon after a doubling (the
//! splits inserts left owed, `Buckets::make_whole`), looking at the size every
//! [`GROWTH_POLL`], and, given an interval, runs the expiry crawler every interval, until it
//! is stopped (or dropped). Started by `Map::spawn_maintainer` (`Map::spawn_crawler`), which
//! gives it the pass to run.

use crate::maintain::CrawlReport;
use podkv_hw::sync::mapped::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the thread looks whether the table grew: a load of the size word. A doubling's
/// newer half is then made within this (plus the time to make it: about 0.2 µs a bucket) of
/// the doubling, unless inserts made it first.
pub const GROWTH_POLL: Duration = Duration::from_millis(100);

/// A background thread running the store's maintenance (module docs); stops on drop.
#[derive(Debug)]
pub struct Crawler {
    stop: Arc<AtomicBool>,
    passes: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<CrawlReport>>,
}

impl Crawler {
    /// Starts the thread: it calls `start` once (on the thread; `None`: nothing to maintain
    /// with, the thread does nothing), then the pass it returned, every [`GROWTH_POLL`] and
    /// every `crawl` interval, telling it whether the expiry crawl is due.
    pub(crate) fn spawn<S, P>(crawl: Option<Duration>, start: S) -> Crawler
    where
        S: FnOnce() -> Option<P> + Send + 'static,
        P: FnMut(bool) -> CrawlReport,
    {
        let stop = Arc::new(AtomicBool::new(false));
        let passes = Arc::new(AtomicU64::new(0));
        let (flag, count) = (stop.clone(), passes.clone());
        let thread = std::thread::spawn(move || {
            let mut total = CrawlReport::default();
            let Some(mut pass) = start() else {
                return total;
            };
            let mut crawl_at = Instant::now();
            while !flag.load(Ordering::Relaxed) {
                let due = crawl.is_some() && Instant::now() >= crawl_at;
                let done = pass(due);
                total.visited += done.visited;
                total.reclaimed += done.reclaimed;
                total.buckets_made += done.buckets_made;
                if let (true, Some(interval)) = (due, crawl) {
                    crawl_at = Instant::now() + interval;
                    count.fetch_add(1, Ordering::Release);
                }
                let wait = match crawl {
                    Some(_) => crawl_at.saturating_duration_since(Instant::now()),
                    None => GROWTH_POLL,
                };
                std::thread::park_timeout(wait.min(GROWTH_POLL));
            }
            total
        });
        Crawler {
            stop,
            passes,
            thread: Some(thread),
        }
    }

    /// Expiry passes completed so far.
    pub fn passes(&self) -> u64 {
        self.passes.load(Ordering::Acquire)
    }

    /// Stops the thread and returns what it did.
    pub fn stop(mut self) -> CrawlReport {
        self.finish()
    }

    fn finish(&mut self) -> CrawlReport {
        self.stop.store(true, Ordering::Relaxed);
        let Some(thread) = self.thread.take() else {
            return CrawlReport::default();
        };
        thread.thread().unpark();
        thread.join().unwrap_or_default()
    }
}

impl Drop for Crawler {
    fn drop(&mut self) {
        self.finish();
    }
}
