//! The server's side of a TLS handshake, on the connection's fiber under a deadline: the first
//! bytes looked at (plain HTTP is answered in plain HTTP), then rustls driven over the timed
//! stream until the session is up.

use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use rustls::ServerConnection;

use super::{names, TlsConfig, TlsInfo, BUFFER_LIMIT};
use crate::server::timed::{TimedStream, WaitLimit};

/// A connection's TLS session: its plaintext read and written through
/// `rustls::Stream::new(session, &mut TimedIo(stream))`.
pub(crate) type TlsSession = ServerConnection;

/// The first byte of a TLS record that carries a handshake message.
const HANDSHAKE_RECORD: u8 = 0x16;
/// What a client that speaks plain HTTP to a TLS port is told, in plain HTTP (as nginx tells it).
const PLAIN_HTTP: &str = "400 Bad Request: plain HTTP was sent to a port that wants TLS\n";
/// How much of what a plain-HTTP client sends is read (and dropped) after the answer, so that a
/// request still arriving does not reset the connection before the answer is read.
const PLAIN_HTTP_DRAIN: usize = 64 * 1024;

/// A connection's timed stream, as rustls reads and writes it.
#[derive(Debug)]
pub(crate) struct TimedIo<'s>(pub(crate) &'s TimedStream);

impl Read for TimedIo<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for TimedIo<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }

    /// rustls hands every record it has ready at once: they go in one `writev(2)`.
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.0.write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Why a handshake did not give a session.
#[derive(Debug)]
pub(crate) enum HandshakeEnd {
    /// The client spoke plain HTTP; it was answered.
    PlainHttp,
    /// The deadline passed.
    TimedOut,
    /// The client closed the connection first.
    Closed,
    /// Not TLS, or refused by rustls (its alert sent), or the connection failed: why.
    Failed(String),
}

/// Runs the server's side of a TLS handshake on `stream`, within the configuration's handshake
/// timeout of `started`; returns the session and what it speaks. Reads and writes on `stream` are
/// left without limits, for the protocol's driver to set its own.
///
/// # Errors
///
/// [`HandshakeEnd`]: how it ended without a session.
pub(crate) fn handshake(
    stream: &TimedStream,
    config: &TlsConfig,
    started: Instant,
) -> Result<(TlsSession, TlsInfo), HandshakeEnd> {
    let deadline = WaitLimit::Until(started + config.handshake_timeout());
    stream.set_read_limit(deadline);
    stream.set_write_limit(deadline);
    let session = run(stream, config);
    stream.set_read_limit(WaitLimit::Unbounded);
    stream.set_write_limit(WaitLimit::Unbounded);
    let session = session?;
    let info = info_of(&session);
    Ok((session, info))
}

/// The handshake, under the limits already set.
fn run(stream: &TimedStream, config: &TlsConfig) -> Result<TlsSession, HandshakeEnd> {
    let mut first = [0u8; 16];
    let n = match stream.read(&mut first) {
        Ok(0) => return Err(HandshakeEnd::Closed),
        Ok(n) => n,
        Err(e) => return Err(ended_by(e)),
    };
    if first[0] != HANDSHAKE_RECORD {
        if first[0].is_ascii_uppercase() {
            answer_plain_http(stream);
            return Err(HandshakeEnd::PlainHttp);
        }
        return Err(HandshakeEnd::Failed(format!("the first bytes are not a TLS handshake: {:02x?}", &first[..n])));
    }
    let mut conn = ServerConnection::new(config.rustls().clone()).map_err(|e| HandshakeEnd::Failed(e.to_string()))?;
    conn.set_buffer_limit(Some(BUFFER_LIMIT));
    let mut io = TimedIo(stream);
    // The bytes read to look at go to rustls first, as if it had read them.
    conn.read_tls(&mut &first[..n]).map_err(|e| HandshakeEnd::Failed(e.to_string()))?;
    if let Err(e) = conn.process_new_packets() {
        let _ = conn.write_tls(&mut io);
        return Err(HandshakeEnd::Failed(e.to_string()));
    }
    while conn.is_handshaking() {
        match conn.complete_io(&mut io) {
            Ok((0, 0)) => return Err(HandshakeEnd::Closed),
            Ok(_) => {}
            Err(e) => return Err(ended_by(e)),
        }
    }
    Ok(conn)
}

/// The end a stream error during the handshake makes.
fn ended_by(e: io::Error) -> HandshakeEnd {
    match e.kind() {
        io::ErrorKind::TimedOut => HandshakeEnd::TimedOut,
        io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe => {
            HandshakeEnd::Closed
        }
        _ => HandshakeEnd::Failed(e.to_string()),
    }
}

/// Tells a client that spoke plain HTTP so, in plain HTTP, and lets it read that before the close.
fn answer_plain_http(stream: &TimedStream) {
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{PLAIN_HTTP}",
        PLAIN_HTTP.len()
    );
    if stream.write_all(answer.as_bytes()).is_err() || stream.stream().shutdown(std::net::Shutdown::Write).is_err() {
        return;
    }
    stream.set_read_limit(WaitLimit::Until(Instant::now() + Duration::from_secs(1)));
    let mut sink = [0u8; 4096];
    let mut drained = 0;
    while drained < PLAIN_HTTP_DRAIN {
        match stream.read(&mut sink) {
            Ok(0) | Err(_) => return,
            Ok(n) => drained += n,
        }
    }
}

/// What a finished handshake agreed on.
fn info_of(conn: &ServerConnection) -> TlsInfo {
    TlsInfo {
        protocol: conn.protocol_version().map_or("unknown", names::protocol),
        cipher: conn.negotiated_cipher_suite().map_or("unknown", |suite| names::cipher(suite.suite())),
        server_name: conn.server_name().map(str::to_owned),
        resumed: conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed),
    }
}
