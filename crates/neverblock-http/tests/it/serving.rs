//! The server under test, run on its own thread, and a raw-bytes HTTP client on std sockets: what
//! the server tests share.

use std::io::{BufRead, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::Duration;

use neverblock_http::server::{Handler, Response, Server, ServerBuilder, ServerHandle, TlsConfig};
use neverblock_http::Error;

/// How long a test client waits for any one read: a bound, so a broken server fails the test
/// instead of hanging it, far above what any answer takes.
pub(crate) const PATIENCE: Duration = Duration::from_secs(10);

/// A server running `handler` on a thread of its own; shut down (at once) and joined on drop.
pub(crate) struct Running {
    pub(crate) addr: SocketAddr,
    pub(crate) handle: ServerHandle,
    thread: Option<JoinHandle<Result<(), Error>>>,
}

impl Running {
    /// One loop, the default settings.
    pub(crate) fn start(handler: impl Handler) -> Running {
        Running::with(Server::builder().workers(1), handler)
    }

    /// `builder`'s settings, on 127.0.0.1 and a free port.
    pub(crate) fn with(builder: ServerBuilder, handler: impl Handler) -> Running {
        Running::started(builder.bind("127.0.0.1:0").expect("bind 127.0.0.1:0"), handler)
    }

    /// `builder`'s settings, HTTPS with `tls` on 127.0.0.1 and a free port.
    pub(crate) fn with_tls(builder: ServerBuilder, tls: &TlsConfig, handler: impl Handler) -> Running {
        Running::started(builder.bind_tls("127.0.0.1:0", tls).expect("bind 127.0.0.1:0"), handler)
    }

    /// Runs `server` with `handler` on a thread of its own.
    pub(crate) fn started(server: Server, handler: impl Handler) -> Running {
        let (addr, handle) = (server.local_addr(), server.handle());
        let thread = std::thread::Builder::new()
            .name(format!("server-{}", addr.port()))
            .spawn(move || server.run(handler))
            .expect("start the server's thread");
        Running { addr, handle, thread: Some(thread) }
    }

    /// A new connection, with [`PATIENCE`] on each read.
    pub(crate) fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(self.addr).expect("connect to the server");
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        stream
    }

    /// Sends `request` on a new connection, ends the sending side, and returns all that comes back,
    /// as text (invalid UTF-8 replaced).
    pub(crate) fn send(&self, request: impl AsRef<[u8]>) -> String {
        String::from_utf8_lossy(&self.send_bytes(request)).into_owned()
    }

    /// [`send`](Running::send), as bytes.
    pub(crate) fn send_bytes(&self, request: impl AsRef<[u8]>) -> Vec<u8> {
        let mut stream = self.connect();
        stream.write_all(request.as_ref()).unwrap();
        stream.shutdown(Shutdown::Write).unwrap();
        read_all_bytes(&mut stream)
    }

    /// Waits for [`run`](Server::run) to return after a shutdown was asked for elsewhere.
    pub(crate) fn join(mut self) -> Result<(), Error> {
        self.thread.take().expect("joined once").join().expect("the server's thread panicked")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.handle.shutdown_now();
            let _ = thread.join();
        }
    }
}

/// Everything `stream` yields until the server closes it (a reset counts as the end), as text.
pub(crate) fn read_all(stream: &mut TcpStream) -> String {
    String::from_utf8_lossy(&read_all_bytes(stream)).into_owned()
}

/// [`read_all`], as bytes.
pub(crate) fn read_all_bytes(stream: &mut TcpStream) -> Vec<u8> {
    let mut bytes = Vec::new();
    match stream.read_to_end(&mut bytes) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("reading until the server closes: {e} (after {:?})", String::from_utf8_lossy(&bytes)),
    }
    bytes
}

/// How many responses `answer` holds: each has one `Date` field.
pub(crate) fn count_responses(answer: &str) -> usize {
    answer.matches("\r\nDate: ").count()
}

/// A response as read off the wire.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl Reply {
    /// The first field called `name` (any case).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Reads one response from `reader`: its head, and its body as `Content-Length`, chunked framing,
/// or (with neither) the end of the connection say; no body after a HEAD (`head`), or for 1xx,
/// 204 and 304.
pub(crate) fn read_reply(reader: &mut impl BufRead, head: bool) -> Reply {
    let mut line = String::new();
    reader.read_line(&mut line).expect("a status line");
    let status = line.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("status line {line:?}"));
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).expect("a header line");
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').unwrap_or_else(|| panic!("header line {line:?}"));
        headers.push((name.to_owned(), value.trim().to_owned()));
    }
    let mut reply = Reply { status, headers, body: Vec::new() };
    if head || status < 200 || status == 204 || status == 304 {
        return reply;
    }
    if reply.header("transfer-encoding").is_some() {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).unwrap();
            let size = usize::from_str_radix(size.trim_end().split(';').next().unwrap(), 16).expect("a chunk size");
            if size == 0 {
                let mut end = String::new();
                reader.read_line(&mut end).unwrap();
                return reply;
            }
            let start = reply.body.len();
            reply.body.resize(start + size + 2, 0);
            reader.read_exact(&mut reply.body[start..]).unwrap();
            reply.body.truncate(start + size);
        }
    }
    match reply.header("content-length").map(|n| n.parse::<usize>().unwrap()) {
        Some(n) => {
            reply.body.resize(n, 0);
            reader.read_exact(&mut reply.body).unwrap();
        }
        None => {
            reader.read_to_end(&mut reply.body).unwrap();
        }
    }
    reply
}

/// Parses every response in `text`, which holds whole responses only (none to a HEAD).
pub(crate) fn replies(text: impl AsRef<[u8]>) -> Vec<Reply> {
    let mut rest = text.as_ref();
    let mut out = Vec::new();
    while !rest.is_empty() {
        out.push(read_reply(&mut rest, false));
    }
    out
}

/// A handler that answers 200 with the request's method and target and what it read of the body.
pub(crate) fn echo() -> impl Handler {
    |request: &mut neverblock_http::server::Request<'_>| {
        let mut body = Vec::new();
        match request.body().read_to_end(&mut body) {
            Ok(_) => {
                let mut text = format!("{} {} ", request.method(), request.target()).into_bytes();
                text.extend_from_slice(&body);
                Response::new(200).body(text)
            }
            Err(e) => Response::new(200).body(format!("read failed: {e}")),
        }
    }
}

/// A fresh directory under the target directory (a disk file system, unlike /tmp on some
/// machines), removed on drop.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl TempDir {
    pub(crate) fn new(name: &str) -> TempDir {
        static COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let exe = std::env::current_exe().unwrap();
        let dir = exe.parent().unwrap().join(format!("http-it-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `content` to `relative`, making its directories.
    pub(crate) fn write(&self, relative: &str, content: impl AsRef<[u8]>) -> PathBuf {
        let path = self.0.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, content).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
