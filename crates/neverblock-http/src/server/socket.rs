//! A connection's socket as the server uses it: every read and write waits no longer than the
//! connection's current budget allows, and finished responses wait in a buffer until the server
//! next has to wait for the client.
//!
//! Slow clients cost a timer here, never a worker: each read or write of a fiber parks it under one
//! timeout, computed from its budget. A [`Budget`] is a deadline for a whole request head (so a
//! client dripping one byte per timeout period is still dropped), a first-byte deadline for an
//! idle keep-alive connection, or a [`Floor`] for bodies both ways: each wait is bounded, and all
//! the time spent waiting on the client must be earned at a minimum rate after a grace period
//! (Apache's `mod_reqtimeout` `MinRate`). Time the handler spends working is not charged to the
//! client.

use std::cell::{Cell, RefCell};
use std::fs::File;
use std::io::{self, Read, Write};
use std::rc::Rc;
use std::time::{Duration, Instant};

use neverblock::net::TcpStream;

/// How long the next reads (or writes) may wait, in all.
#[derive(Clone, Copy, Debug)]
pub(super) enum Budget {
    /// As long as they like.
    Unbounded,
    /// Until this instant.
    Until(Instant),
    /// The first byte by `by`, then everything by `then` after that byte arrived: a request head
    /// on an idle connection.
    FirstByte { by: Instant, then: Duration },
    /// A rate floor: a body.
    Floor(Floor),
}

/// A minimum data rate: each wait at most `per_wait`, and the waits together at most `grace`
/// plus one second per `min_rate` bytes moved.
#[derive(Clone, Copy, Debug)]
pub(super) struct Floor {
    per_wait: Duration,
    min_rate: u64,
    waited: Duration,
    moved: u64,
}

impl Floor {
    /// A fresh floor: waits of at most `per_wait`, a grace of `per_wait` as well, then `min_rate`
    /// bytes a second (0: no rate, only the bound on each wait).
    pub(super) fn new(per_wait: Duration, min_rate: u64) -> Floor {
        Floor { per_wait, min_rate, waited: Duration::ZERO, moved: 0 }
    }

    /// How long the next operation may wait; `None` once the client has fallen below the rate.
    pub(super) fn allowance(&self) -> Option<Duration> {
        let mut allow = self.per_wait;
        if self.min_rate > 0 {
            let earned =
                self.per_wait.saturating_add(Duration::from_secs_f64(self.moved as f64 / self.min_rate as f64));
            allow = allow.min(earned.checked_sub(self.waited)?);
        }
        (!allow.is_zero()).then_some(allow)
    }

    /// Takes in one operation that waited `waited` and moved `moved` bytes.
    pub(super) fn record(&mut self, waited: Duration, moved: usize) {
        self.waited += waited;
        self.moved += moved as u64;
    }
}

impl Budget {
    /// The timeout of the next operation, starting `now`.
    fn timeout(&self, now: Instant) -> io::Result<Option<Duration>> {
        let left = match *self {
            Budget::Unbounded => return Ok(None),
            Budget::Until(deadline) | Budget::FirstByte { by: deadline, .. } => deadline.checked_duration_since(now),
            Budget::Floor(floor) => floor.allowance(),
        };
        match left.filter(|d| !d.is_zero()) {
            Some(d) => Ok(Some(d)),
            None => Err(io::Error::new(io::ErrorKind::TimedOut, "the client was too slow")),
        }
    }

    /// The budget after an operation that started at `start`, ended at `end` and moved `n` bytes.
    fn after(self, start: Instant, end: Instant, n: usize) -> Budget {
        match self {
            Budget::FirstByte { then, .. } if n > 0 => Budget::Until(end + then),
            Budget::Floor(mut floor) => {
                floor.record(end - start, n);
                Budget::Floor(floor)
            }
            other => other,
        }
    }
}

/// A connection's socket, its budgets, and the response bytes not yet written; a cheap handle
/// (clones share all of it), so the connection's read buffer and the server's writers hold it alike.
#[derive(Clone, Debug)]
pub(super) struct Socket {
    inner: Rc<Inner>,
}

#[derive(Debug)]
pub(super) struct Inner {
    stream: Rc<TcpStream>,
    read: Cell<Budget>,
    write: Cell<Budget>,
    /// Response bytes to write before the next read (see [`Socket::queue`]).
    pending: RefCell<Vec<u8>>,
}

impl std::ops::Deref for Socket {
    type Target = Inner;

    fn deref(&self) -> &Inner {
        &self.inner
    }
}

impl Socket {
    pub(super) fn new(stream: Rc<TcpStream>) -> Socket {
        let inner = Inner {
            stream,
            read: Cell::new(Budget::Unbounded),
            write: Cell::new(Budget::Unbounded),
            pending: RefCell::new(Vec::new()),
        };
        Socket { inner: Rc::new(inner) }
    }

    pub(super) fn stream(&self) -> &TcpStream {
        &self.stream
    }

    pub(super) fn set_read_budget(&self, budget: Budget) {
        self.read.set(budget);
    }

    pub(super) fn set_write_budget(&self, budget: Budget) {
        self.write.set(budget);
    }

    /// Appends `bytes` to what is written before the next read, or by [`flush`](Socket::flush).
    pub(super) fn queue(&self, bytes: &[u8]) {
        self.pending.borrow_mut().extend_from_slice(bytes);
    }

    /// The bytes waiting to be written, to append to.
    pub(super) fn pending(&self) -> std::cell::RefMut<'_, Vec<u8>> {
        self.pending.borrow_mut()
    }

    /// Writes what is queued.
    ///
    /// # Errors
    ///
    /// The write's error (`TimedOut` past the write budget).
    pub(super) fn flush(&self) -> io::Result<()> {
        let mut pending = self.pending.take();
        let result = self.write_all_unqueued(&pending);
        pending.clear();
        // Keep the allocation for the next response, unless it grew large.
        if pending.capacity() <= 64 * 1024 {
            *self.pending.borrow_mut() = pending;
        }
        result
    }

    /// Sends up to `len` bytes of `file` from `offset` with `sendfile(2)`, under the write budget;
    /// queued bytes go first.
    ///
    /// # Errors
    ///
    /// As [`TcpStream::send_file`].
    pub(super) fn send_file(&self, file: &File, offset: u64, len: usize) -> io::Result<usize> {
        self.flush()?;
        self.timed(&self.write, |s| s.send_file(file, offset, len), TcpStream::set_write_timeout)
    }

    /// Runs `op` on the stream under `budget`, set as the stream's timeout by `set`.
    fn timed(
        &self,
        budget: &Cell<Budget>,
        op: impl FnOnce(&TcpStream) -> io::Result<usize>,
        set: fn(&TcpStream, Option<Duration>) -> io::Result<()>,
    ) -> io::Result<usize> {
        let start = Instant::now();
        let current = budget.get();
        set(&self.stream, current.timeout(start)?)?;
        let n = op(&self.stream)?;
        budget.set(current.after(start, Instant::now(), n));
        Ok(n)
    }

    /// Writes all of `bytes` under the write budget, without looking at the queue.
    fn write_all_unqueued(&self, bytes: &[u8]) -> io::Result<()> {
        let mut rest = bytes;
        while !rest.is_empty() {
            match self.timed(&self.write, |mut s| s.write(rest), TcpStream::set_write_timeout) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

impl Read for Socket {
    /// Writes the queued response bytes first: the client may be waiting for them before it sends more.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if !self.pending.borrow().is_empty() {
            self.flush()?;
        }
        self.timed(&self.read, |mut s| s.read(buf), TcpStream::set_read_timeout)
    }
}

impl Write for Socket {
    /// Writes the queued bytes first, then `buf`.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !self.pending.borrow().is_empty() {
            self.flush()?;
        }
        self.timed(&self.write, |mut s| s.write(buf), TcpStream::set_write_timeout)
    }

    fn flush(&mut self) -> io::Result<()> {
        Socket::flush(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_floor_bounds_each_wait_and_the_average_rate() {
        let mut floor = Floor::new(Duration::from_secs(10), 100);
        assert_eq!(floor.allowance(), Some(Duration::from_secs(10)));
        floor.record(Duration::from_secs(8), 0);
        assert_eq!(floor.allowance(), Some(Duration::from_secs(2)), "the grace shrinks while nothing moves");
        floor.record(Duration::from_secs(2), 100);
        assert_eq!(floor.allowance(), Some(Duration::from_secs(1)), "100 bytes earn one more second");
        floor.record(Duration::from_secs(1), 1);
        assert_eq!(floor.allowance(), Some(Duration::from_millis(10)));
        floor.record(Duration::from_millis(10), 0);
        assert_eq!(floor.allowance(), None, "a drip below the rate runs out");
    }

    #[test]
    fn a_floor_without_a_rate_bounds_only_each_wait() {
        let mut floor = Floor::new(Duration::from_secs(3), 0);
        floor.record(Duration::from_secs(1000), 1);
        assert_eq!(floor.allowance(), Some(Duration::from_secs(3)));
    }

    #[test]
    fn a_head_deadline_starts_at_its_first_byte() {
        let now = Instant::now();
        let idle = Budget::FirstByte { by: now + Duration::from_secs(60), then: Duration::from_secs(5) };
        assert!(matches!(idle.after(now, now, 0), Budget::FirstByte { .. }), "nothing arrived");
        let later = now + Duration::from_secs(30);
        match idle.after(now, later, 1) {
            Budget::Until(deadline) => assert_eq!(deadline, later + Duration::from_secs(5)),
            other => panic!("{other:?}"),
        }
        assert_eq!(Budget::Until(now).timeout(now).unwrap_err().kind(), io::ErrorKind::TimedOut);
    }
}
