//! Unix-domain streams and listeners that park the fiber, not the thread.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use socket2::{Domain, SockAddr, Socket, Type};

use super::nonblocking::NonBlocking;

/// A Unix-domain stream, like [`std::os::unix::net::UnixStream`]; reads and
/// writes park the calling fiber (outside a runtime they block the thread).
///
/// # Examples
///
/// ```
/// use std::io::{Read, Write};
/// use neverblock::net::UnixStream;
///
/// neverblock::run(|| {
///     let (mut a, mut b) = UnixStream::pair().unwrap();
///     let reader = neverblock::spawn(move || {
///         let mut s = String::new();
///         b.read_to_string(&mut s).unwrap();
///         s
///     });
///     a.write_all(b"over the socket").unwrap();
///     drop(a);
///     assert_eq!(reader.join().unwrap(), "over the socket");
/// });
/// ```
#[derive(Debug)]
pub struct UnixStream {
    io: NonBlocking<std::os::unix::net::UnixStream>,
}

impl UnixStream {
    /// Connects to the socket at `path`. A listener whose backlog is full makes
    /// the connect return `WouldBlock` at once (Unix sockets do not wait for
    /// room); it is retried every millisecond, parking only the fiber, until
    /// the write timeout (none here: forever).
    ///
    /// # Errors
    ///
    /// `NotFound`, `ConnectionRefused`, or the system call's error.
    pub fn connect(path: impl AsRef<Path>) -> io::Result<UnixStream> {
        let addr = SockAddr::unix(path)?;
        let socket = Socket::new(Domain::UNIX, Type::STREAM.nonblocking(), None)?;
        loop {
            match socket.connect(&addr) {
                Ok(()) => break,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => crate::sleep(Duration::from_millis(1)),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(UnixStream { io: NonBlocking::new(socket.into()) })
    }

    /// A connected pair.
    ///
    /// # Errors
    ///
    /// The system call's error (out of file descriptors, …).
    pub fn pair() -> io::Result<(UnixStream, UnixStream)> {
        let (a, b) = std::os::unix::net::UnixStream::pair()?;
        Ok((UnixStream::from_std(a)?, UnixStream::from_std(b)?))
    }

    /// Wraps a std stream, switching it to non-blocking mode.
    ///
    /// # Errors
    ///
    /// If the mode cannot be set.
    pub fn from_std(stream: std::os::unix::net::UnixStream) -> io::Result<UnixStream> {
        stream.set_nonblocking(true)?;
        Ok(UnixStream { io: NonBlocking::new(stream) })
    }

    /// Gives back the std stream, in blocking mode again.
    ///
    /// # Errors
    ///
    /// If the mode cannot be set.
    pub fn into_std(self) -> io::Result<std::os::unix::net::UnixStream> {
        let stream = self.io.into_inner();
        stream.set_nonblocking(false)?;
        Ok(stream)
    }

    /// The local address.
    ///
    /// # Errors
    ///
    /// The system call's error.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.io.get_ref().local_addr()
    }

    /// The peer's address.
    ///
    /// # Errors
    ///
    /// The system call's error.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.io.get_ref().peer_addr()
    }

    /// The non-blocking fd under the stream, for [`AsyncIo`](crate::bridge::AsyncIo)'s polls.
    pub(crate) fn nonblocking(&self) -> &NonBlocking<std::os::unix::net::UnixStream> {
        &self.io
    }

    /// Shuts down the read half, the write half, or both.
    ///
    /// # Errors
    ///
    /// The system call's error.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.io.get_ref().shutdown(how)
    }

    /// Reads without consuming and without waiting: what has arrived, `Ok(0)` once
    /// the peer has closed, `WouldBlock` when nothing has.
    ///
    /// # Errors
    ///
    /// `WouldBlock` when nothing has arrived; the connection's error.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::{ErrorKind, Write};
    /// use neverblock::net::UnixStream;
    ///
    /// let (a, mut b) = UnixStream::pair().unwrap();
    /// let mut byte = [0];
    /// assert_eq!(a.try_peek(&mut byte).unwrap_err().kind(), ErrorKind::WouldBlock);
    /// b.write_all(b"x").unwrap();
    /// assert_eq!(a.try_peek(&mut byte).unwrap(), 1);
    /// assert_eq!(a.try_peek(&mut byte).unwrap(), 1, "still there: a peek consumes nothing");
    /// ```
    pub fn try_peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.io.try_peek(buf)
    }

    /// Makes each read that waits longer than `timeout` fail with `TimedOut`.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a zero duration.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.io.set_read_timeout(timeout)
    }

    /// Makes each write that waits longer than `timeout` fail with `TimedOut`.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a zero duration.
    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.io.set_write_timeout(timeout)
    }
}

impl Read for &UnixStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.io.read_stream(buf.len(), |mut s| s.read(buf))
    }
}

impl Write for &UnixStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.io.write_stream(buf.len(), |mut s| s.write(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Read for UnixStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&*self).read(buf)
    }
}

impl Write for UnixStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&*self).write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl AsFd for UnixStream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.io.get_ref().as_fd()
    }
}

impl AsRawFd for UnixStream {
    fn as_raw_fd(&self) -> RawFd {
        self.io.get_ref().as_raw_fd()
    }
}

/// A Unix-domain listening socket; `accept` parks the calling fiber.
///
/// # Examples
///
/// ```
/// use neverblock::net::{UnixListener, UnixStream};
///
/// let dir = std::env::temp_dir().join(format!("nb-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let path = dir.join("sock");
/// let p = path.clone();
/// neverblock::run(move || {
///     let listener = UnixListener::bind(&p).unwrap();
///     let client = neverblock::spawn(move || UnixStream::connect(p).unwrap());
///     let (_conn, _) = listener.accept().unwrap();
///     client.join().unwrap();
/// });
/// std::fs::remove_dir_all(dir).unwrap();
/// ```
#[derive(Debug)]
pub struct UnixListener {
    io: NonBlocking<std::os::unix::net::UnixListener>,
}

impl UnixListener {
    /// Binds to `path` (which must not exist) with a backlog of 4096.
    ///
    /// # Errors
    ///
    /// `AddrInUse` if the path exists, or the system call's error.
    pub fn bind(path: impl AsRef<Path>) -> io::Result<UnixListener> {
        let socket = Socket::new(Domain::UNIX, Type::STREAM.nonblocking(), None)?;
        socket.bind(&SockAddr::unix(path)?)?;
        socket.listen(super::BACKLOG)?;
        Ok(UnixListener { io: NonBlocking::new(socket.into()) })
    }

    /// Waits for a connection.
    ///
    /// # Errors
    ///
    /// The system call's error (`EMFILE`, … as [`TcpListener::accept`](super::TcpListener::accept)).
    pub fn accept(&self) -> io::Result<(UnixStream, SocketAddr)> {
        let (stream, addr) = self.io.read_with(|l| l.accept())?;
        Ok((UnixStream::from_std(stream)?, addr))
    }

    /// The bound address.
    ///
    /// # Errors
    ///
    /// The system call's error.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.io.get_ref().local_addr()
    }

    /// Wraps a std listener, switching it to non-blocking mode.
    ///
    /// # Errors
    ///
    /// If the mode cannot be set.
    pub fn from_std(listener: std::os::unix::net::UnixListener) -> io::Result<UnixListener> {
        listener.set_nonblocking(true)?;
        Ok(UnixListener { io: NonBlocking::new(listener) })
    }

    /// Gives back the std listener, in blocking mode again.
    ///
    /// # Errors
    ///
    /// If the mode cannot be set.
    pub fn into_std(self) -> io::Result<std::os::unix::net::UnixListener> {
        let listener = self.io.into_inner();
        listener.set_nonblocking(false)?;
        Ok(listener)
    }
}

impl AsFd for UnixListener {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.io.get_ref().as_fd()
    }
}

impl AsRawFd for UnixListener {
    fn as_raw_fd(&self) -> RawFd {
        self.io.get_ref().as_raw_fd()
    }
}
