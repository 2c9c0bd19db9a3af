//! A non-blocking fd that parks the calling fiber, not the thread, when it would block.

use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::reactor::{poll_blocking, Interest};
use crate::runtime::scheduler::{self, Woken};

/// An fd in non-blocking mode with the reactor registration and the timeouts of
/// the socket that owns it.
///
/// An operation is tried first and waited for only on `WouldBlock` (readiness is
/// edge-triggered, so nothing is lost). Inside a task the wait parks the fiber on
/// the running thread's reactor, registering the fd there the first time; outside
/// a runtime it blocks the thread in `poll(2)`, as std's blocking sockets do.
#[derive(Debug)]
pub(crate) struct NonBlocking<T: AsFd> {
    /// Declared before `inner`, so it is dropped (deregistered) before the fd closes.
    registration: Registration,
    inner: T,
    /// Read and write timeouts in nanoseconds (0: none).
    read_timeout: AtomicU64,
    write_timeout: AtomicU64,
}

impl<T: AsFd> NonBlocking<T> {
    /// Wraps `inner`, which the caller has put in non-blocking mode.
    pub(crate) fn new(inner: T) -> NonBlocking<T> {
        NonBlocking {
            registration: Registration { fd: inner.as_fd().as_raw_fd(), reactor: AtomicU64::new(0) },
            inner,
            read_timeout: AtomicU64::new(0),
            write_timeout: AtomicU64::new(0),
        }
    }

    pub(crate) fn get_ref(&self) -> &T {
        &self.inner
    }

    /// Deregisters and gives the fd back (still non-blocking).
    pub(crate) fn into_inner(self) -> T {
        let NonBlocking { mut registration, inner, .. } = self;
        registration.end(true);
        inner
    }

    /// Runs `op` until it does not return `WouldBlock`, waiting for readability in between.
    pub(crate) fn read_with<R>(&self, op: impl FnMut(&T) -> io::Result<R>) -> io::Result<R> {
        self.io_with(Interest::READABLE, load(&self.read_timeout), op)
    }

    /// Runs `op` until it does not return `WouldBlock`, waiting for writability in between.
    pub(crate) fn write_with<R>(&self, op: impl FnMut(&T) -> io::Result<R>) -> io::Result<R> {
        self.io_with(Interest::WRITABLE, load(&self.write_timeout), op)
    }

    /// Waits once until the fd is writable (a non-blocking connect completing), until `deadline`.
    pub(crate) fn wait_writable(&self, deadline: Option<Instant>) -> io::Result<()> {
        self.wait(Interest::WRITABLE, deadline)
    }

    pub(crate) fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        store(&self.read_timeout, timeout)
    }

    pub(crate) fn read_timeout(&self) -> Option<Duration> {
        load(&self.read_timeout)
    }

    pub(crate) fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        store(&self.write_timeout, timeout)
    }

    pub(crate) fn write_timeout(&self) -> Option<Duration> {
        load(&self.write_timeout)
    }

    fn io_with<R>(
        &self,
        interest: Interest,
        timeout: Option<Duration>,
        mut op: impl FnMut(&T) -> io::Result<R>,
    ) -> io::Result<R> {
        // The clock is read only once the operation would block.
        let mut deadline = None;
        loop {
            match op(&self.inner) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let deadline = *deadline.get_or_insert_with(|| timeout.map(|t| Instant::now() + t));
                    self.wait(interest, deadline)?;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                result => return result,
            }
        }
    }

    fn wait(&self, interest: Interest, deadline: Option<Instant>) -> io::Result<()> {
        let fd = self.registration.fd;
        let Some(s) = scheduler::in_task() else {
            return if poll_blocking(fd, interest, deadline)? { Ok(()) } else { Err(timed_out(interest)) };
        };
        let id = s.reactor.id();
        if self.registration.reactor.load(Ordering::Relaxed) != id {
            s.reactor.register(fd)?;
            self.registration.reactor.store(id, Ordering::Relaxed);
        }
        match crate::io::park_on_fd(&s, fd, interest, deadline) {
            Woken::Ready => Ok(()),
            Woken::TimedOut => Err(timed_out(interest)),
        }
    }
}

/// Which reactor an fd is registered with; ends the registration when dropped.
#[derive(Debug)]
struct Registration {
    fd: RawFd,
    /// The reactor's id (0: none yet).
    reactor: AtomicU64,
}

impl Registration {
    /// Ends the registration with this thread's reactor, if it is registered there:
    /// `from_poller` removes the fd from epoll too (the fd lives on); otherwise the
    /// reactor only forgets it, since closing the fd, which follows, removes it from
    /// epoll without a system call of ours. A registration on another thread's
    /// reactor ends when the fd is closed.
    fn end(&mut self, from_poller: bool) {
        let id = std::mem::take(self.reactor.get_mut());
        if id == 0 {
            return;
        }
        if let Some(s) = scheduler::current() {
            if s.reactor.id() == id {
                s.reactor.deregister(self.fd, from_poller);
            }
        }
    }
}

impl Drop for Registration {
    /// Runs just before the fd is closed (the field order of `NonBlocking`).
    fn drop(&mut self) {
        self.end(false);
    }
}

/// A timeout as stored: nanoseconds, 0 for none.
fn load(timeout: &AtomicU64) -> Option<Duration> {
    match timeout.load(Ordering::Relaxed) {
        0 => None,
        nanos => Some(Duration::from_nanos(nanos)),
    }
}

/// Stores a timeout; zero is refused, as std refuses it.
fn store(timeout: &AtomicU64, value: Option<Duration>) -> io::Result<()> {
    let nanos = match value {
        None => 0,
        Some(d) if d.is_zero() => {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "cannot set a 0 duration timeout"));
        }
        Some(d) => u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
    };
    timeout.store(nanos, Ordering::Relaxed);
    Ok(())
}

/// The error of an operation that waited past its timeout.
fn timed_out(interest: Interest) -> io::Error {
    let what = if interest.readable { "read" } else { "write" };
    io::Error::new(io::ErrorKind::TimedOut, format!("socket {what} timed out"))
}
