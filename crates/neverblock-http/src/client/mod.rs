//! The client: requests, redirects, timeouts and the stale-connection retry, over a keep-alive
//! pool of plain or TLS connections; responses as streams, or read whole.

use std::borrow::Cow;
use std::io::{self, Read};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::ClientConfig;
use url::Url;

use crate::error::{Error, ErrorKind};
use crate::wire::client::{read_continue, read_response_head, Answer, RequestHead, ResponseHead, SendError, Upload};
use crate::wire::{self, BufferedConn, Limits, WireError};
use conn::Conn;
use origin::OriginRef;
use pool::{Pool, PooledConn};

mod builder;
mod conn;
mod message;
mod origin;
mod pool;
mod stream;

pub use builder::ClientBuilder;
pub(crate) use conn::DeadlinePassed;
pub use message::{get, post, Request, Response};
pub use stream::ResponseStream;

/// The most of a redirect's body read (and dropped) to keep its connection: a longer one closes it.
const REDIRECT_BODY_SKIP: u64 = 64 * 1024;

/// An HTTP/1.1 client with a keep-alive pool; cheap to clone (clones share the
/// pool) and usable from any fiber or thread.
///
/// Requests read like blocking code: inside a fiber each waits by parking the
/// fiber, so many fibers' requests are in flight at once on one thread;
/// outside a runtime they block the thread.
///
/// [`request`](Client::request) (and `get`, `head`, `post`) returns a [`Response`] read whole;
/// [`send`](Client::send) returns a [`ResponseStream`] as soon as the head has arrived, its body
/// read as it comes; [`send_body`](Client::send_body) also streams the request's body from a reader.
///
/// # Examples
///
/// ```
/// use std::io::{Read, Write};
/// use neverblock_http::Client;
/// use neverblock::net::TcpListener;
///
/// neverblock::run(|| {
///     let listener = TcpListener::bind("127.0.0.1:0").unwrap();
///     let url = format!("http://{}/hello", listener.local_addr().unwrap());
///     neverblock::spawn(move || {
///         let (mut conn, _) = listener.accept().unwrap();
///         let mut head = [0; 1024];
///         let _ = conn.read(&mut head).unwrap();
///         conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello").unwrap();
///     });
///     let response = Client::new().get(&url).unwrap();
///     assert_eq!((response.status(), response.body()), (200, &b"hello"[..]));
/// });
/// ```
#[derive(Clone, Debug)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    pool: Pool,
    tls: Arc<ClientConfig>,
    connect_timeout: Duration,
    read_timeout: Duration,
    total_timeout: Option<Duration>,
    expect_continue_timeout: Duration,
    redirects: usize,
    limits: Limits,
}

/// How one exchange on one connection failed.
enum Attempt {
    /// The connection was closed or reset before any byte of a response came back: this is the
    /// error to report if the request is not sent again.
    Stale(Error),
    Failed(Error),
}

/// A request's parts, borrowed: what the client sends on its first hop.
#[derive(Debug)]
pub(crate) struct Parts<'a, F> {
    pub(crate) method: &'a str,
    /// The URL: its origin is where the request goes, and it names the request in errors.
    /// Borrowed when the caller holds it parsed (the proxy's upstream, a `Request` made from a
    /// `Url`): no count taken per request.
    pub(crate) url: Cow<'a, Arc<Url>>,
    /// The path and query to ask for, when not the URL's own.
    pub(crate) target: Option<&'a str>,
    pub(crate) headers: &'a [(F, F)],
    /// Whether the method, target and fields are known to be writable as they are (the proxy's:
    /// what the server's parser accepted, and fields made from it); if not, they are checked byte
    /// by byte before anything is sent.
    pub(crate) valid: bool,
}

impl<'a> Parts<'a, String> {
    /// The parts of `request`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidUrl`] if its URL did not parse.
    fn of(request: &'a Request) -> Result<Parts<'a, String>, Error> {
        let url = match &request.parsed {
            Some(url) => Cow::Borrowed(url),
            None => Cow::Owned(Arc::new(parse(&request.url)?)),
        };
        Ok(Parts { method: &request.method, url, target: None, headers: &request.headers, valid: false })
    }
}

impl Default for Client {
    fn default() -> Client {
        Client::new()
    }
}

impl Client {
    /// A client with the default settings (see [`ClientBuilder`]).
    ///
    /// # Examples
    ///
    /// ```
    /// let client = neverblock_http::Client::new();
    /// let err = client.get("http://127.0.0.1:1/").unwrap_err();
    /// assert_eq!(err.kind(), neverblock_http::ErrorKind::Refused);
    /// ```
    pub fn new() -> Client {
        ClientBuilder::default().build().expect("the built-in roots are valid")
    }

    /// Settings for a new client.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let client = neverblock_http::Client::builder().total_timeout(Duration::from_secs(10)).build().unwrap();
    /// # drop(client);
    /// ```
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// `GET url`.
    ///
    /// # Errors
    ///
    /// See [`ErrorKind`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let response = neverblock_http::Client::new().get("http://127.0.0.1:8080/").unwrap();
    /// println!("{}", response.text());
    /// ```
    pub fn get(&self, url: &str) -> Result<Response, Error> {
        self.request(&Request::new("GET", url))
    }

    /// `HEAD url`: the response has headers and no body.
    ///
    /// # Errors
    ///
    /// See [`ErrorKind`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let response = neverblock_http::Client::new().head("http://127.0.0.1:8080/big.iso").unwrap();
    /// println!("{:?} bytes", response.header("content-length"));
    /// ```
    pub fn head(&self, url: &str) -> Result<Response, Error> {
        self.request(&Request::new("HEAD", url))
    }

    /// `POST url` with `body`.
    ///
    /// # Errors
    ///
    /// See [`ErrorKind`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let response = neverblock_http::Client::new().post("http://127.0.0.1:8080/echo", "hello").unwrap();
    /// assert_eq!(response.status(), 200);
    /// ```
    pub fn post(&self, url: &str, body: impl Into<Vec<u8>>) -> Result<Response, Error> {
        self.request(&Request::new("POST", url).body(body))
    }

    /// Sends `request`, follows redirects if the client is set to, and reads the whole response
    /// (at most [`max_body`](ClientBuilder::max_body) of body): [`send`](Client::send), then
    /// [`ResponseStream::into_response`].
    ///
    /// # Errors
    ///
    /// See [`ErrorKind`]; a timeout of the whole request is `TotalTimeout`
    /// whatever phase it cut short.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use neverblock_http::{Client, Request};
    ///
    /// let request = Request::new("PUT", "http://127.0.0.1:8080/item/1").header("Content-Type", "text/plain").body("one");
    /// let response = Client::new().request(&request).unwrap();
    /// assert_eq!(response.status(), 204);
    /// ```
    pub fn request(&self, request: &Request) -> Result<Response, Error> {
        self.within_total(&request.url, |deadline| {
            self.follow(&Parts::of(request)?, Upload::Bytes(&request.body), deadline)?.into_response()
        })
    }

    /// Sends `request` (with its body, if any), follows redirects if the client is set to, and
    /// returns the response as soon as its head has arrived, its body to be read from the
    /// [`ResponseStream`]. Interim responses (`100 Continue`, `103 Early Hints`) are skipped.
    ///
    /// # Errors
    ///
    /// As [`request`](Client::request), for the exchange up to the response's head.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use neverblock_http::{Client, Request};
    ///
    /// let client = Client::new();
    /// let mut response = client.send(&Request::new("GET", "http://127.0.0.1:8080/big.iso")).unwrap();
    /// println!("{} {:?}", response.status(), response.content_length());
    /// let skipped = response.copy_to(&mut std::io::sink()).unwrap();
    /// # drop(skipped);
    /// ```
    pub fn send(&self, request: &Request) -> Result<ResponseStream, Error> {
        self.within_total(&request.url, |deadline| {
            self.follow(&Parts::of(request)?, Upload::Bytes(&request.body), deadline)
        })
    }

    /// Sends `request` with a body streamed from `body` instead of its own, and returns the
    /// response as [`send`](Client::send) does. With `len`, the body is `len` bytes, sent under
    /// `Content-Length` (its reader must give that many); without, it is sent chunked until the
    /// reader ends. Either way the client frames the body: `Content-Length` and `Transfer-Encoding`
    /// fields of the request are not sent. The body is read and sent a piece at a time (a read of
    /// at most 32 KiB, then a write), never held whole.
    ///
    /// A streamed body is sent once: the request is not sent again after a stale kept-alive
    /// connection (idle connections are checked first), and a 307 or 308 redirect is returned
    /// rather than followed; 301, 302 and 303 redirects of a POST become a GET without a body, as
    /// with [`send`](Client::send).
    ///
    /// # Errors
    ///
    /// As [`send`](Client::send); `ErrorKind::Io` if the reader fails, or ends before `len` bytes.
    ///
    /// # Examples
    ///
    /// An upload of unknown length, sent chunked:
    ///
    /// ```no_run
    /// use neverblock_http::{Client, Request};
    ///
    /// let log = std::fs::File::open("/var/log/syslog").unwrap();
    /// let request = Request::new("PUT", "http://127.0.0.1:8080/logs/today").header("Content-Type", "text/plain");
    /// let response = Client::new().send_body(&request, log, None).unwrap();
    /// assert_eq!(response.status(), 201);
    /// ```
    pub fn send_body(&self, request: &Request, mut body: impl Read, len: Option<u64>) -> Result<ResponseStream, Error> {
        self.within_total(&request.url, |deadline| {
            self.follow(&Parts::of(request)?, Upload::Reader { reader: &mut body, len }, deadline)
        })
    }

    /// Sends a request given as borrowed `parts` (with `body`), and returns the response as
    /// [`send`](Client::send) does: the reverse proxy's way to pass a request on without first
    /// copying each of its fields into a [`Request`].
    pub(crate) fn send_parts(&self, parts: Parts<'_, &str>, body: Upload<'_>) -> Result<ResponseStream, Error> {
        self.within_total(parts.url.as_str(), |deadline| self.follow(&parts, body, deadline))
    }

    /// Runs `exchange` under the client's total timeout, if it has one: in a fiber, a timeout scope
    /// cuts short whatever it waits on; in any case every read and write is bounded by the deadline
    /// `exchange` is given. A timeout it causes is `TotalTimeout`.
    fn within_total<T>(
        &self,
        url: &str,
        exchange: impl FnOnce(Option<(Duration, Instant)>) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let Some(total) = self.inner.total_timeout else { return exchange(None) };
        let deadline = Some((total, Instant::now() + total));
        match neverblock::timeout(total, || exchange(deadline)) {
            Ok(result) => result.map_err(|e| name_total_timeout(e, url, deadline)),
            Err(neverblock::Elapsed) => Err(total_timeout(url, total)),
        }
    }

    fn follow<F: AsRef<str>>(
        &self,
        parts: &Parts<'_, F>,
        mut body: Upload<'_>,
        deadline: Option<(Duration, Instant)>,
    ) -> Result<ResponseStream, Error> {
        let Parts { method, url, target, headers, valid } = parts;
        let (mut method, headers) = (*method, *headers);
        let first: &Arc<Url> = url;
        let head = match target {
            Some(target) => RequestHead { method, url: first, target, headers },
            None => RequestHead::to(method, first, headers),
        };
        // Later hops' targets are their URLs' own, which hold nothing a head may not.
        if *valid {
            debug_assert!(head.check().is_ok(), "{:?}", head.check());
        } else {
            head.check().map_err(|e| Error::wire(first.as_str(), e))?;
        }
        let mut response = self.send_once(&head, first, &mut body, deadline)?;
        // The URL of the last hop, once a redirect made one.
        let mut redirected: Option<Arc<Url>> = None;
        for hop in 0.. {
            if self.inner.redirects == 0 || !is_redirect(response.status()) {
                return Ok(response);
            }
            let Some(location) = response.header("location") else { return Ok(response) };
            if hop == self.inner.redirects {
                return Err(Error::new(
                    ErrorKind::TooManyRedirects,
                    format!("{first}: more than {} redirects", self.inner.redirects),
                ));
            }
            let url = redirected.as_ref().unwrap_or(first);
            let next = url.join(location).map_err(|e| {
                Error::new(ErrorKind::Malformed, format!("{url}: bad redirect location {location:?}: {e}"))
            })?;
            check_scheme(&next)?;
            // 303, and 301/302 after a POST, turn into a GET without a body (what browsers do).
            let status = response.status();
            if status == 303 || (matches!(status, 301 | 302) && method == "POST") {
                method = "GET";
                body = Upload::Bytes(&[]);
            } else if !body.is_replayable() {
                // The body was streamed and cannot be sent to the new location: the caller decides.
                return Ok(response);
            }
            response.skip_body(REDIRECT_BODY_SKIP);
            let url = redirected.insert(Arc::new(next));
            response = self.send_once(&RequestHead::to(method, url, headers), url, &mut body, deadline)?;
        }
        unreachable!("the loop returns")
    }

    /// One request on one connection: an idle pooled one if there is one (retried
    /// once on a fresh connection if the server had closed it and the request is
    /// replayable), else a new one.
    fn send_once<F: AsRef<str>>(
        &self,
        head: &RequestHead<'_, F>,
        url: &Arc<Url>,
        body: &mut Upload<'_>,
        deadline: Option<(Duration, Instant)>,
    ) -> Result<ResponseStream, Error> {
        let method = head.method;
        let replayable = body.is_replayable() && replayable(method, head.headers);

        let host = self.inner.pool.host(OriginRef::of(url));
        let slot = host
            .slot()
            .map_err(|_| Error::new(ErrorKind::TotalTimeout, format!("{url}: waiting for a connection slot")))?;
        let respond = |(conn, response)| {
            ResponseStream::new(url.clone(), response, conn, (host.clone(), slot), &self.inner.limits, deadline)
        };
        if let Some(conn) = host.take_idle(!replayable) {
            match self.send_on(conn, head, body, url, deadline) {
                Err(Attempt::Stale(e)) if !replayable => {
                    return Err(Error::new(
                        ErrorKind::Reset,
                        format!("{e}; {method} is not replayable, so it was not retried"),
                    ));
                }
                Err(Attempt::Stale(_)) => {}
                Err(Attempt::Failed(e)) => return Err(e),
                Ok(exchanged) => return Ok(respond(exchanged)),
            }
        }
        let connect_timeout = bound(self.inner.connect_timeout, deadline);
        let conn = Box::new(BufferedConn::new(Conn::open(host.origin(), connect_timeout, &self.inner.tls)?));
        match self.send_on(conn, head, body, url, deadline) {
            Ok(exchanged) => Ok(respond(exchanged)),
            Err(Attempt::Stale(e) | Attempt::Failed(e)) => Err(e),
        }
    }

    /// Sends the request on `conn` and reads the response's head. A request that asks for `100
    /// Continue` sends its body only once that comes, or nothing has come within the client's
    /// `expect_continue_timeout`; a final answer before it is returned without the body ever sent.
    fn send_on<F: AsRef<str>>(
        &self,
        mut conn: PooledConn,
        head: &RequestHead<'_, F>,
        body: &mut Upload<'_>,
        url: &Arc<Url>,
        deadline: Option<(Duration, Instant)>,
    ) -> Result<(PooledConn, ResponseHead), Attempt> {
        let deadline_at = deadline.map(|(_, at)| at);
        let stream = conn.get_mut().stream();
        let set = stream.set_timeouts(self.inner.read_timeout, deadline_at);
        set.map_err(|e| Attempt::Failed(Error::io("set socket timeouts", e)))?;
        let is_head = head.method == "HEAD";
        let sent = if head.expects_continue() && body.has_bytes() {
            match conn.send_head(head, body) {
                Ok(()) => match self.await_continue(&mut conn, is_head, deadline_at) {
                    Ok(None) => conn.send_body(body),
                    Ok(Some(mut response)) => {
                        // The server answered without the body it was told of: the connection
                        // cannot carry another request.
                        response.keep_alive = false;
                        return Ok((conn, response));
                    }
                    Err(e) => return Err(read_failure(url, e, None)),
                },
                Err(e) => Err(e),
            }
        } else {
            conn.send_request(head, body)
        };
        let unsent = match sent {
            Ok(()) => None,
            Err(SendError::Body(e)) => {
                let why = format!("{url}: reading the request body");
                return Err(Attempt::Failed(Error::with_source(ErrorKind::Io, why, e)));
            }
            // The server may have answered before it stopped reading (a 413 to a long upload):
            // that answer, if any, is read next.
            Err(SendError::Conn(e)) if wire::is_disconnect(&e) => Some(e),
            Err(SendError::Conn(e)) => return Err(Attempt::Failed(Error::io(&format!("send to {url}"), e))),
        };
        match read_response_head(&mut conn, is_head, &self.inner.limits) {
            Ok(mut response) => {
                // A request cut short leaves the connection in no state to carry another, and one
                // that asked to close it is the last on it.
                response.keep_alive &= unsent.is_none() && !head.asks_close();
                Ok((conn, response))
            }
            Err(e) => Err(read_failure(url, e, unsent)),
        }
    }

    /// Waits for the server's word on a request that asked for `100 Continue`: `None` to send the
    /// body (it came, or nothing came within `expect_continue_timeout`), or the final response the
    /// server gave without it.
    fn await_continue(
        &self,
        conn: &mut PooledConn,
        is_head: bool,
        deadline: Option<Instant>,
    ) -> Result<Option<ResponseHead>, WireError> {
        let wait = self.inner.read_timeout.min(self.inner.expect_continue_timeout);
        conn.get_mut().stream().set_timeouts(wait, deadline)?;
        let answer = read_continue(conn, is_head, &self.inner.limits);
        conn.get_mut().stream().set_timeouts(self.inner.read_timeout, deadline)?;
        match answer {
            Ok(Answer::Continue) => Ok(None),
            Ok(Answer::Final(response)) => Ok(Some(response)),
            // Silence: the server may not know the expectation (RFC 9110 §10.1.1).
            Err(WireError::Io(e)) if e.kind() == io::ErrorKind::TimedOut && !conn::is_deadline(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// How an exchange whose response head could not be read failed: stale (the connection closed
/// before any byte of an answer, perhaps as the request was sent, `unsent`), or for good.
fn read_failure(url: &Url, e: WireError, unsent: Option<io::Error>) -> Attempt {
    match (e, unsent) {
        (WireError::NoResponse(_), Some(e)) => {
            Attempt::Stale(Error::io(&format!("{url}: the connection closed while sending the request"), e))
        }
        (e @ WireError::NoResponse(_), None) => Attempt::Stale(Error::wire(url.as_str(), e)),
        (e, _) => Attempt::Failed(Error::wire(url.as_str(), e)),
    }
}

/// `e`, or a `TotalTimeout` if the request's deadline (`total`) caused it.
pub(crate) fn name_total_timeout(e: Error, url: &str, total: Option<(Duration, Instant)>) -> Error {
    match total {
        Some((total, deadline))
            if e.kind() == ErrorKind::TotalTimeout || (is_timeout(e.kind()) && Instant::now() >= deadline) =>
        {
            total_timeout(url, total)
        }
        _ => e,
    }
}

fn total_timeout(url: &str, total: Duration) -> Error {
    Error::new(ErrorKind::TotalTimeout, format!("{url}: no response within {total:?}"))
}

/// Parses an absolute http(s) URL with a host.
pub(crate) fn parse(url: &str) -> Result<Url, Error> {
    let parsed = Url::parse(url).map_err(|e| Error::new(ErrorKind::InvalidUrl, format!("{url}: {e}")))?;
    check_scheme(&parsed)?;
    Ok(parsed)
}

/// Refuses a URL that is not http(s) or has no host.
fn check_scheme(url: &Url) -> Result<(), Error> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(Error::new(ErrorKind::InvalidUrl, format!("{url}: only http:// and https:// URLs are supported")));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(Error::new(ErrorKind::InvalidUrl, format!("{url}: no host")));
    }
    Ok(())
}

fn is_redirect(status: u16) -> bool {
    matches!(status, 301 | 302 | 303 | 307 | 308)
}

fn is_timeout(kind: ErrorKind) -> bool {
    matches!(kind, ErrorKind::ConnectTimeout | ErrorKind::ReadTimeout | ErrorKind::TotalTimeout)
}

/// Go's rule for resending a request whose connection turned out closed: safe
/// methods, or a request that carries an idempotency key.
fn replayable<F: AsRef<str>>(method: &str, headers: &[(F, F)]) -> bool {
    matches!(method, "GET" | "HEAD" | "OPTIONS" | "TRACE")
        || headers
            .iter()
            .map(|(name, _)| name.as_ref())
            .any(|name| name.eq_ignore_ascii_case("idempotency-key") || name.eq_ignore_ascii_case("x-idempotency-key"))
}

/// A connect timeout, no later than the request's deadline (reads and writes are bounded by the
/// connection's own [`BoundedStream`](conn::BoundedStream)).
fn bound(timeout: Duration, deadline: Option<(Duration, Instant)>) -> Duration {
    match deadline {
        Some((_, d)) => timeout.min(d.saturating_duration_since(Instant::now()).max(Duration::from_millis(1))),
        None => timeout,
    }
}
