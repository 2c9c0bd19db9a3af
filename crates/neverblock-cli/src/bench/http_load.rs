//! Keep-alive HTTP load for the server benchmarks: `connections` fibers spread over the runtime's
//! threads, each holding one connection and sending GET after GET on it (a closed loop, no
//! pipelining, as `wrk` does), counted over a fixed window after a warm-up. Over HTTPS
//! ([`https_load`](super::https_load)) the same loop runs over TLS, each fiber a client that may
//! also open a new connection for every request, to measure handshakes.
//!
//! It is lean so that it leaves the cores to the server it measures: a connection's request is
//! one prebuilt buffer written whole, its response is read into one reused buffer and parsed by
//! httparse (status and `Content-Length` only), and nothing is shared between threads while the
//! load runs: each thread keeps its own tally, read once the window has closed. A response is
//! timed from the end of the one before, so each costs one clock read, which also says whether it
//! fell in the window; on a new connection per request, that time holds the connection's close,
//! the next one's connect and its handshake.

use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use neverblock::net::TcpStream;
use neverblock::runtime::{self, Builder};
use rustls::ClientConfig;

use super::https_load::{Tls, TlsConnection};
use crate::histogram::Histogram;

/// The longest response head read.
const HEAD_ROOM: usize = 16 * 1024;
/// How much of a body is read at a time.
const READ_SIZE: usize = 64 * 1024;
/// How long a connection that failed waits before it connects again.
const RECONNECT_PAUSE: Duration = Duration::from_millis(10);
/// How long [`probe`] waits for its exchanges.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// What to send, and for how long.
#[derive(Clone, Debug)]
pub(crate) struct Load {
    pub(crate) addr: SocketAddr,
    /// The request target, e.g. `/hello.txt`.
    pub(crate) path: String,
    /// The body length every answer must have (a 200 with another length counts as an error).
    pub(crate) expect_len: u64,
    pub(crate) connections: usize,
    pub(crate) threads: usize,
    pub(crate) warmup: Duration,
    pub(crate) duration: Duration,
    /// HTTPS with these settings, or cleartext HTTP (`None`).
    pub(crate) tls: Option<Tls>,
}

impl Load {
    /// The request every exchange sends.
    fn request(&self) -> Vec<u8> {
        format!("GET {} HTTP/1.1\r\nHost: {}\r\n\r\n", self.path, self.addr).into_bytes()
    }

    /// Whether each request goes on a new connection, closed once its response is read.
    fn connection_per_request(&self) -> bool {
        self.tls.as_ref().is_some_and(|tls| tls.handshakes.connection_per_request())
    }
}

/// What the window saw.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// Failed exchanges (connection errors, other statuses, wrong lengths) in the window.
    pub(crate) errors: u64,
    /// The first failure's text, warm-up included.
    pub(crate) first_error: Option<String>,
    /// Latencies of the responses completed in the window, each a 200 with the expected body.
    pub(crate) latencies: Histogram,
}

impl Tally {
    fn merge(&mut self, other: Tally) {
        self.errors += other.errors;
        self.first_error = self.first_error.take().or(other.first_error);
        self.latencies.merge(&other.latencies);
    }

    fn fail(&mut self, counted: bool, error: &io::Error) {
        self.errors += u64::from(counted);
        if self.first_error.is_none() {
            self.first_error = Some(error.to_string());
        }
    }
}

/// When the window opens and closes.
#[derive(Clone, Copy, Debug)]
struct Window {
    opens: Instant,
    closes: Instant,
}

impl Window {
    fn holds(&self, t: Instant) -> bool {
        t >= self.opens && t < self.closes
    }
}

/// Runs `load` on a runtime of its own (its threads are made by this thread, so they inherit its
/// CPU affinity) and returns what the window saw.
pub(crate) fn run(load: &Load) -> Tally {
    let threads = load.threads.clamp(1, load.connections.max(1));
    let load = load.clone();
    Builder::new().threads(threads).run(move || {
        let opens = Instant::now() + load.warmup;
        let window = Window { opens, closes: opens + load.duration };
        let request = load.request();
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (load, request) = (load.clone(), request.clone());
                let connections = load.connections / threads + usize::from(t < load.connections % threads);
                runtime::spawn_on(t, move || run_thread(&load, &request, connections, window))
            })
            .collect();
        let mut tally = Tally::default();
        for handle in handles {
            tally.merge(handle.join().expect("a load thread panicked"));
        }
        tally
    })
}

/// Runs `connections` connection fibers on this thread until the window closes; returns their
/// tally (fibers still in an exchange then are cancelled with the runtime).
fn run_thread(load: &Load, request: &[u8], connections: usize, window: Window) -> Tally {
    let tally = Rc::new(RefCell::new(Tally::default()));
    for _ in 0..connections {
        let (tally, request, load) = (tally.clone(), request.to_vec(), load.clone());
        neverblock::spawn(move || connection(&load, &request, window, &tally));
    }
    neverblock::sleep_until(window.closes);
    tally.take()
}

/// One client's loop: request, response, repeat, until the window closes, on a connection kept
/// alive (a failed one is counted and replaced) or on a new connection for each request.
fn connection(load: &Load, request: &[u8], window: Window, tally: &RefCell<Tally>) {
    let mut buf = vec![0u8; HEAD_ROOM.max(READ_SIZE)];
    let client = load.tls.as_ref().map(Tls::client);
    let mut warm = false;
    let mut start = Instant::now();
    loop {
        let mut connection = match Connection::open(load.addr, client.as_ref()) {
            Ok(connection) => connection,
            Err(e) => {
                let now = Instant::now();
                tally.borrow_mut().fail(window.holds(now), &e);
                neverblock::sleep(RECONNECT_PAUSE);
                start = Instant::now();
                continue;
            }
        };
        loop {
            let result = exchange(&mut connection, request, &mut buf, load.expect_len)
                .and_then(|()| connection.check(load.tls.as_ref(), warm));
            let end = Instant::now();
            if end >= window.closes {
                return;
            }
            let counted = window.holds(end);
            if let Err(e) = result {
                tally.borrow_mut().fail(counted, &e);
                start = end;
                break;
            }
            if counted {
                tally.borrow_mut().latencies.record(end - start);
            }
            warm = true;
            start = end;
            if load.connection_per_request() {
                connection.close();
                break;
            }
        }
    }
}

/// Opens a connection as the load does and makes one exchange on it (two on two connections when
/// each request has a connection of its own: the first brings the ticket the second must resume
/// from), checked as the load checks them, to see that the server answers before it is measured.
/// Returns what the last TLS handshake agreed, if any (see [`TlsConnection::describe`]).
pub(crate) fn probe(load: &Load) -> io::Result<Option<String>> {
    let load = load.clone();
    let probes = 1 + usize::from(load.connection_per_request());
    Builder::new().threads(1).run(move || {
        let exchanges = || {
            let (request, client) = (load.request(), load.tls.as_ref().map(Tls::client));
            let mut buf = vec![0u8; HEAD_ROOM.max(READ_SIZE)];
            let mut agreed = None;
            for n in 0..probes {
                let mut connection = Connection::open(load.addr, client.as_ref())?;
                exchange(&mut connection, &request, &mut buf, load.expect_len)?;
                connection.check(load.tls.as_ref(), n > 0)?;
                agreed = connection.describe();
                connection.close();
            }
            Ok(agreed)
        };
        neverblock::timeout(PROBE_TIMEOUT, exchanges).unwrap_or_else(|_| Err(io::ErrorKind::TimedOut.into()))
    })
}

/// A connection to the server: cleartext, or TLS over TCP.
enum Connection {
    Cleartext(TcpStream),
    Tls(Box<TlsConnection>),
}

impl Connection {
    /// Connects to `addr`, then makes a TLS handshake with `client`'s settings if given.
    fn open(addr: SocketAddr, client: Option<&Arc<ClientConfig>>) -> io::Result<Connection> {
        let tcp = TcpStream::connect(addr)?;
        let _ = tcp.set_nodelay(true);
        Ok(match client {
            None => Connection::Cleartext(tcp),
            Some(client) => Connection::Tls(Box::new(TlsConnection::handshake(client, tcp)?)),
        })
    }

    /// Whether the handshake was the one `tls` asks for of a client that is `warm` or not (see
    /// [`TlsConnection::check`]).
    fn check(&self, tls: Option<&Tls>, warm: bool) -> io::Result<()> {
        match (self, tls) {
            (Connection::Tls(connection), Some(tls)) => connection.check(tls.handshakes, warm),
            _ => Ok(()),
        }
    }

    /// What the TLS handshake agreed, over TLS.
    fn describe(&self) -> Option<String> {
        match self {
            Connection::Cleartext(_) => None,
            Connection::Tls(connection) => Some(connection.describe()),
        }
    }

    /// Closes the connection (over TLS, after close_notify).
    fn close(self) {
        if let Connection::Tls(connection) = self {
            connection.close();
        }
    }
}

impl Read for Connection {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Connection::Cleartext(tcp) => tcp.read(buf),
            Connection::Tls(tls) => tls.read(buf),
        }
    }
}

impl Write for Connection {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Connection::Cleartext(tcp) => tcp.write(buf),
            Connection::Tls(tls) => tls.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Connection::Cleartext(tcp) => tcp.flush(),
            Connection::Tls(tls) => tls.flush(),
        }
    }
}

/// Sends `request` and reads its response whole: a 200 whose body is `expect_len` bytes, with
/// nothing after it.
fn exchange(connection: &mut Connection, request: &[u8], buf: &mut [u8], expect_len: u64) -> io::Result<()> {
    connection.write_all(request)?;
    let mut filled = 0;
    let (head_len, body_len) = loop {
        if filled == HEAD_ROOM {
            return Err(invalid("a response head longer than 16 KiB"));
        }
        let n = connection.read(&mut buf[filled..HEAD_ROOM])?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        filled += n;
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut response = httparse::Response::new(&mut headers);
        match response.parse(&buf[..filled]) {
            Ok(httparse::Status::Complete(head_len)) => {
                if response.code != Some(200) {
                    return Err(invalid(&format!("status {}", response.code.unwrap_or(0))));
                }
                break (head_len, content_length(response.headers)?);
            }
            Ok(httparse::Status::Partial) => {}
            Err(e) => return Err(invalid(&format!("a malformed response head: {e}"))),
        }
    };
    if body_len != expect_len {
        return Err(invalid(&format!("a body of {body_len} bytes, not {expect_len}")));
    }
    let mut have = (filled - head_len) as u64;
    while have < body_len {
        let want = usize::try_from(body_len - have).unwrap_or(usize::MAX).min(buf.len());
        let n = connection.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        have += n as u64;
    }
    if have > body_len {
        return Err(invalid("bytes after the response, which nobody asked for"));
    }
    Ok(())
}

/// The `Content-Length` of a response head (every server measured frames its bodies by length).
fn content_length(headers: &[httparse::Header<'_>]) -> io::Result<u64> {
    let field = headers.iter().find(|h| h.name.eq_ignore_ascii_case("content-length"));
    let value = field.ok_or_else(|| invalid("a response without Content-Length"))?.value;
    std::str::from_utf8(value).ok().and_then(|v| v.trim().parse().ok()).ok_or_else(|| invalid("a bad Content-Length"))
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_owned())
}
