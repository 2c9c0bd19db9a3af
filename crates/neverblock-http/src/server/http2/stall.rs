//! The connection's I/O as h2 drives it, its writes watched: since when they have waited for a
//! client that reads nothing (one flooding SETTINGS or PINGs without reading their ACKs, or a
//! stalled download), so that the connection's fiber can end it after the send timeout, as an
//! HTTP/1 write that waits that long ends its connection.
//!
//! h2 reads no further frame while its answers to earlier ones cannot be written, so such a
//! client holds no more than the socket's buffers and h2's one write buffer; only time is left
//! to bound.

use std::cell::Cell;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Since when the connection's writes have made no progress, if they wait.
#[derive(Debug, Default)]
pub(super) struct Stall {
    since: Cell<Option<Instant>>,
}

impl Stall {
    /// How long the writes have waited, if they do.
    pub(super) fn waited(&self) -> Option<Duration> {
        self.since.get().map(|since| since.elapsed())
    }

    /// Notes what a write or flush did: waiting starts (or goes on) a stall, anything else ends it.
    fn note<R>(&self, polled: Poll<io::Result<R>>) -> Poll<io::Result<R>> {
        match polled {
            Poll::Pending => {
                if self.since.get().is_none() {
                    self.since.set(Some(Instant::now()));
                }
            }
            Poll::Ready(_) => self.since.set(None),
        }
        polled
    }
}

/// `io`, its writes noted in a [`Stall`] that the connection's fiber reads.
#[derive(Debug)]
pub(super) struct Watched<T> {
    io: T,
    stall: Rc<Stall>,
}

impl<T> Watched<T> {
    pub(super) fn new(io: T) -> (Watched<T>, Rc<Stall>) {
        let stall = Rc::new(Stall::default());
        (Watched { io, stall: stall.clone() }, stall)
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.stall.note(Pin::new(&mut this.io).poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.stall.note(Pin::new(&mut this.io).poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.stall.note(Pin::new(&mut this.io).poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.stall.note(Pin::new(&mut this.io).poll_shutdown(cx))
    }
}
