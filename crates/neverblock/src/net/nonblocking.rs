//! A non-blocking fd that parks the calling fiber, not the thread, when it would block.

use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use crate::runtime::registration::{Direction, Interest, Registration};
use crate::runtime::{instant_of, ns_of};

/// An fd in non-blocking mode with its loop registration and the timeouts of
/// the socket that owns it.
///
/// An operation is tried when it may succeed and waited for only after it
/// returned `WouldBlock`: once one has (or a stream's read or write came back
/// short, which means the same), the next one in that direction parks on the
/// fd's registration at once, without a system call, until the kernel reports
/// readiness. Outside a runtime the wait blocks the thread in `poll(2)`, as
/// std's blocking sockets do.
///
/// A read or write timeout is a deadline for the whole call, checked each time
/// the fd is found not ready; its timer is the registration's own, re-armed
/// lazily (see `reactor::source`), so a long timeout that rarely expires costs
/// no timer insert or cancel per wait. A deadline set on the socket bounds every
/// wait in its direction the same way, and costs no clock reading at all until
/// a wait ends without the fd ready.
#[derive(Debug)]
pub(crate) struct NonBlocking<T: AsFd> {
    /// Declared before `inner`, so it is dropped (deregistered) before the fd closes.
    registration: Registration,
    inner: T,
    /// Read and write timeouts in nanoseconds (0: none).
    read_timeout: AtomicU64,
    write_timeout: AtomicU64,
    /// Read and write deadlines, as stored by [`store_deadline`] (0: none).
    read_deadline: AtomicU64,
    write_deadline: AtomicU64,
}

impl<T: AsFd> NonBlocking<T> {
    /// Wraps `inner`, which the caller has put in non-blocking mode.
    pub(crate) fn new(inner: T) -> NonBlocking<T> {
        NonBlocking {
            registration: Registration::new(),
            inner,
            read_timeout: AtomicU64::new(0),
            write_timeout: AtomicU64::new(0),
            read_deadline: AtomicU64::new(0),
            write_deadline: AtomicU64::new(0),
        }
    }

    pub(crate) fn get_ref(&self) -> &T {
        &self.inner
    }

    /// Deregisters and gives the fd back (still non-blocking).
    pub(crate) fn into_inner(self) -> T {
        let NonBlocking { mut registration, inner, .. } = self;
        registration.deregister(Some(inner.as_fd()));
        inner
    }

    /// The fd's readability as a wait of the running task's loop (see [`Registration::interest`]);
    /// `None` where it cannot be one.
    pub(crate) fn read_interest(&self) -> Option<Interest> {
        self.registration.interest(self.inner.as_fd(), Direction::Read).ok().flatten()
    }

    /// Runs `op` until it does not return `WouldBlock`, waiting for readability in between.
    pub(crate) fn read_with<R>(&self, op: impl FnMut(&T) -> io::Result<R>) -> io::Result<R> {
        self.io_with(Direction::Read, load(&self.read_timeout), &self.read_deadline, op)
    }

    /// Like [`read_with`](Self::read_with) for a stream read into `len` bytes of
    /// room: a read that comes back short has drained the socket, so the next one
    /// waits for the kernel's next report instead of trying first.
    pub(crate) fn read_stream(&self, len: usize, op: impl FnMut(&T) -> io::Result<usize>) -> io::Result<usize> {
        let n = self.read_with(op)?;
        self.note_stream_read(n, len);
        Ok(n)
    }

    /// Runs `op` until it does not return `WouldBlock`, waiting for writability in between.
    pub(crate) fn write_with<R>(&self, op: impl FnMut(&T) -> io::Result<R>) -> io::Result<R> {
        self.io_with(Direction::Write, load(&self.write_timeout), &self.write_deadline, op)
    }

    /// Like [`write_with`](Self::write_with) for a stream write of `len` bytes: a
    /// short write has filled the socket's buffer.
    pub(crate) fn write_stream(&self, len: usize, op: impl FnMut(&T) -> io::Result<usize>) -> io::Result<usize> {
        let n = self.write_with(op)?;
        self.note_stream_write(n, len);
        Ok(n)
    }

    /// The future side of [`read_stream`](Self::read_stream): `Pending` when the read
    /// would block, once the fd's readability is an interest of the `block_on`
    /// polling with `cx` (see [`bridge`](crate::bridge)).
    pub(crate) fn poll_read_stream(
        &self,
        cx: &Context<'_>,
        len: usize,
        op: impl FnMut(&T) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        let n = ready!(self.poll_with(Direction::Read, cx, op))?;
        self.note_stream_read(n, len);
        Poll::Ready(Ok(n))
    }

    /// The future side of [`write_stream`](Self::write_stream), as
    /// [`poll_read_stream`](Self::poll_read_stream) is of reads.
    pub(crate) fn poll_write_stream(
        &self,
        cx: &Context<'_>,
        len: usize,
        op: impl FnMut(&T) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        let n = ready!(self.poll_with(Direction::Write, cx, op))?;
        self.note_stream_write(n, len);
        Poll::Ready(Ok(n))
    }

    /// A stream read of `n` bytes into `len` of room: one that came back short (and
    /// not at the end) drained the socket, so readiness is the kernel's to report again.
    #[inline]
    fn note_stream_read(&self, n: usize, len: usize) {
        if n > 0 && n < len {
            self.registration.clear_ready(self.inner.as_fd(), Direction::Read);
        }
    }

    /// A stream write of `n` of `len` bytes: a short one filled the socket's buffer.
    #[inline]
    fn note_stream_write(&self, n: usize, len: usize) {
        if n < len {
            self.registration.clear_ready(self.inner.as_fd(), Direction::Write);
        }
    }

    /// Runs `op` until it does not return `WouldBlock`; then returns `Pending` if the
    /// fd's `direction` became an interest of the polling `block_on`, or else waits
    /// for it in place and tries again. The socket's timeouts do not apply.
    fn poll_with<R>(
        &self,
        direction: Direction,
        cx: &Context<'_>,
        mut op: impl FnMut(&T) -> io::Result<R>,
    ) -> Poll<io::Result<R>> {
        loop {
            if self.registration.may_be_ready(direction) {
                match op(&self.inner) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        self.registration.clear_ready(self.inner.as_fd(), direction)
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    result => return Poll::Ready(result),
                }
            }
            match crate::runtime::polling::wait_for(cx, &self.registration, self.inner.as_fd(), direction) {
                Ok(true) => return Poll::Pending,
                Ok(false) => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    /// Reads without consuming and without waiting: what is there now, `Ok(0)` at
    /// end of stream, `WouldBlock` when nothing has arrived.
    pub(crate) fn try_peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        let flags = rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT;
        match rustix::net::recv(&self.inner, buf, flags) {
            Ok((n, _)) => Ok(n),
            Err(e) => {
                if e == rustix::io::Errno::AGAIN {
                    self.registration.clear_ready(self.inner.as_fd(), Direction::Read);
                }
                Err(e.into())
            }
        }
    }

    /// Waits until the fd becomes writable (a non-blocking connect completing), or
    /// `deadline` passes (`TimedOut`).
    pub(crate) fn wait_writable(&self, deadline: Option<Instant>) -> io::Result<()> {
        self.registration.clear_ready(self.inner.as_fd(), Direction::Write);
        loop {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(timed_out(Direction::Write));
            }
            self.registration.wait(self.inner.as_fd(), Direction::Write, deadline)?;
            if self.registration.may_be_ready(Direction::Write) {
                return Ok(());
            }
        }
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

    pub(crate) fn set_read_deadline(&self, deadline: Option<Instant>) {
        store_deadline(&self.read_deadline, deadline);
    }

    pub(crate) fn read_deadline(&self) -> Option<Instant> {
        load_deadline(&self.read_deadline)
    }

    pub(crate) fn set_write_deadline(&self, deadline: Option<Instant>) {
        store_deadline(&self.write_deadline, deadline);
    }

    pub(crate) fn write_deadline(&self) -> Option<Instant> {
        load_deadline(&self.write_deadline)
    }

    fn io_with<R>(
        &self,
        direction: Direction,
        timeout: Option<Duration>,
        fixed: &AtomicU64,
        mut op: impl FnMut(&T) -> io::Result<R>,
    ) -> io::Result<R> {
        // Set at the first wait: the clock is read only once the operation would block, and then
        // only for a timeout.
        let mut deadline: Option<Option<Instant>> = None;
        loop {
            if self.registration.may_be_ready(direction) {
                match op(&self.inner) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        self.registration.clear_ready(self.inner.as_fd(), direction)
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    result => return result,
                }
            }
            let deadline = match deadline {
                None => *deadline.insert(wait_until(load_deadline(fixed), timeout)),
                Some(Some(d)) if Instant::now() >= d => return Err(timed_out(direction)),
                Some(d) => d,
            };
            self.registration.wait(self.inner.as_fd(), direction, deadline)?;
        }
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

/// When a wait must end: at the socket's deadline, or `timeout` from now if that comes first.
fn wait_until(deadline: Option<Instant>, timeout: Option<Duration>) -> Option<Instant> {
    let Some(timeout) = timeout else { return deadline };
    let after_timeout = Instant::now() + timeout;
    Some(deadline.map_or(after_timeout, |deadline| deadline.min(after_timeout)))
}

/// Stores a deadline as the runtime's clock reading of it (never 0; 0: none), so that a socket's
/// deadline is one atomic word, as its timeouts are.
fn store_deadline(cell: &AtomicU64, deadline: Option<Instant>) {
    cell.store(deadline.map_or(0, ns_of), Ordering::Relaxed);
}

/// The deadline [`store_deadline`] stored.
fn load_deadline(cell: &AtomicU64) -> Option<Instant> {
    match cell.load(Ordering::Relaxed) {
        0 => None,
        stored => Some(instant_of(stored)),
    }
}

/// The error of an operation that waited past its timeout.
fn timed_out(direction: Direction) -> io::Error {
    let what = match direction {
        Direction::Read => "read",
        Direction::Write => "write",
    };
    io::Error::new(io::ErrorKind::TimedOut, format!("socket {what} timed out"))
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    use std::rc::Rc;

    use super::*;
    use crate::runtime::scheduler;

    /// A non-blocking socket pair, the first end wrapped.
    fn pair() -> (Rc<NonBlocking<UnixStream>>, UnixStream) {
        let (a, b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        (Rc::new(NonBlocking::new(a)), b)
    }

    /// Reads into 64 bytes of room, counting the attempts.
    fn read(io: &NonBlocking<UnixStream>, attempts: &Cell<usize>) -> Vec<u8> {
        let mut buf = [0; 64];
        let n = io
            .read_stream(buf.len(), |mut s| {
                attempts.set(attempts.get() + 1);
                s.read(&mut buf)
            })
            .unwrap();
        buf[..n].to_vec()
    }

    /// Writes `bytes` to `peer` once the calling fiber has parked.
    fn send_later(mut peer: UnixStream, bytes: &'static [u8]) -> crate::JoinHandle<UnixStream> {
        crate::spawn(move || {
            peer.write_all(bytes).unwrap();
            peer
        })
    }

    #[test]
    fn a_read_after_a_short_read_parks_without_trying_first() {
        crate::run(|| {
            let (io, peer) = pair();
            let attempts = Cell::new(0);
            let peer = send_later(peer, b"abc");
            assert_eq!(read(&io, &attempts), b"abc");
            assert_eq!(attempts.get(), 2, "one attempt would block, the next one read");
            let peer = send_later(peer.join().unwrap(), b"def");
            assert_eq!(read(&io, &attempts), b"def");
            assert_eq!(attempts.get(), 3, "the short read drained the socket: no attempt before the data came");
            drop(peer.join().unwrap());
        });
    }

    #[test]
    fn end_of_file_after_a_short_read_is_seen_though_the_kernel_reports_it_once() {
        crate::run(|| {
            let (io, mut peer) = pair();
            io.set_read_timeout(Some(Duration::from_secs(10))).unwrap(); // a hang guard, not a measure
            let attempts = Cell::new(0);
            let closer = crate::spawn(move || {
                peer.write_all(b"last").unwrap();
                drop(peer);
            });
            assert_eq!(read(&io, &attempts), b"last", "data and end-of-file in one report");
            assert_eq!(read(&io, &attempts), b"", "end-of-file, not a wait for a report that never comes");
            closer.join().unwrap();
        });
    }

    #[test]
    fn a_read_timeout_is_one_timer_however_many_reads_wait() {
        crate::run(|| {
            let (io, mut peer) = pair();
            io.set_read_timeout(Some(Duration::from_secs(3600))).unwrap();
            let attempts = Cell::new(0);
            let reactor = || scheduler::current().expect("inside run");
            let before = reactor().reactor_for_tests().timers_set();
            for round in 0..50u8 {
                let writer = crate::spawn(move || {
                    peer.write_all(&[round]).unwrap();
                    peer
                });
                assert_eq!(read(&io, &attempts), [round]);
                peer = writer.join().unwrap();
            }
            let set = reactor().reactor_for_tests().timers_set() - before;
            assert_eq!(set, 1, "50 waits under one hour-long timeout armed one timer");
            drop(io);
            assert!(!reactor().reactor_for_tests().has_timers(), "the socket's timer left with it");
        });
    }

    #[test]
    fn a_timed_out_or_cancelled_read_leaves_no_waiter_and_a_closed_socket_no_timer() {
        crate::run(|| {
            let (io, _peer) = pair();
            let reactor = || scheduler::current().expect("inside run");
            let attempts = Rc::new(Cell::new(0));
            io.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
            let mut buf = [0; 8];
            let err = io.read_stream(8, |mut s| s.read(&mut buf)).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::TimedOut);
            assert!(!reactor().reactor_for_tests().has_fd_waiters(), "a timed-out wait takes itself off the fd");

            io.set_read_timeout(Some(Duration::from_secs(3600))).unwrap();
            let (held, count) = (io.clone(), attempts.clone());
            let reader = crate::spawn(move || read(&held, &count));
            crate::yield_now();
            assert!(reactor().reactor_for_tests().has_fd_waiters(), "the reader is parked on the fd");
            reader.cancel();
            assert!(reader.join().is_err(), "cancelled while parked");
            assert!(!reactor().reactor_for_tests().has_fd_waiters(), "a cancelled wait takes itself off the fd");
            drop(io);
            assert_eq!(reactor().reactor_for_tests().registered(), 0, "the socket deregistered on drop");
            assert!(!reactor().reactor_for_tests().has_timers(), "and took its deadline timer along");
        });
    }
}
