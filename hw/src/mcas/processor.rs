//! `nmp`, the processor side: a software model of CXLALLOC's FPGA near-memory processor.
//!
//! # Serving
//! The processor scans every client's `spwr` line. A line whose `seq` is even and differs from
//! the last one answered holds a request; the processor copies it (seqlock: re-reading `seq`
//! proves the copy whole), logs it in the journal line, performs it on the target, writes the
//! client's `sprd` line and clears the journal. One processor performs one operation at a time,
//! so operations on any target are serialised, as the FPGA serialises them per address.
//!
//! # Liveness: claim, heartbeat, journal
//! - **claim** (`epoch << 32 | pid`, 0 = none): a processor starts by CASing it, from 0 or
//!   from a claim whose heartbeat stood still for the takeover time, to the next epoch; exactly
//!   one starter wins. A processor that finds its claim gone stops before its next request; one
//!   that stops cleanly sets it back to 0.
//! - **heartbeat**: bumped after every scan, and at least every [`IDLE_SLEEP`] when idle.
//!   Clients waiting for a reply declare the processor dead when it stands still.
//! - **journal**: the request being served. A processor that takes over from a dead one
//!   answers the journalled request [`McasError::OutcomeUnknown`](super::McasError) instead of
//!   performing it a second time.
//!
//! # Polling
//! Scans spin while requests keep coming. After [`COUNT_SPIN_SCANS`] idle scans the processor
//! *parks*: it sets `parked`, scans once more (a request published before the flag was
//! visible), and sleeps on the doorbell for at most [`IDLE_SLEEP`]; a client that sees `parked`
//! rings it. After a reply the processor wakes the client if its `waiting` word is set. So the
//! processor answers within a scan under load, costs no CPU when idle, and on a machine with
//! more runnable threads than cores a round trip costs a wake-up, not a scheduler quantum.

use super::nmp::{op, status};
use super::region::word;
use super::{park, McasError, Region};
use crate::sync::mapped::{fence, AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Idle scans spent spinning before the processor parks.
pub const COUNT_SPIN_SCANS: u32 = 1 << 12;
/// The longest a parked processor sleeps between heartbeats.
pub const IDLE_SLEEP: Duration = Duration::from_millis(2);
/// Scans between checks that the claim is still this processor's.
const COUNT_SCANS_PER_CLAIM_CHECK: u32 = 1 << 10;
/// How long a starter watches a claimed region's heartbeat before judging it dead.
pub const TAKEOVER_AFTER: Duration = Duration::from_secs(1);

fn claim_word(epoch: u64, pid: u32) -> u64 {
    epoch << 32 | u64::from(pid)
}

/// The process id recorded in a claim word.
pub fn claim_pid(claim: u64) -> u32 {
    claim as u32
}

/// The claim a starter installs over `observed`: the next epoch, this process.
fn next_claim(observed: u64) -> u64 {
    claim_word((observed >> 32) + 1, std::process::id())
}

/// Why [`Processor::run`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// The stop flag was raised; the claim was released.
    Asked,
    /// Another processor took the claim over (this one was judged dead).
    Superseded,
}

/// A processor that holds the region's claim.
#[derive(Debug)]
pub struct Processor {
    region: Region,
    claim: u64,
    /// The last `seq` answered per client.
    answered: Vec<u64>,
}

impl Processor {
    /// Claims `region`: at once if unclaimed, else after watching the current claim's
    /// heartbeat stand still for `takeover_after`. Fails with `AlreadyServed` when a live
    /// processor holds it or another starter won.
    pub fn claim(region: &Region, takeover_after: Duration) -> Result<Processor, McasError> {
        let observed = region.liveness(word::CLAIM).load(Ordering::Acquire);
        if observed != 0 && is_beating(region, takeover_after) {
            return Err(McasError::AlreadyServed {
                pid: claim_pid(observed),
            });
        }
        Processor::claim_over(region, observed)
    }

    /// Claims `region` if its claim still reads `observed` (a claim the caller judged dead, or
    /// 0): one CAS, so of many starters exactly one wins.
    pub fn claim_over(region: &Region, observed: u64) -> Result<Processor, McasError> {
        let claim = next_claim(observed);
        let word = region.liveness(word::CLAIM);
        if let Err(now) =
            word.compare_exchange(observed, claim, Ordering::AcqRel, Ordering::Acquire)
        {
            return Err(McasError::AlreadyServed {
                pid: claim_pid(now),
            });
        }
        let mut processor = Processor {
            region: region.clone(),
            claim,
            answered: Vec::new(),
        };
        processor.recover();
        Ok(processor)
    }

    /// After a takeover: reads what was answered, and answers a request the dead processor was
    /// serving with `UNKNOWN` (it may have swapped already), never performing it twice.
    fn recover(&mut self) {
        let count = self.region.count_clients();
        self.answered = (0..count)
            .map(|c| self.region.sprd(c, word::SEQ).load(Ordering::Acquire))
            .collect();
        let inflight = self
            .region
            .journal(word::INFLIGHT_CLIENT)
            .load(Ordering::Acquire);
        if inflight == 0 {
            return;
        }
        let seq = self
            .region
            .journal(word::INFLIGHT_SEQ)
            .load(Ordering::Relaxed);
        if let Some(client) = u32::try_from(inflight - 1).ok().filter(|&c| c < count) {
            let pending = self.region.spwr(client, word::SEQ).load(Ordering::Acquire);
            if pending == seq && self.answered[client as usize] != seq {
                self.reply(client, seq, status::UNKNOWN, 0);
                self.answered[client as usize] = seq;
            }
        }
        self.region
            .journal(word::INFLIGHT_CLIENT)
            .store(0, Ordering::Release);
    }

    /// The claim word this processor holds.
    pub fn claim_value(&self) -> u64 {
        self.claim
    }

    /// Serves requests until `stop` is raised (then releases the claim) or the claim is lost.
    pub fn run(mut self, stop: &AtomicBool) -> Stopped {
        let mut idle = 0u32;
        let mut scans = 0u32;
        let mut beat = self
            .region
            .liveness(word::HEARTBEAT)
            .load(Ordering::Relaxed);
        loop {
            let served = self.scan();
            beat = beat.wrapping_add(1);
            self.region
                .liveness(word::HEARTBEAT)
                .store(beat, Ordering::Relaxed);
            scans = scans.wrapping_add(1);
            if scans % COUNT_SCANS_PER_CLAIM_CHECK == 0 || idle >= COUNT_SPIN_SCANS {
                if let Some(stopped) = self.should_stop(stop) {
                    return stopped;
                }
            }
            idle = if served > 0 {
                0
            } else {
                idle.saturating_add(1)
            };
            if idle < COUNT_SPIN_SCANS {
                std::hint::spin_loop();
            } else if self.park() > 0 {
                idle = 0;
            }
        }
    }

    /// Sleeps on the doorbell until a client rings or [`IDLE_SLEEP`] passes; returns requests
    /// served by the scan that closes the race with clients publishing as it parks.
    #[cold]
    fn park(&mut self) -> u32 {
        let doorbell = self.region.liveness(word::DOORBELL);
        let bell = doorbell.load(Ordering::SeqCst);
        self.region
            .liveness(word::PARKED)
            .store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst); // the flag before the scan's loads (Dekker with the client)
        let served = self.scan();
        if served == 0 {
            park::wait(self.region.liveness(word::DOORBELL), bell, IDLE_SLEEP);
        }
        self.region
            .liveness(word::PARKED)
            .store(0, Ordering::Relaxed);
        served
    }

    fn should_stop(&mut self, stop: &AtomicBool) -> Option<Stopped> {
        if self.region.liveness(word::CLAIM).load(Ordering::Acquire) != self.claim {
            return Some(Stopped::Superseded);
        }
        if !stop.load(Ordering::Relaxed) {
            return None;
        }
        // Answer what is already pending, then let the next starter in without a wait.
        self.scan();
        let _ = self.region.liveness(word::CLAIM).compare_exchange(
            self.claim,
            0,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
        Some(Stopped::Asked)
    }

    /// One pass over every client's request line; returns how many requests it served.
    fn scan(&mut self) -> u32 {
        let mut served = 0;
        for client in 0..self.region.count_clients() {
            served += u32::from(self.serve(client));
        }
        served
    }

    /// Serves client `client`'s request if one is ready and unanswered.
    #[inline]
    fn serve(&mut self, client: u32) -> bool {
        let line = |i| self.region.spwr(client, i);
        let seq = line(word::SEQ).load(Ordering::Acquire);
        if seq & 1 == 1 || seq == self.answered[client as usize] {
            return false;
        }
        let op = line(word::OP).load(Ordering::Relaxed);
        let target = line(word::TARGET).load(Ordering::Relaxed);
        let expected = line(word::EXPECTED).load(Ordering::Relaxed);
        let new = line(word::NEW).load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        if line(word::SEQ).load(Ordering::Relaxed) != seq {
            return false; // torn: the client is rewriting the line; the next scan sees it
        }
        let journal = |i| self.region.journal(i);
        journal(word::INFLIGHT_SEQ).store(seq, Ordering::Relaxed);
        journal(word::INFLIGHT_CLIENT).store(u64::from(client) + 1, Ordering::Release);
        // The take: journal, then look again. A client that gave up withdraws (its `seq`),
        // then reads the journal (`NmpClient::withdraw`), so one of the two sees the other:
        // either this finds the request withdrawn and leaves it, or the client finds it taken
        // and reports its outcome unknown. Never performed after a withdrawal said it was not.
        fence(Ordering::SeqCst);
        if line(word::SEQ).load(Ordering::Relaxed) != seq {
            journal(word::INFLIGHT_CLIENT).store(0, Ordering::Release);
            return false;
        }
        let (status, previous) = self.perform(op, target, expected, new);
        self.reply(client, seq, status, previous);
        self.region
            .journal(word::INFLIGHT_CLIENT)
            .store(0, Ordering::Release);
        self.answered[client as usize] = seq;
        true
    }

    /// The operation itself, on memory. A CPU CAS rather than load-then-store so that even a
    /// processor that lingers after being superseded cannot break atomicity on this host.
    fn perform(&self, op: u64, target: u64, expected: u64, new: u64) -> (u64, u64) {
        let Some(word) = self.region.target(target) else {
            return (status::BAD_TARGET, 0);
        };
        match op {
            op::CAS => {
                match word.compare_exchange(expected, new, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(previous) => (status::SUCCESS, previous),
                    Err(previous) => (status::FAILURE, previous),
                }
            }
            op::STORE => (status::SUCCESS, word.swap(new, Ordering::AcqRel)),
            _ => (status::BAD_OP, 0),
        }
    }

    fn reply(&self, client: u32, seq: u64, status: u64, previous: u64) {
        let line = |i| self.region.sprd(client, i);
        line(word::STATUS).store(status, Ordering::Relaxed);
        line(word::PREVIOUS).store(previous, Ordering::Relaxed);
        line(word::SEQ).store(seq, Ordering::Release);
        fence(Ordering::SeqCst);
        if line(word::WAITING).load(Ordering::Relaxed) != 0 {
            park::wake(line(word::SEQ));
        }
    }
}

/// Whether `region`'s heartbeat moves within `within` (polled every 100 µs).
pub fn is_beating(region: &Region, within: Duration) -> bool {
    let heartbeat = region.liveness(word::HEARTBEAT);
    let first = heartbeat.load(Ordering::Relaxed);
    let start = Instant::now();
    loop {
        if heartbeat.load(Ordering::Relaxed) != first {
            return true;
        }
        if start.elapsed() > within {
            return false;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// A processor running on a thread of this process. Dropping it stops the processor.
#[derive(Debug)]
pub struct ProcessorHandle {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Stopped>>,
}

impl Processor {
    /// Runs this processor on a new thread.
    pub fn spawn(self) -> ProcessorHandle {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("mcas-nmp".into())
            .spawn(move || {
                // Not on the CPU of a pinned worker whose first mCAS started it.
                crate::cpus::run_where_the_process_may();
                self.run(&flag)
            })
            .expect("spawning the mCAS processor thread");
        ProcessorHandle {
            stop,
            thread: Some(thread),
        }
    }
}

impl ProcessorHandle {
    /// Stops the processor (pending requests are answered first) and waits for it.
    pub fn stop(mut self) -> Stopped {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> Stopped {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take().map(std::thread::JoinHandle::join) {
            Some(Ok(stopped)) => stopped,
            Some(Err(panic)) => std::panic::resume_unwind(panic),
            None => Stopped::Asked,
        }
    }
}

impl Drop for ProcessorHandle {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.stop_and_join();
        }
    }
}

/// How [`ensure_processor`] starts a processor when none is alive.
#[derive(Debug)]
pub enum Start {
    /// On a thread of this process.
    Thread,
    /// As its own process: a command that runs `podkv mcas-nmp` (or an equivalent) on the
    /// same region; it claims the region itself.
    Command(std::process::Command),
}

/// What [`ensure_processor`] found or did.
#[derive(Debug)]
pub enum Liveness {
    /// A live processor already served the region, or another starter won.
    Existing {
        /// Its process id, from the claim word.
        pid: u32,
    },
    /// This call started the processor on a thread.
    StartedThread(ProcessorHandle),
    /// This call started the processor as a process, which now serves the region.
    StartedProcess(std::process::Child),
}

/// Makes sure a live processor serves `region`, starting one with `start` if the region is
/// unclaimed or its heartbeat stands still for `timeout`. Of concurrent callers exactly one
/// starts a processor; the others get [`Liveness::Existing`].
pub fn ensure_processor(
    region: &Region,
    start: Start,
    timeout: Duration,
) -> Result<Liveness, McasError> {
    let observed = region.liveness(word::CLAIM).load(Ordering::Acquire);
    if observed != 0 && is_beating(region, timeout) {
        return Ok(Liveness::Existing {
            pid: claim_pid(observed),
        });
    }
    match start {
        Start::Thread => match Processor::claim_over(region, observed) {
            Ok(processor) => Ok(Liveness::StartedThread(processor.spawn())),
            Err(McasError::AlreadyServed { pid }) => Ok(Liveness::Existing { pid }),
            Err(other) => Err(other),
        },
        Start::Command(mut command) => {
            let child = command.spawn()?;
            wait_for_child_processor(region, child, timeout)
        }
    }
}

/// Waits until the spawned child (or a rival) serves the region.
fn wait_for_child_processor(
    region: &Region,
    mut child: std::process::Child,
    timeout: Duration,
) -> Result<Liveness, McasError> {
    let deadline = Instant::now() + 2 * timeout + Duration::from_secs(10);
    loop {
        let claim = region.liveness(word::CLAIM).load(Ordering::Acquire);
        if claim != 0 && is_beating(region, Duration::from_millis(20)) {
            if claim_pid(claim) == child.id() {
                return Ok(Liveness::StartedProcess(child));
            }
            // A rival serves: our child sees it beating and exits; reap it.
            let _ = child.wait();
            return Ok(Liveness::Existing {
                pid: claim_pid(claim),
            });
        }
        if let Some(status) = child.try_wait()? {
            let alive = claim != 0 && is_beating(region, timeout);
            if alive {
                return Ok(Liveness::Existing {
                    pid: claim_pid(claim),
                });
            }
            return Err(McasError::Io(std::io::Error::other(format!(
                "the mCAS processor process exited ({status}) without serving"
            ))));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(McasError::NoProcessor);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcas::RegionFile;

    #[test]
    fn a_takeover_answers_the_journalled_request_unknown_and_never_repeats_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = RegionFile::create(&dir.path().join("region"), 2, 2).unwrap();
        let region = file.region();
        let target = region.targets().start;
        // A processor claims the region, journals client 1's store of 9, performs it, and dies
        // before replying.
        let dead = Processor::claim_over(region, 0).unwrap();
        let spwr = |i| region.spwr(1, i);
        spwr(word::OP).store(op::STORE, Ordering::Relaxed);
        spwr(word::TARGET).store(target, Ordering::Relaxed);
        spwr(word::NEW).store(9, Ordering::Relaxed);
        spwr(word::SEQ).store(2, Ordering::Release);
        region
            .journal(word::INFLIGHT_SEQ)
            .store(2, Ordering::Relaxed);
        region
            .journal(word::INFLIGHT_CLIENT)
            .store(2, Ordering::Release);
        region.target(target).unwrap().store(9, Ordering::Relaxed);
        // Someone else changes the target meanwhile, through a later request.
        region.target(target).unwrap().store(5, Ordering::Relaxed);
        let next = Processor::claim_over(region, dead.claim_value()).unwrap();
        assert_eq!(region.sprd(1, word::SEQ).load(Ordering::Acquire), 2);
        assert_eq!(
            region.sprd(1, word::STATUS).load(Ordering::Relaxed),
            status::UNKNOWN
        );
        assert_eq!(
            region
                .journal(word::INFLIGHT_CLIENT)
                .load(Ordering::Relaxed),
            0
        );
        let handle = next.spawn();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(handle.stop(), Stopped::Asked);
        assert_eq!(
            region.target(target).unwrap().load(Ordering::Relaxed),
            5,
            "not repeated"
        );
        // The dead processor, were it to wake, finds its claim gone.
        assert_ne!(
            region.liveness(word::CLAIM).load(Ordering::Relaxed),
            dead.claim_value()
        );
    }

    /// Client 1 sends a CAS of the first target from 0 to 9 to a processor that claimed the
    /// region and never beats. With `taken`, a thread plays that processor taking the request
    /// (journal) and performing it, then dying. What the client's CAS returns.
    fn give_up_on_a_dead_processor(taken: bool) -> (McasError, u64) {
        use crate::mcas::{NmpClient, NmpOptions};
        let dir = tempfile::tempdir().unwrap();
        let file = RegionFile::create(&dir.path().join("region"), 2, 2).unwrap();
        let region = file.region().clone();
        let target = region.targets().start;
        let _dead = Processor::claim_over(&region, 0).unwrap();
        let options = NmpOptions {
            timeout: Duration::from_millis(200),
            spins: 1,
        };
        let client = NmpClient::new(region.clone(), 1, options).unwrap();
        let before = region.spwr(1, word::SEQ).load(Ordering::Acquire);
        let processor = taken.then(|| {
            let region = region.clone();
            std::thread::spawn(move || loop {
                let seq = region.spwr(1, word::SEQ).load(Ordering::Acquire);
                if seq & 1 == 0 && seq != before {
                    region
                        .journal(word::INFLIGHT_SEQ)
                        .store(seq, Ordering::Relaxed);
                    region
                        .journal(word::INFLIGHT_CLIENT)
                        .store(2, Ordering::Release);
                    region.target(target).unwrap().store(9, Ordering::Release);
                    return;
                }
                std::thread::yield_now();
            })
        });
        let error = client.cas(target, 0, 9).unwrap_err();
        if let Some(processor) = processor {
            processor.join().unwrap();
        }
        (
            error,
            region.target(target).unwrap().load(Ordering::Acquire),
        )
    }

    #[test]
    fn a_client_that_gives_up_on_a_taken_request_reports_its_outcome_unknown() {
        let (error, value) = give_up_on_a_dead_processor(true);
        assert_eq!(value, 9, "the dead processor performed it");
        assert!(matches!(error, McasError::OutcomeUnknown), "{error}");
    }

    #[test]
    fn a_client_that_gives_up_on_a_request_never_taken_reports_it_undone() {
        let (error, value) = give_up_on_a_dead_processor(false);
        assert_eq!(value, 0);
        assert!(matches!(error, McasError::ProcessorDead(_)), "{error}");
    }

    #[test]
    fn a_claim_over_a_stale_observation_loses() {
        let dir = tempfile::tempdir().unwrap();
        let file = RegionFile::create(&dir.path().join("region"), 1, 1).unwrap();
        let first = Processor::claim_over(file.region(), 0).unwrap();
        assert!(matches!(
            Processor::claim_over(file.region(), 0),
            Err(McasError::AlreadyServed { pid }) if pid == std::process::id()
        ));
        assert!(Processor::claim_over(file.region(), first.claim_value()).is_ok());
    }
}
