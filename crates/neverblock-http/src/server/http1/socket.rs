//! An HTTP/1 connection's socket: its timed stream, and the response bytes not yet written, which
//! wait in a buffer until the server next has to wait for the client (so a head and a short body,
//! or a response and the `100 Continue` of the next request, go out in one write).

use std::cell::{RefCell, RefMut};
use std::fs::File;
use std::io::{self, Read, Write};
use std::rc::Rc;

use crate::server::timed::{TimedStream, WaitLimit};
use neverblock::net::TcpStream;

/// A cheap handle (clones share everything), so the connection's read buffer and the server's
/// writers hold it alike.
#[derive(Clone, Debug)]
pub(super) struct Socket {
    timed: TimedStream,
    /// Response bytes to write before the next read (see [`Socket::queue`]).
    pending: Rc<RefCell<Vec<u8>>>,
}

impl Socket {
    pub(super) fn new(stream: Rc<TcpStream>) -> Socket {
        Socket { timed: TimedStream::new(stream), pending: Rc::default() }
    }

    pub(super) fn stream(&self) -> &TcpStream {
        self.timed.stream()
    }

    pub(super) fn set_read_limit(&self, limit: WaitLimit) {
        self.timed.set_read_limit(limit);
    }

    pub(super) fn set_write_limit(&self, limit: WaitLimit) {
        self.timed.set_write_limit(limit);
    }

    /// Appends `bytes` to what is written before the next read, or by [`flush`](Socket::flush).
    pub(super) fn queue(&self, bytes: &[u8]) {
        self.pending.borrow_mut().extend_from_slice(bytes);
    }

    /// The bytes waiting to be written, to append to.
    pub(super) fn pending(&self) -> RefMut<'_, Vec<u8>> {
        self.pending.borrow_mut()
    }

    /// Takes the bytes waiting to be written (and their allocation), to write them with more; give
    /// the buffer back with [`give_back`](Socket::give_back).
    pub(super) fn take_pending(&self) -> Vec<u8> {
        self.pending.take()
    }

    /// Puts back a buffer [`take_pending`](Socket::take_pending) took, with the bytes in it that
    /// are still to be written.
    pub(super) fn give_back(&self, bytes: Vec<u8>) {
        let mut pending = self.pending.borrow_mut();
        debug_assert!(pending.is_empty(), "nothing is queued while the buffer is out");
        *pending = bytes;
    }

    /// Writes what is queued.
    ///
    /// # Errors
    ///
    /// The write's error (`TimedOut` past the write limit).
    pub(super) fn flush(&self) -> io::Result<()> {
        let mut pending = self.pending.take();
        let result = self.timed.write_all(&pending);
        pending.clear();
        // Keep the allocation for the next response, unless it grew large.
        if pending.capacity() <= 64 * 1024 {
            *self.pending.borrow_mut() = pending;
        }
        result
    }

    /// Sends up to `len` bytes of `file` from `offset` with `sendfile(2)`, under the write limit;
    /// queued bytes go first.
    ///
    /// # Errors
    ///
    /// As [`TcpStream::send_file`].
    pub(super) fn send_file(&self, file: &File, offset: u64, len: usize) -> io::Result<usize> {
        self.flush()?;
        self.timed.send_file(file, offset, len)
    }

    /// Writes the queued bytes, if any.
    fn flush_queued(&self) -> io::Result<()> {
        if self.pending.borrow().is_empty() {
            return Ok(());
        }
        self.flush()
    }
}

impl Read for Socket {
    /// Writes the queued response bytes first: the client may be waiting for them before it sends more.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.flush_queued()?;
        self.timed.read(buf)
    }
}

impl Write for Socket {
    /// Writes the queued bytes first, then `buf`.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.flush_queued()?;
        self.timed.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Socket::flush(self)
    }
}
