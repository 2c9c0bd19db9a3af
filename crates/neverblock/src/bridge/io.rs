//! `AsyncIo`: this crate's stream sockets as tokio's and the futures crate's
//! `AsyncRead + AsyncWrite` (features `tokio` and `futures-io`).

use std::io::{self, IoSlice, Read, Write};
use std::net::Shutdown;
use std::rc::Rc;
use std::task::{Context, Poll};

use crate::net::{TcpStream, UnixStream};

/// A stream socket polled as a future's I/O: a read or write that would block
/// returns `Pending`, and the [`block_on`](crate::block_on) polling it parks its
/// fiber until the fd is ready (or its waker is woken). Polled by another
/// executor's waker, a read or write that would block waits in place instead,
/// parking the fiber (or, outside a runtime, blocking the thread) as the socket's
/// own `read` does.
///
/// With the cargo feature `tokio`, it implements `tokio::io::{AsyncRead,
/// AsyncWrite}` (the traits alone: no tokio runtime is started or needed); with
/// `futures-io`, `futures_io::{AsyncRead, AsyncWrite}`. Flushing does nothing (the
/// socket keeps no buffer); shutting down (closing) shuts down the write half.
/// The socket's own read and write timeouts do not apply to polls: put a
/// [`timeout`](crate::timeout) around the `block_on`.
///
/// # Examples
///
/// ```
/// use std::future::poll_fn;
/// use std::io::Read;
/// use neverblock::bridge::AsyncIo;
/// use neverblock::net::UnixStream;
///
/// neverblock::run(|| {
///     let (a, mut b) = UnixStream::pair().unwrap();
///     let a = AsyncIo::new(a);
///     let n = neverblock::block_on(poll_fn(|cx| a.poll_write(cx, b"pong"))).unwrap().unwrap();
///     let mut buf = [0; 4];
///     b.read_exact(&mut buf[..n]).unwrap();
///     assert_eq!(&buf, b"pong");
/// });
/// ```
#[derive(Debug)]
pub struct AsyncIo<T> {
    inner: T,
    /// Writes of at least this many bytes are made with more to come (`usize::MAX`: none).
    more_from: usize,
}

/// A [`batching`](AsyncIo::batching) socket's writes of at least this many bytes (a large
/// frame's) are made with more to come.
const BATCHED_WRITE: usize = 8 * 1024;

/// A socket [`AsyncIo`] can wrap: [`TcpStream`] and [`UnixStream`], owned or in an [`Rc`].
pub trait Socket: sealed::Sealed {}

mod sealed {
    use std::io::{self, IoSlice};
    use std::task::{Context, Poll};

    /// The polls of a socket; sealed, so the methods stay the crate's.
    pub trait Sealed {
        fn poll_read(&self, cx: &Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>>;
        fn poll_write(&self, cx: &Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>>;
        fn poll_write_vectored(&self, cx: &Context<'_>, bufs: &[IoSlice<'_>]) -> Poll<io::Result<usize>>;
        /// A write after which more is coming: the kernel may hold a partial segment back
        /// (a TCP socket's); a write for the others.
        fn poll_write_more(&self, cx: &Context<'_>, bufs: &[IoSlice<'_>]) -> Poll<io::Result<usize>> {
            self.poll_write_vectored(cx, bufs)
        }
        fn shutdown_write(&self) -> io::Result<()>;
    }
}

/// Implements [`Socket`] for a stream type holding a `NonBlocking` of a std stream, with its
/// own write with more to come if it has one.
macro_rules! socket {
    ($stream:ty $(, $write_more:path)?) => {
        impl Socket for $stream {}

        impl sealed::Sealed for $stream {
            fn poll_read(&self, cx: &Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
                self.nonblocking().poll_read_stream(cx, buf.len(), |mut s| s.read(buf))
            }

            fn poll_write(&self, cx: &Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
                self.nonblocking().poll_write_stream(cx, buf.len(), |mut s| s.write(buf))
            }

            fn poll_write_vectored(&self, cx: &Context<'_>, bufs: &[IoSlice<'_>]) -> Poll<io::Result<usize>> {
                let len = bufs.iter().map(|b| b.len()).sum();
                self.nonblocking().poll_write_stream(cx, len, |mut s| s.write_vectored(bufs))
            }

            $(fn poll_write_more(&self, cx: &Context<'_>, bufs: &[IoSlice<'_>]) -> Poll<io::Result<usize>> {
                $write_more(self, cx, bufs)
            })?

            fn shutdown_write(&self) -> io::Result<()> {
                self.shutdown(Shutdown::Write)
            }
        }
    };
}

socket!(TcpStream, TcpStream::poll_write_more);
socket!(UnixStream);

/// A socket shared by its owners (a server's connection registry and its driver, say) is
/// polled as the socket itself.
impl<T: Socket> Socket for Rc<T> {}

impl<T: Socket> sealed::Sealed for Rc<T> {
    fn poll_read(&self, cx: &Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        (**self).poll_read(cx, buf)
    }

    fn poll_write(&self, cx: &Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        (**self).poll_write(cx, buf)
    }

    fn poll_write_vectored(&self, cx: &Context<'_>, bufs: &[IoSlice<'_>]) -> Poll<io::Result<usize>> {
        (**self).poll_write_vectored(cx, bufs)
    }

    fn poll_write_more(&self, cx: &Context<'_>, bufs: &[IoSlice<'_>]) -> Poll<io::Result<usize>> {
        (**self).poll_write_more(cx, bufs)
    }

    fn shutdown_write(&self) -> io::Result<()> {
        (**self).shutdown_write()
    }
}

impl<T: Socket> AsyncIo<T> {
    /// Wraps `socket`.
    ///
    /// # Examples
    ///
    /// ```
    /// let (a, _b) = neverblock::net::UnixStream::pair().unwrap();
    /// let io = neverblock::bridge::AsyncIo::new(a);
    /// ```
    pub fn new(socket: T) -> AsyncIo<T> {
        AsyncIo { inner: socket, more_from: usize::MAX }
    }

    /// Wraps `socket` for a driver that writes frames in bursts (HTTP/2's, say): a write of
    /// 8 KiB or more tells the kernel more is coming (`MSG_MORE`), so a burst of frames
    /// leaves in full segments instead of a segment (and a wakeup of the peer) per frame,
    /// as nginx's `tcp_nopush` does. The kernel may hold the burst's last partial segment
    /// back: call the TCP socket's [`push`](crate::net::TcpStream::push) when the burst
    /// ends, before waiting. For a Unix socket it is [`new`](Self::new).
    ///
    /// # Examples
    ///
    /// See [`TcpStream::push`](crate::net::TcpStream::push).
    pub fn batching(socket: T) -> AsyncIo<T> {
        AsyncIo { inner: socket, more_from: BATCHED_WRITE }
    }

    /// The socket.
    ///
    /// # Examples
    ///
    /// ```
    /// let (a, _b) = neverblock::net::UnixStream::pair().unwrap();
    /// let io = neverblock::bridge::AsyncIo::new(a);
    /// assert!(io.get_ref().peer_addr().is_ok());
    /// ```
    pub fn get_ref(&self) -> &T {
        &self.inner
    }

    /// Gives the socket back.
    ///
    /// # Examples
    ///
    /// ```
    /// let (a, _b) = neverblock::net::UnixStream::pair().unwrap();
    /// let socket = neverblock::bridge::AsyncIo::new(a).into_inner();
    /// ```
    pub fn into_inner(self) -> T {
        self.inner
    }

    /// Reads what has arrived into `buf`: `Ready(Ok(0))` at the end of the stream,
    /// `Pending` when nothing has (the polling `block_on` then waits for the fd).
    ///
    /// # Errors
    ///
    /// The socket's; `TimedOut` when, polled by another executor, it waited in
    /// place inside an expired [`timeout`](crate::timeout).
    ///
    /// # Examples
    ///
    /// See [`AsyncIo`].
    pub fn poll_read(&self, cx: &Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        self.inner.poll_read(cx, buf)
    }

    /// Writes what fits of `buf`, or is `Pending` while nothing does.
    ///
    /// # Errors
    ///
    /// As [`poll_read`](Self::poll_read).
    ///
    /// # Examples
    ///
    /// See [`AsyncIo`].
    pub fn poll_write(&self, cx: &Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if buf.len() >= self.more_from {
            return self.inner.poll_write_more(cx, &[IoSlice::new(buf)]);
        }
        self.inner.poll_write(cx, buf)
    }

    /// Writes what fits of `bufs`, in order, or is `Pending` while nothing does.
    ///
    /// # Errors
    ///
    /// As [`poll_read`](Self::poll_read).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::future::poll_fn;
    /// use std::io::IoSlice;
    ///
    /// neverblock::run(|| {
    ///     let (a, _b) = neverblock::net::UnixStream::pair().unwrap();
    ///     let io = neverblock::bridge::AsyncIo::new(a);
    ///     let bufs = [IoSlice::new(b"he"), IoSlice::new(b"llo")];
    ///     let n = neverblock::block_on(poll_fn(|cx| io.poll_write_vectored(cx, &bufs))).unwrap();
    ///     assert_eq!(n.unwrap(), 5);
    /// });
    /// ```
    pub fn poll_write_vectored(&self, cx: &Context<'_>, bufs: &[IoSlice<'_>]) -> Poll<io::Result<usize>> {
        if bufs.iter().map(|buf| buf.len()).sum::<usize>() >= self.more_from {
            return self.inner.poll_write_more(cx, bufs);
        }
        self.inner.poll_write_vectored(cx, bufs)
    }

    /// Shuts down the write half: the peer reads the end of the stream.
    ///
    /// # Errors
    ///
    /// The system call's (`NotConnected` once the peer has gone).
    ///
    /// # Examples
    ///
    /// ```
    /// let (a, _b) = neverblock::net::UnixStream::pair().unwrap();
    /// neverblock::bridge::AsyncIo::new(a).shutdown_write().unwrap();
    /// ```
    pub fn shutdown_write(&self) -> io::Result<()> {
        self.inner.shutdown_write()
    }
}

#[cfg(feature = "tokio")]
mod tokio_traits {
    use std::io::{self, IoSlice};
    use std::pin::Pin;
    use std::task::{ready, Context, Poll};

    use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

    use super::{AsyncIo, Socket};

    impl<T: Socket + Unpin> AsyncRead for AsyncIo<T> {
        fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
            let n = ready!(AsyncIo::poll_read(&*self, cx, buf.initialize_unfilled()))?;
            buf.advance(n);
            Poll::Ready(Ok(()))
        }
    }

    impl<T: Socket + Unpin> AsyncWrite for AsyncIo<T> {
        fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
            AsyncIo::poll_write(&*self, cx, buf)
        }

        fn poll_write_vectored(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            AsyncIo::poll_write_vectored(&*self, cx, bufs)
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(self.shutdown_write())
        }
    }
}

#[cfg(feature = "futures-io")]
mod futures_traits {
    use std::io::{self, IoSlice};
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use futures_io::{AsyncRead, AsyncWrite};

    use super::{AsyncIo, Socket};

    impl<T: Socket + Unpin> AsyncRead for AsyncIo<T> {
        fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
            AsyncIo::poll_read(&*self, cx, buf)
        }
    }

    impl<T: Socket + Unpin> AsyncWrite for AsyncIo<T> {
        fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
            AsyncIo::poll_write(&*self, cx, buf)
        }

        fn poll_write_vectored(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            AsyncIo::poll_write_vectored(&*self, cx, bufs)
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(self.shutdown_write())
        }
    }
}
