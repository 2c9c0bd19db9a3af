//! The byte stream under a connection: a TCP or unix socket, or TLS over TCP, read in
//! large chunks into a buffer that backend messages are split from without copying.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use neverblock::net::{TcpStream, UnixStream};
use postgres_protocol::message::backend::Message;

use super::tls::TlsStream;
use crate::config::Host;
use crate::Config;
use crate::Error;

/// How much one read asks the kernel for.
const READ_CHUNK: usize = 16 * 1024;

/// A connected stream to the server, over TCP or a unix-domain socket, or TLS over TCP
/// (`super::tls::negotiate` makes it; cleartext pays for it with one more match arm).
#[derive(Debug)]
pub(crate) enum TcpOrUnixStream {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(Box<TlsStream>),
}

impl TcpOrUnixStream {
    /// Connects to `host` (TCP with `TCP_NODELAY`: each request is one write, and
    /// must not wait for the previous one's acknowledgement).
    pub(crate) fn connect(host: &Host) -> io::Result<TcpOrUnixStream> {
        match host {
            Host::Tcp(name, port) => {
                let stream = TcpStream::connect((name.as_str(), *port))?;
                stream.set_nodelay(true)?;
                Ok(TcpOrUnixStream::Tcp(stream))
            }
            Host::Unix(dir, port) => UnixStream::connect(Host::socket_path(dir, *port)).map(TcpOrUnixStream::Unix),
        }
    }

    /// Sets a TCP connection's keepalive probes and user timeout as `config` says (a
    /// unix socket has no network to lose).
    pub(crate) fn watch_liveness(&self, config: &Config) -> io::Result<()> {
        let tcp = match self {
            TcpOrUnixStream::Tcp(s) => s,
            TcpOrUnixStream::Tls(s) => s.tcp(),
            TcpOrUnixStream::Unix(_) => return Ok(()),
        };
        tcp.set_keepalive(config.get_keepalive().as_ref())?;
        tcp.set_user_timeout(config.get_tcp_user_timeout())
    }

    pub(crate) fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            TcpOrUnixStream::Tcp(s) => (&*s).read(buf),
            TcpOrUnixStream::Unix(s) => (&*s).read(buf),
            TcpOrUnixStream::Tls(s) => s.read(buf),
        }
    }

    pub(crate) fn write_all(&self, buf: &[u8]) -> io::Result<()> {
        match self {
            TcpOrUnixStream::Tcp(s) => (&*s).write_all(buf),
            TcpOrUnixStream::Unix(s) => (&*s).write_all(buf),
            TcpOrUnixStream::Tls(s) => s.write_all(buf),
        }
    }

    /// Ends both directions: a fiber parked reading it wakes to end of stream.
    pub(crate) fn shutdown(&self) {
        let _ = match self {
            TcpOrUnixStream::Tcp(s) => s.shutdown(Shutdown::Both),
            TcpOrUnixStream::Unix(s) => s.shutdown(Shutdown::Both),
            TcpOrUnixStream::Tls(s) => s.tcp().shutdown(Shutdown::Both),
        };
    }

    pub(crate) fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            TcpOrUnixStream::Tcp(s) => s.set_read_timeout(timeout),
            TcpOrUnixStream::Unix(s) => s.set_read_timeout(timeout),
            TcpOrUnixStream::Tls(s) => s.tcp().set_read_timeout(timeout),
        }
    }

    /// Whether the peer has sent anything, closed, or failed, checked without
    /// waiting: an idle connection should have nothing to say (over TLS, not even a
    /// record: the raw socket is peeked).
    pub(crate) fn has_pending_input(&self) -> bool {
        let mut byte = [0u8; 1];
        let peeked = match self {
            TcpOrUnixStream::Tcp(s) => s.try_peek(&mut byte),
            TcpOrUnixStream::Unix(s) => s.try_peek(&mut byte),
            TcpOrUnixStream::Tls(s) => s.tcp().try_peek(&mut byte),
        };
        !matches!(peeked, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    /// The TLS session, when the stream is one.
    pub(crate) fn tls(&self) -> Option<&TlsStream> {
        match self {
            TcpOrUnixStream::Tls(s) => Some(s),
            _ => None,
        }
    }
}

/// A socket with its read buffer: backend messages in, whole writes out.
#[derive(Debug)]
pub(crate) struct Framed {
    /// Shared with the writer fiber of a pool's shared connection.
    socket: Arc<TcpOrUnixStream>,
    /// Bytes read and not yet parsed; messages are split off its front as `Bytes`.
    ///
    /// # Invariant
    ///
    /// `next_message` reads only when no whole message is buffered, so this
    /// holds less than one message plus one read (`READ_CHUNK`), however many
    /// rows the server has sent: a result is parsed a row at a time.
    input: BytesMut,
    /// Where each read lands before its bytes join `input`.
    chunk: Box<[u8]>,
}

impl Framed {
    pub(crate) fn new(socket: TcpOrUnixStream) -> Framed {
        Framed {
            socket: Arc::new(socket),
            input: BytesMut::with_capacity(READ_CHUNK),
            chunk: vec![0; READ_CHUNK].into_boxed_slice(),
        }
    }

    pub(crate) fn socket(&self) -> &Arc<TcpOrUnixStream> {
        &self.socket
    }

    /// The next backend message, reading as needed.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when a read times out (nothing is lost: call again),
    /// [`Error::Closed`] at end of stream, [`Error::Io`], [`Error::Protocol`].
    pub(crate) fn next_message(&mut self) -> Result<Message, Error> {
        loop {
            match Message::parse(&mut self.input) {
                Ok(Some(message)) => return Ok(message),
                Ok(None) => {}
                Err(e) => return Err(Error::protocol(format!("malformed message from the server: {e}"))),
            }
            let n = self.socket.read(&mut self.chunk).map_err(Error::io)?;
            if n == 0 {
                return Err(Error::Closed);
            }
            self.input.extend_from_slice(&self.chunk[..n]);
        }
    }

    /// Writes all of `out`, then empties it.
    pub(crate) fn send(&mut self, out: &mut BytesMut) -> Result<(), Error> {
        let sent = self.socket.write_all(out);
        out.clear();
        sent.map_err(Error::io)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use neverblock::net::{KeepAlive, TcpListener};

    use super::*;

    /// The keepalive a connection made under `config` ends up with.
    fn keepalive_under(config: Config) -> Option<KeepAlive> {
        neverblock::run(move || {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let host = Host::Tcp("127.0.0.1".into(), listener.local_addr().unwrap().port());
            let socket = TcpOrUnixStream::connect(&host).unwrap();
            socket.watch_liveness(&config).unwrap();
            match &socket {
                TcpOrUnixStream::Tcp(s) => s.keepalive().unwrap(),
                other => unreachable!("{other:?}"),
            }
        })
    }

    #[test]
    fn every_tcp_connection_gets_keepalive_probes_unless_told_otherwise() {
        let default = keepalive_under(Config::new()).expect("on by default");
        assert_eq!(default.idle, Duration::from_secs(30));
        assert_eq!((default.interval, default.retries), (Duration::from_secs(10), 3));
        let asked =
            Config::parse("postgres://h/db?keepalives_idle=7&keepalives_interval=2&keepalives_count=4").unwrap();
        let want = KeepAlive { idle: Duration::from_secs(7), interval: Duration::from_secs(2), retries: 4 };
        assert_eq!(keepalive_under(asked), Some(want));
        assert_eq!(keepalive_under(Config::parse("postgres://h/db?keepalives=0").unwrap()), None);
    }
}
