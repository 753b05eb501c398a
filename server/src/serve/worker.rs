//! Worker threads, the accept loop and connections.
//!
//! Each worker is one OS thread running a `current_thread` tokio runtime and a `LocalSet`: its
//! connections never migrate, so the worker's one [`Backend`] (one store handle, one thread
//! slot) serves them all without locks or thread-locals. Worker 0 also accepts: it admits a
//! connection under `--max-conns` and hands the socket to the next worker round-robin, as
//! memcached's listener thread does. The main thread waits for SIGTERM/SIGINT (and serves
//! `--metrics`), then tells the workers to stop and joins them; each drops its handle, which
//! publishes its counters and releases its slot.

use std::cell::RefCell;
use std::io::{self, Write as _};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{mpsc, watch};

use crate::protocol::connection::drain;
use crate::protocol::{Flow, MemcacheCodec};

use super::backend::Backend;
use super::stats::Counter;
use super::stats::Shared;
use super::{metrics, ServeError};

/// Seconds between two compaction passes of a worker while the heap holds more slab memory
/// than `--memory`: a size shift can outgrow the limit within one `--drain-interval`.
const SECONDS_OVER: u64 = 1;

/// Buckets a compaction pass walks between two turns of the worker's other tasks (a walk of
/// a whole index of millions of buckets would hold the worker's connections for seconds).
const COUNT_DRAIN_SLICE: u64 = 4096;

/// Bytes a read buffer has free before each read (memcached's read buffer is 16 KiB).
const SIZE_READ_CHUNK: usize = 16 * 1024;
/// Listen backlog (memcached's default `-b`).
const COUNT_BACKLOG: u32 = 1024;
/// memcached's answer to one connection too many.
const REPLY_TOO_MANY: &[u8] = b"ERROR Too many open connections\r\n";
/// How often a worker publishes its batched item counts.
const SECONDS_PUBLISH: u64 = 1;

/// Starts the workers, says the ready line ([`say_ready`]), waits for a signal, stops everything.
pub fn run(
    main_rt: &tokio::runtime::Runtime,
    shared: Arc<Shared>,
    listener: std::net::TcpListener,
    metrics_listener: Option<TcpListener>,
) -> Result<(), ServeError> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let threads = shared.settings.threads;
    let (senders, receivers): (Vec<_>, Vec<_>) =
        (0..threads).map(|_| mpsc::unbounded_channel()).unzip();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let mut joins = Vec::new();
    let mut listener = Some(listener);
    let mut senders = Some(senders);
    for (index, inbox) in receivers.into_iter().enumerate() {
        let job = Job {
            shared: shared.clone(),
            index,
            inbox,
            stop: stop_rx.clone(),
            accept: if index == 0 {
                listener.take().zip(senders.take())
            } else {
                None
            },
            ready: ready_tx.clone(),
        };
        let join = std::thread::Builder::new()
            .name(format!("podkv-worker-{index}"))
            .spawn(move || job.run())
            .map_err(ServeError::Start)?;
        joins.push(join);
    }
    drop(ready_tx);
    let started: Result<Vec<()>, ServeError> = ready_rx.iter().take(threads).collect();
    let started = started.and_then(|ready| {
        if ready.len() == threads {
            Ok(())
        } else {
            let why = io::Error::other("a worker stopped before it was ready");
            Err(ServeError::Start(why))
        }
    });
    // Handlers go in before the ready line, so a signal sent as soon as it appears is caught.
    let signals = {
        let _runtime = main_rt.enter();
        Signals::install()
    };
    let outcome = started.and(signals).map(|signals| {
        super::text::page_out();
        say_ready(&shared);
        main_rt.block_on(wait_for_signal(signals, shared.clone(), metrics_listener));
    });
    let _ = stop_tx.send(true);
    for join in joins {
        let _ = join.join();
    }
    if outcome.is_ok() {
        tracing::info!(pid = std::process::id(), "stopped");
    }
    outcome
}

/// The ready line, `podkv serve: listening on ADDR (heap PATH, pid N)`: `podkv serve`'s
/// command-line contract, read by the pod monitor (a member is up once its log has this line
/// with its own pid), by tests and by scripts. It is written plainly, not as a `tracing`
/// event, so that no `RUST_LOG` can hide it or change its shape.
fn say_ready(shared: &Shared) {
    let line = format!(
        "podkv serve: listening on {} (heap {}, pid {})\n",
        shared.settings.listen,
        shared.settings.heap.display(),
        std::process::id()
    );
    // One write of the whole line, so it never interleaves with a log event; a closed stderr
    // leaves nobody to tell.
    let _ = io::stderr().lock().write_all(line.as_bytes());
}

/// Binds the listening socket (SO_REUSEADDR always, SO_REUSEPORT when asked). Call it inside
/// a runtime.
pub fn bind(addr: SocketAddr, reuseport: bool) -> Result<TcpListener, ServeError> {
    let fail = |source| ServeError::Listen { addr, source };
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(fail)?;
    socket.set_reuseaddr(true).map_err(fail)?;
    if reuseport {
        socket.set_reuseport(true).map_err(fail)?;
    }
    socket.bind(addr).map_err(fail)?;
    socket.listen(COUNT_BACKLOG).map_err(fail)
}

/// The signals that stop the server.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    /// Installs the handlers (inside a runtime).
    fn install() -> Result<Signals, ServeError> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate()).map_err(ServeError::Start)?,
            int: signal(SignalKind::interrupt()).map_err(ServeError::Start)?,
        })
    }
}

/// Waits for SIGTERM or SIGINT, serving `--metrics` meanwhile.
async fn wait_for_signal(
    mut signals: Signals,
    shared: Arc<Shared>,
    metrics_listener: Option<TcpListener>,
) {
    if let Some(listener) = metrics_listener {
        tokio::spawn(metrics::serve(listener, shared));
    }
    tokio::select! {
        _ = signals.term.recv() => {}
        _ = signals.int.recv() => {}
    }
}

/// What one worker thread is given.
struct Job {
    shared: Arc<Shared>,
    index: usize,
    inbox: mpsc::UnboundedReceiver<std::net::TcpStream>,
    stop: watch::Receiver<bool>,
    /// Worker 0: the listener and every worker's inbox.
    accept: Option<(
        std::net::TcpListener,
        Vec<mpsc::UnboundedSender<std::net::TcpStream>>,
    )>,
    ready: std::sync::mpsc::Sender<Result<(), ServeError>>,
}

impl Job {
    /// The worker thread's body.
    fn run(self) {
        let rt = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                let _ = self.ready.send(Err(ServeError::Start(e)));
                return;
            }
        };
        let backend = match Backend::new(self.shared.clone(), self.index) {
            Ok(b) => Rc::new(b),
            Err(e) => {
                let _ = self.ready.send(Err(ServeError::Slot(e)));
                return;
            }
        };
        let local = tokio::task::LocalSet::new();
        let Job {
            inbox,
            mut stop,
            accept,
            ready,
            ..
        } = self;
        let worker = backend.clone();
        local.block_on(&rt, async move {
            let backend = worker;
            if let Some((listener, outboxes)) = accept {
                match TcpListener::from_std(listener) {
                    Ok(l) => {
                        tokio::task::spawn_local(accept_loop(
                            l,
                            backend.shared().clone(),
                            outboxes,
                        ));
                    }
                    Err(e) => {
                        let _ = ready.send(Err(ServeError::Start(e)));
                        return;
                    }
                }
            }
            tokio::task::spawn_local(publish_loop(backend.clone()));
            if backend.shared().settings.drain > 0 || backend.shared().store.capacity().is_some() {
                tokio::task::spawn_local(compact_loop(backend.clone()));
            }
            tokio::task::spawn_local(inbox_loop(inbox, backend.clone()));
            let _ = ready.send(Ok(()));
            let _ = stop.wait_for(|stopped| *stopped).await;
        });
        drop(local);
        drop(rt);
        if let Ok(backend) = Rc::try_unwrap(backend) {
            backend.publish();
        }
    }
}

/// Accepts connections, refuses those over `--max-conns`, hands the rest out round-robin.
async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    outboxes: Vec<mpsc::UnboundedSender<std::net::TcpStream>>,
) {
    let mut next = 0;
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // EMFILE and friends: memcached backs off and retries too.
                tracing::warn!(error = %e, "accept failed; retrying");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let Ok(stream) = stream.into_std() else {
            continue;
        };
        if !shared.admit() {
            refuse(stream);
            continue;
        }
        if outboxes[next].send(stream).is_err() {
            shared.leave();
        }
        next = (next + 1) % outboxes.len();
    }
}

/// One connection too many: memcached's error line, then close.
fn refuse(mut stream: std::net::TcpStream) {
    // A fresh socket's send buffer always takes 33 bytes; a failure only means the client left.
    let _ = stream.write_all(REPLY_TOO_MANY);
    let _ = stream.shutdown(std::net::Shutdown::Write);
}

/// Takes sockets handed to this worker and serves each on its own local task.
async fn inbox_loop(mut inbox: mpsc::UnboundedReceiver<std::net::TcpStream>, backend: Rc<Backend>) {
    let buffers = Rc::new(Buffers::default());
    while let Some(stream) = inbox.recv().await {
        let backend = backend.clone();
        let buffers = buffers.clone();
        tokio::task::spawn_local(async move {
            if let Ok(stream) = TcpStream::from_std(stream) {
                let _ = stream.set_nodelay(true);
                if let Err(e) = connection(&backend, &buffers, stream).await {
                    log_connection_error(&e);
                }
            }
            backend.shared().leave();
        });
    }
}

/// Publishes the worker's batched item counts every second, so `stats` lags by at most that.
async fn publish_loop(backend: Rc<Backend>) {
    let mut tick = tokio::time::interval(Duration::from_secs(SECONDS_PUBLISH));
    loop {
        tick.tick().await;
        backend.publish();
    }
}

/// Compacts every `--drain-interval` (`--drain`), and every [`SECONDS_OVER`] while the
/// heap holds more slab memory than `--memory`: the worker gives up its sparse slabs (only
/// the slot that owns a slab can) and moves their items into its own slabs of their classes,
/// which it fills anyway (a mover of its own would hold a partly filled slab of every
/// class); over the limit it also gives up its sparsest slabs and evicts their items, as
/// memcached's slab mover evicts the items of a page it takes. The pass walks the index in
/// slices of [`COUNT_DRAIN_SLICE`] buckets, answering the worker's connections between them.
async fn compact_loop(backend: Rc<Backend>) {
    let settings = &backend.shared().settings;
    let (percent, every) = (settings.drain, Duration::from_secs(settings.drain_interval));
    let mut wait = every;
    loop {
        tokio::time::sleep(wait).await;
        let mut pass = backend.compact_begin(percent);
        while !backend.compact_slice(&mut pass, COUNT_DRAIN_SLICE) {
            tokio::task::yield_now().await;
        }
        trim_malloc();
        wait = if backend.share_over() > 0 {
            every.min(Duration::from_secs(SECONDS_OVER))
        } else {
            every
        };
    }
}

/// Gives the free pages of the process's own malloc heaps back to the OS, as compaction gives
/// back the store's: connection buffers and request parsing leave freed memory in glibc's
/// per-thread arenas, which glibc returns only from the top of each heap by itself.
fn trim_malloc() {
    #[cfg(target_env = "gnu")]
    // SAFETY: `malloc_trim` only releases free memory of glibc's heaps; any thread may call it.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Resets and broken pipes are how clients leave; anything else is worth a line.
fn log_connection_error(e: &io::Error) {
    use io::ErrorKind::*;
    if !matches!(e.kind(), ConnectionReset | BrokenPipe | UnexpectedEof) {
        tracing::warn!(error = %e, "connection failed");
    }
}

/// Buffers a worker lends its connections for one read and its replies: a connection holds
/// a read buffer only while part of a request waits in it, and a reply buffer only while its
/// replies are written. The free ones are reused last-in first-out, so the few in use stay in
/// the cache however many connections are open (as memcached's per-thread read buffers), and
/// an idle connection holds no buffer.
#[derive(Default)]
pub struct Buffers {
    /// Buffers not lent out. Only this worker's thread uses it (the worker is `!Send`).
    free: RefCell<Vec<BytesMut>>,
}

impl Buffers {
    /// A cleared buffer with room for one read.
    fn take(&self) -> BytesMut {
        self.free
            .borrow_mut()
            .pop()
            .unwrap_or_else(|| BytesMut::with_capacity(SIZE_READ_CHUNK))
    }

    /// Takes `buffer` back, unless it grew for a large value (then it is freed).
    fn give(&self, mut buffer: BytesMut) {
        buffer.clear();
        let mut free = self.free.borrow_mut();
        if buffer.capacity() <= SIZE_BUFFER_KEPT && free.len() < COUNT_BUFFERS_KEPT {
            free.push(buffer);
        }
    }
}

/// The largest buffer a worker keeps for reuse.
const SIZE_BUFFER_KEPT: usize = 4 * SIZE_READ_CHUNK;
/// How many free buffers a worker keeps at most.
const COUNT_BUFFERS_KEPT: usize = 64;

/// Serves one connection: wait until readable → read → decode every complete frame →
/// dispatch each → one write. Closes after `--idle-timeout` seconds without a request byte,
/// as memcached does.
async fn connection(backend: &Backend, buffers: &Buffers, mut stream: TcpStream) -> io::Result<()> {
    let shared = backend.shared();
    let mut codec = MemcacheCodec::new(shared.settings.limits);
    // The partial request waiting for the rest of its bytes, if any.
    let mut pending: Option<BytesMut> = None;
    let idle = (shared.settings.idle_timeout > 0)
        .then(|| Duration::from_secs(shared.settings.idle_timeout));
    loop {
        // `poll_read_ready`, not `readable()`: the latter queues a waiter under a lock on
        // every call, a few hundred instructions per request.
        let readable = std::future::poll_fn(|cx| stream.poll_read_ready(cx));
        match idle {
            None => readable.await?,
            Some(limit) => match tokio::time::timeout(limit, readable).await {
                Ok(ready) => ready?,
                Err(_) => {
                    shared
                        .idle_kicks
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    return Ok(());
                }
            },
        }
        let mut input = pending.take().unwrap_or_else(|| buffers.take());
        input.reserve(SIZE_READ_CHUNK);
        // Readable now, so this reads at once (only a spurious wake-up waits, holding the
        // buffer). Not `try_read_buf`: tokio's read also notes that a short read emptied the
        // socket, which saves a `recv` answered EAGAIN per request.
        let read = stream.read_buf(&mut input).await?;
        backend.counters().add(Counter::BytesRead, read as u64);
        let eof = read == 0;
        let mut output = buffers.take();
        let flow = drain(backend, &mut codec, &mut input, &mut output, eof);
        keep_or_give(buffers, &mut pending, input);
        let flow = flow?;
        if !output.is_empty() {
            write_all(&stream, &output).await?;
            backend
                .counters()
                .add(Counter::BytesWritten, output.len() as u64);
        }
        buffers.give(output);
        if eof || flow == Flow::Close {
            return stream.shutdown().await;
        }
    }
}

/// Keeps a read buffer holding part of a request for the next read; gives an empty one back.
fn keep_or_give(buffers: &Buffers, pending: &mut Option<BytesMut>, input: BytesMut) {
    if input.is_empty() {
        buffers.give(input);
    } else {
        *pending = Some(input);
    }
}

/// Writes all of `bytes`, straight away while the socket takes them (one `send` for the
/// usual reply), waiting for room only when it does not.
async fn write_all(stream: &TcpStream, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        match stream.try_write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(written) => bytes = &bytes[written..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => stream.writable().await?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
