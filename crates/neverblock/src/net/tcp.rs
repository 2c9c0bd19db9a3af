//! TCP streams and listeners that park the fiber, not the thread.

use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::addr::{each_addr, ToSocketAddrs};
use super::nonblocking::NonBlocking;

/// A TCP connection, like [`std::net::TcpStream`]: reads and writes park the
/// calling fiber until the socket is ready (outside a runtime they block the
/// thread, as std's do). Implements [`Read`] and [`Write`], also through `&TcpStream`,
/// so one fiber can read while another writes.
///
/// # Examples
///
/// ```
/// use std::io::{Read, Write};
/// use neverblock::net::{TcpListener, TcpStream};
///
/// neverblock::run(|| {
///     let listener = TcpListener::bind("127.0.0.1:0").unwrap();
///     let addr = listener.local_addr().unwrap();
///     let server = neverblock::spawn(move || {
///         let (mut conn, _) = listener.accept().unwrap();
///         let mut buf = [0; 5];
///         conn.read_exact(&mut buf).unwrap();
///         conn.write_all(&buf).unwrap();
///     });
///     let mut client = TcpStream::connect(addr).unwrap();
///     client.write_all(b"hello").unwrap();
///     let mut echo = String::new();
///     client.read_to_string(&mut echo).unwrap();
///     assert_eq!(echo, "hello");
///     server.join().unwrap();
/// });
/// ```
#[derive(Debug)]
pub struct TcpStream {
    io: NonBlocking<std::net::TcpStream>,
    /// Whether a write told the kernel more was coming (`MSG_MORE`) since the last
    /// [`push`](TcpStream::push), so a partial segment may be held back.
    held: AtomicBool,
}

/// When TCP keepalive probes go out on an idle connection: the first after `idle` without
/// traffic, then one every `interval`, the connection dropped after `retries` unanswered ones.
/// A dead peer is found after about `idle + interval * retries`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeepAlive {
    /// Idle time before the first probe.
    pub idle: Duration,
    /// Time between probes.
    pub interval: Duration,
    /// Unanswered probes before the connection is dropped.
    pub retries: u32,
}

impl TcpStream {
    fn wrap(stream: std::net::TcpStream) -> TcpStream {
        TcpStream { io: NonBlocking::new(stream), held: AtomicBool::new(false) }
    }

    /// Connects to the first address of `addr` that accepts (a host name is
    /// resolved on the blocking pool).
    ///
    /// # Errors
    ///
    /// The resolver's error, or the last address's connect error (`ConnectionRefused`, …).
    pub fn connect(addr: impl ToSocketAddrs) -> io::Result<TcpStream> {
        each_addr(&addr, |a| TcpStream::connect_addr(a, None))
    }

    /// Connects to `addr`, giving up with `TimedOut` after `timeout`.
    ///
    /// # Errors
    ///
    /// `TimedOut`, or the connect error; `InvalidInput` for a zero timeout.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use neverblock::net::{TcpListener, TcpStream};
    ///
    /// let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    /// let addr = listener.local_addr().unwrap();
    /// let conn = neverblock::run(move || TcpStream::connect_timeout(&addr, Duration::from_secs(1)));
    /// assert_eq!(conn.unwrap().peer_addr().unwrap(), addr);
    /// ```
    pub fn connect_timeout(addr: &SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
        if timeout.is_zero() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "cannot connect with a 0 duration timeout"));
        }
        TcpStream::connect_addr(addr, Some(timeout))
    }

    fn connect_addr(addr: &SocketAddr, timeout: Option<Duration>) -> io::Result<TcpStream> {
        let socket = Socket::new(Domain::for_address(*addr), Type::STREAM.nonblocking(), Some(Protocol::TCP))?;
        let pending = match socket.connect(&SockAddr::from(*addr)) {
            Ok(()) => false,
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => true,
            Err(e) => return Err(e),
        };
        let stream = TcpStream::wrap(std::net::TcpStream::from(socket));
        if pending {
            let deadline = timeout.map(|t| std::time::Instant::now() + t);
            loop {
                stream.io.wait_writable(deadline).map_err(|e| match e.kind() {
                    io::ErrorKind::TimedOut => {
                        io::Error::new(io::ErrorKind::TimedOut, format!("connect to {addr} timed out"))
                    }
                    _ => e,
                })?;
                if let Some(e) = stream.take_error()? {
                    return Err(e);
                }
                // A wake can be spurious (an event for an earlier file under this fd number):
                // connected only once the peer is known.
                match stream.peer_addr() {
                    Ok(_) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotConnected => {}
                    Err(e) => return Err(e),
                }
            }
        }
        stream.refuse_self_connect(addr)?;
        Ok(stream)
    }

    /// Refuses a connection to itself. When nothing listens on a loopback port inside the
    /// kernel's ephemeral range, a connect can be given that very port as its source and
    /// "succeed" by TCP's simultaneous open: the client then reads its own writes, and holds the
    /// port a server wants to bind. Such a connection is closed at once and reported as refused,
    /// which it is (Go's dialer does the same).
    fn refuse_self_connect(&self, addr: &SocketAddr) -> io::Result<()> {
        if self.local_addr()? == self.peer_addr()? {
            // Closed with a reset, so the port is not held in TIME_WAIT either.
            socket2::SockRef::from(self.io.get_ref()).set_linger(Some(Duration::ZERO))?;
            return Err(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                format!("nothing listens on {addr} (the connect reached its own source port)"),
            ));
        }
        Ok(())
    }

    /// Wraps a std stream, switching it to non-blocking mode.
    ///
    /// # Errors
    ///
    /// If the mode cannot be set.
    ///
    /// # Examples
    ///
    /// ```
    /// let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// let std_stream = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    /// let stream = neverblock::net::TcpStream::from_std(std_stream).unwrap();
    /// let back: std::net::TcpStream = stream.into_std().unwrap();
    /// assert!(back.peer_addr().is_ok());
    /// ```
    pub fn from_std(stream: std::net::TcpStream) -> io::Result<TcpStream> {
        stream.set_nonblocking(true)?;
        Ok(TcpStream::wrap(stream))
    }

    /// Gives back the std stream, in blocking mode again; timeouts set here do not carry over.
    ///
    /// # Errors
    ///
    /// If the mode cannot be set.
    pub fn into_std(self) -> io::Result<std::net::TcpStream> {
        let stream = self.io.into_inner();
        stream.set_nonblocking(false)?;
        Ok(stream)
    }

    /// The remote address.
    ///
    /// # Errors
    ///
    /// `NotConnected`, or the system call's error.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.io.get_ref().peer_addr()
    }

    /// The local address.
    ///
    /// # Errors
    ///
    /// The system call's error.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.io.get_ref().local_addr()
    }

    /// The non-blocking fd under the stream, for [`AsyncIo`](crate::bridge::AsyncIo)'s polls.
    pub(crate) fn nonblocking(&self) -> &NonBlocking<std::net::TcpStream> {
        &self.io
    }

    /// Shuts down the read half, the write half, or both.
    ///
    /// # Errors
    ///
    /// The system call's error (`NotConnected`, …).
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.io.get_ref().shutdown(how)
    }

    /// Sends at once what writes made with more to come (an
    /// [`AsyncIo::batching`](crate::bridge::AsyncIo::batching) socket's large writes) held
    /// back: the last partial segment, which the kernel would otherwise keep for up to
    /// 200 ms waiting for more. Leaving `TCP_CORK` does it, so a socket corked by
    /// `setsockopt` is uncorked too. No system call when no such write was made since the
    /// last push.
    ///
    /// # Errors
    ///
    /// The system call's error.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::future::poll_fn;
    /// use std::io::{IoSlice, Read};
    /// use std::rc::Rc;
    /// use neverblock::bridge::AsyncIo;
    /// use neverblock::net::{TcpListener, TcpStream};
    ///
    /// neverblock::run(|| {
    ///     let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    ///     let client = Rc::new(TcpStream::connect(listener.local_addr().unwrap()).unwrap());
    ///     let (mut server, _) = listener.accept().unwrap();
    ///     let io = AsyncIo::batching(client.clone());
    ///     let frame = vec![7u8; 20_000];
    ///     let n = neverblock::block_on(poll_fn(|cx| io.poll_write_vectored(cx, &[IoSlice::new(&frame)])));
    ///     assert_eq!(n.unwrap().unwrap(), frame.len());
    ///     client.push().unwrap(); // the burst is over: send its last segment now
    ///     let mut got = vec![0; frame.len()];
    ///     server.read_exact(&mut got).unwrap();
    ///     assert_eq!(got, frame);
    /// });
    /// ```
    pub fn push(&self) -> io::Result<()> {
        if self.held.swap(false, Ordering::Relaxed) {
            rustix::net::sockopt::set_tcp_cork(self, false)?;
        }
        Ok(())
    }

    /// Polls a write of `bufs` that tells the kernel more is coming (`MSG_MORE`): it may
    /// hold back a last partial segment until [`push`](TcpStream::push).
    pub(crate) fn poll_write_more(&self, cx: &Context<'_>, bufs: &[IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let len = bufs.iter().map(|buf| buf.len()).sum();
        let flags = rustix::net::SendFlags::MORE | rustix::net::SendFlags::NOSIGNAL;
        let n = ready!(self.io.poll_write_stream(cx, len, |socket| {
            Ok(rustix::net::sendmsg(socket, bufs, &mut rustix::net::SendAncillaryBuffer::default(), flags)?)
        }))?;
        self.held.store(true, Ordering::Relaxed);
        Poll::Ready(Ok(n))
    }

    /// Turns Nagle's algorithm off (`true`) or on.
    ///
    /// # Errors
    ///
    /// The system call's error.
    pub fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        self.io.get_ref().set_nodelay(nodelay)
    }

    /// Whether Nagle's algorithm is off.
    ///
    /// # Errors
    ///
    /// The system call's error.
    pub fn nodelay(&self) -> io::Result<bool> {
        self.io.get_ref().nodelay()
    }

    /// Makes each read that waits longer than `timeout` fail with `TimedOut` (`None`: wait forever).
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a zero duration, as std.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.io.set_read_timeout(timeout)
    }

    /// The read timeout.
    ///
    /// # Errors
    ///
    /// Never; a `Result` as in std.
    pub fn read_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(self.io.read_timeout())
    }

    /// Makes each write that waits longer than `timeout` fail with `TimedOut` (`None`: wait forever).
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a zero duration, as std.
    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.io.set_write_timeout(timeout)
    }

    /// The write timeout.
    ///
    /// # Errors
    ///
    /// Never; a `Result` as in std.
    pub fn write_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(self.io.write_timeout())
    }

    /// Makes each read that waits fail with `TimedOut` once `deadline` has passed (`None`: no
    /// deadline), as Go's `SetReadDeadline`: one instant for every read until it is changed, where
    /// a timeout starts again with each read. A read whose data is already there succeeds, past its
    /// deadline too: the deadline bounds waiting. With a read timeout as well, a wait ends at
    /// whichever comes first. Setting it reads no clock.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::{ErrorKind, Read};
    /// use std::time::{Duration, Instant};
    ///
    /// neverblock::run(|| {
    ///     let listener = neverblock::net::TcpListener::bind("127.0.0.1:0").unwrap();
    ///     let client = neverblock::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    ///     let _server = listener.accept().unwrap();
    ///     let deadline = Instant::now() + Duration::from_millis(20);
    ///     client.set_read_deadline(Some(deadline));
    ///     assert_eq!(client.read_deadline(), Some(deadline));
    ///     let err = (&client).read(&mut [0; 8]).unwrap_err();
    ///     assert_eq!(err.kind(), ErrorKind::TimedOut);
    ///     assert!(Instant::now() >= deadline);
    /// });
    /// ```
    pub fn set_read_deadline(&self, deadline: Option<Instant>) {
        self.io.set_read_deadline(deadline);
    }

    /// The read deadline: the instant set, to the nanosecond, unless it lies before the runtime
    /// first read the clock (then that first reading, passed as well).
    pub fn read_deadline(&self) -> Option<Instant> {
        self.io.read_deadline()
    }

    /// Makes each write that waits fail with `TimedOut` once `deadline` has passed (`None`: no
    /// deadline), as [`set_read_deadline`](Self::set_read_deadline) does reads.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    ///
    /// neverblock::run(|| {
    ///     let listener = neverblock::net::TcpListener::bind("127.0.0.1:0").unwrap();
    ///     let client = neverblock::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    ///     let deadline = Instant::now() + Duration::from_secs(5);
    ///     client.set_write_deadline(Some(deadline));
    ///     assert_eq!(client.write_deadline(), Some(deadline));
    ///     client.set_write_deadline(None);
    ///     assert_eq!(client.write_deadline(), None);
    /// });
    /// ```
    pub fn set_write_deadline(&self, deadline: Option<Instant>) {
        self.io.set_write_deadline(deadline);
    }

    /// The write deadline, as [`read_deadline`](Self::read_deadline) gives the read one.
    pub fn write_deadline(&self) -> Option<Instant> {
        self.io.write_deadline()
    }

    /// Reads without consuming, parking until at least one byte (or EOF) is there.
    ///
    /// # Errors
    ///
    /// As [`Read::read`].
    pub fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.io.read_with(|s| s.peek(buf))
    }

    /// Sends up to `len` bytes of `file`, from `offset`, with `sendfile(2)`: the
    /// kernel copies them from the page cache to the socket, never through user
    /// memory. Parks the calling fiber while the socket's buffer is full (under the
    /// write timeout), and while a range not yet in the page cache is read into it
    /// on the blocking pool, so a cold file never stalls the loop. Sends at most
    /// 512 KiB a call, so one fast client does not hold its loop; call again for
    /// the rest. Returns how many bytes were sent: 0 only when `len` is 0 or
    /// `offset` is at or past the end of the file.
    ///
    /// # Errors
    ///
    /// As [`Write::write`] (`TimedOut` past the write timeout, `BrokenPipe`,
    /// `ConnectionReset`); the file's read error.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::{Read, Write};
    /// use neverblock::net::{TcpListener, TcpStream};
    ///
    /// let path = std::env::temp_dir().join(format!("send-file-doc-{}", std::process::id()));
    /// std::fs::write(&path, b"hello, file").unwrap();
    /// let file = std::fs::File::open(&path).unwrap();
    /// neverblock::run(move || {
    ///     let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    ///     let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    ///     let (server, _) = listener.accept().unwrap();
    ///     let (mut offset, end) = (7, file.metadata().unwrap().len());
    ///     while offset < end {
    ///         offset += server.send_file(&file, offset, (end - offset) as usize).unwrap() as u64;
    ///     }
    ///     drop(server);
    ///     let mut got = String::new();
    ///     client.read_to_string(&mut got).unwrap();
    ///     assert_eq!(got, "file");
    /// });
    /// std::fs::remove_file(path).unwrap();
    /// ```
    pub fn send_file(&self, file: &std::fs::File, offset: u64, len: usize) -> io::Result<usize> {
        let len = len.min(super::send_file::MAX_CHUNK);
        if len > 0 && !super::send_file::is_cached(file, offset, len) {
            super::send_file::warm(file, offset, len)?;
        }
        self.io.write_with(|s| super::send_file::send_once(s, file, offset, len))
    }

    /// Reads without consuming and without waiting: what has arrived, `Ok(0)` once
    /// the peer has closed, `WouldBlock` when nothing has. A pool checks an idle
    /// connection with it (an idle connection's server should have nothing to say).
    ///
    /// # Errors
    ///
    /// `WouldBlock` when nothing has arrived; the connection's error (`ConnectionReset`, …).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::ErrorKind;
    /// use neverblock::net::{TcpListener, TcpStream};
    ///
    /// neverblock::run(|| {
    ///     let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    ///     let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    ///     let (server, _) = listener.accept().unwrap();
    ///     let mut byte = [0];
    ///     assert_eq!(client.try_peek(&mut byte).unwrap_err().kind(), ErrorKind::WouldBlock);
    ///     drop(server);
    ///     assert_eq!(client.try_peek(&mut byte).unwrap(), 0, "closed");
    /// });
    /// ```
    pub fn try_peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.io.try_peek(buf)
    }

    /// Turns TCP keepalive probing on with `keepalive`'s timing, or off with `None`: a peer that
    /// vanished (a dead network, a crashed host) is then found while the connection is idle,
    /// and a fiber reading it gets an error instead of waiting forever.
    ///
    /// # Errors
    ///
    /// The system call's error.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use neverblock::net::{KeepAlive, TcpListener, TcpStream};
    ///
    /// let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    /// let addr = listener.local_addr().unwrap();
    /// let stream = neverblock::run(move || TcpStream::connect(addr)).unwrap();
    /// let probing = KeepAlive { idle: Duration::from_secs(30), interval: Duration::from_secs(10), retries: 3 };
    /// stream.set_keepalive(Some(&probing)).unwrap();
    /// assert_eq!(stream.keepalive().unwrap(), Some(probing));
    /// ```
    pub fn set_keepalive(&self, keepalive: Option<&KeepAlive>) -> io::Result<()> {
        let socket = socket2::SockRef::from(self.io.get_ref());
        match keepalive {
            None => socket.set_keepalive(false),
            Some(k) => socket.set_tcp_keepalive(
                &socket2::TcpKeepalive::new().with_time(k.idle).with_interval(k.interval).with_retries(k.retries),
            ),
        }
    }

    /// The keepalive probing set on the socket, `None` when off.
    ///
    /// # Errors
    ///
    /// The system call's error.
    pub fn keepalive(&self) -> io::Result<Option<KeepAlive>> {
        let socket = socket2::SockRef::from(self.io.get_ref());
        if !socket.keepalive()? {
            return Ok(None);
        }
        Ok(Some(KeepAlive {
            idle: socket.tcp_keepalive_time()?,
            interval: socket.tcp_keepalive_interval()?,
            retries: socket.tcp_keepalive_retries()?,
        }))
    }

    /// How long written data may stay unacknowledged before the kernel drops the connection
    /// (`TCP_USER_TIMEOUT`; `None`: the system's default, many minutes of retransmissions).
    ///
    /// # Errors
    ///
    /// The system call's error.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use neverblock::net::{TcpListener, TcpStream};
    ///
    /// let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    /// let addr = listener.local_addr().unwrap();
    /// let stream = neverblock::run(move || TcpStream::connect(addr)).unwrap();
    /// stream.set_user_timeout(Some(Duration::from_secs(60))).unwrap();
    /// assert_eq!(stream.user_timeout().unwrap(), Some(Duration::from_secs(60)));
    /// ```
    pub fn set_user_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        socket2::SockRef::from(self.io.get_ref()).set_tcp_user_timeout(timeout)
    }

    /// The `TCP_USER_TIMEOUT` set on the socket, `None` when it is the system's default.
    ///
    /// # Errors
    ///
    /// The system call's error.
    pub fn user_timeout(&self) -> io::Result<Option<Duration>> {
        socket2::SockRef::from(self.io.get_ref()).tcp_user_timeout()
    }

    /// The pending socket error (`SO_ERROR`), cleared by reading it.
    ///
    /// # Errors
    ///
    /// The system call's error.
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.io.get_ref().take_error()
    }
}

// Reads and writes are system calls made here (rustix's), not through libc: a program that links
// the blocking-call hooks has libc's `recv` and `send` lead through them, which would only look
// up this socket's state to make the same call.
impl Read for &TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.io.read_stream(buf.len(), |s| Ok(rustix::net::recv(s, &mut *buf, rustix::net::RecvFlags::empty())?.0))
    }

    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        let len = bufs.iter().map(|b| b.len()).sum();
        self.io.read_stream(len, |mut s| s.read_vectored(bufs))
    }
}

impl Write for &TcpStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // MSG_NOSIGNAL: a peer gone is an error here (EPIPE), never a SIGPIPE, as std's send does.
        self.io.write_stream(buf.len(), |s| Ok(rustix::net::send(s, buf, rustix::net::SendFlags::NOSIGNAL)?))
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let len = bufs.iter().map(|b| b.len()).sum();
        self.io.write_stream(len, |mut s| s.write_vectored(bufs))
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Read for TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&*self).read(buf)
    }

    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        (&*self).read_vectored(bufs)
    }
}

impl Write for TcpStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&*self).write(buf)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        (&*self).write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl AsFd for TcpStream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.io.get_ref().as_fd()
    }
}

impl AsRawFd for TcpStream {
    fn as_raw_fd(&self) -> RawFd {
        self.io.get_ref().as_raw_fd()
    }
}

/// A TCP listening socket, like [`std::net::TcpListener`]; `accept` parks the
/// calling fiber until a connection arrives. Bound with `SO_REUSEADDR` and a
/// backlog of 4096 (capped by `net.core.somaxconn`); to listen on one port from
/// every loop, see [`bind_reuse_port`](TcpListener::bind_reuse_port).
///
/// For a server loop that survives running out of file descriptors, see
/// [`serve`](super::serve).
///
/// # Examples
///
/// ```
/// use neverblock::net::{TcpListener, TcpStream};
///
/// neverblock::run(|| {
///     let listener = TcpListener::bind("127.0.0.1:0").unwrap();
///     let addr = listener.local_addr().unwrap();
///     let client = neverblock::spawn(move || TcpStream::connect(addr).unwrap().local_addr().unwrap());
///     let (_conn, peer) = listener.accept().unwrap();
///     assert_eq!(peer, client.join().unwrap());
/// });
/// ```
#[derive(Debug)]
pub struct TcpListener {
    io: NonBlocking<std::net::TcpListener>,
}

impl TcpListener {
    /// Binds to the first address of `addr` that can be bound.
    ///
    /// # Errors
    ///
    /// The resolver's error, or the last address's bind error (`AddrInUse`, …).
    pub fn bind(addr: impl ToSocketAddrs) -> io::Result<TcpListener> {
        each_addr(&addr, |a| TcpListener::bind_addr(a, false))
    }

    /// Like [`bind`](TcpListener::bind), with `SO_REUSEPORT` set too: every listener
    /// bound this way to the same address (by the same user) gets a share of it, and
    /// the kernel spreads incoming connections across them (by a hash of each
    /// connection's addresses and ports). A server binds one per loop, each with its
    /// own accept loop, so accepts and requests are spread over the threads (nginx's
    /// `reuseport`). Port 0 picks a port no other listener holds; bind the others to
    /// the address the first one got ([`local_addr`](TcpListener::local_addr)).
    ///
    /// Any process of the same user may join the group the same way: a second
    /// server started on a port in use shares its connections instead of failing.
    /// A plain [`bind`](TcpListener::bind) first (then dropped) catches that.
    ///
    /// # Errors
    ///
    /// As [`bind`](TcpListener::bind): `AddrInUse` if a listener without the option,
    /// or another user's, holds the address.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock::net::TcpListener;
    /// use neverblock::runtime::{spawn_on, Builder};
    ///
    /// Builder::new().threads(2).run(|| {
    ///     let first = TcpListener::bind_reuse_port("127.0.0.1:0").unwrap();
    ///     let addr = first.local_addr().unwrap();
    ///     // Loop 1 listens on the same port; a server runs `net::serve` on each.
    ///     let second = spawn_on(1, move || TcpListener::bind_reuse_port(addr)?.local_addr());
    ///     assert_eq!(second.join().unwrap().unwrap(), addr);
    ///     // Without the option, the port is taken.
    ///     assert!(TcpListener::bind(addr).is_err());
    /// });
    /// ```
    pub fn bind_reuse_port(addr: impl ToSocketAddrs) -> io::Result<TcpListener> {
        each_addr(&addr, |a| TcpListener::bind_addr(a, true))
    }

    fn bind_addr(addr: &SocketAddr, reuse_port: bool) -> io::Result<TcpListener> {
        let socket = Socket::new(Domain::for_address(*addr), Type::STREAM.nonblocking(), Some(Protocol::TCP))?;
        socket.set_reuse_address(true)?;
        if reuse_port {
            socket.set_reuse_port(true)?;
        }
        socket.bind(&SockAddr::from(*addr))?;
        socket.listen(super::BACKLOG)?;
        Ok(TcpListener { io: NonBlocking::new(socket.into()) })
    }

    /// Waits for a connection. The stream is non-blocking like every stream here.
    ///
    /// # Errors
    ///
    /// The system call's error. `EMFILE`/`ENFILE` (out of file descriptors) leave
    /// the connection waiting in the backlog: call again later, as [`serve`](super::serve) does.
    pub fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        let (stream, addr) = self.io.read_with(|l| l.accept())?;
        Ok((TcpStream::from_std(stream)?, addr))
    }

    /// Accepted connections, forever (each `accept` in turn).
    pub fn incoming(&self) -> impl Iterator<Item = io::Result<TcpStream>> + '_ {
        std::iter::repeat_with(|| self.accept().map(|(s, _)| s))
    }

    /// The bound address (with the port the system picked, for port 0).
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
    pub fn from_std(listener: std::net::TcpListener) -> io::Result<TcpListener> {
        listener.set_nonblocking(true)?;
        Ok(TcpListener { io: NonBlocking::new(listener) })
    }

    /// Gives back the std listener, in blocking mode again.
    ///
    /// # Errors
    ///
    /// If the mode cannot be set.
    pub fn into_std(self) -> io::Result<std::net::TcpListener> {
        let listener = self.io.into_inner();
        listener.set_nonblocking(false)?;
        Ok(listener)
    }
}

impl AsFd for TcpListener {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.io.get_ref().as_fd()
    }
}

impl AsRawFd for TcpListener {
    fn as_raw_fd(&self) -> RawFd {
        self.io.get_ref().as_raw_fd()
    }
}
