//! The io_uring worker (`--io uring`, the default where the kernel allows it).
//!
//! One ring per worker thread. Each connection has one multishot `recv` in the ring, which
//! posts a completion whenever bytes arrive, and at most one `send` of replies (all of them:
//! `MSG_WAITALL`); requests read meanwhile (a pipelining client) wait for it unanswered, so
//! replies keep their order and the worker holds one batch of them at a time, as the epoll
//! worker does. The worker enters the kernel once per turn of its loop, submitting
//! every reply of the turn and reaping what completed, where the epoll worker makes a `recv`
//! and a `send` system call per request and an `epoll_wait` besides (memcached too); the
//! kernel's TCP work is the same.
//!
//! A `recv` names no buffer: the kernel picks one from the worker's provided-buffer ring when
//! bytes arrive (`bufring`), and the worker copies them out into a buffer of the
//! connection's and gives the ring buffer back at once, so an idle connection holds no
//! buffer, as in the epoll worker.
//!
//! New connections come from the accept loop through the worker's [`Doorbell`] (a channel
//! and an eventfd the ring reads). The worker's other tasks — publishing its counts every
//! second, compaction passes, the idle timeout — run between two waits, which time out at the
//! next one due.

mod bufring;
mod doorbell;

use std::io;
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use io_uring::{cqueue, opcode, squeue, types, IoUring};

use bufring::{BufRing, BUFFER_GROUP};
pub use doorbell::{Doorbell, Message};

use super::backend::Backend;
use super::io::{keep_or_give, log_connection_error, trim_malloc, Buffers};
use super::io::{COUNT_DRAIN_SLICE, SECONDS_OVER, SECONDS_PUBLISH};
use super::stats::{Counter, Shared};
use super::ServeError;
use crate::protocol::connection::drain;
use crate::protocol::{Flow, MemcacheCodec};

/// Submission queue entries (the completion queue has twice as many; the kernel keeps
/// completions beyond it rather than drop them, `IORING_FEAT_NODROP`).
const COUNT_ENTRIES: u32 = 1024;
/// Unanswered input, waiting for a `send`, beyond which a connection's reads pause (see
/// `Worker::answer`).
const SIZE_PENDING_MAX: usize = 256 * 1024;
/// What a completion completes (the low byte of its user data; the rest is the connection).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Recv = 1,
    Send = 2,
    Bell = 3,
    Cancel = 4,
}

fn user_data(conn: u32, op: Op) -> u64 {
    u64::from(conn) << 8 | op as u64
}

fn decode(data: u64) -> (u32, Option<Op>) {
    let op = match data & 0xff {
        1 => Some(Op::Recv),
        2 => Some(Op::Send),
        3 => Some(Op::Bell),
        4 => Some(Op::Cancel),
        _ => None,
    };
    ((data >> 8) as u32, op)
}

/// Whether this kernel lets this process run the io_uring worker: a ring with the setup the
/// worker uses and a provided-buffer ring. `Err` says why not (io_uring disabled by
/// `kernel.io_uring_disabled` or a seccomp filter, or a kernel older than 5.19).
pub fn probe() -> io::Result<()> {
    let ring = new_ring()?;
    BufRing::new(&ring).map(drop)
}

/// A ring whose completions run only when this thread waits for them (`DEFER_TASKRUN`, one
/// issuer); plain on kernels before 6.1.
fn new_ring() -> io::Result<IoUring> {
    IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(COUNT_ENTRIES)
        .or_else(|_| IoUring::builder().setup_coop_taskrun().build(COUNT_ENTRIES))
        .or_else(|_| IoUring::new(COUNT_ENTRIES))
}

/// One connection of the worker.
struct Conn {
    stream: TcpStream,
    codec: MemcacheCodec,
    /// Input not answered yet: a partial request, or requests that wait for a `send`.
    pending: Option<BytesMut>,
    /// Replies in a `send` now (kept alive for the kernel until its completion).
    sending: Option<BytesMut>,
    /// The end of its stream was read (its last requests are still answered).
    eof: bool,
    /// Whether its multishot `recv` is in the ring.
    receiving: bool,
    /// Its `recv` is canceled, or being canceled, until its replies are out.
    paused: bool,
    /// Operations of this connection in the ring.
    in_ring: u8,
    /// Close once nothing of it is in the ring.
    closing: bool,
    /// When its last request bytes came (`--idle-timeout`).
    last: Instant,
}

/// What one io_uring worker thread is given.
pub struct RingJob {
    /// The server.
    pub shared: Arc<Shared>,
    /// The worker's index (its counters).
    pub index: usize,
    /// New connections and the stop.
    pub inbox: mpsc::Receiver<Message>,
    /// The doorbell's eventfd, which the ring reads.
    pub bell: Arc<OwnedFd>,
    /// Told once the worker is ready, or why it could not start.
    pub ready: mpsc::Sender<Result<(), ServeError>>,
}

impl RingJob {
    /// The worker thread's body.
    pub fn run(self) {
        let started = new_ring().and_then(|ring| Ok((BufRing::new(&ring)?, ring)));
        let (bufs, ring) = match started {
            Ok(parts) => parts,
            Err(e) => {
                let _ = self.ready.send(Err(ServeError::Start(e)));
                return;
            }
        };
        let backend = match Backend::new(self.shared.clone(), self.index) {
            Ok(b) => b,
            Err(e) => {
                let _ = self.ready.send(Err(ServeError::Slot(e)));
                return;
            }
        };
        let mut worker = Worker {
            ring,
            bufs,
            backend,
            conns: Vec::new(),
            free: Vec::new(),
            buffers: Buffers::default(),
            reaped: Vec::new(),
            starved: Vec::new(),
            inbox: self.inbox,
            bell: self.bell,
            bell_word: Box::new([0; 8]),
            in_ring: 0,
            stopping: false,
            now: Instant::now(),
        };
        let _ = self.ready.send(Ok(()));
        if let Err(e) = worker.serve() {
            tracing::error!(error = %e, "worker's ring failed; its connections are closed");
        }
        worker.close_all();
        worker.backend.publish();
    }
}

/// An io_uring worker's state (see the module doc).
struct Worker {
    ring: IoUring,
    bufs: BufRing,
    backend: Backend,
    /// Connections by slot (the high bits of the user data).
    conns: Vec<Option<Conn>>,
    /// Free slots of `conns`.
    free: Vec<u32>,
    buffers: Buffers,
    /// The completions of one wait.
    reaped: Vec<cqueue::Entry>,
    /// Connections whose `recv` found no ring buffer, posted again after the batch.
    starved: Vec<u32>,
    inbox: mpsc::Receiver<Message>,
    bell: Arc<OwnedFd>,
    /// Where the ring reads the eventfd's count (boxed: the kernel writes it later).
    bell_word: Box<[u8; 8]>,
    /// Operations in the ring, all connections' and the doorbell's.
    in_ring: usize,
    stopping: bool,
    /// When the last wait returned: the time of every completion of the turn.
    now: Instant,
}

impl Worker {
    /// The loop: wait, handle the completions, run the timed tasks, until stopped and every
    /// operation is out of the ring.
    fn serve(&mut self) -> io::Result<()> {
        let settings = self.backend.shared().settings.clone();
        let compacts = settings.drain > 0 || self.backend.shared().store.capacity().is_some();
        let every = Duration::from_secs(settings.drain_interval);
        let idle = (settings.idle_timeout > 0).then(|| Duration::from_secs(settings.idle_timeout));
        let second = Duration::from_secs(SECONDS_PUBLISH);
        let now = Instant::now();
        let mut next_publish = now + second;
        let mut next_compact = compacts.then(|| now + every);
        let mut next_idle = idle.map(|_| now + second);
        let mut pass = None;
        self.post_bell()?;
        while !(self.stopping && self.in_ring == 0) {
            let now = Instant::now();
            let due = [Some(next_publish), next_compact, next_idle]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(next_publish);
            // A compaction pass under way runs a slice per turn, so the turn does not sleep.
            let wait = if pass.is_some() {
                Duration::ZERO
            } else {
                due.saturating_duration_since(now)
            };
            self.wait(wait)?;
            self.now = Instant::now();
            self.handle_completions()?;
            let now = self.now;
            if now >= next_publish {
                self.backend.publish();
                next_publish = now + second;
            }
            if let (Some(limit), Some(at)) = (idle, next_idle) {
                if now >= at {
                    self.kick_idle(now, limit);
                    next_idle = Some(now + second);
                }
            }
            if pass.is_none() && next_compact.is_some_and(|at| now >= at) {
                pass = Some(self.backend.compact_begin(settings.drain));
            }
            if let Some(p) = pass.as_mut() {
                if self.backend.compact_slice(p, COUNT_DRAIN_SLICE) {
                    pass = None;
                    trim_malloc();
                    let again = if self.backend.share_over() > 0 {
                        every.min(Duration::from_secs(SECONDS_OVER))
                    } else {
                        every
                    };
                    next_compact = Some(Instant::now() + again);
                }
            }
        }
        Ok(())
    }

    /// Submits what is queued and waits up to `wait` for at least one completion. A zero
    /// `wait` (a compaction pass under way) returns at once, but still asks for completions:
    /// those deferred to this thread run only in a wait that does, and a plain submit would
    /// leave the connections' until the pass ended.
    fn wait(&mut self, wait: Duration) -> io::Result<()> {
        let ts = types::Timespec::from(wait);
        let args = types::SubmitArgs::new().timespec(&ts);
        let result = self.ring.submitter().submit_with_args(1, &args);
        match result {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR)) => Ok(()),
            // The completion queue is full: reaping makes room.
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Handles every completion there is.
    fn handle_completions(&mut self) -> io::Result<()> {
        let mut reaped = std::mem::take(&mut self.reaped);
        reaped.extend(self.ring.completion());
        for cqe in reaped.drain(..) {
            let (conn, op) = decode(cqe.user_data());
            self.in_ring -= 1;
            match op {
                Some(Op::Recv) => self.received(conn, cqe.result(), cqe.flags())?,
                Some(Op::Send) => self.sent(conn, cqe.result())?,
                Some(Op::Bell) => self.rung()?,
                Some(Op::Cancel) | None => {}
            }
        }
        self.reaped = reaped;
        self.bufs.publish();
        for conn in std::mem::take(&mut self.starved) {
            self.post_recv(conn)?;
        }
        Ok(())
    }

    /// A `recv` of connection `slot` completed with `result` (bytes, or `-errno`).
    fn received(&mut self, slot: u32, result: i32, flags: u32) -> io::Result<()> {
        let Some(conn) = self.conns[slot as usize].as_mut() else {
            return Ok(());
        };
        if !cqueue::more(flags) {
            // The multishot `recv` ended (end of stream, an error, or no ring buffer).
            conn.in_ring -= 1;
            conn.receiving = false;
        } else {
            self.in_ring += 1;
        }
        let retry = [libc::ENOBUFS, libc::EAGAIN, libc::EINTR, libc::ECANCELED];
        let waits_for_replies = conn.paused && conn.sending.is_some();
        if retry.contains(&-result) {
            if conn.closing {
                self.close_if_done(slot);
            } else if !conn.receiving && !waits_for_replies {
                // Out of ring buffers, or paused and the replies are out meanwhile: again
                // once this batch gave its buffers back.
                conn.paused = false;
                self.starved.push(slot);
            }
            return Ok(());
        }
        if result < 0 {
            // The client reset, or the worker shut the connection down.
            log_connection_error(&io::Error::from_raw_os_error(-result));
            conn.closing = true;
            self.close_if_done(slot);
            return Ok(());
        }
        if result == 0 {
            conn.eof = true;
        } else if let Some(id) = cqueue::buffer_select(flags) {
            let input = conn.pending.get_or_insert_with(|| self.buffers.take());
            input.extend_from_slice(self.bufs.bytes(id, result as usize));
            self.bufs.push(id);
        }
        self.backend
            .counters()
            .add(Counter::BytesRead, result as u64);
        conn.last = self.now;
        self.answer(slot)
    }

    /// Answers the requests connection `slot` has read, unless its last replies are still
    /// being sent: then the input waits (its reads pause past [`SIZE_PENDING_MAX`], so a
    /// client that sends and never reads fills its socket buffers, not this process), and
    /// the send's completion answers it. Replies so go out in request order, and a read's
    /// worth of requests makes replies a batch at a time (`drain`'s bound).
    fn answer(&mut self, slot: u32) -> io::Result<()> {
        let Some(conn) = self.conns[slot as usize].as_mut() else {
            return Ok(());
        };
        if conn.closing {
            self.close_if_done(slot);
            return Ok(());
        }
        if conn.sending.is_some() {
            let waiting = conn.pending.as_ref().map_or(0, |p| p.len());
            if waiting > SIZE_PENDING_MAX && conn.receiving && !conn.paused {
                conn.paused = true;
                let cancel = opcode::AsyncCancel::new(user_data(slot, Op::Recv))
                    .build()
                    .user_data(user_data(slot, Op::Cancel));
                return self.push(cancel);
            }
            return Ok(());
        }
        let eof = conn.eof;
        let mut output = self.buffers.take();
        let flow = match conn.pending.take() {
            Some(mut input) => {
                let flow = drain(&self.backend, &mut conn.codec, &mut input, &mut output, eof);
                keep_or_give(&self.buffers, &mut conn.pending, input);
                flow
            }
            None => Ok(Flow::Continue),
        };
        let close = match flow {
            Ok(Flow::Full) => false,
            Ok(flow) => eof || flow == Flow::Close,
            Err(e) => {
                log_connection_error(&e);
                true
            }
        };
        if close {
            conn.closing = true;
            // Ends the multishot `recv`; the replies still go out.
            let _ = conn.stream.shutdown(Shutdown::Read);
        }
        if output.is_empty() {
            self.buffers.give(output);
        } else {
            self.post_send(slot, output)?;
        }
        self.close_if_done(slot);
        Ok(())
    }

    /// The `send` of connection `slot` completed with `result`.
    fn sent(&mut self, slot: u32, result: i32) -> io::Result<()> {
        let Some(conn) = self.conns[slot as usize].as_mut() else {
            return Ok(());
        };
        conn.in_ring -= 1;
        if let Some(output) = conn.sending.take() {
            self.buffers.give(output);
        }
        if result < 0 {
            log_connection_error(&io::Error::from_raw_os_error(-result));
            conn.closing = true;
            let _ = conn.stream.shutdown(Shutdown::Both);
            self.close_if_done(slot);
            return Ok(());
        }
        self.backend
            .counters()
            .add(Counter::BytesWritten, result as u64);
        self.answer(slot)?;
        let Some(conn) = self.conns[slot as usize].as_mut() else {
            return Ok(());
        };
        if conn.paused && !conn.receiving && !conn.closing && conn.sending.is_none() {
            // Every reply is out and the input is answered as far as it goes: read again.
            conn.paused = false;
            return self.post_recv(slot);
        }
        Ok(())
    }

    /// The doorbell rang: takes the new connections (and the stop), reads the bell again.
    fn rung(&mut self) -> io::Result<()> {
        while let Ok(message) = self.inbox.try_recv() {
            match message {
                Message::Conn(stream) => self.open(stream)?,
                Message::Stop => self.stop(),
            }
        }
        if !self.stopping {
            self.post_bell()?;
        }
        Ok(())
    }

    /// Serves `stream`: its first `recv`.
    fn open(&mut self, stream: std::net::TcpStream) -> io::Result<()> {
        if self.stopping {
            self.backend.shared().leave();
            return Ok(());
        }
        let _ = stream.set_nodelay(true);
        // Blocking: the ring tries each operation without waiting and arms a poll itself.
        let _ = stream.set_nonblocking(false);
        let conn = Conn {
            stream,
            codec: MemcacheCodec::new(self.backend.shared().settings.limits),
            pending: None,
            sending: None,
            eof: false,
            receiving: false,
            paused: false,
            in_ring: 0,
            closing: false,
            last: self.now,
        };
        let slot = match self.free.pop() {
            Some(slot) => {
                self.conns[slot as usize] = Some(conn);
                slot
            }
            None => {
                self.conns.push(Some(conn));
                (self.conns.len() - 1) as u32
            }
        };
        self.post_recv(slot)
    }

    /// Stop: every connection is shut down, which ends its operations in the ring. (The
    /// doorbell's read, which brought the stop, is not posted again.)
    fn stop(&mut self) {
        self.stopping = true;
        for conn in self.conns.iter_mut().flatten() {
            conn.closing = true;
            let _ = conn.stream.shutdown(Shutdown::Both);
        }
    }

    /// Closes the connections idle longer than `limit` (their `recv` ends, then they close).
    fn kick_idle(&mut self, now: Instant, limit: Duration) {
        for conn in self.conns.iter_mut().flatten() {
            if !conn.closing && now.duration_since(conn.last) >= limit {
                conn.closing = true;
                let _ = conn.stream.shutdown(Shutdown::Both);
                self.backend
                    .shared()
                    .idle_kicks
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    /// Closes connection `slot` if it is closing and nothing of it is in the ring.
    fn close_if_done(&mut self, slot: u32) {
        let entry = &mut self.conns[slot as usize];
        if entry
            .as_ref()
            .is_some_and(|conn| conn.closing && conn.in_ring == 0)
        {
            let conn = entry.take().expect("checked above");
            let _ = conn.stream.shutdown(Shutdown::Write);
            if let Some(pending) = conn.pending {
                self.buffers.give(pending);
            }
            self.free.push(slot);
            self.backend.shared().leave();
        }
    }

    /// The connections left when the loop ends (a failed ring): closed.
    fn close_all(&mut self) {
        for conn in self.conns.drain(..).flatten() {
            let _ = conn.stream.shutdown(Shutdown::Both);
            self.backend.shared().leave();
        }
    }

    /// Posts a multishot `recv` for connection `slot`: each time bytes arrive, the kernel
    /// puts them in a ring buffer it picks and posts a completion, until the stream ends.
    fn post_recv(&mut self, slot: u32) -> io::Result<()> {
        let Some(conn) = self.conns[slot as usize].as_mut() else {
            return Ok(());
        };
        let recv = opcode::RecvMulti::new(types::Fd(conn.stream.as_raw_fd()), BUFFER_GROUP)
            .build()
            .user_data(user_data(slot, Op::Recv));
        conn.in_ring += 1;
        conn.receiving = true;
        self.push(recv)
    }

    /// Posts a `send` of `output` for connection `slot` (all of it: `MSG_WAITALL`).
    fn post_send(&mut self, slot: u32, output: BytesMut) -> io::Result<()> {
        let conn = self.conns[slot as usize]
            .as_mut()
            .expect("a live connection");
        let fd = types::Fd(conn.stream.as_raw_fd());
        let send = opcode::Send::new(fd, output.as_ptr(), output.len() as u32)
            .flags(libc::MSG_WAITALL | libc::MSG_NOSIGNAL)
            .build()
            .user_data(user_data(slot, Op::Send));
        conn.sending = Some(output);
        conn.in_ring += 1;
        self.push(send)
    }

    /// Posts a read of the doorbell's eventfd.
    fn post_bell(&mut self) -> io::Result<()> {
        let read = opcode::Read::new(
            types::Fd(self.bell.as_raw_fd()),
            self.bell_word.as_mut_ptr(),
            8,
        )
        .build()
        .user_data(user_data(0, Op::Bell));
        self.push(read)
    }

    /// Queues `entry`, submitting first if the queue is full.
    fn push(&mut self, entry: squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: every buffer an entry names lives until its completion: ring buffers
            // in `bufs`, replies in their connection's `sending`, the bell word in `self`;
            // and the worker waits for every completion before it drops them (or leaks
            // them, `Drop`).
            if unsafe { self.ring.submission().push(&entry) }.is_ok() {
                self.in_ring += 1;
                return Ok(());
            }
            self.ring.submit()?;
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Nothing is in the ring once `serve` returned normally. After a failure, what
        // remains is canceled when the ring closes, in the kernel's own time: the memory it
        // may still write (ring buffers, the bell word) is leaked rather than freed.
        let _ = self.ring.submitter().unregister_buf_ring(BUFFER_GROUP);
        if self.in_ring > 0 {
            std::mem::forget(std::mem::replace(&mut self.bell_word, Box::new([0; 8])));
            self.bufs.leak_memory();
        }
    }
}
