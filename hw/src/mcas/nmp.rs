//! `nmp`, the client side: one thread's request and response lines (CXLALLOC §4, Figure 6).
//!
//! # One mCAS
//! 1. **spwr** — the client writes its request line as a seqlock: `seq` ← odd (writing),
//!    then `op, target, expected, new`, then `seq` ← the next even number (ready, released).
//! 2. The processor ([`super::processor`]) sees a ready `seq` it has not answered, performs
//!    the operation — alone, so operations on one target are serialised — and writes the
//!    client's response line: `status, previous`, then `seq` (released).
//! 3. **sprd** — the client spins briefly on its response `seq`, then parks on it; the reply
//!    is success or failure plus the previous value (success iff `previous == expected`).
//!
//! If the processor is parked (idle), step 1 ends by ringing the region's doorbell; a client
//! parks after setting its `waiting` word, which the processor checks after each reply
//! ([`super::park`]; Dekker-style: each side stores its flag, fences, then reads the other's).
//!
//! # A dead processor
//! While parked (in [`PARK_SLICE`] slices) the client watches the region's heartbeat. If it stops for
//! [`NmpOptions::timeout`], or no processor holds the claim, the client *withdraws* its request
//! (`seq` ← odd, so no later processor serves it) and returns
//! [`McasError::ProcessorDead`] or [`McasError::NoProcessor`]: an error, never a hang. Those two
//! mean the request took no effect. A processor *takes* a request by journalling it and then
//! checking that it is still there; a client that finds its request taken when it withdraws
//! returns [`McasError::OutcomeUnknown`] instead, as does a request a successor finds journalled
//! but unanswered.

use super::region::word;
use super::{park, McasError, Region};
use crate::sync::mapped::{fence, Ordering};
use std::cell::Cell;
use std::time::{Duration, Instant};

/// Request operations (`spwr.op`).
pub(crate) mod op {
    pub const CAS: u64 = 1;
    pub const STORE: u64 = 2;
}

/// Reply statuses (`sprd.status`).
pub(crate) mod status {
    pub const SUCCESS: u64 = 1;
    pub const FAILURE: u64 = 2;
    pub const BAD_TARGET: u64 = 3;
    pub const BAD_OP: u64 = 4;
    pub const UNKNOWN: u64 = 5;
}

/// A parked client wakes at least this often to check the processor's heartbeat.
pub const PARK_SLICE: Duration = Duration::from_millis(2);

/// Client tuning.
#[derive(Clone, Copy, Debug)]
pub struct NmpOptions {
    /// How long the heartbeat may stand still before the processor is declared dead. Must
    /// exceed the processor's longest pause (its idle sleep, [`super::processor::IDLE_SLEEP`],
    /// plus scheduling delays) many times over: the default, 2 s, keeps a processor starved
    /// by a busy machine from being taken for dead.
    pub timeout: Duration,
    /// Polls of the response line before the client parks until the processor wakes it.
    pub spins: u32,
}

impl Default for NmpOptions {
    fn default() -> Self {
        NmpOptions {
            timeout: Duration::from_secs(2),
            spins: 1 << 9,
        }
    }
}

/// Waits while the processor's journal names request `seq` of line `client`: a request a
/// processor took before the line's new client withdrew it (the processor journals, then
/// looks at the line again; the new client withdraws, then reads the journal: one of the two
/// sees the other). Such a request is performed once the processor runs on, maybe after the
/// new client has started: a recoverer that read the heap in between would decide on a state
/// the request then changes (a slab pushed on a free list twice, or left off it). The wait
/// ends when the processor has answered it, or when a successor processor has answered it
/// unknown without performing it, or when the heartbeat has stood still for `timeout` (the
/// processor died holding it: its successor never performs it).
fn settle_taken(region: &Region, client: u32, seq: u64, timeout: Duration) {
    let heartbeat = region.liveness(word::HEARTBEAT);
    let mut beat = heartbeat.load(Ordering::Relaxed);
    let mut since = Instant::now();
    while is_taken(region, client, seq) {
        let now = heartbeat.load(Ordering::Relaxed);
        if now != beat {
            (beat, since) = (now, Instant::now());
        } else if since.elapsed() > timeout {
            return;
        }
        std::thread::yield_now();
    }
}

/// Whether the processor's journal names request `seq` of line `client`: a processor took it
/// (and, unless it died, performs and answers it).
fn is_taken(region: &Region, client: u32, seq: u64) -> bool {
    region
        .journal(word::INFLIGHT_CLIENT)
        .load(Ordering::Acquire)
        == u64::from(client) + 1
        && region.journal(word::INFLIGHT_SEQ).load(Ordering::Acquire) == seq
}

/// The processor's answer to one mCAS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CasReply {
    /// The target's value before the operation.
    pub previous: u64,
    /// Whether the swap happened (the processor's bit; equals `previous == expected`).
    pub succeeded: bool,
}

/// One thread's mCAS client: owns request line `client` of the region. Not `Sync`: one
/// request at a time per line.
#[derive(Debug)]
pub struct NmpClient {
    region: Region,
    client: u32,
    /// The value this client last wrote to its `spwr.seq` (odd: withdrawn or never used).
    seq: Cell<u64>,
    options: NmpOptions,
}

impl NmpClient {
    /// A client on line `client` (the caller's thread-slot index; no two live clients may
    /// share one). A request a dead predecessor left pending on the line is withdrawn; one a
    /// processor had already taken is waited for ([`settle_taken`]), so that nothing the
    /// predecessor asked for lands after this returns.
    pub fn new(region: Region, client: u32, options: NmpOptions) -> Result<NmpClient, McasError> {
        let count = region.count_clients();
        if client >= count {
            return Err(McasError::BadClient { client, count });
        }
        let seq = region.spwr(client, word::SEQ).load(Ordering::Acquire);
        let withdrawn = seq | 1;
        region
            .spwr(client, word::SEQ)
            .store(withdrawn, Ordering::Release);
        if seq & 1 == 0 {
            fence(Ordering::SeqCst);
            settle_taken(&region, client, seq, options.timeout);
        }
        Ok(NmpClient {
            region,
            client,
            seq: Cell::new(withdrawn),
            options,
        })
    }

    /// Compare-and-swap at mapping offset `target`, performed by the processor.
    #[inline]
    pub fn cas(&self, target: u64, expected: u64, new: u64) -> Result<CasReply, McasError> {
        let (status, previous) = self.request(op::CAS, target, expected, new)?;
        let succeeded = status == status::SUCCESS;
        debug_assert_eq!(
            succeeded,
            previous == expected,
            "processor reply is consistent"
        );
        Ok(CasReply {
            previous,
            succeeded,
        })
    }

    /// Writes `value` at `target` through the processor, ordered with every mCAS on it.
    pub fn store(&self, target: u64, value: u64) -> Result<(), McasError> {
        self.request(op::STORE, target, 0, value).map(drop)
    }

    /// The word at `target`: an uncachable load, which the NMP passes straight to memory.
    pub fn load(&self, target: u64) -> Result<u64, McasError> {
        let word = self
            .region
            .target(target)
            .ok_or(McasError::BadTarget(target))?;
        Ok(word.load(Ordering::Acquire))
    }

    /// The client id (its line).
    pub fn client(&self) -> u32 {
        self.client
    }

    /// One spwr/sprd round trip: returns (status, previous) for a served request.
    #[inline]
    fn request(
        &self,
        op: u64,
        target: u64,
        expected: u64,
        new: u64,
    ) -> Result<(u64, u64), McasError> {
        let writing = self.seq.get() | 1;
        let ready = writing + 1;
        let line = |i| self.region.spwr(self.client, i);
        line(word::SEQ).store(writing, Ordering::Relaxed);
        fence(Ordering::Release);
        line(word::OP).store(op, Ordering::Relaxed);
        line(word::TARGET).store(target, Ordering::Relaxed);
        line(word::EXPECTED).store(expected, Ordering::Relaxed);
        line(word::NEW).store(new, Ordering::Relaxed);
        line(word::SEQ).store(ready, Ordering::Release);
        self.seq.set(ready);
        self.ring_if_parked();
        let reply = self.region.sprd(self.client, word::SEQ);
        for _ in 0..self.options.spins {
            if reply.load(Ordering::Acquire) == ready {
                return self.read_reply(target);
            }
            std::hint::spin_loop();
        }
        self.wait_slow(ready, target)
    }

    /// Wakes an idle processor: after the request is published, so either the processor sees
    /// the request in its last scan before sleeping, or this sees `parked` and rings.
    #[inline]
    fn ring_if_parked(&self) {
        fence(Ordering::SeqCst);
        if self.region.liveness(word::PARKED).load(Ordering::Relaxed) != 0 {
            self.ring();
        }
    }

    #[cold]
    fn ring(&self) {
        let doorbell = self.region.liveness(word::DOORBELL);
        doorbell.fetch_add(1, Ordering::SeqCst);
        park::wake(doorbell);
    }

    /// The parked wait, watching the heartbeat so a dead processor is an error, not a hang.
    #[cold]
    fn wait_slow(&self, ready: u64, target: u64) -> Result<(u64, u64), McasError> {
        let reply = self.region.sprd(self.client, word::SEQ);
        let waiting = self.region.sprd(self.client, word::WAITING);
        let heartbeat = self.region.liveness(word::HEARTBEAT);
        let mut beat = heartbeat.load(Ordering::Relaxed);
        let mut since = Instant::now();
        loop {
            waiting.store(1, Ordering::SeqCst);
            let seen = reply.load(Ordering::SeqCst);
            if seen != ready {
                park::wait(reply, seen, PARK_SLICE);
            }
            waiting.store(0, Ordering::Relaxed);
            if reply.load(Ordering::Acquire) == ready {
                return self.read_reply(target);
            }
            let error = if self.region.liveness(word::CLAIM).load(Ordering::Acquire) == 0 {
                McasError::NoProcessor
            } else if heartbeat.load(Ordering::Relaxed) != beat {
                beat = heartbeat.load(Ordering::Relaxed);
                since = Instant::now();
                continue;
            } else if since.elapsed() > self.options.timeout {
                McasError::ProcessorDead(since.elapsed())
            } else {
                continue;
            };
            return self.withdraw(ready, target, error);
        }
    }

    /// Takes the pending request back so no later processor serves it; a reply that raced in
    /// first still counts. If a processor had already taken it (its journal names this
    /// request), it may have performed it before dying: `OutcomeUnknown`. Otherwise none ever
    /// will (the processor journals, then looks at `seq` again; this withdraws, then reads the
    /// journal: one of the two sees the other), and `error` says it took no effect.
    fn withdraw(&self, ready: u64, target: u64, error: McasError) -> Result<(u64, u64), McasError> {
        self.region
            .spwr(self.client, word::SEQ)
            .store(ready | 1, Ordering::Release);
        self.seq.set(ready | 1);
        fence(Ordering::SeqCst);
        if self
            .region
            .sprd(self.client, word::SEQ)
            .load(Ordering::Acquire)
            == ready
        {
            return self.read_reply(target);
        }
        if is_taken(&self.region, self.client, ready) {
            return Err(McasError::OutcomeUnknown);
        }
        Err(error)
    }

    fn read_reply(&self, target: u64) -> Result<(u64, u64), McasError> {
        let status = self
            .region
            .sprd(self.client, word::STATUS)
            .load(Ordering::Relaxed);
        let previous = self
            .region
            .sprd(self.client, word::PREVIOUS)
            .load(Ordering::Relaxed);
        match status {
            status::SUCCESS | status::FAILURE => Ok((status, previous)),
            status::BAD_TARGET => Err(McasError::BadTarget(target)),
            status::UNKNOWN => Err(McasError::OutcomeUnknown),
            _ => Err(McasError::BadRegion(format!(
                "processor replied status {status}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcas::RegionFile;
    use std::sync::atomic::AtomicBool;

    /// A new client of a line whose request a processor had taken (journalled) before the line
    /// was withdrawn waits until the processor is done with it: a recoverer that opens the
    /// dead client's line then reads the heap after what that request did, never before.
    #[test]
    fn a_new_client_waits_for_the_request_of_its_line_a_processor_took() {
        let dir = tempfile::tempdir().unwrap();
        let file = RegionFile::create(&dir.path().join("region"), 2, 2).unwrap();
        let region = file.region().clone();
        let target = region.targets().start;
        // A client of line 1 sent request 2 and died; the processor took it, and runs on
        // (beating) for 100 ms before it performs it.
        region.spwr(1, word::SEQ).store(2, Ordering::Release);
        let journal = |i| region.journal(i);
        journal(word::INFLIGHT_SEQ).store(2, Ordering::Relaxed);
        journal(word::INFLIGHT_CLIENT).store(2, Ordering::Release);
        let performed = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..10 {
                    region
                        .liveness(word::HEARTBEAT)
                        .fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(10));
                }
                region.target(target).unwrap().store(9, Ordering::Relaxed);
                performed.store(true, Ordering::Release);
                journal(word::INFLIGHT_CLIENT).store(0, Ordering::Release);
            });
            let _client = NmpClient::new(region.clone(), 1, NmpOptions::default()).unwrap();
            assert!(
                performed.load(Ordering::Acquire),
                "the taken request landed before the new client began"
            );
        });
        // A line with no request taken: no wait, even with no processor at all.
        let start = std::time::Instant::now();
        let _other = NmpClient::new(region.clone(), 0, NmpOptions::default()).unwrap();
        assert!(start.elapsed() < Duration::from_secs(1));
    }
}
