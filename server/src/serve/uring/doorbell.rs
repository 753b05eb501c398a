//! How the accept loop and the main thread reach an io_uring worker ([`Doorbell`]).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::mpsc;
use std::sync::Arc;

/// What the accept loop and the main thread tell a worker.
pub enum Message {
    /// A connection admitted for this worker.
    Conn(std::net::TcpStream),
    /// Close every connection and stop.
    Stop,
}

/// How the accept loop and the main thread reach an io_uring worker: a message, then a
/// ring of its eventfd, which the worker's ring reads.
#[derive(Clone)]
pub struct Doorbell {
    tx: mpsc::Sender<Message>,
    fd: Arc<OwnedFd>,
}

impl Doorbell {
    /// A doorbell and the worker's end of it.
    pub fn new() -> io::Result<(Doorbell, mpsc::Receiver<Message>)> {
        // SAFETY: eventfd takes no pointers; a non-negative result is a new descriptor.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by eventfd and is owned by nobody else.
        let fd = Arc::new(unsafe { OwnedFd::from_raw_fd(fd) });
        let (tx, rx) = mpsc::channel();
        Ok((Doorbell { tx, fd }, rx))
    }

    /// Sends `message`; false if the worker is gone.
    pub fn send(&self, message: Message) -> bool {
        if self.tx.send(message).is_err() {
            return false;
        }
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live local to an eventfd this doorbell owns.
        unsafe { libc::write(self.fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
        true
    }

    /// The eventfd a worker's ring reads.
    pub fn fd(&self) -> Arc<OwnedFd> {
        self.fd.clone()
    }
}
