//! Access logs in Apache's formats, byte for byte, written off the request path.
//!
//! A [`LogFormat`] is compiled once (`format.rs`) into items, each a directive's small function
//! (`items.rs`) or literal text; values are escaped as Apache escapes them (`escape.rs`) and times
//! are made once a second (`clock.rs`). [`AccessLog::record`] runs on the connection's fiber from
//! the server's response hook: it makes the line and queues it; a thread of its own writes the
//! queue in batches, reopens the file on request, and writes every queued line before it ends
//! (`writer.rs`).

mod clock;
mod escape;
mod format;
mod items;
mod writer;

use std::fmt;
use std::path::Path;
use std::sync::Arc;

pub use format::LogFormat;

use crate::error::{Error, ErrorKind};
use crate::server::Exchange;
use writer::Writer;

/// An access log: a line in a [`LogFormat`] for each exchange, written to standard output or a
/// file by a thread of its own; cheap to clone (clones share the writer).
///
/// [`record`](AccessLog::record) makes the line on the calling fiber and queues it; the writer
/// gathers what is queued and writes it in one call, so a request never waits for a disk (it parks
/// only if 16,384 lines are waiting, and then no line is dropped). [`reopen`](AccessLog::reopen)
/// makes the writer open its file again by its path, for log rotation (logrotate's `postrotate`
/// sends `neverblock serve` a SIGHUP for this); [`close`](AccessLog::close) writes every line
/// queued and waits for the writer to end, to call when the server has returned.
///
/// # Examples
///
/// ```
/// use std::io::{Read, Write};
/// use neverblock_http::server::{AccessLog, LogFormat, Request, Response, Server};
///
/// let path = std::env::temp_dir().join(format!("access-doc-{}.log", std::process::id()));
/// let log = AccessLog::file(&path, LogFormat::common()).unwrap();
/// let server = Server::builder().workers(1).on_response(log.hook()).bind("127.0.0.1:0").unwrap();
/// let (addr, handle) = (server.local_addr(), server.handle());
/// let running = std::thread::spawn(move || server.run(|_: &mut Request<'_>| Response::new(200).body("hi\n")));
///
/// let mut client = std::net::TcpStream::connect(addr).unwrap();
/// client.write_all(b"GET /hello?x=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
/// client.read_to_end(&mut Vec::new()).unwrap();
/// handle.shutdown();
/// running.join().unwrap().unwrap();
/// log.close();
///
/// let written = std::fs::read_to_string(&path).unwrap();
/// assert!(written.starts_with("127.0.0.1 - - ["), "{written}");
/// assert!(written.ends_with("] \"GET /hello?x=1 HTTP/1.1\" 200 3\n"), "{written}");
/// # std::fs::remove_file(path).unwrap();
/// ```
#[derive(Clone)]
pub struct AccessLog {
    format: LogFormat,
    server_name: Arc<str>,
    writer: Arc<Writer>,
}

impl AccessLog {
    /// A log written to standard output.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Io`] if the writer's thread cannot start.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{AccessLog, LogFormat};
    ///
    /// let log = AccessLog::stdout(LogFormat::combined()).unwrap();
    /// # log.close();
    /// ```
    pub fn stdout(format: LogFormat) -> Result<AccessLog, Error> {
        let writer =
            Writer::stdout().map_err(|e| Error::with_source(ErrorKind::Io, "start the access log".into(), e))?;
        Ok(AccessLog::with_writer(format, writer))
    }

    /// A log appended to `path` (made if missing).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Io`] if the file cannot be opened for appending, or the writer's thread cannot
    /// start.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{AccessLog, LogFormat};
    ///
    /// let path = std::env::temp_dir().join(format!("access-file-doc-{}.log", std::process::id()));
    /// let log = AccessLog::file(&path, LogFormat::common()).unwrap();
    /// # log.close();
    /// # std::fs::remove_file(path).unwrap();
    /// assert!(AccessLog::file("/no/such/dir/access.log", LogFormat::common()).is_err());
    /// ```
    pub fn file(path: impl AsRef<Path>, format: LogFormat) -> Result<AccessLog, Error> {
        let path = path.as_ref();
        let writer = Writer::file(path)
            .map_err(|e| Error::with_source(ErrorKind::Io, format!("open the access log {}", path.display()), e))?;
        Ok(AccessLog::with_writer(format, writer))
    }

    fn with_writer(format: LogFormat, writer: Writer) -> AccessLog {
        clock::system_zone();
        AccessLog { format, server_name: host_name().into(), writer: Arc::new(writer) }
    }

    /// The server's name, which `%v` shows (default: this machine's host name, as Apache's
    /// `ServerName` defaults to it).
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{AccessLog, LogFormat};
    ///
    /// let log = AccessLog::stdout("%v %h %>s".parse().unwrap()).unwrap().server_name("www.example.org");
    /// # log.close();
    /// ```
    pub fn server_name(mut self, name: &str) -> AccessLog {
        self.server_name = name.into();
        self
    }

    /// Makes the line for `exchange` and queues it for the writer.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{AccessLog, Exchange, LogFormat, Server};
    ///
    /// let log = AccessLog::stdout(LogFormat::common()).unwrap();
    /// let for_hook = log.clone();
    /// let server = Server::builder()
    ///     // Only errors are logged.
    ///     .on_response(move |x: &Exchange<'_>| if x.status() >= 400 { for_hook.record(x) })
    ///     .bind("127.0.0.1:0")
    ///     .unwrap();
    /// # drop(server);
    /// # log.close();
    /// ```
    pub fn record(&self, exchange: &Exchange<'_>) {
        let mut line = Vec::with_capacity(256);
        self.format.write_line(exchange, &self.server_name, &mut line);
        self.writer.send(line);
    }

    /// A response hook that records every exchange, for
    /// [`ServerBuilder::on_response`](crate::server::ServerBuilder::on_response).
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{AccessLog, LogFormat, Server};
    ///
    /// let log = AccessLog::stdout(LogFormat::common()).unwrap();
    /// let server = Server::builder().on_response(log.hook()).bind("127.0.0.1:0").unwrap();
    /// # drop(server);
    /// # log.close();
    /// ```
    pub fn hook(&self) -> impl Fn(&Exchange<'_>) + Send + Sync + 'static {
        let log = self.clone();
        move |exchange: &Exchange<'_>| log.record(exchange)
    }

    /// Has the writer open its file again by its path once the lines queued so far are written
    /// (after a rotation renamed it; nothing for standard output). Returns at once.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{AccessLog, LogFormat};
    ///
    /// let path = std::env::temp_dir().join(format!("access-reopen-doc-{}.log", std::process::id()));
    /// let log = AccessLog::file(&path, LogFormat::common()).unwrap();
    /// std::fs::rename(&path, path.with_extension("log.1")).unwrap();
    /// log.reopen();
    /// log.close();
    /// assert!(path.exists(), "a fresh file at the old path");
    /// # std::fs::remove_file(&path).unwrap();
    /// # std::fs::remove_file(path.with_extension("log.1")).unwrap();
    /// ```
    pub fn reopen(&self) {
        self.writer.reopen();
    }

    /// Writes every line queued so far and ends the writer; lines recorded after are dropped.
    /// Call it once the server has returned, so that no line is lost.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{AccessLog, LogFormat};
    ///
    /// let log = AccessLog::stdout(LogFormat::common()).unwrap();
    /// log.close();
    /// ```
    pub fn close(&self) {
        self.writer.close();
    }
}

impl fmt::Debug for AccessLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AccessLog")
            .field("format", &self.format.pattern())
            .field("to", &self.writer.target())
            .field("server_name", &self.server_name)
            .finish()
    }
}

/// This machine's host name (`localhost` if it cannot be read).
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}
