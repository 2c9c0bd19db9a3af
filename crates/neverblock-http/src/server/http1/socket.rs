//! An HTTP/1 connection's socket: its timed stream, in cleartext or through its TLS session, and
//! the response bytes not yet written, which wait in a buffer until the server next has to wait
//! for the client (so a head and a short body, or a response and the `100 Continue` of the next
//! request, go out in one write).

use std::cell::{RefCell, RefMut};
use std::fs::File;
use std::io::{self, Read, Write};
use std::rc::Rc;

use crate::server::file_piece::{read_piece, FILE_PIECE};
use crate::server::timed::{TimedStream, WaitLimit};
use crate::server::tls::{TimedIo, TlsSession};
use neverblock::net::TcpStream;

/// A cheap handle (clones share everything), so the connection's read buffer and the server's
/// writers hold it alike.
#[derive(Clone)]
pub(super) struct Socket {
    inner: Rc<Inner>,
}

struct Inner {
    timed: TimedStream,
    /// The TLS session the bytes go through, on an HTTPS connection.
    /// Boxed: a session is over a kilobyte, which a cleartext connection should not carry.
    tls: Option<RefCell<Box<TlsSession>>>,
    /// Response bytes to write before the next read (see [`Socket::queue`]).
    pending: RefCell<Vec<u8>>,
}

impl Socket {
    pub(super) fn new(timed: TimedStream, tls: Option<Box<TlsSession>>) -> Socket {
        Socket { inner: Rc::new(Inner { timed, tls: tls.map(RefCell::new), pending: RefCell::default() }) }
    }

    pub(super) fn stream(&self) -> &TcpStream {
        self.inner.timed.stream()
    }

    /// The connection's stream, when this is the last handle on it and nothing is queued or held
    /// by TLS (a cleartext connection between requests): what moves to another loop.
    pub(super) fn into_stream(self) -> Option<TcpStream> {
        let inner = Rc::into_inner(self.inner)?;
        (inner.tls.is_none() && inner.pending.borrow().is_empty()).then_some(())?;
        inner.timed.into_stream()
    }

    pub(super) fn set_read_limit(&self, limit: WaitLimit) {
        self.inner.timed.set_read_limit(limit);
    }

    pub(super) fn set_write_limit(&self, limit: WaitLimit) {
        self.inner.timed.set_write_limit(limit);
    }

    /// Appends `bytes` to what is written before the next read, or by [`flush`](Socket::flush).
    pub(super) fn queue(&self, bytes: &[u8]) {
        self.inner.pending.borrow_mut().extend_from_slice(bytes);
    }

    /// The bytes waiting to be written, to append to.
    pub(super) fn pending(&self) -> RefMut<'_, Vec<u8>> {
        self.inner.pending.borrow_mut()
    }

    /// Takes the bytes waiting to be written (and their allocation), to write them with more; give
    /// the buffer back with [`give_back`](Socket::give_back).
    pub(super) fn take_pending(&self) -> Vec<u8> {
        self.inner.pending.take()
    }

    /// Puts back a buffer [`take_pending`](Socket::take_pending) took, with the bytes in it that
    /// are still to be written.
    pub(super) fn give_back(&self, bytes: Vec<u8>) {
        let mut pending = self.inner.pending.borrow_mut();
        debug_assert!(pending.is_empty(), "nothing is queued while the buffer is out");
        *pending = bytes;
    }

    /// Writes what is queued.
    ///
    /// # Errors
    ///
    /// The write's error (`TimedOut` past the write limit).
    pub(super) fn flush(&self) -> io::Result<()> {
        let mut pending = self.inner.pending.take();
        let result = self.write_all_through(&pending);
        pending.clear();
        // Keep the allocation for the next response, unless it grew large.
        if pending.capacity() <= 64 * 1024 {
            *self.inner.pending.borrow_mut() = pending;
        }
        result
    }

    /// Whether the connection is cleartext with nothing queued to write: a task with no fiber can
    /// wait for its client, the kernel holding all there is to read.
    pub(super) fn can_wait_fiberless(&self) -> bool {
        self.inner.tls.is_none() && self.inner.pending.borrow().is_empty()
    }

    /// Lets go of the write buffer's allocation while nothing is queued (a connection long idle).
    pub(super) fn release_queue(&self) {
        let mut pending = self.inner.pending.borrow_mut();
        if pending.is_empty() {
            *pending = Vec::new();
        }
    }

    /// Sends up to `len` bytes of `file` from `offset`, under the write limit, queued bytes first:
    /// with `sendfile(2)` in cleartext; over TLS, a piece read (on the blocking pool when not in
    /// the page cache) and encrypted.
    ///
    /// # Errors
    ///
    /// As [`TcpStream::send_file`], or the file's read error.
    pub(super) fn send_file(&self, file: &File, offset: u64, len: usize) -> io::Result<usize> {
        self.flush()?;
        if self.inner.tls.is_none() {
            return self.inner.timed.send_file(file, offset, len);
        }
        let piece = read_piece(file, offset, len.min(FILE_PIECE))?;
        self.write_all_through(&piece)?;
        Ok(piece.len())
    }

    /// Ends a TLS session with `close_notify`, so the client knows the response was not cut short;
    /// nothing in cleartext.
    pub(super) fn close_notify(&self) {
        if let Some(tls) = &self.inner.tls {
            let mut session = tls.borrow_mut();
            session.send_close_notify();
            let _ = rustls::Stream::new(&mut **session, &mut TimedIo(&self.inner.timed)).flush();
        }
    }

    /// Writes the queued bytes, if any.
    #[inline]
    fn flush_queued(&self) -> io::Result<()> {
        if self.inner.pending.borrow().is_empty() {
            return Ok(());
        }
        self.flush()
    }

    /// Writes all of `bytes` to the client, through TLS on an HTTPS connection.
    #[inline]
    fn write_all_through(&self, bytes: &[u8]) -> io::Result<()> {
        match &self.inner.tls {
            None => self.inner.timed.write_all(bytes),
            Some(tls) => rustls::Stream::new(&mut **tls.borrow_mut(), &mut TimedIo(&self.inner.timed)).write_all(bytes),
        }
    }
}

impl Read for Socket {
    /// Writes the queued response bytes first: the client may be waiting for them before it sends more.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.flush_queued()?;
        let inner = &*self.inner;
        match &inner.tls {
            None => inner.timed.read(buf),
            Some(tls) => rustls::Stream::new(&mut **tls.borrow_mut(), &mut TimedIo(&inner.timed)).read(buf),
        }
    }
}

impl Write for Socket {
    /// Writes the queued bytes first, then `buf`.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.flush_queued()?;
        let inner = &*self.inner;
        match &inner.tls {
            None => inner.timed.write(buf),
            Some(tls) => rustls::Stream::new(&mut **tls.borrow_mut(), &mut TimedIo(&inner.timed)).write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Socket::flush(self)
    }
}

impl std::fmt::Debug for Socket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Socket").field("tls", &self.inner.tls.is_some()).finish_non_exhaustive()
    }
}
