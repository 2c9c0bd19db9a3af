//! A TLS session over a fiber socket, safe for the two fibers of a pool's shared connection.
//!
//! A shared connection reads and writes its socket from two fibers at once: the reader parks in
//! [`TlsStream::read`] while the writer parks in [`TlsStream::write_all`]. Over TLS both go
//! through one rustls session, kept apart by three rules.
//!
//! - **No lock is held across a park.** The session is in a `std` mutex taken only between
//!   parks. A write encrypts under it into the outgoing buffer, lets it go, then waits on the
//!   socket. A read takes the session's ciphertext buffer out of it, lets it go and waits on the
//!   socket for ciphertext, then takes the lock again to hand those bytes to rustls
//!   (`read_tls`, `process_new_packets`) and take the plaintext. The lock is a `std` mutex
//!   rather than a `RefCell` because a [`Connection`](crate::Connection) is `Send`; it is never
//!   contended, since a socket's fibers share one thread and neither parks while holding it.
//! - **One writer of records at a time.** Ciphertext leaves the session only into `outgoing`,
//!   under that buffer's lock (a neverblock `Mutex`), and the lock's holder writes the buffer to
//!   the socket front to back before it lets go, parking as the socket needs. So records never
//!   interleave on the wire and go out in the order rustls made them; a write that fails leaves
//!   exactly its unsent bytes at the front.
//! - **What reading makes rustls want to send gets sent**: an alert (a fatal error's, or the
//!   warning that refuses a TLS 1.2 renegotiation). (The answer to a TLS 1.3 KeyUpdate rustls
//!   holds back itself and puts ahead of the next record we send, as TLS 1.3 asks.) After
//!   processing, the reader tries the `outgoing` lock and, if it is free, sends the bytes
//!   without waiting (`MSG_DONTWAIT`). If the writer holds it, the writer sends them: it looks
//!   at the session once more after its last socket write, and lets go of the lock with no park
//!   between that look and the unlock. The reader never waits to write: a reader parked on a
//!   full socket while the server is parked writing rows to us that nobody reads would stall
//!   both for good. Whatever a non-waiting send leaves stays at the front of `outgoing`, ahead
//!   of the next write's records.
//!
//! The reader's rustls calls keep to one rule of their own: ciphertext is fed only once the
//! plaintext before it has been taken, so rustls never refuses it for a full plaintext buffer,
//! and ciphertext already read is never dropped.
//!
//! Outside the session: [`TlsStream::tcp`] is the raw socket, for a peek while the connection
//! is idle (any byte or end of stream then means the session is not clean), its read timeout, and
//! `shutdown`, which wakes a fiber parked reading with end of stream. Dropping the stream sends
//! `close_notify` if the socket takes it at once.

use std::fmt;
use std::io::{self, Read, Write};
use std::sync::{Mutex, MutexGuard, PoisonError};

use neverblock::net::TcpStream;
use rustix::net::SendFlags;
use rustls::ClientConnection;

/// How much ciphertext one socket read asks for: a full TLS record.
const READ_CHUNK: usize = 16 * 1024 + 256;

/// How much plaintext rustls encrypts before a write sends it: a larger request goes out in
/// pieces this size, so encrypting one never holds more than this in memory twice over.
const WRITE_PIECE: usize = 64 * 1024;

/// An established TLS session to the server over a TCP socket.
pub(crate) struct TlsStream {
    tcp: TcpStream,
    session: Mutex<Session>,
    /// Ciphertext taken from the session and not yet written; see the module's rules.
    outgoing: neverblock::sync::Mutex<Vec<u8>>,
}

/// The rustls session and the ciphertext read for it.
struct Session {
    tls: ClientConnection,
    /// Ciphertext read from the socket and not yet fed to `tls`: `raw[fed..filled]`. The reader
    /// takes the buffer out while it waits on the socket.
    raw: Box<[u8]>,
    fed: usize,
    filled: usize,
}

impl TlsStream {
    /// Wraps a session whose handshake is done.
    pub(crate) fn new(tcp: TcpStream, mut tls: ClientConnection) -> TlsStream {
        tls.set_buffer_limit(Some(WRITE_PIECE));
        let session = Session { tls, raw: vec![0; READ_CHUNK].into_boxed_slice(), fed: 0, filled: 0 };
        TlsStream { tcp, session: Mutex::new(session), outgoing: neverblock::sync::Mutex::new(Vec::new()) }
    }

    /// The socket under the session.
    pub(crate) fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// SCRAM's channel binding data (`tls-server-end-point`) for the server's certificate, when
    /// its signature algorithm allows one.
    pub(crate) fn tls_server_end_point(&self) -> Option<Vec<u8>> {
        let session = self.session();
        let certificate = session.tls.peer_certificates()?.first()?;
        super::binding::tls_server_end_point(certificate)
    }

    /// Reads plaintext, parking while none has arrived. `Ok(0)` after the server's
    /// `close_notify`; `UnexpectedEof` when the socket ends without one.
    pub(crate) fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let (plaintext, queued, mut raw) = {
                let mut session = self.session();
                let plaintext = session.read_plaintext(buf);
                let raw = if plaintext.is_none() { std::mem::take(&mut session.raw) } else { Box::default() };
                (plaintext, session.tls.wants_write(), raw)
            };
            if queued {
                self.send_queued();
            }
            if let Some(result) = plaintext {
                return result;
            }
            let got = (&self.tcp).read(&mut raw);
            let mut session = self.session();
            session.raw = raw;
            let n = got?;
            (session.fed, session.filled) = (0, n);
            if n == 0 {
                // Marks the end of stream, which `read_plaintext` then reports.
                session.tls.read_tls(&mut io::empty())?;
            }
        }
    }

    /// Encrypts and writes all of `plaintext`, parking as the socket needs.
    pub(crate) fn write_all(&self, mut plaintext: &[u8]) -> io::Result<()> {
        let mut outgoing =
            self.outgoing.lock().map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "timed out waiting to write"))?;
        loop {
            {
                let mut session = self.session();
                let taken = session.tls.writer().write(plaintext)?;
                plaintext = &plaintext[taken..];
                take_queued(&mut session.tls, &mut outgoing);
            }
            if outgoing.is_empty() {
                // rustls takes plaintext whenever its queue is empty, as it is here: unless the
                // session is over, nothing is left.
                return match plaintext.is_empty() {
                    true => Ok(()),
                    false => Err(io::Error::new(io::ErrorKind::WriteZero, "the TLS session is closed")),
                };
            }
            write_out(&self.tcp, &mut outgoing)?;
        }
    }

    /// Sends what rustls queued while reading, without waiting, unless the writer holds
    /// `outgoing` (it sends them before letting go).
    fn send_queued(&self) {
        let Some(mut outgoing) = self.outgoing.try_lock() else { return };
        take_queued(&mut self.session().tls, &mut outgoing);
        let mut sent = 0;
        while sent < outgoing.len() {
            match rustix::net::send(&self.tcp, &outgoing[sent..], SendFlags::DONTWAIT | SendFlags::NOSIGNAL) {
                Ok(n) => sent += n,
                // Full, or failed: what is left goes with the next write, which reports a failure.
                Err(_) => break,
            }
        }
        outgoing.drain(..sent);
    }

    fn session(&self) -> MutexGuard<'_, Session> {
        // A panic inside rustls leaves nothing half-updated that matters here: the
        // connection fails on its next error.
        self.session.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Session {
    /// Plaintext into `buf`, feeding rustls the ciphertext already read as it needs; `None`
    /// when it needs more from the socket.
    fn read_plaintext(&mut self, buf: &mut [u8]) -> Option<io::Result<usize>> {
        loop {
            match self.tls.reader().read(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                done => return Some(done),
            }
            if self.fed == self.filled {
                return None;
            }
            // The plaintext is all taken (`WouldBlock` above), so rustls has room for more.
            match self.tls.read_tls(&mut &self.raw[self.fed..self.filled]) {
                // After the server's close_notify rustls takes nothing: what follows is not the session's.
                Ok(0) => self.fed = self.filled,
                Ok(n) => self.fed += n,
                Err(e) => return Some(Err(e)),
            }
            if let Err(e) = self.tls.process_new_packets() {
                return Some(Err(io::Error::new(io::ErrorKind::InvalidData, e)));
            }
        }
    }
}

/// Moves the ciphertext rustls has queued into `out` (writing into a `Vec` does not fail).
fn take_queued(tls: &mut ClientConnection, out: &mut Vec<u8>) {
    while tls.wants_write() && tls.write_tls(out).is_ok() {}
}

/// Writes all of `outgoing`, parking as the socket needs; a failure leaves the unsent bytes.
fn write_out(tcp: &TcpStream, outgoing: &mut Vec<u8>) -> io::Result<()> {
    let mut sent = 0;
    let result = loop {
        if sent == outgoing.len() {
            break Ok(());
        }
        match (&*tcp).write(&outgoing[sent..]) {
            Ok(0) => break Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => sent += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => break Err(e),
        }
    };
    outgoing.drain(..sent);
    result
}

impl Drop for TlsStream {
    /// Ends the session with `close_notify` if the socket takes it at once (and no record is
    /// half sent, which would garble it).
    fn drop(&mut self) {
        let clean = self.outgoing.try_lock().is_some_and(|outgoing| outgoing.is_empty());
        if clean {
            self.session().tls.send_close_notify();
            self.send_queued();
        }
    }
}

impl fmt::Debug for TlsStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let session = self.session();
        f.debug_struct("TlsStream")
            .field("tcp", &self.tcp)
            .field("version", &session.tls.protocol_version())
            .field("cipher_suite", &session.tls.negotiated_cipher_suite().map(|s| s.suite()))
            .finish_non_exhaustive()
    }
}
