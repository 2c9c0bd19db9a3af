//! Loopback HTTP/1.1 servers with scripted (mis)behaviour, built on std threads and `std::net` only, so
//! they test the runtime's HTTP client without depending on the runtime.
#![allow(dead_code, reason = "fixtures: each test file uses only some of them")]

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ServerConfig, ServerConnection, StreamOwned};

/// How long a connection may sit idle before the server gives up on it (except `Stall`).
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// The pause after the head and each chunk of a `Chunked` response.
const CHUNK_PAUSE: Duration = Duration::from_millis(10);

/// What the server does with every request on every connection.
#[derive(Debug, Clone)]
pub(crate) enum Behaviour {
    /// Keep-alive: answers every request with this response plus `Content-Length` (none for 204 and 304).
    Fixed { status: u16, headers: Vec<(String, String)>, body: Vec<u8> },
    /// Keep-alive: 200 with `Transfer-Encoding: chunked` and `Trailer: X-Trailer`, then one write per non-empty
    /// chunk (empty ones are skipped), `;ext=first` on the first, then `0\r\nX-Trailer: done\r\n\r\n`. Each
    /// write but the last is followed by a 10 ms pause, so the client sees the head and chunks in separate reads.
    Chunked { chunks: Vec<Vec<u8>> },
    /// Sends `HTTP/1.1 200 OK\r\n`, sleeps `delay`, then `Content-Length: 4\r\n\r\nslow`; keep-alive.
    /// Dropping the server waits out a sleep in progress.
    Slow { delay: Duration },
    /// Reads the request and never answers; the connection stays open until the server drops.
    Stall,
    /// 200 with `Content-Length: declared`, then `sent` bytes of `x`, then closes.
    Truncated { declared: usize, sent: usize },
    /// 200 with `Transfer-Encoding: chunked`, then `5\r\nhello\r\n`, then closes before the last-chunk.
    TruncatedChunked,
    /// Answers `HTTP/1.1 abc nonsense\r\n\r\n`, then closes.
    Malformed,
    /// Answers the first request of each connection with a keep-alive 200 `first` (no `Connection:
    /// close`), then closes: a client that reuses the connection reads EOF before any response byte.
    CloseAfterFirst,
    /// Answers the first request of each connection with a keep-alive 200 `first`, reads the second, and
    /// closes without a byte of answer: the race where a server drops an idle connection as a request arrives.
    CloseOnSecond,
    /// Keep-alive: 200 whose body is the request's method, a space, and the request's body.
    Echo,
    /// Keep-alive: 200 whose body is the request's `Host` value.
    EchoHost,
    /// The server's first `times` requests get `302` with `Location: to`, later ones 200 `done`; keep-alive.
    Redirect { to: String, times: usize },
    /// Sends `HTTP/1.1 100 Continue\r\n\r\n` before reading the request body, then 200 `ok`; keep-alive.
    Interim,
    /// Keep-alive: HEAD gets 200 with `Content-Length: 1000` and no body; anything else gets `head_body()`.
    Head,
    /// Answers every request with exactly these bytes, and keeps the connection open whatever they say.
    Raw(Vec<u8>),
    /// Reads the request, then resets the connection (`SO_LINGER` 0) without a byte of answer.
    Reset,
    /// Sends `head` (a response head, or the start of one), then one `x` every `every`, for `total`
    /// or until the client leaves.
    Drip { head: Vec<u8>, every: Duration, total: Duration },
}

impl Behaviour {
    /// A `Fixed` response built from borrowed parts.
    pub(crate) fn fixed(status: u16, headers: &[(&str, &str)], body: impl Into<Vec<u8>>) -> Behaviour {
        let headers = headers.iter().map(|&(name, value)| (name.to_owned(), value.to_owned())).collect();
        Behaviour::Fixed { status, headers, body: body.into() }
    }
}

/// The 1000-byte body `Behaviour::Head` serves to GET: `abc…z` repeated.
pub(crate) fn head_body() -> Vec<u8> {
    (b'a'..=b'z').cycle().take(1000).collect()
}

/// A plain-HTTP server on 127.0.0.1 with a fresh port; it stops, and closes every connection, on drop.
#[derive(Debug)]
pub(crate) struct TestServer {
    addr: SocketAddr,
    shared: Arc<FixtureState>,
    accept: Option<JoinHandle<()>>,
}

/// What the server's threads share.
#[derive(Debug)]
struct FixtureState {
    behaviour: Behaviour,
    tls: Option<Arc<ServerConfig>>,
    connections: AtomicUsize,
    requests: AtomicUsize,
    /// Requests read and not yet answered, and the most there have been at once.
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    stop: AtomicBool,
}

impl TestServer {
    /// Binds 127.0.0.1:0 and serves `behaviour` from a std thread.
    ///
    /// # Panics
    ///
    /// If the port cannot be bound or the thread cannot start.
    pub(crate) fn start(behaviour: Behaviour) -> TestServer {
        TestServer::spawn(behaviour, None)
    }

    /// Binds, then runs the accept loop on its own thread.
    fn spawn(behaviour: Behaviour, tls: Option<Arc<ServerConfig>>) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local address");
        let shared = Arc::new(FixtureState {
            behaviour,
            tls,
            connections: 0.into(),
            requests: 0.into(),
            in_flight: 0.into(),
            max_in_flight: 0.into(),
            stop: false.into(),
        });
        let accepting = Arc::clone(&shared);
        let accept = thread::Builder::new()
            .name(format!("test-server-{}", addr.port()))
            .spawn(move || accept_loop(&listener, &accepting))
            .expect("spawn the accept thread");
        TestServer { addr, shared, accept: Some(accept) }
    }

    /// The address the server listens on.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT/path`; `path` may or may not start with `/`.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}/{}", self.addr, path.trim_start_matches('/'))
    }

    /// How many connections the server has accepted.
    pub(crate) fn connections(&self) -> usize {
        self.shared.connections.load(SeqCst)
    }

    /// How many request heads the server has read, over all connections.
    pub(crate) fn requests(&self) -> usize {
        self.shared.requests.load(SeqCst)
    }

    /// The most requests the server has been answering at once.
    pub(crate) fn max_in_flight(&self) -> usize {
        self.shared.max_in_flight.load(SeqCst)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, SeqCst);
        // Wakes the accept loop, which then sees `stop`; it fails only if the loop already ended.
        let _ = TcpStream::connect(self.addr);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

/// Accepts until `stop`, one thread per connection; then shuts every connection down and joins its thread.
fn accept_loop(listener: &TcpListener, shared: &Arc<FixtureState>) {
    let mut open: Vec<(TcpStream, JoinHandle<()>)> = Vec::new();
    let mut resets = Vec::new();
    for stream in listener.incoming() {
        if shared.stop.load(SeqCst) {
            break;
        }
        let Ok(stream) = stream else { continue };
        shared.connections.fetch_add(1, SeqCst);
        let _ = stream.set_nodelay(true);
        stream.set_read_timeout(Some(READ_TIMEOUT)).expect("set a read timeout");
        if let Behaviour::Reset = shared.behaviour {
            // No clone kept: the reset needs this socket's last descriptor closed.
            let shared = Arc::clone(shared);
            resets.push(thread::spawn(move || reset(stream, &shared)));
            continue;
        }
        let Ok(handle) = stream.try_clone() else { continue };
        let shared = Arc::clone(shared);
        open.retain(|(_, thread)| !thread.is_finished());
        open.push((handle, thread::spawn(move || serve_socket(stream, &shared))));
    }
    for (stream, thread) in open {
        let _ = stream.shutdown(Shutdown::Both);
        let _ = thread.join();
    }
    for thread in resets {
        let _ = thread.join();
    }
}

/// Reads one request head from `stream`, then closes it with `SO_LINGER` 0: the peer gets a reset.
fn reset(stream: TcpStream, shared: &FixtureState) {
    let socket = socket2::SockRef::from(&stream);
    socket.set_linger(Some(Duration::ZERO)).expect("set SO_LINGER");
    let mut conn = Conn { stream: &stream, buf: Vec::new() };
    if let Ok(Some(_)) = conn.head() {
        shared.requests.fetch_add(1, SeqCst);
    }
    // Dropping the only descriptor with SO_LINGER 0 sends the reset (`shutdown` would send a FIN).
}

/// Serves one accepted socket, over TLS if configured, then closes it (after `close_notify` under TLS).
fn serve_socket(stream: TcpStream, shared: &FixtureState) {
    // `shutdown`, not drop, ends the connection: the accept loop holds a clone of the socket.
    let Some(config) = &shared.tls else {
        let _ = serve(&mut Conn { stream: &stream, buf: Vec::new() }, shared);
        let _ = stream.shutdown(Shutdown::Both);
        return;
    };
    // Fails only for a config that cannot serve, and `TlsTestServer::start` built a working one.
    let session = ServerConnection::new(Arc::clone(config)).expect("a TLS session");
    let mut tls = StreamOwned::new(session, stream);
    let served = serve(&mut Conn { stream: &mut tls, buf: Vec::new() }, shared);
    if served.is_ok() {
        tls.conn.send_close_notify();
        let _ = tls.flush();
    }
    let _ = tls.sock.shutdown(Shutdown::Both);
}

/// A request head: all the behaviours need of it.
struct Head {
    method: String,
    host: String,
    content_length: usize,
    chunked: bool,
}

/// A connection with the bytes read past the current request.
struct Conn<S> {
    stream: S,
    buf: Vec<u8>,
}

impl<S: Read + Write> Conn<S> {
    /// Reads up to and including `\r\n\r\n`; `None` if the peer closed between requests.
    fn head(&mut self) -> io::Result<Option<Head>> {
        let end = loop {
            if let Some(at) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            if self.fill()? == 0 {
                return if self.buf.is_empty() { Ok(None) } else { Err(io::ErrorKind::UnexpectedEof.into()) };
            }
        };
        let text = String::from_utf8_lossy(&self.buf[..end]).into_owned();
        self.buf.drain(..end);
        let mut lines = text.split("\r\n");
        let method = lines.next().and_then(|line| line.split(' ').next()).unwrap_or_default().to_owned();
        let fields: Vec<_> = lines.filter_map(|line| line.split_once(':')).collect();
        let field = |name: &str| {
            fields.iter().find(|(n, _)| n.trim().eq_ignore_ascii_case(name)).map(|(_, value)| value.trim())
        };
        let content_length = field("content-length").and_then(|value| value.parse().ok()).unwrap_or(0);
        let host = field("host").unwrap_or_default().to_owned();
        let chunked = field("transfer-encoding").is_some_and(|coding| coding.eq_ignore_ascii_case("chunked"));
        Ok(Some(Head { method, host, content_length, chunked }))
    }

    /// Reads a chunked request body, its extensions and trailers dropped.
    fn chunked_body(&mut self) -> io::Result<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            let line = self.line()?;
            let digits = line.split(';').next().unwrap_or_default().trim();
            let size = usize::from_str_radix(digits, 16).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            if size == 0 {
                while !self.line()?.is_empty() {}
                return Ok(body);
            }
            body.extend(self.body(size)?);
            self.body(2)?;
        }
    }

    /// Reads one CRLF-terminated line, without its CRLF.
    fn line(&mut self) -> io::Result<String> {
        loop {
            if let Some(at) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.buf[..at]).into_owned();
                self.buf.drain(..at + 2);
                return Ok(line);
            }
            if self.fill()? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
    }

    /// Reads exactly `len` bytes of request body.
    fn body(&mut self, len: usize) -> io::Result<Vec<u8>> {
        while self.buf.len() < len {
            if self.fill()? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
        Ok(self.buf.drain(..len).collect())
    }

    /// Reads what the peer has sent into `buf`; 0 at end of stream.
    fn fill(&mut self) -> io::Result<usize> {
        let mut chunk = [0; 4096];
        let n = self.stream.read(&mut chunk)?;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n)
    }

    /// Writes all of `bytes` and flushes them to the socket.
    fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)?;
        self.stream.flush()
    }
}

/// Answers requests on `conn` as `shared.behaviour` says, until either side closes.
fn serve<S: Read + Write>(conn: &mut Conn<S>, shared: &FixtureState) -> io::Result<()> {
    let mut on_this_connection = 0;
    while let Some(head) = conn.head()? {
        on_this_connection += 1;
        let index = shared.requests.fetch_add(1, SeqCst);
        let _answering = InFlight::enter(shared);
        if let Behaviour::Interim = shared.behaviour {
            conn.send(b"HTTP/1.1 100 Continue\r\n\r\n")?;
        }
        let body = if head.chunked { conn.chunked_body()? } else { conn.body(head.content_length)? };
        match &shared.behaviour {
            Behaviour::Fixed { status, headers, body } => conn.send(&response(*status, headers, body))?,
            Behaviour::Chunked { chunks } => {
                conn.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Trailer\r\n\r\n")?;
                pause(CHUNK_PAUSE);
                for (i, chunk) in chunks.iter().filter(|chunk| !chunk.is_empty()).enumerate() {
                    let ext = if i == 0 { ";ext=first" } else { "" };
                    conn.send(&[format!("{:x}{ext}\r\n", chunk.len()).as_bytes(), chunk, b"\r\n"].concat())?;
                    pause(CHUNK_PAUSE);
                }
                conn.send(b"0\r\nX-Trailer: done\r\n\r\n")?;
            }
            Behaviour::Slow { delay } => {
                conn.send(b"HTTP/1.1 200 OK\r\n")?;
                pause(*delay);
                conn.send(b"Content-Length: 4\r\n\r\nslow")?;
            }
            Behaviour::Stall => loop {
                match conn.fill() {
                    Ok(0) => return Ok(()),
                    Err(e) if !matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                        return Err(e)
                    }
                    _ => {}
                }
            },
            Behaviour::Truncated { declared, sent } => {
                conn.send(format!("HTTP/1.1 200 OK\r\nContent-Length: {declared}\r\n\r\n").as_bytes())?;
                return conn.send(&vec![b'x'; *sent]);
            }
            Behaviour::TruncatedChunked => {
                return conn.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n");
            }
            Behaviour::Malformed => return conn.send(b"HTTP/1.1 abc nonsense\r\n\r\n"),
            Behaviour::CloseAfterFirst => return conn.send(&response(200, &[], b"first")),
            Behaviour::CloseOnSecond if on_this_connection == 1 => conn.send(&response(200, &[], b"first"))?,
            Behaviour::CloseOnSecond => return Ok(()),
            Behaviour::Echo => conn.send(&response(200, &[], &[head.method.as_bytes(), b" ", &body].concat()))?,
            Behaviour::EchoHost => conn.send(&response(200, &[], head.host.as_bytes()))?,
            Behaviour::Redirect { to, times } if index < *times => {
                conn.send(&response(302, &[("Location".into(), to.clone())], b""))?;
            }
            Behaviour::Redirect { .. } => conn.send(&response(200, &[], b"done"))?,
            Behaviour::Interim => conn.send(&response(200, &[], b"ok"))?,
            Behaviour::Head if head.method == "HEAD" => {
                conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")?
            }
            Behaviour::Head => conn.send(&response(200, &[], &head_body()))?,
            Behaviour::Raw(bytes) => conn.send(bytes)?,
            Behaviour::Reset => unreachable!("the accept loop resets these connections itself"),
            Behaviour::Drip { head, every, total } => {
                conn.send(head)?;
                for _ in 0..total.as_millis() / every.as_millis().max(1) {
                    pause(*every);
                    conn.send(b"x")?;
                }
                return Ok(());
            }
        }
    }
    Ok(())
}

/// Counts one request as being answered until dropped.
struct InFlight<'a>(&'a FixtureState);

impl InFlight<'_> {
    fn enter(shared: &FixtureState) -> InFlight<'_> {
        let now = shared.in_flight.fetch_add(1, SeqCst) + 1;
        shared.max_in_flight.fetch_max(now, SeqCst);
        InFlight(shared)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, SeqCst);
    }
}

/// A complete response; `Content-Length` is added unless the status forbids a body (204) or implies none (304).
fn response(status: u16, headers: &[(String, String)], body: &[u8]) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        204 => "No Content",
        302 => "Found",
        304 => "Not Modified",
        404 => "Not Found",
        500 => "Internal Server Error",
        _ => "Unknown",
    };
    let mut head = format!("HTTP/1.1 {status} {reason}\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if matches!(status, 204 | 304) {
        return [head.as_bytes(), b"\r\n"].concat();
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    [head.as_bytes(), body].concat()
}

/// Blocks this server thread for `duration`.
#[expect(clippy::disallowed_methods, reason = "these servers run on plain std threads, never on fibers")]
fn pause(duration: Duration) {
    thread::sleep(duration);
}

/// The plain server's behaviours over TLS 1.2/1.3 with a fresh self-signed certificate for `localhost`
/// and 127.0.0.1.
#[derive(Debug)]
pub(crate) struct TlsTestServer {
    server: TestServer,
    ca: CertificateDer<'static>,
}

impl TlsTestServer {
    /// Generates the certificate and serves `behaviour` on 127.0.0.1:0 over TLS.
    ///
    /// # Panics
    ///
    /// If the certificate or the TLS configuration cannot be made, or as [`TestServer::start`].
    pub(crate) fn start(behaviour: Behaviour) -> TlsTestServer {
        let names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
        let certified = rcgen::generate_simple_self_signed(names).expect("self-signed certificate");
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(certified.key_pair.serialize_der()));
        let ca = certified.cert.der().clone();
        let config = ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .with_no_client_auth()
            .with_single_cert(vec![ca.clone()], key)
            .expect("the key matches the certificate");
        TlsTestServer { server: TestServer::spawn(behaviour, Some(Arc::new(config))), ca }
    }

    /// The address the server listens on.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// `https://localhost:PORT/path`: the certificate names `localhost`, so this checks SNI and the DNS name.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("https://localhost:{}/{}", self.addr().port(), path.trim_start_matches('/'))
    }

    /// The certificate's DER, for the client's root store.
    pub(crate) fn ca_certificate_der(&self) -> Vec<u8> {
        self.ca.to_vec()
    }

    /// How many TCP connections the server has accepted.
    pub(crate) fn connections(&self) -> usize {
        self.server.connections()
    }

    /// How many request heads the server has read, over all connections.
    pub(crate) fn requests(&self) -> usize {
        self.server.requests()
    }
}
