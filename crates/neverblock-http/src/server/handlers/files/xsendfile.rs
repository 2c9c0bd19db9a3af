//! X-Sendfile: a handler names a file in a response header and the server sends that file itself,
//! as Apache's mod_xsendfile (`X-Sendfile: /path`) and nginx's internal locations
//! (`X-Accel-Redirect: /uri`) do.
//!
//! The handler keeps control of which file goes to whom; the bytes never pass through its code,
//! so a slow download costs it nothing. The file is opened beneath a configured directory with the
//! static handler's `openat2(RESOLVE_BENEATH)` open, so no path, `..` or symbolic link can lead
//! outside it, and answered as a static file is: `sendfile(2)`, `Range` and `If-Range`,
//! conditional GET, `Content-Type` by extension.

use std::borrow::Cow;
use std::ffi::OsStr;
use std::fmt;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use percent_encoding::percent_decode_str;

use super::{leads_outside_root, url_path_beneath, StaticFiles};
use crate::error::Error;
use crate::server::{Handler, Request, Response};

/// The handler's fields a file response replaces: they describe the body the handler did not send.
const REPLACED: [&str; 6] =
    ["content-length", "transfer-encoding", "content-range", "etag", "last-modified", "accept-ranges"];

/// A [`Handler`] around another whose responses may name a file for the server to send.
///
/// When the inner handler's response carries `X-Sendfile: <path>` (the name is
/// [configurable](XSendfile::header)) and a [root](XSendfile::root) is set, or
/// `X-Accel-Redirect: <uri>` and a [location](XSendfile::accel_location) matches the URI, the
/// response's body is dropped and the file is sent in its place, with everything
/// [`StaticFiles`] gives a file: `sendfile(2)`, a 206 for `Range` (and `If-Range`), 304 and 412
/// for conditional requests, `ETag`, `Last-Modified`, `Accept-Ranges`, and `Content-Type` by
/// extension. The status is the file's (200, 206, 304, …), whatever the handler said; the
/// handler's other fields are kept, and its own `Content-Type` replaces the one guessed from the
/// extension (its `Content-Disposition`, `Cache-Control`, `Set-Cookie` … go out as it set them),
/// but not its `Content-Length`, `Content-Range`, `ETag`, `Last-Modified` or `Accept-Ranges`,
/// which would describe the body it did not send. A request of any method is answered as a GET of
/// the file (a HEAD as a HEAD), as nginx does.
///
/// `X-Sendfile` names a file system path: an absolute one must lie under the root, after
/// resolving symbolic links (a path lexically under it is opened beneath it, where the kernel
/// refuses any link out; any other is resolved first, and must end up under it); a relative one is
/// taken from the root. Percent escapes in it are decoded (mod_xsendfile's default), so names that
/// are not ASCII can be sent. `X-Accel-Redirect` names a URI: the longest matching location prefix
/// is replaced by its directory (nginx's `alias`), the rest decoded as a URL path (a `..`
/// segment or an encoded slash refused), and a query ignored.
///
/// A file that cannot be sent (outside the root, missing, not a regular file, no location for the
/// URI) is answered 404 with a warning in the log naming the path, never with the handler's
/// response. Either header is removed whenever its mechanism is configured, so neither ever
/// reaches the client; without a root, `X-Sendfile` passes through untouched.
///
/// # Examples
///
/// An application that checks who may download and lets the server send the bytes:
///
/// ```
/// use std::io::{Read, Write};
/// use neverblock_http::server::{Request, Response, Server, XSendfile};
///
/// let dir = std::env::temp_dir().join(format!("xsendfile-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// std::fs::write(dir.join("report.pdf"), b"%PDF-1.7 ...").unwrap();
///
/// let app = |request: &mut Request<'_>| match request.header("authorization") {
///     Some("Bearer letmein") => Response::new(200)
///         .header("X-Sendfile", "report.pdf")
///         .header("Content-Disposition", "attachment; filename=\"q3.pdf\""),
///     _ => Response::new(403),
/// };
/// let handler = XSendfile::new(app).root(&dir).unwrap();
///
/// let server = Server::builder().workers(1).bind("127.0.0.1:0").unwrap();
/// let (addr, handle) = (server.local_addr(), server.handle());
/// let running = std::thread::spawn(move || server.run(handler));
///
/// let mut client = std::net::TcpStream::connect(addr).unwrap();
/// client.write_all(b"GET /q3 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer letmein\r\nConnection: close\r\n\r\n").unwrap();
/// let mut answer = String::new();
/// client.read_to_string(&mut answer).unwrap();
/// assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"));
/// assert!(answer.contains("\r\nContent-Type: application/pdf\r\n"));
/// assert!(answer.contains("\r\nContent-Disposition: attachment; filename=\"q3.pdf\"\r\n"));
/// assert!(!answer.contains("X-Sendfile"), "the header never reaches the client");
/// assert!(answer.ends_with("\r\n\r\n%PDF-1.7 ..."));
///
/// handle.shutdown();
/// running.join().unwrap().unwrap();
/// # std::fs::remove_dir_all(dir).unwrap();
/// ```
pub struct XSendfile<H> {
    inner: H,
    header: Cow<'static, str>,
    root: Option<SendfileRoot>,
    /// Longest prefix first.
    locations: Vec<Location>,
}

/// The directory `X-Sendfile` paths must lie under.
#[derive(Clone, Debug)]
struct SendfileRoot {
    files: StaticFiles,
    /// The directory as configured, made absolute but not canonical: paths through it (and its
    /// symbolic links) count as under it.
    given: PathBuf,
}

/// An `X-Accel-Redirect` location: URIs under `prefix` name files under `files`' root.
#[derive(Clone, Debug)]
struct Location {
    prefix: String,
    files: StaticFiles,
}

impl<H: Handler> XSendfile<H> {
    /// Wraps `inner`; nothing is honoured until a [root](XSendfile::root) or a
    /// [location](XSendfile::accel_location) is set.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Request, Response, XSendfile};
    ///
    /// let handler = XSendfile::new(|_: &mut Request<'_>| Response::new(200).header("X-Sendfile", "/srv/files/a.iso"));
    /// # drop(handler);
    /// ```
    pub fn new(inner: H) -> XSendfile<H> {
        XSendfile { inner, header: Cow::Borrowed("X-Sendfile"), root: None, locations: Vec::new() }
    }

    /// Honours `X-Sendfile` for files under `dir`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Io`](crate::ErrorKind::Io) if `dir` is not a directory that can be opened.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Request, Response, XSendfile};
    ///
    /// let app = |_: &mut Request<'_>| Response::new(200).header("X-Sendfile", "a.iso");
    /// let handler = XSendfile::new(app).root(std::env::temp_dir()).unwrap();
    /// # drop(handler);
    /// assert!(XSendfile::new(app).root("/no/such/dir").is_err());
    /// ```
    pub fn root(mut self, dir: impl AsRef<Path>) -> Result<XSendfile<H>, Error> {
        let dir = dir.as_ref();
        let files = StaticFiles::new(dir)?.precompressed(false);
        let given = std::path::absolute(dir).unwrap_or_else(|_| files.root().to_path_buf());
        self.root = Some(SendfileRoot { files, given });
        Ok(self)
    }

    /// The response field that names a file path (default `X-Sendfile`; `X-Lighttpd-Send-File`
    /// or any other an application sends).
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Request, Response, XSendfile};
    ///
    /// let app = |_: &mut Request<'_>| Response::new(200).header("X-Lighttpd-Send-File", "a.iso");
    /// let handler = XSendfile::new(app).header("X-Lighttpd-Send-File").root(std::env::temp_dir()).unwrap();
    /// # drop(handler);
    /// ```
    pub fn header(mut self, name: impl Into<Cow<'static, str>>) -> XSendfile<H> {
        self.header = name.into();
        self
    }

    /// Honours `X-Accel-Redirect` for URIs under `prefix`, which name files under `dir` (nginx's
    /// `location PREFIX { internal; alias DIR/; }`). With several locations the longest matching
    /// prefix wins; `"/"` maps every URI under `dir` (nginx's `root`).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Io`](crate::ErrorKind::Io) if `dir` is not a directory that can be opened.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Request, Response, XSendfile};
    ///
    /// // `X-Accel-Redirect: /protected/a.iso` sends <temp>/a.iso.
    /// let app = |_: &mut Request<'_>| Response::new(200).header("X-Accel-Redirect", "/protected/a.iso");
    /// let handler = XSendfile::new(app).accel_location("/protected/", std::env::temp_dir()).unwrap();
    /// # drop(handler);
    /// ```
    pub fn accel_location(mut self, prefix: &str, dir: impl AsRef<Path>) -> Result<XSendfile<H>, Error> {
        let files = StaticFiles::new(dir)?.precompressed(false);
        self.locations.push(Location { prefix: prefix.to_owned(), files });
        self.locations.sort_by_key(|l| std::cmp::Reverse(l.prefix.len()));
        Ok(self)
    }

    /// The file response for the path `value` names under `root`, or a 404 with a log line.
    fn send_path(&self, request: &Request<'_>, root: &SendfileRoot, value: &str) -> Response {
        match root.relative(value) {
            Some(relative) => self.send_beneath(request, &root.files, &relative, &self.header, value),
            None => refuse(request, &self.header, value, format_args!("lies outside {}", root.given.display())),
        }
    }

    /// The file response for the URI `value` names in a location, or a 404 with a log line.
    fn send_uri(&self, request: &Request<'_>, value: &str) -> Response {
        let path = value.split('?').next().unwrap_or_default();
        let Some(location) = self.locations.iter().find(|l| path.starts_with(&l.prefix)) else {
            return refuse(request, "X-Accel-Redirect", value, format_args!("matches no location"));
        };
        match url_path_beneath(&path[location.prefix.len()..]) {
            Ok(relative) => self.send_beneath(request, &location.files, &relative, "X-Accel-Redirect", value),
            Err(why) => refuse(request, "X-Accel-Redirect", value, format_args!("is refused: {why}")),
        }
    }

    /// Sends `relative` beneath `files`' root, which `value` of the handler's `header` named.
    fn send_beneath(
        &self,
        request: &Request<'_>,
        files: &StaticFiles,
        relative: &Path,
        header: &str,
        value: &str,
    ) -> Response {
        let root = files.root().display();
        match files.serve_named(request, relative) {
            Ok(Some(response)) => response,
            Ok(None) => refuse(request, header, value, format_args!("is not a regular file")),
            Err(e) if leads_outside_root(&e) => refuse(request, header, value, format_args!("leads outside {root}")),
            Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::NotADirectory) => {
                refuse(request, header, value, format_args!("does not exist under {root}"))
            }
            Err(e) => files.open_failed(request, &e),
        }
    }
}

impl SendfileRoot {
    /// The path relative to the root that `value` names, if it lies under the root.
    fn relative(&self, value: &str) -> Option<PathBuf> {
        let decoded: Vec<u8> = percent_decode_str(value).collect();
        if decoded.contains(&0) {
            return None;
        }
        let path = Path::new(OsStr::from_bytes(&decoded));
        if path.is_relative() {
            return Some(path.to_path_buf());
        }
        for base in [self.files.root(), self.given.as_path()] {
            if let Ok(rest) = path.strip_prefix(base) {
                return Some(rest.to_path_buf());
            }
        }
        // Not lexically under the root: where it leads may be (a symbolic link into it).
        let path = path.to_path_buf();
        let resolved = neverblock::spawn_blocking(move || path.canonicalize()).ok()?;
        resolved.strip_prefix(self.files.root()).ok().map(Path::to_path_buf)
    }
}

impl<H: Handler> Handler for XSendfile<H> {
    fn handle(&self, request: &mut Request<'_>) -> Response {
        let mut response = self.inner.handle(request);
        let path = self.root.as_ref().and_then(|root| Some((root, response.remove_header(&self.header)?)));
        let uri = match self.locations.is_empty() {
            true => None,
            false => response.remove_header("X-Accel-Redirect"),
        };
        let file = match (path, uri) {
            (Some((root, path)), _) => self.send_path(request, root, &path),
            (None, Some(uri)) => self.send_uri(request, &uri),
            (None, None) => return response,
        };
        merge(file, &response)
    }
}

/// The file's response with the handler's fields that still apply; an error response alone.
fn merge(mut file: Response, handler: &Response) -> Response {
    if !matches!(file.status(), 200 | 206 | 304) {
        return file;
    }
    let not_modified = file.status() == 304;
    let handler_type = handler.header_value("content-type").is_some();
    if handler_type {
        file.remove_header("content-type");
    }
    for (name, value) in handler.headers() {
        let replaced = REPLACED.iter().any(|r| name.eq_ignore_ascii_case(r));
        if replaced || (not_modified && name.eq_ignore_ascii_case("content-type")) {
            continue;
        }
        file.append_header(name.to_owned(), value.to_owned());
    }
    file
}

/// A 404 for a file the handler named but that cannot be sent, and the log line saying why.
fn refuse(request: &Request<'_>, header: &str, value: &str, why: fmt::Arguments<'_>) -> Response {
    log::warn!(
        "{} {} {}: the handler's {header} names {value:?}, which {why}; answering 404",
        request.peer_addr(),
        request.method(),
        request.target()
    );
    Response::error(404, "no such file")
}

impl<H> fmt::Debug for XSendfile<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XSendfile")
            .field("header", &self.header)
            .field("root", &self.root.as_ref().map(|r| &r.given))
            .field("locations", &self.locations.iter().map(|l| (&l.prefix, l.files.root())).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}
