//! Worker threads, the accept loop and connections.
//!
//! Each worker is one OS thread running a `current_thread` tokio runtime and a `LocalSet`: its
//! connections never migrate, so the worker's one [`Backend`] (one store handle, one thread
//! slot) serves them all without locks or thread-locals. Worker 0 also accepts: it admits a
//! connection under `--max-conns` and hands the socket to the next worker round-robin, as
//! memcached's listener thread does. The main thread waits for SIGTERM/SIGINT (and serves
//! `--metrics`), then tells the workers to stop and joins them; each drops its handle, which
//! publishes its counters and releases its slot.

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
use super::io::{keep_or_give, log_connection_error, trim_malloc, Buffers, Io};
use super::io::{COUNT_DRAIN_SLICE, SECONDS_OVER, SECONDS_PUBLISH, SIZE_READ_CHUNK};
use super::stats::Counter;
use super::stats::Shared;
use super::uring::{self, Doorbell, Message};
use super::{metrics, ServeError};

/// Listen backlog (memcached's default `-b`).
const COUNT_BACKLOG: u32 = 1024;
/// memcached's answer to one connection too many.
const REPLY_TOO_MANY: &[u8] = b"ERROR Too many open connections\r\n";
/// Starts the workers, says the ready line ([`say_ready`]), waits for a signal, stops everything.
pub fn run(
    main_rt: &tokio::runtime::Runtime,
    shared: Arc<Shared>,
    listener: std::net::TcpListener,
    metrics_listener: Option<TcpListener>,
) -> Result<(), ServeError> {
    let threads = shared.settings.threads;
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let workers = match shared.settings.io {
        Io::Epoll => start_epoll(&shared, listener, ready_tx)?,
        Io::Uring => start_uring(main_rt, &shared, listener, ready_tx)?,
    };
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
    workers.stop();
    if outcome.is_ok() {
        tracing::info!(pid = std::process::id(), "stopped");
    }
    outcome
}

/// Running workers: their threads and how to tell them to stop.
struct Workers {
    joins: Vec<std::thread::JoinHandle<()>>,
    stop: Stop,
}

/// How to tell the workers to stop.
enum Stop {
    /// Epoll workers watch a flag.
    Watch(watch::Sender<bool>),
    /// io_uring workers hear it at their doorbells.
    Bells(Vec<Doorbell>),
}

impl Workers {
    /// Tells every worker to stop, then waits for them.
    fn stop(self) {
        match self.stop {
            Stop::Watch(tx) => {
                let _ = tx.send(true);
            }
            Stop::Bells(bells) => {
                for bell in bells {
                    bell.send(Message::Stop);
                }
            }
        }
        for join in self.joins {
            let _ = join.join();
        }
    }
}

/// Where the accept loop hands a worker its connections.
#[derive(Clone)]
enum Outbox {
    /// An epoll worker's inbox task.
    Task(mpsc::UnboundedSender<std::net::TcpStream>),
    /// An io_uring worker's doorbell.
    Ring(Doorbell),
}

impl Outbox {
    /// Hands `stream` over; false if the worker is gone.
    fn hand(&self, stream: std::net::TcpStream) -> bool {
        match self {
            Outbox::Task(tx) => tx.send(stream).is_ok(),
            Outbox::Ring(bell) => bell.send(Message::Conn(stream)),
        }
    }
}

/// Starts the epoll workers (one tokio runtime each); worker 0 also accepts.
fn start_epoll(
    shared: &Arc<Shared>,
    listener: std::net::TcpListener,
    ready: std::sync::mpsc::Sender<Result<(), ServeError>>,
) -> Result<Workers, ServeError> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..shared.settings.threads)
        .map(|_| mpsc::unbounded_channel())
        .unzip();
    let mut joins = Vec::new();
    let mut listener = Some(listener);
    let mut outboxes = Some(senders.into_iter().map(Outbox::Task).collect());
    for (index, inbox) in receivers.into_iter().enumerate() {
        let job = Job {
            shared: shared.clone(),
            index,
            inbox,
            stop: stop_rx.clone(),
            accept: if index == 0 {
                listener.take().zip(outboxes.take())
            } else {
                None
            },
            ready: ready.clone(),
        };
        joins.push(spawn_worker(index, move || job.run())?);
    }
    Ok(Workers {
        joins,
        stop: Stop::Watch(stop_tx),
    })
}

/// Starts worker `index`'s thread, named for `top` and the like.
fn spawn_worker(
    index: usize,
    body: impl FnOnce() + Send + 'static,
) -> Result<std::thread::JoinHandle<()>, ServeError> {
    std::thread::Builder::new()
        .name(format!("podkv-worker-{index}"))
        .spawn(body)
        .map_err(ServeError::Start)
}

/// Starts the io_uring workers; the main thread's runtime accepts for them.
fn start_uring(
    main_rt: &tokio::runtime::Runtime,
    shared: &Arc<Shared>,
    listener: std::net::TcpListener,
    ready: std::sync::mpsc::Sender<Result<(), ServeError>>,
) -> Result<Workers, ServeError> {
    let mut bells = Vec::new();
    let mut joins = Vec::new();
    for index in 0..shared.settings.threads {
        let (bell, inbox) = Doorbell::new().map_err(ServeError::Start)?;
        let job = uring::RingJob {
            shared: shared.clone(),
            index,
            inbox,
            bell: bell.fd(),
            ready: ready.clone(),
        };
        joins.push(spawn_worker(index, move || job.run())?);
        bells.push(bell);
    }
    let outboxes = bells.iter().cloned().map(Outbox::Ring).collect();
    let listener = {
        let _runtime = main_rt.enter();
        TcpListener::from_std(listener).map_err(ServeError::Start)?
    };
    main_rt.spawn(accept_loop(listener, shared.clone(), outboxes));
    Ok(Workers {
        joins,
        stop: Stop::Bells(bells),
    })
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
    accept: Option<(std::net::TcpListener, Vec<Outbox>)>,
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
async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, outboxes: Vec<Outbox>) {
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
        if !outboxes[next].hand(stream) {
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
        let flow = loop {
            let flow = drain(backend, &mut codec, &mut input, &mut output, eof);
            if !matches!(flow, Ok(Flow::Full)) {
                break flow;
            }
            // The replies so far reached drain's bound: out with them, then the rest.
            write_all(&stream, &output).await?;
            let written = output.len() as u64;
            backend.counters().add(Counter::BytesWritten, written);
            output.clear();
        };
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
