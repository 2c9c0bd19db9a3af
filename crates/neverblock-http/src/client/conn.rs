//! One connection to a server: plain TCP, or TLS (rustls) over the same fiber-aware stream, each
//! read and write waiting no longer than the read timeout and the request's deadline allow.

use std::fmt;
use std::io::{self, Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};

use super::origin::Origin;
use crate::error::{Error, ErrorKind};
use neverblock::net::{TcpStream, ToSocketAddrs};

/// A connection's byte stream.
#[derive(Debug)]
pub(crate) enum Conn {
    Plain(BoundedStream),
    Tls(Box<StreamOwned<ClientConnection, BoundedStream>>),
}

/// A TCP stream whose every read and write waits at most the read timeout, and never past the
/// request's deadline, which is the socket's own (`TcpStream::set_read_deadline`): a server that
/// sends a byte now and then cannot stretch a request past its total timeout, in a fiber or outside
/// a runtime alike (where no fiber timeout could cut the call short).
#[derive(Debug)]
pub(crate) struct BoundedStream {
    tcp: TcpStream,
    /// When the request must be over (its total timeout), if it has one.
    deadline: Option<Instant>,
}

/// The error a read or write gives once the request's deadline has passed: a `TimedOut` I/O error
/// whose inner error is this.
#[derive(Debug)]
pub(crate) struct DeadlinePassed;

impl fmt::Display for DeadlinePassed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the request's total timeout has passed")
    }
}

impl std::error::Error for DeadlinePassed {}

/// Whether `e` is the error of a read or write that the request's deadline cut short.
pub(crate) fn is_deadline(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<DeadlinePassed>())
}

impl BoundedStream {
    /// Sets how long each read and write may wait, and the deadline of the request about to use
    /// the connection.
    pub(crate) fn set_timeouts(&mut self, timeout: Duration, deadline: Option<Instant>) -> io::Result<()> {
        self.deadline = deadline;
        self.tcp.set_read_timeout(Some(timeout))?;
        self.tcp.set_write_timeout(Some(timeout))?;
        self.tcp.set_read_deadline(deadline);
        self.tcp.set_write_deadline(deadline);
        Ok(())
    }

    /// Runs `op`, refused once the deadline has passed; a `TimedOut` that the deadline caused
    /// becomes [`DeadlinePassed`].
    fn bounded<T>(&self, op: impl FnOnce(&TcpStream) -> io::Result<T>) -> io::Result<T> {
        let Some(deadline) = self.deadline else { return op(&self.tcp) };
        let passed = || Instant::now() >= deadline;
        if passed() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, DeadlinePassed));
        }
        match op(&self.tcp) {
            Err(e) if e.kind() == io::ErrorKind::TimedOut && passed() => {
                Err(io::Error::new(io::ErrorKind::TimedOut, DeadlinePassed))
            }
            result => result,
        }
    }
}

impl Read for BoundedStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.bounded(|mut tcp| tcp.read(buf))
    }
}

impl Write for BoundedStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.bounded(|mut tcp| tcp.write(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Conn {
    /// Connects to `origin` (resolving its host on the blocking pool), trying each
    /// address in turn; TLS connections are set up but the handshake happens on first use.
    pub(crate) fn open(origin: &Origin, connect_timeout: Duration, tls: &Arc<ClientConfig>) -> Result<Conn, Error> {
        let Origin { host, port, .. } = origin;
        let addrs =
            (&**host, *port).resolve().map_err(|e| Error::new(ErrorKind::Resolve, format!("resolve {host}: {e}")))?;
        let mut last = None;
        let mut stream = None;
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, connect_timeout) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = Some(Error::io(&format!("connect to {host}:{port} ({addr})"), e)),
            }
        }
        let stream = stream.ok_or_else(|| {
            last.unwrap_or_else(|| Error::new(ErrorKind::Resolve, format!("resolve {host}: no address")))
        })?;
        stream.set_nodelay(true).map_err(|e| Error::io("set TCP_NODELAY", e))?;
        let stream = BoundedStream { tcp: stream, deadline: None };
        if !origin.tls {
            return Ok(Conn::Plain(stream));
        }
        let name = ServerName::try_from(host.trim_start_matches('[').trim_end_matches(']').to_owned())
            .map_err(|e| Error::new(ErrorKind::InvalidUrl, format!("{host} is not a TLS server name: {e}")))?;
        let session = ClientConnection::new(tls.clone(), name)
            .map_err(|e| Error::new(ErrorKind::Tls, format!("TLS setup for {host}: {e}")))?;
        Ok(Conn::Tls(Box::new(StreamOwned::new(session, stream))))
    }

    pub(crate) fn stream(&mut self) -> &mut BoundedStream {
        match self {
            Conn::Plain(s) => s,
            Conn::Tls(s) => &mut s.sock,
        }
    }

    fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Plain(s) => &s.tcp,
            Conn::Tls(s) => &s.sock.tcp,
        }
    }

    /// Whether an idle pooled connection still looks usable: nothing has arrived
    /// on it (no EOF, no stray bytes, no TLS alert), checked without waiting.
    pub(crate) fn looks_idle(&self) -> bool {
        // The socket is non-blocking, so a plain peek answers at once.
        let probe = socket2::SockRef::from(self.tcp()).peek(&mut [std::mem::MaybeUninit::uninit(); 1]);
        probe.is_err_and(|e| e.kind() == io::ErrorKind::WouldBlock)
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(buf),
            Conn::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => s.write(buf),
            Conn::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Conn::Plain(s) => s.flush(),
            Conn::Tls(s) => s.flush(),
        }
    }
}

/// The TLS settings: the Mozilla roots (webpki-roots) plus `extra_roots` (DER).
pub(crate) fn tls_config(extra_roots: &[Vec<u8>]) -> Result<Arc<ClientConfig>, Error> {
    let mut roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    for der in extra_roots {
        roots
            .add(der.clone().into())
            .map_err(|e| Error::new(ErrorKind::Tls, format!("a root certificate was refused: {e}")))?;
    }
    let config = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::new(ErrorKind::Tls, format!("TLS versions: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}
