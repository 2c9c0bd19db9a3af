//! Static files: a directory served as nginx's static module serves it, sent by the kernel.
//!
//! A request's path is mapped under the root (`path.rs`, which refuses `..`, encoded slashes and
//! NUL bytes), opened so that no symbolic link leads out of the root and no disk read stalls the
//! loop (`open.rs`), and answered with `Content-Type` by extension, `ETag` and `Last-Modified`,
//! conditional requests in RFC 9110's order (`conditional.rs`) and a single byte range
//! (`range.rs`); the body is a file range the server sends with `sendfile(2)`, or a small file's
//! bytes from memory.
//!
//! What a path was found to be (`found.rs`: the open file, its metadata, tag, dates and type) is
//! shared by the requests of one turn of the loop and forgotten before the loop next looks for
//! events (`this_turn.rs`), so under load one open serves many requests while any change to the
//! file is seen by the first request after it. Small files' bytes stay with the loop from turn to
//! turn, reused while the file just opened is the one they were read from, unchanged
//! (`small_files.rs`): then a response is one write, and its request two system calls.

mod conditional;
mod fields;
mod found;
mod open;
mod path;
mod range;
mod small_files;
mod then;
mod this_turn;
mod xsendfile;

use std::borrow::Cow;
use std::io;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::time::SystemTime;

use crate::error::{Error, ErrorKind};
use crate::server::{is_out_of_descriptors, shed_idle_connections, Body, Handler, Request, Response};
use conditional::{Conditions, Outcome, Validators};
use fields::Fields;
use found::Found;
use open::Root;
use range::Selection;
pub use then::FilesThen;
pub use xsendfile::XSendfile;

/// The longest path Linux takes, in bytes with its NUL (`PATH_MAX`): a longer target is answered
/// 414, as too long to serve.
const PATH_MAX: usize = 4096;

/// A [`Handler`] that serves the files under a directory.
///
/// GET and HEAD only (others get 405). A directory's URL without its trailing slash is redirected
/// (301) to it; with it, its `index.html` is served, and without one the answer is 403: no
/// listings. Paths with `..` (plain or percent-encoded), an encoded slash or a NUL byte get 400;
/// paths that lead out of the root through a symbolic link get 404 (and a log line), as do names
/// longer than the file system allows (a whole path longer than the kernel takes: 414). When the
/// client accepts gzip and `name.gz` exists beside `name`, that is sent with
/// `Content-Encoding: gzip` (every response carries `Vary: Accept-Encoding`, unless
/// [`precompressed`](StaticFiles::precompressed) is turned off). `Range` gets a 206 for one range,
/// or for several that merge into one; other sets of ranges get the whole file; an unsatisfiable
/// one gets 416 with `Content-Range: bytes */<size>`.
///
/// # Examples
///
/// ```
/// use std::io::{Read, Write};
/// use neverblock_http::server::{Server, StaticFiles};
///
/// let dir = std::env::temp_dir().join(format!("static-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// std::fs::write(dir.join("hello.txt"), "hello, file\n").unwrap();
///
/// let server = Server::builder().workers(1).bind("127.0.0.1:0").unwrap();
/// let (addr, handle) = (server.local_addr(), server.handle());
/// let files = StaticFiles::new(&dir).unwrap();
/// let running = std::thread::spawn(move || server.run(files));
///
/// let mut client = std::net::TcpStream::connect(addr).unwrap();
/// client.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
/// let mut answer = String::new();
/// client.read_to_string(&mut answer).unwrap();
/// assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"));
/// assert!(answer.contains("\r\nContent-Type: text/plain; charset=utf-8\r\n"));
/// assert!(answer.ends_with("\r\n\r\nhello, file\n"));
///
/// handle.shutdown();
/// running.join().unwrap().unwrap();
/// # std::fs::remove_dir_all(dir).unwrap();
/// ```
#[derive(Clone, Debug)]
pub struct StaticFiles {
    root: Arc<Root>,
    precompressed: bool,
}

impl StaticFiles {
    /// Serves the files under `root`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Io`] if `root` is not a directory that can be opened.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::StaticFiles;
    /// use neverblock_http::ErrorKind;
    ///
    /// let files = StaticFiles::new(std::env::temp_dir()).unwrap();
    /// # drop(files);
    /// let missing = StaticFiles::new("/no/such/directory").unwrap_err();
    /// assert_eq!(missing.kind(), ErrorKind::Io);
    /// ```
    pub fn new(root: impl AsRef<Path>) -> Result<StaticFiles, Error> {
        let root = root.as_ref();
        let opened = Root::open(root)
            .map_err(|e| Error::with_source(ErrorKind::Io, format!("open the directory {}", root.display()), e))?;
        Ok(StaticFiles { root: Arc::new(opened), precompressed: true })
    }

    /// Whether to send `name.gz` to clients that accept gzip (default: yes).
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::StaticFiles;
    ///
    /// // `name.gz` is sent as it is, never in place of `name`.
    /// let files = StaticFiles::new(std::env::temp_dir()).unwrap().precompressed(false);
    /// # drop(files);
    /// ```
    pub fn precompressed(mut self, on: bool) -> StaticFiles {
        self.precompressed = on;
        self
    }

    /// The root directory, made canonical.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::StaticFiles;
    ///
    /// let files = StaticFiles::new(".").unwrap();
    /// assert!(files.root().is_absolute());
    /// ```
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// The response to `request`: the file its path names under the root.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Request, Response, StaticFiles};
    ///
    /// let files = StaticFiles::new(std::env::temp_dir()).unwrap();
    /// // The files, with a health check in front of them.
    /// let handler = move |request: &mut Request<'_>| match request.path() {
    ///     "/health" => Response::new(200).body("ok\n"),
    ///     _ => files.serve(request),
    /// };
    /// # let _ = handler;
    /// ```
    pub fn serve(&self, request: &Request<'_>) -> Response {
        self.serve_path(request, request.path())
    }

    /// The response to `request` for the file `path` names under the root: a URL path,
    /// percent-encoded, as [`serve`](StaticFiles::serve) takes from the request (an application
    /// that maps its own URLs, or names a file to send for a response, gives its own).
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Request, Response, StaticFiles};
    ///
    /// let files = StaticFiles::new(std::env::temp_dir()).unwrap();
    /// // Everything under /assets/ comes from the directory, the rest from elsewhere.
    /// let handler = move |request: &mut Request<'_>| match request.path().strip_prefix("/assets") {
    ///     Some(rest) => files.serve_path(request, rest),
    ///     None => Response::new(404),
    /// };
    /// # let _ = handler;
    /// ```
    pub fn serve_path(&self, request: &Request<'_>, path: &str) -> Response {
        if !matches!(request.method(), "GET" | "HEAD") {
            return Response::error(405, "only GET and HEAD are served here").header("Allow", "GET, HEAD");
        }
        let mapped = match path::map(path) {
            Ok(mapped) => mapped,
            Err(why) => return Response::error(400, why),
        };
        self.serve_mapped(request, mapped)
    }

    /// The response for a path mapped under the root: a file, a directory's index, or why not.
    fn serve_mapped(&self, request: &Request<'_>, mapped: path::Mapped) -> Response {
        let mut found = match self.open(&mapped.relative) {
            Ok(found) => found,
            Err(e) => return self.open_failed(request, &e),
        };
        let mut relative = mapped.relative;
        if found.meta.is_dir() {
            if !mapped.trailing_slash {
                return redirect_to_directory(request);
            }
            relative.to_mut().push("index.html");
            found = match self.open(&relative) {
                Ok(found) => found,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Response::error(403, "no index.html here"),
                Err(e) => return self.open_failed(request, &e),
            };
        } else if mapped.trailing_slash {
            return Response::error(404, "not a directory");
        }
        if !found.meta.is_file() {
            return Response::error(403, "not a regular file");
        }
        let fields = Fields::of(request);
        if self.precompressed && accepts_gzip(fields.accept_encoding.get()) {
            let mut gz = relative.into_owned().into_os_string();
            gz.push(".gz");
            if let Ok(gz_found) = self.open(Path::new(&gz)) {
                if gz_found.meta.is_file() {
                    let content_type = found.content_type.clone();
                    return self.file_response(&fields, request.method(), &gz_found, content_type, true);
                }
            }
        }
        self.file_response(&fields, request.method(), &found, found.content_type.clone(), false)
    }

    /// The response for the regular file at `relative` under the root, named by a handler rather
    /// than by the request's path (X-Sendfile): whatever the request's method, it is answered as a
    /// GET (or a HEAD) of the file, with its conditionals and range. What cannot be served is
    /// returned as the error of the open, or `None` for what is not a regular file.
    fn serve_named(&self, request: &Request<'_>, relative: &Path) -> Result<Option<Response>, io::Error> {
        let found = self.open(relative)?;
        if !found.meta.is_file() {
            return Ok(None);
        }
        let method = if request.method() == "HEAD" { "HEAD" } else { "GET" };
        Ok(Some(self.file_response(&Fields::of(request), method, &found, found.content_type.clone(), false)))
    }

    /// Opens `relative` under the root, or takes what this loop found there this turn;
    /// running out of descriptors sheds idle connections and tries once more.
    fn open(&self, relative: &Path) -> io::Result<Rc<Found>> {
        match this_turn::find(&self.root, relative) {
            Err(e) if is_out_of_descriptors(&e) && shed_idle_connections() => this_turn::find(&self.root, relative),
            other => other,
        }
    }

    /// The answer when the file could not be opened.
    fn open_failed(&self, request: &Request<'_>, e: &io::Error) -> Response {
        match e.kind() {
            io::ErrorKind::NotFound | io::ErrorKind::NotADirectory => Response::error(404, "no such file"),
            io::ErrorKind::PermissionDenied => Response::error(403, "not readable"),
            _ if open::is_escape(e) => {
                log::warn!(
                    "{} asked for {}, which leads outside {}",
                    request.peer_addr(),
                    request.path(),
                    self.root.path().display()
                );
                Response::error(404, "no such file")
            }
            _ if is_out_of_descriptors(e) => {
                Response::error(503, "out of file descriptors; try again").header("Retry-After", "1")
            }
            _ if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
                Response::error(404, "no such file")
            }
            // A name longer than the file system allows names no file; a whole path longer than
            // the kernel takes is a target too long to serve.
            io::ErrorKind::InvalidFilename => {
                log::debug!("{} asked for a path the file system cannot name: {e}", request.peer_addr());
                if request.path().len() >= PATH_MAX {
                    Response::error(414, "the path is longer than the file system allows")
                } else {
                    Response::error(404, "no such file")
                }
            }
            _ => {
                log::error!("opening {} under {}: {e}", request.path(), self.root.path().display());
                Response::error(500, "the file cannot be opened")
            }
        }
    }

    /// The response for an open regular file: conditionals, range, headers, and the file as body
    /// (from memory when its bytes are, and it is sent whole).
    fn file_response(
        &self,
        fields: &Fields<'_>,
        method: &str,
        found: &Found,
        content_type: Cow<'static, str>,
        gzip: bool,
    ) -> Response {
        let size = found.meta.len();
        let conditions = Conditions {
            if_match: fields.if_match.get(),
            if_unmodified_since: fields.if_unmodified_since.get(),
            if_none_match: fields.if_none_match.get(),
            if_modified_since: fields.if_modified_since.get(),
            if_range: fields.if_range.get(),
        };
        // The clock is read only when the answer depends on it: a condition to evaluate, or a
        // modification time that was ahead of the clock when the file was opened.
        let now = match conditions.is_empty() && found.modified <= found.opened_at {
            true => found.opened_at,
            false => SystemTime::now(),
        };
        // A modification time in the future is said as now (RFC 9110 §8.8.2.1), in a
        // `Last-Modified` made for this response alone; else the file's, shared.
        let modified = found.modified.min(now);
        let modified_ahead = (found.modified > now).then(|| httpdate::fmt_http_date(conditional::to_second(now)));
        let validators = Validators { etag: &found.etag, modified, now };
        let outcome = conditional::evaluate(method, &conditions, &validators);
        // Every answer, refusals too, depends on Accept-Encoding when a gzip sibling may be chosen.
        let vary = |mut response: Response| {
            if self.precompressed {
                response.append_valid_header("Vary", "Accept-Encoding");
            }
            response
        };
        let part = |offset: u64, len: u64| Body::File { file: Rc::clone(&found.file), offset, len };
        let mut response = match outcome {
            Outcome::Failed => return vary(Response::error(412, "a precondition failed")),
            Outcome::NotModified => Response::new(304),
            Outcome::Proceed { range } => {
                let selection = match fields.range.get() {
                    Some(field) if range => range::select(field, size),
                    _ => Selection::Whole,
                };
                match selection {
                    Selection::Whole => match &found.bytes {
                        Some(bytes) => Response::new(200).body(Rc::clone(bytes)),
                        None => Response::new(200).body(part(0, size)),
                    },
                    Selection::Part(part_range) => Response::new(206)
                        .header("Content-Range", format!("bytes {}-{}/{size}", part_range.start, part_range.end - 1))
                        .body(part(part_range.start, part_range.end - part_range.start)),
                    Selection::Unsatisfiable => {
                        return vary(
                            Response::error(416, "the range is outside the file")
                                .header("Content-Range", format!("bytes */{size}")),
                        )
                    }
                }
            }
        };
        // The fields are the handler's own (a type from the guess's table, a tag of hex digits,
        // an HTTP date): valid, and not checked again.
        if outcome != Outcome::NotModified {
            response.append_valid_header("Content-Type", content_type);
            response.append_valid_header("Accept-Ranges", "bytes");
            if gzip {
                response.append_valid_header("Content-Encoding", "gzip");
            }
        }
        response.append_valid_header("ETag", Rc::clone(&found.etag));
        match modified_ahead {
            Some(now) => response.append_valid_header("Last-Modified", now),
            None => response.append_valid_header("Last-Modified", Rc::clone(&found.last_modified)),
        }
        vary(response)
    }
}

impl Handler for StaticFiles {
    fn handle(&self, request: &mut Request<'_>) -> Response {
        self.serve(request)
    }
}

/// The path relative to a root that the percent-encoded URL path `raw` names.
///
/// # Errors
///
/// Why the path is refused: a `..` segment, an encoded slash, a NUL byte, a broken escape.
fn url_path_beneath(raw: &str) -> Result<std::path::PathBuf, &'static str> {
    path::map(raw).map(|mapped| mapped.relative.into_owned())
}

/// Whether `e`, from opening a path beneath a root, is the refusal of a path that leads outside it.
fn leads_outside_root(e: &io::Error) -> bool {
    open::is_escape(e)
}

/// 301 to the directory's URL with its slash: relative (the last segment and `/`), so a path that
/// starts with `//` cannot turn into another host; after `./` when the segment holds a colon, which
/// would make it a scheme (RFC 3986 §4.2).
fn redirect_to_directory(request: &Request<'_>) -> Response {
    let last = request.path().rsplit('/').next().unwrap_or_default();
    let dot = if last.contains(':') { "./" } else { "" };
    let location = match request.query() {
        Some(query) => format!("{dot}{last}/?{query}"),
        None => format!("{dot}{last}/"),
    };
    let location = if last.is_empty() { "/".to_owned() } else { location };
    Response::error(301, "this is a directory").header("Location", location)
}

/// Whether `Accept-Encoding` accepts gzip: named with a nonzero weight, or `*` when gzip is not
/// named.
fn accepts_gzip(field: Option<&str>) -> bool {
    let mut star = false;
    for element in field.unwrap_or_default().split(',') {
        let mut parts = element.split(';');
        let coding = parts.next().unwrap_or_default().trim();
        let weight_is_zero = parts.any(|p| {
            let p = p.trim();
            p.strip_prefix("q=")
                .or_else(|| p.strip_prefix("Q="))
                .is_some_and(|q| q.trim().parse::<f32>().is_ok_and(|q| q == 0.0))
        });
        if coding.eq_ignore_ascii_case("gzip") || coding.eq_ignore_ascii_case("x-gzip") {
            return !weight_is_zero;
        }
        star |= coding == "*" && !weight_is_zero;
    }
    star
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_is_accepted_when_named_with_weight_or_by_star() {
        let cases = [
            (None, false),
            (Some("gzip"), true),
            (Some("deflate, GZIP;q=0.5"), true),
            (Some("gzip;q=0"), false),
            (Some("gzip; q=0.000, *"), false),
            (Some("*"), true),
            (Some("*;q=0"), false),
            (Some("br, identity"), false),
        ];
        for (field, expected) in cases {
            assert_eq!(accepts_gzip(field), expected, "{field:?}");
        }
    }
}
