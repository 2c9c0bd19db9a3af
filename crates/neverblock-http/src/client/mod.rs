//! The client: requests, redirects, timeouts and the stale-connection retry, over a keep-alive
//! pool of plain or TLS connections.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::ClientConfig;
use url::Url;

use crate::error::{Error, ErrorKind};
use crate::wire::client::{read_response, RequestHead};
use crate::wire::{self, BufferedConn, Limits, WireError};
use conn::{tls_config, Conn};
use origin::OriginRef;
use pool::{Host, Pool, PooledConn};

mod conn;
mod message;
mod origin;
mod pool;

pub(crate) use conn::DeadlinePassed;
pub use message::{get, post, Request, Response};

/// An HTTP/1.1 client with a keep-alive pool; cheap to clone (clones share the
/// pool) and usable from any fiber or thread.
///
/// Requests read like blocking code: inside a fiber each waits by parking the
/// fiber, so many fibers' requests are in flight at once on one thread;
/// outside a runtime they block the thread.
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
    redirects: usize,
    limits: Limits,
}

/// Settings for a [`Client`].
///
/// Defaults: connect timeout 30 s, read timeout 60 s, no total timeout, 64
/// connections per host, idle connections closed after 90 s, redirects not
/// followed, response bodies up to 1 GiB, Mozilla's root certificates.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// let client = neverblock_http::Client::builder()
///     .connect_timeout(Duration::from_secs(2))
///     .read_timeout(Duration::from_secs(5))
///     .total_timeout(Duration::from_secs(10))
///     .max_connections_per_host(8)
///     .redirects(5)
///     .build()
///     .unwrap();
/// # drop(client);
/// ```
#[derive(Clone, Debug)]
pub struct ClientBuilder {
    connect_timeout: Duration,
    read_timeout: Duration,
    total_timeout: Option<Duration>,
    per_host: usize,
    idle_timeout: Duration,
    redirects: usize,
    max_body: usize,
    roots: Vec<Vec<u8>>,
}

impl Default for ClientBuilder {
    fn default() -> ClientBuilder {
        ClientBuilder {
            connect_timeout: Duration::from_secs(30),
            read_timeout: Duration::from_secs(60),
            total_timeout: None,
            per_host: 64,
            idle_timeout: Duration::from_secs(90),
            redirects: 0,
            max_body: usize::try_from(Limits::default().max_body).unwrap_or(usize::MAX),
            roots: Vec::new(),
        }
    }
}

impl ClientBuilder {
    /// How long connecting may take (`ErrorKind::ConnectTimeout`).
    pub fn connect_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.connect_timeout = timeout;
        self
    }

    /// How long one read or write may wait (`ErrorKind::ReadTimeout`).
    pub fn read_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.read_timeout = timeout;
        self
    }

    /// How long a whole request may take, redirects included (`ErrorKind::TotalTimeout`).
    pub fn total_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.total_timeout = Some(timeout);
        self
    }

    /// At most `n` connections to one origin at once, busy or idle; more requests wait their turn.
    pub fn max_connections_per_host(mut self, n: usize) -> ClientBuilder {
        self.per_host = n.max(1);
        self
    }

    /// Idle keep-alive connections older than this are closed, not reused.
    pub fn idle_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.idle_timeout = timeout;
        self
    }

    /// Follow up to `n` redirects (0, the default: return the 3xx response).
    pub fn redirects(mut self, n: usize) -> ClientBuilder {
        self.redirects = n;
        self
    }

    /// Refuse response bodies larger than `bytes` (`ErrorKind::TooLarge`).
    pub fn max_body(mut self, bytes: usize) -> ClientBuilder {
        self.max_body = bytes;
        self
    }

    /// Trust this root certificate (DER) as well as Mozilla's.
    pub fn add_root_certificate(mut self, der: Vec<u8>) -> ClientBuilder {
        self.roots.push(der);
        self
    }

    /// The client.
    ///
    /// # Errors
    ///
    /// `ErrorKind::Tls` if a root certificate is not a valid certificate.
    pub fn build(self) -> Result<Client, Error> {
        Ok(Client {
            inner: Arc::new(Inner {
                pool: Pool::new(self.per_host, self.idle_timeout),
                tls: tls_config(&self.roots)?,
                connect_timeout: self.connect_timeout,
                read_timeout: self.read_timeout,
                total_timeout: self.total_timeout,
                redirects: self.redirects,
                limits: Limits { max_body: self.max_body as u64, ..Limits::default() },
            }),
        })
    }
}

/// How one exchange on one connection failed.
enum Attempt {
    /// The connection was closed or reset before any byte of a response came back.
    Stale(String),
    Failed(Error),
}

impl Default for Client {
    fn default() -> Client {
        Client::new()
    }
}

impl Client {
    /// A client with the default settings (see [`ClientBuilder`]).
    pub fn new() -> Client {
        ClientBuilder::default().build().expect("the built-in roots are valid")
    }

    /// Settings for a new client.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// `GET url`.
    ///
    /// # Errors
    ///
    /// See [`ErrorKind`].
    pub fn get(&self, url: &str) -> Result<Response, Error> {
        self.request(&Request::new("GET", url))
    }

    /// `HEAD url`: the response has headers and no body.
    ///
    /// # Errors
    ///
    /// See [`ErrorKind`].
    pub fn head(&self, url: &str) -> Result<Response, Error> {
        self.request(&Request::new("HEAD", url))
    }

    /// `POST url` with `body`.
    ///
    /// # Errors
    ///
    /// See [`ErrorKind`].
    pub fn post(&self, url: &str, body: impl Into<Vec<u8>>) -> Result<Response, Error> {
        self.request(&Request::new("POST", url).body(body))
    }

    /// Sends `request`, follows redirects if the client is set to, and reads the whole response.
    ///
    /// # Errors
    ///
    /// See [`ErrorKind`]; a timeout of the whole request is `TotalTimeout`
    /// whatever phase it cut short.
    pub fn request(&self, request: &Request) -> Result<Response, Error> {
        let Some(total) = self.inner.total_timeout else { return self.follow(request, None) };
        let deadline = Instant::now() + total;
        let timed_out =
            || Error::new(ErrorKind::TotalTimeout, format!("{}: no response within {total:?}", request.url));
        // In a fiber the timeout scope cuts short whatever the request waits on; in any case each
        // read and write is bounded by the deadline (the connection's `Socket`).
        match neverblock::timeout(total, || self.follow(request, Some(deadline))) {
            Ok(Err(e))
                if e.kind() == ErrorKind::TotalTimeout || (Instant::now() >= deadline && is_timeout(e.kind())) =>
            {
                Err(timed_out())
            }
            Ok(result) => result,
            Err(neverblock::Elapsed) => Err(timed_out()),
        }
    }

    fn follow(&self, request: &Request, deadline: Option<Instant>) -> Result<Response, Error> {
        let mut url = match &request.parsed {
            Some(url) => url.clone(),
            None => Arc::new(parse(&request.url)?),
        };
        let mut method = request.method.as_str();
        let mut body = request.body.as_slice();
        for hop in 0.. {
            let response = self.send(method, &url, &request.headers, body, deadline)?;
            let location = response.header("location").filter(|_| is_redirect(response.status()));
            let (true, Some(location)) = (self.inner.redirects > 0, location) else { return Ok(response) };
            if hop == self.inner.redirects {
                return Err(Error::new(
                    ErrorKind::TooManyRedirects,
                    format!("{}: more than {} redirects", request.url, self.inner.redirects),
                ));
            }
            let next = url.join(location).map_err(|e| {
                Error::new(ErrorKind::Malformed, format!("{url}: bad redirect location {location:?}: {e}"))
            })?;
            check_scheme(&next)?;
            url = Arc::new(next);
            // 303, and 301/302 after a POST, turn into a GET without a body (what browsers do).
            if response.status() == 303 || (matches!(response.status(), 301 | 302) && method == "POST") {
                method = "GET";
                body = &[];
            }
        }
        unreachable!("the loop returns")
    }

    /// One request on one connection: an idle pooled one if there is one (retried
    /// once on a fresh connection if the server had closed it and the request is
    /// replayable), else a new one.
    fn send(
        &self,
        method: &str,
        url: &Arc<Url>,
        headers: &[(String, String)],
        body: &[u8],
        deadline: Option<Instant>,
    ) -> Result<Response, Error> {
        let head = RequestHead { method, url, headers };
        head.check().map_err(|e| Error::wire(url.as_str(), e))?;
        let replayable = replayable(method, headers);

        let host = self.inner.pool.host(OriginRef::of(url));
        let _slot = host
            .slot()
            .map_err(|_| Error::new(ErrorKind::TotalTimeout, format!("{url}: waiting for a connection slot")))?;
        if let Some(conn) = host.take_idle(!replayable) {
            match self.exchange(conn, &host, &head, body, url, deadline) {
                Err(Attempt::Stale(why)) if !replayable => {
                    return Err(Error::new(
                        ErrorKind::Reset,
                        format!("{why}; {method} is not replayable, so it was not retried"),
                    ));
                }
                Err(Attempt::Stale(_)) => {}
                Err(Attempt::Failed(e)) => return Err(e),
                Ok(response) => return Ok(response),
            }
        }
        let connect_timeout = bound(self.inner.connect_timeout, deadline);
        let conn = Box::new(BufferedConn::new(Conn::open(host.origin(), connect_timeout, &self.inner.tls)?));
        match self.exchange(conn, &host, &head, body, url, deadline) {
            Ok(response) => Ok(response),
            Err(Attempt::Stale(why)) => Err(Error::new(ErrorKind::Truncated, why)),
            Err(Attempt::Failed(e)) => Err(e),
        }
    }

    fn exchange(
        &self,
        mut conn: PooledConn,
        host: &Host,
        head: &RequestHead<'_>,
        body: &[u8],
        url: &Arc<Url>,
        deadline: Option<Instant>,
    ) -> Result<Response, Attempt> {
        let set = conn.get_mut().socket().set_budget(self.inner.read_timeout, deadline);
        set.map_err(|e| Attempt::Failed(Error::io("set socket timeouts", e)))?;
        if let Err(e) = conn.send_request(head, body) {
            return Err(if wire::is_disconnect(&e) {
                Attempt::Stale(format!("{url}: the connection closed while sending the request: {e}"))
            } else {
                Attempt::Failed(Error::io(&format!("send to {url}"), e))
            });
        }
        match read_response(&mut conn, head.method == "HEAD", &self.inner.limits) {
            Err(WireError::NoResponse) => {
                Err(Attempt::Stale(format!("{url}: the connection closed before any response")))
            }
            Err(e) => Err(Attempt::Failed(Error::wire(url.as_str(), e))),
            Ok(raw) => {
                if raw.reusable && !conn.has_buffered() {
                    host.put_idle(conn);
                }
                Ok(Response { status: raw.status, head: raw.head, body: raw.body, url: url.clone() })
            }
        }
    }
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
fn replayable(method: &str, headers: &[(String, String)]) -> bool {
    matches!(method, "GET" | "HEAD" | "OPTIONS" | "TRACE")
        || headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("idempotency-key") || k.eq_ignore_ascii_case("x-idempotency-key"))
}

/// A connect timeout, no later than the request's deadline (reads and writes are bounded by the
/// connection's own [`Socket`](conn::Socket)).
fn bound(timeout: Duration, deadline: Option<Instant>) -> Duration {
    match deadline {
        Some(d) => timeout.min(d.saturating_duration_since(Instant::now()).max(Duration::from_millis(1))),
        None => timeout,
    }
}
