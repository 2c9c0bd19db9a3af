//! A TLS session as tokio's `AsyncRead + AsyncWrite`, for h2: rustls' `ServerConnection`
//! driven over the polled socket (`read_tls` → `process_new_packets` → `reader`, and `writer` →
//! `write_tls`), a socket that would block turning into `Pending` for the polling `block_on`.
//!
//! This is the loop rustls' `tlsserver-mio` example runs, with polls in place of readiness
//! callbacks; tokio-rustls does the same, but cannot take over a session whose handshake the
//! server already made on its fiber (`tls::handshake`, with its plain-HTTP answer and deadline).

use std::io::{self, Read, Write};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{ready, Context, Poll};

use neverblock::bridge::AsyncIo;
use neverblock::net::TcpStream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::server::tls::TlsSession;

/// A connection's TLS session over its socket, as h2 reads and writes it.
#[derive(Debug)]
pub(super) struct TlsIo {
    socket: AsyncIo<Rc<TcpStream>>,
    session: TlsSession,
}

impl TlsIo {
    pub(super) fn new(socket: AsyncIo<Rc<TcpStream>>, session: TlsSession) -> TlsIo {
        TlsIo { socket, session }
    }

    /// Writes the TLS records the session holds; `Ready(Ok)` once none is left.
    fn poll_write_tls(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.session.wants_write() {
            match self.session.write_tls(&mut Polled { socket: &self.socket, cx }) {
                Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// The socket within one poll, as rustls reads and writes it: `Pending` is `WouldBlock`.
struct Polled<'a, 'b> {
    socket: &'a AsyncIo<Rc<TcpStream>>,
    cx: &'a mut Context<'b>,
}

impl Read for Polled<'_, '_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.socket.poll_read(self.cx, buf) {
            Poll::Ready(result) => result,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl Write for Polled<'_, '_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.socket.poll_write(self.cx, buf) {
            Poll::Ready(result) => result,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    /// rustls hands over the records it has in one call: they leave in one `writev`.
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match self.socket.poll_write_vectored(self.cx, bufs) {
            Poll::Ready(result) => result,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl AsyncRead for TlsIo {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            match this.session.reader().read(buf.initialize_unfilled()) {
                // 0: the client's close_notify (an end without one is `UnexpectedEof`).
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
            // What the session owes the client (a key update, an alert) goes out on the way.
            if let Poll::Ready(Err(e)) = this.poll_write_tls(cx) {
                return Poll::Ready(Err(e));
            }
            match this.session.read_tls(&mut Polled { socket: &this.socket, cx }) {
                // The end of the stream: the reader says next whether it was clean.
                Ok(0) => {}
                Ok(_) => {
                    if let Err(e) = this.session.process_new_packets() {
                        // Its alert, if the socket takes it now.
                        let _ = this.poll_write_tls(cx);
                        return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, e)));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for TlsIo {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        loop {
            let n = this.session.writer().write(buf)?;
            if n > 0 || buf.is_empty() {
                // Taken into the session; its records go out now if the socket takes them, else
                // on the flush h2 makes.
                if let Poll::Ready(Err(e)) = this.poll_write_tls(cx) {
                    return Poll::Ready(Err(e));
                }
                return Poll::Ready(Ok(n));
            }
            // The session's buffer is full: empty it first.
            ready!(this.poll_write_tls(cx))?;
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.session.writer().flush()?;
        this.poll_write_tls(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.session.send_close_notify();
        ready!(this.poll_write_tls(cx))?;
        Poll::Ready(this.socket.shutdown_write())
    }
}
