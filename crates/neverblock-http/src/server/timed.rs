//! A connection's TCP stream as the server uses it, whatever the protocol over it: every read and
//! write waits no longer than the connection's current limit allows.
//!
//! Slow clients cost a timer here, never a worker: each read or write of a fiber parks it under one
//! deadline, worked out from its limit on the loop's clock (no clock is read per operation). A
//! [`WaitLimit`] is a deadline for a whole request head (so a client dripping one byte per timeout
//! period is still dropped), a first-byte deadline for an idle keep-alive connection, or a
//! [`MinRate`] for bodies both ways: each wait is bounded, and all the time spent waiting on the
//! client must be earned at a minimum rate after a grace period (Apache's `mod_reqtimeout`
//! `MinRate`). Time the handler spends working is not charged to the client.

use std::cell::Cell;
use std::fs::File;
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

use neverblock::net::TcpStream;

use crate::turn_clock::now;

/// How long the next reads (or writes) may wait, in all.
#[derive(Clone, Copy, Debug)]
pub(crate) enum WaitLimit {
    /// As long as they like.
    Unbounded,
    /// Until this instant.
    Until(Instant),
    /// The first byte by `by`, then everything by `then` after that byte arrived: a request head
    /// on an idle connection.
    FirstByte { by: Instant, then: Duration },
    /// A minimum data rate: a body.
    MinRate(MinRate),
}

/// A minimum data rate: each wait at most `per_wait`, and the waits together at most a grace of
/// `per_wait` plus one second per `min_rate` bytes moved.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MinRate {
    per_wait: Duration,
    min_rate: u64,
    waited: Duration,
    moved: u64,
}

impl MinRate {
    /// A fresh limit: waits of at most `per_wait`, a grace of `per_wait` as well, then `min_rate`
    /// bytes a second (0: no rate, only the bound on each wait).
    pub(crate) fn new(per_wait: Duration, min_rate: u64) -> MinRate {
        MinRate { per_wait, min_rate, waited: Duration::ZERO, moved: 0 }
    }

    /// How long the next operation may wait; `None` once the client has fallen below the rate.
    pub(crate) fn allowance(&self) -> Option<Duration> {
        let mut allow = self.per_wait;
        // Nothing waited yet (a response or body that never had to wait for the client): the
        // grace alone is more than `per_wait`, so the rate needs no working out.
        if self.min_rate > 0 && !self.waited.is_zero() {
            // In whole nanoseconds, without floating point: `moved` bytes at `min_rate` a second
            // (past 18 GB moved, as good as for ever).
            let nanos = self.moved.checked_mul(1_000_000_000).map_or(u64::MAX, |n| n / self.min_rate);
            let earned = self.per_wait.saturating_add(Duration::from_nanos(nanos));
            allow = allow.min(earned.checked_sub(self.waited)?);
        }
        (!allow.is_zero()).then_some(allow)
    }

    /// Takes in one operation that waited `waited` and moved `moved` bytes.
    pub(crate) fn record(&mut self, waited: Duration, moved: usize) {
        self.waited += waited;
        self.moved += moved as u64;
    }
}

impl WaitLimit {
    /// The deadline of the next operation, starting `now`.
    fn deadline(&self, now: Instant) -> io::Result<Option<Instant>> {
        let deadline = match *self {
            WaitLimit::Unbounded => return Ok(None),
            WaitLimit::Until(deadline) | WaitLimit::FirstByte { by: deadline, .. } => deadline,
            WaitLimit::MinRate(rate) => match rate.allowance() {
                Some(allowance) => now + allowance,
                None => now,
            },
        };
        if deadline > now {
            Ok(Some(deadline))
        } else {
            Err(io::Error::new(io::ErrorKind::TimedOut, "the client was too slow"))
        }
    }

    /// The limit after an operation that started at `start`, ended at `end` and moved `n` bytes.
    fn after(self, start: Instant, end: Instant, n: usize) -> WaitLimit {
        match self {
            WaitLimit::FirstByte { then, .. } if n > 0 => WaitLimit::Until(end + then),
            WaitLimit::MinRate(mut rate) => {
                // An operation that did not park ended in the turn it began.
                let waited = if end == start { Duration::ZERO } else { end.saturating_duration_since(start) };
                rate.record(waited, n);
                WaitLimit::MinRate(rate)
            }
            other => other,
        }
    }
}

/// A connection's stream and the limits its reads and writes wait under.
#[derive(Debug)]
pub(crate) struct TimedStream {
    stream: Rc<TcpStream>,
    read: Cell<WaitLimit>,
    write: Cell<WaitLimit>,
}

impl TimedStream {
    pub(crate) fn new(stream: Rc<TcpStream>) -> TimedStream {
        TimedStream { stream, read: Cell::new(WaitLimit::Unbounded), write: Cell::new(WaitLimit::Unbounded) }
    }

    pub(crate) fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// The stream, when no one else holds it.
    pub(crate) fn into_stream(self) -> Option<TcpStream> {
        Rc::into_inner(self.stream)
    }

    pub(crate) fn set_read_limit(&self, limit: WaitLimit) {
        self.read.set(limit);
    }

    pub(crate) fn set_write_limit(&self, limit: WaitLimit) {
        self.write.set(limit);
    }

    /// One read, under the read limit.
    ///
    /// # Errors
    ///
    /// The read's error; `TimedOut` past the limit.
    #[inline]
    pub(crate) fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.timed(&self.read, |mut s| io::Read::read(&mut s, buf), TcpStream::set_read_deadline)
    }

    /// One write, under the write limit.
    ///
    /// # Errors
    ///
    /// The write's error; `TimedOut` past the limit.
    #[inline]
    pub(crate) fn write(&self, buf: &[u8]) -> io::Result<usize> {
        self.timed(&self.write, |mut s| io::Write::write(&mut s, buf), TcpStream::set_write_deadline)
    }

    /// One gathering write of `bufs` (`writev(2)`), under the write limit: a TLS session's records
    /// leave in one call.
    ///
    /// # Errors
    ///
    /// The write's error; `TimedOut` past the limit.
    #[inline]
    pub(crate) fn write_vectored(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.timed(&self.write, |mut s| io::Write::write_vectored(&mut s, bufs), TcpStream::set_write_deadline)
    }

    /// Writes all of `bytes`, under the write limit.
    ///
    /// # Errors
    ///
    /// The first failed write's error (`WriteZero` if one wrote nothing).
    pub(crate) fn write_all(&self, bytes: &[u8]) -> io::Result<()> {
        let mut rest = bytes;
        while !rest.is_empty() {
            match self.write(rest) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Sends up to `len` bytes of `file` from `offset` with `sendfile(2)`, under the write limit.
    ///
    /// # Errors
    ///
    /// As [`TcpStream::send_file`].
    pub(crate) fn send_file(&self, file: &File, offset: u64, len: usize) -> io::Result<usize> {
        self.timed(&self.write, |s| s.send_file(file, offset, len), TcpStream::set_write_deadline)
    }

    /// Runs `op` on the stream under `limit`, set as the stream's deadline by `set`.
    #[inline]
    fn timed(
        &self,
        limit: &Cell<WaitLimit>,
        op: impl FnOnce(&TcpStream) -> io::Result<usize>,
        set: fn(&TcpStream, Option<Instant>),
    ) -> io::Result<usize> {
        let start = now();
        let current = limit.get();
        set(&self.stream, current.deadline(start)?);
        let n = op(&self.stream)?;
        limit.set(current.after(start, now(), n));
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_min_rate_bounds_each_wait_and_the_average_rate() {
        let mut rate = MinRate::new(Duration::from_secs(10), 100);
        assert_eq!(rate.allowance(), Some(Duration::from_secs(10)));
        rate.record(Duration::from_secs(8), 0);
        assert_eq!(rate.allowance(), Some(Duration::from_secs(2)), "the grace shrinks while nothing moves");
        rate.record(Duration::from_secs(2), 100);
        assert_eq!(rate.allowance(), Some(Duration::from_secs(1)), "100 bytes earn one more second");
        rate.record(Duration::from_secs(1), 1);
        assert_eq!(rate.allowance(), Some(Duration::from_millis(10)));
        rate.record(Duration::from_millis(10), 0);
        assert_eq!(rate.allowance(), None, "a drip below the rate runs out");
    }

    #[test]
    fn a_min_rate_of_zero_bounds_only_each_wait() {
        let mut rate = MinRate::new(Duration::from_secs(3), 0);
        rate.record(Duration::from_secs(1000), 1);
        assert_eq!(rate.allowance(), Some(Duration::from_secs(3)));
    }

    #[test]
    fn a_min_rate_sets_each_operation_a_deadline_of_what_it_allows() {
        let now = Instant::now();
        let mut rate = MinRate::new(Duration::from_secs(10), 100);
        assert_eq!(WaitLimit::MinRate(rate).deadline(now).unwrap(), Some(now + Duration::from_secs(10)));
        rate.record(Duration::from_secs(10), 0);
        let spent = WaitLimit::MinRate(rate).deadline(now).unwrap_err();
        assert_eq!(spent.kind(), io::ErrorKind::TimedOut, "the grace is spent and nothing moved");
        assert_eq!(WaitLimit::Unbounded.deadline(now).unwrap(), None);
    }

    #[test]
    fn a_head_deadline_starts_at_its_first_byte() {
        let now = Instant::now();
        let idle = WaitLimit::FirstByte { by: now + Duration::from_secs(60), then: Duration::from_secs(5) };
        assert!(matches!(idle.after(now, now, 0), WaitLimit::FirstByte { .. }), "nothing arrived");
        let later = now + Duration::from_secs(30);
        match idle.after(now, later, 1) {
            WaitLimit::Until(deadline) => assert_eq!(deadline, later + Duration::from_secs(5)),
            other => panic!("{other:?}"),
        }
        assert_eq!(WaitLimit::Until(now).deadline(now).unwrap_err().kind(), io::ErrorKind::TimedOut);
    }
}
