//! The background expiry crawler: one thread that runs a pass every `interval` until it is
//! stopped (or dropped). Started by `Map::spawn_crawler`, which gives it the pass to run.

use crate::maintain::CrawlReport;
use podkv_hw::sync::mapped::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A background thread running the expiry crawler every `interval`; stops on drop.
#[derive(Debug)]
pub struct Crawler {
    stop: Arc<AtomicBool>,
    passes: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<CrawlReport>>,
}

impl Crawler {
    /// Starts the thread: it calls `start` once (on the thread; `None`: nothing to crawl
    /// with, the crawler does no pass), then the pass it returned every `interval`.
    pub(crate) fn spawn<S, P>(interval: Duration, start: S) -> Crawler
    where
        S: FnOnce() -> Option<P> + Send + 'static,
        P: FnMut() -> CrawlReport,
    {
        let stop = Arc::new(AtomicBool::new(false));
        let passes = Arc::new(AtomicU64::new(0));
        let (flag, count) = (stop.clone(), passes.clone());
        let thread = std::thread::spawn(move || {
            let mut total = CrawlReport::default();
            let Some(mut pass) = start() else {
                return total;
            };
            while !flag.load(Ordering::Relaxed) {
                let done = pass();
                total.visited += done.visited;
                total.reclaimed += done.reclaimed;
                count.fetch_add(1, Ordering::Release);
                std::thread::park_timeout(interval);
            }
            total
        });
        Crawler {
            stop,
            passes,
            thread: Some(thread),
        }
    }

    /// Passes completed so far.
    pub fn passes(&self) -> u64 {
        self.passes.load(Ordering::Acquire)
    }

    /// Stops the crawler and returns what it did.
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
