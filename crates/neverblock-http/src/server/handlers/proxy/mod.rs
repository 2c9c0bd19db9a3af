//! The reverse proxy: a handler that sends each request on to an upstream server through the
//! library's own client and its keep-alive pool, and streams the answer back.
//!
//! Bodies stream both ways without being held whole (`upstream.rs`): the request body is read from
//! the client as the upstream takes it (sized, or chunked when the client sent it chunked), and the
//! answer's body is read from the upstream as the client takes it, so a slow client slows only its
//! own upstream connection. Header fields cross as `fields.rs` says. An upstream that refuses or
//! resets the connection, or answers something that is not HTTP, gets the client a 502; one that
//! does not answer in time a 504; each with a warning in the log.

mod events;
mod fields;
mod upstream;

use std::borrow::Cow;
use std::fmt;
use std::io::{self, Read};
use std::sync::Arc;
use std::time::Duration;

use url::{Position, Url};

use crate::client::{Parts, ResponseStream};
use crate::error::{Error, ErrorKind};
use crate::server::{Body, Handler, Request, Response};
use crate::{Client, Request as Outgoing};
use events::{InFlight, Observer};
pub use events::{ProxyEvent, UpstreamFailure};
use fields::{Forwarding, Origin};
use upstream::{Answer, Failed};

/// A [`Handler`] that answers every request with what an upstream server answers it.
///
/// The request goes to the upstream's origin with its target unchanged (after the upstream URL's
/// own path, when it has one), its method, its end-to-end fields and its body; the upstream's
/// `Host` is its own, and the client's goes in `X-Forwarded-Host`. Hop-by-hop fields (RFC 9110
/// §7.6.1: `Connection` and the fields it names, `Keep-Alive`, `TE`, `Transfer-Encoding`,
/// `Upgrade`, `Proxy-Connection`, and `Proxy-Authenticate`, `Proxy-Authorization` and `Trailer`
/// as Go's and nginx's proxies treat them) stay on their hop both ways; `Forwarded` and
/// `X-Forwarded-For` gain the client's address, and `X-Forwarded-Proto` and `Via` are set. The
/// answer's status, fields and body come back as they are. Bodies stream both ways, never held
/// whole (nginx's `proxy_buffering off` and `proxy_request_buffering off`): a download holds its
/// upstream connection until the client has it all. A short answer of known length (up to 64 KiB)
/// is read first and goes out in one write with its head.
///
/// Connections to the upstream are kept alive in the client's pool (up to 1024 at once by
/// default). An upstream that refuses the connection, resets it, closes it before answering, or
/// answers with something that is not HTTP/1.x gets the client a 502; one that takes longer than
/// the [timeout](Proxy::timeout) to accept the connection or to send the next part of its answer
/// a 504; each is logged as a warning. A body that fails midway cuts the client's response short
/// (its connection closes), with a warning too. An [observer](Proxy::observe) hears of each
/// request sent on, each one done, and each upstream failure (what a metrics page counts).
///
/// Wrap it in an [`XSendfile`](super::XSendfile) to honour the upstream's `X-Sendfile` and
/// `X-Accel-Redirect` answers.
///
/// # Examples
///
/// ```no_run
/// use neverblock_http::server::{Proxy, Server};
///
/// // Everything on port 8080 goes to the application on port 3000.
/// let proxy = Proxy::new("http://127.0.0.1:3000").unwrap();
/// Server::builder().shutdown_on_signals().bind("127.0.0.1:8080").unwrap().run(proxy).unwrap();
/// ```
pub struct Proxy {
    /// The upstream's origin and path prefix, without a trailing slash.
    base: String,
    /// The upstream's URL, parsed: where every request goes.
    url: Arc<Url>,
    /// The upstream's path prefix, without a trailing slash (empty for none).
    prefix: String,
    timeout: Duration,
    connections: usize,
    client: Client,
    observer: Option<Observer>,
}

impl Proxy {
    /// A proxy to `upstream`, an `http://` (or `https://`) URL: its origin, and optionally a path
    /// that every request's target is put after.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidUrl`] if `upstream` is not such a URL (or has a query).
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Proxy;
    /// use neverblock_http::ErrorKind;
    ///
    /// let proxy = Proxy::new("http://127.0.0.1:3000").unwrap();
    /// assert_eq!(proxy.upstream(), "http://127.0.0.1:3000");
    /// assert_eq!(Proxy::new("ftp://127.0.0.1/").unwrap_err().kind(), ErrorKind::InvalidUrl);
    /// ```
    pub fn new(upstream: &str) -> Result<Proxy, Error> {
        let url = Url::parse(upstream).map_err(|e| Error::new(ErrorKind::InvalidUrl, format!("{upstream}: {e}")))?;
        // Refuses a URL the client cannot send to (not http or https, no host).
        Outgoing::from_url("GET", url.clone())?;
        if url.query().is_some() || url.fragment().is_some() {
            return Err(Error::new(ErrorKind::InvalidUrl, format!("{upstream}: an upstream URL has no query")));
        }
        let (base, prefix) = (base(&url), url.path().trim_end_matches('/').to_owned());
        let (timeout, connections) = (Duration::from_secs(60), 1024);
        let client = client(timeout, connections)?;
        Ok(Proxy { base, url: Arc::new(url), prefix, timeout, connections, client, observer: None })
    }

    /// How long the upstream may take to accept a connection, and then each time to send the next
    /// part of its answer, before the client gets a 504 (default 60 s, as nginx's
    /// `proxy_read_timeout`).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use neverblock_http::server::Proxy;
    ///
    /// let proxy = Proxy::new("http://127.0.0.1:3000").unwrap().timeout(Duration::from_secs(5));
    /// # drop(proxy);
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Proxy {
        self.timeout = timeout;
        self.rebuild()
    }

    /// At most `n` connections to the upstream at once, busy or idle (default 1024); more requests
    /// wait their turn.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Proxy;
    ///
    /// let proxy = Proxy::new("http://127.0.0.1:3000").unwrap().max_connections(128);
    /// # drop(proxy);
    /// ```
    pub fn max_connections(mut self, n: usize) -> Proxy {
        self.connections = n.max(1);
        self.rebuild()
    }

    /// Tells `observer` of every request sent on to the upstream ([`ProxyEvent::Sent`]), of its end
    /// ([`ProxyEvent::Done`], once its answer's body has been passed on or given up) and of every
    /// upstream failure ([`ProxyEvent::UpstreamFailed`]): what a metrics page counts
    /// ([`Metrics::proxy_observer`](crate::server::Metrics::proxy_observer)). It is called on the
    /// request's fiber and should not block.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::atomic::{AtomicI64, Ordering};
    /// use std::sync::Arc;
    /// use neverblock_http::server::{Proxy, ProxyEvent};
    ///
    /// let in_flight = Arc::new(AtomicI64::new(0));
    /// let counted = in_flight.clone();
    /// let proxy = Proxy::new("http://127.0.0.1:3000").unwrap().observe(move |event| match event {
    ///     ProxyEvent::Sent => drop(counted.fetch_add(1, Ordering::Relaxed)),
    ///     ProxyEvent::Done => drop(counted.fetch_sub(1, Ordering::Relaxed)),
    ///     _ => {}
    /// });
    /// # drop(proxy);
    /// ```
    pub fn observe(mut self, observer: impl Fn(ProxyEvent) + Send + Sync + 'static) -> Proxy {
        self.observer = Some(Arc::new(observer));
        self
    }

    /// The upstream's URL, as requests are sent to it (without a trailing slash).
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Proxy;
    ///
    /// assert_eq!(Proxy::new("http://127.0.0.1:3000/app/").unwrap().upstream(), "http://127.0.0.1:3000/app");
    /// ```
    pub fn upstream(&self) -> &str {
        &self.base
    }

    fn rebuild(mut self) -> Proxy {
        // Settings that built a client once build it again: only the roots could fail, and there are none.
        self.client = client(self.timeout, self.connections).expect("the client's settings are valid");
        self
    }

    /// The upstream's answer to `request`, or why there is none.
    fn forward(&self, request: &mut Request<'_>) -> Result<Answer, Failed> {
        // The head is borrowed apart from the request, whose body is read as the fields are sent.
        let (head, parts) = (request.head, request.parts);
        let target = self.target(parts.path(head), parts.query(head));
        let proto = if request.tls().is_some() { "https" } else { "http" };
        let host = head.get("host").and_then(|host| std::str::from_utf8(host).ok());
        let from = Origin { peer: request.peer_addr(), host, proto };
        let forwarding = Forwarding::of(head.fields(), from);
        let (fields, dropped) = fields::upstream_request(head.fields(), from, &forwarding);
        if !dropped.is_empty() {
            log::debug!("{}: fields that are not UTF-8 were not forwarded: {dropped:?}", request.peer_addr());
        }
        // The request's parser (httparse, or h2's for HTTP/2) accepted the method and every field
        // by HTTP's rules, the target is plain or made by the URL parser, and the forwarding
        // fields are made of those.
        let parts = Parts {
            method: head.method(),
            url: Cow::Borrowed(&self.url),
            target: Some(&target),
            headers: &fields,
            valid: true,
        };
        let len = request.content_length();
        upstream::round_trip(&self.client, parts, request.body(), len)
    }

    /// The request target upstream for a request's `path` and `query`: the path after the
    /// upstream's own. A plain path and query (the usual case) are put together as they are;
    /// anything else goes through the URL parser, which percent-encodes and resolves dot segments
    /// as it does in a whole URL.
    fn target<'r>(&self, path: &'r str, query: Option<&'r str>) -> Cow<'r, str> {
        let path = origin_path(path);
        if is_plain_path(path) && query.is_none_or(is_plain_query) {
            if self.prefix.is_empty() && query.is_none() {
                return Cow::Borrowed(path);
            }
            let mut target = [self.prefix.as_str(), path].concat();
            if let Some(query) = query {
                target.push('?');
                target.push_str(query);
            }
            return Cow::Owned(target);
        }
        let mut url = Url::clone(&self.url);
        url.set_path(&[self.prefix.as_str(), path].concat());
        url.set_query(query);
        Cow::Owned(url[Position::BeforePath..Position::AfterQuery].to_owned())
    }

    /// The client's response for the upstream's `answer`.
    fn respond(&self, request: &Request<'_>, answer: Answer, in_flight: InFlight) -> Response {
        let head_request = request.method() == "HEAD";
        let mut response = Response::new(answer.status());
        // Fields the client's parser accepted (a fold made spaces), so valid as they are.
        for (name, value) in fields::downstream_response(answer.head().fields(), head_request) {
            response.append_valid_header(name.to_owned(), value.to_owned());
        }
        if head_request || matches!(answer.status(), 204 | 304) {
            return response;
        }
        let stream = match answer {
            // A short body goes out in one write with the head; its request is done with the upstream.
            Answer::Read(read) => return response.body(read.into_body()),
            Answer::Stream(stream) => stream,
        };
        let len = stream.content_length();
        let body = UpstreamBody {
            stream,
            what: format!("{} {} {}", request.peer_addr(), request.method(), request.target()),
            sent: 0,
            in_flight,
        };
        response.body(Body::Reader { reader: Box::new(body), len })
    }

    /// The client's response when the upstream gave none: 502 or 504, logged.
    fn failed(&self, request: &Request<'_>, error: &Error, in_flight: &InFlight) -> Response {
        let failure = UpstreamFailure::of(error.kind());
        in_flight.tell(ProxyEvent::UpstreamFailed(failure));
        let (status, why) = match failure {
            UpstreamFailure::Timeout => (504, "the upstream did not answer in time"),
            _ => (502, "the upstream did not answer"),
        };
        log::warn!(
            "{} {} {}: the upstream {} failed ({error}); answering {status}",
            request.peer_addr(),
            request.method(),
            request.target(),
            self.base
        );
        Response::error(status, why)
    }
}

impl Handler for Proxy {
    fn handle(&self, request: &mut Request<'_>) -> Response {
        let in_flight = InFlight::start(self.observer.clone());
        match self.forward(request) {
            Ok(answer) if answer.status() >= 200 => self.respond(request, answer, in_flight),
            Ok(answer) => {
                let error = Error::new(ErrorKind::Malformed, format!("status {} switches protocols", answer.status()));
                self.failed(request, &error, &in_flight)
            }
            Err(Failed::Upstream(error)) => self.failed(request, &error, &in_flight),
            // The server answers a request body it could not read with its own status.
            Err(Failed::Client) => Response::error(400, "the request body could not be read"),
        }
    }
}

/// The upstream's response body as the server sends it on: a failure midway is logged and
/// told, and the request stays in flight until the body is done with.
struct UpstreamBody {
    stream: ResponseStream,
    /// The request, for the log.
    what: String,
    sent: u64,
    in_flight: InFlight,
}

impl Read for UpstreamBody {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.stream.read(buf) {
            Ok(n) => {
                self.sent += n as u64;
                Ok(n)
            }
            Err(e) => {
                let failure = match e.kind() {
                    io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => UpstreamFailure::Timeout,
                    _ => UpstreamFailure::Reset,
                };
                self.in_flight.tell(ProxyEvent::UpstreamFailed(failure));
                log::warn!(
                    "{}: the upstream's body failed after {} bytes ({e}); the response is cut short",
                    self.what,
                    self.sent
                );
                Err(e)
            }
        }
    }
}

/// Whether `path` reads the same once the URL parser has had it: it starts with `/`, holds only
/// characters a path keeps as they are (letters, digits, `-._~!$&'()*+,;=:@/` and `%`, which is
/// left alone), and no dot segment (not even a percent-encoded one) could be resolved away.
fn is_plain_path(path: &str) -> bool {
    let kept = |b: u8| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/%".contains(&b);
    path.starts_with('/') && path.bytes().all(kept) && !path.contains("/.") && !has_encoded_dot(path)
}

/// Whether `query` reads the same once the URL parser has had it: only letters, digits,
/// `-._~!$&()*+,;=:@/?` and `%` (an `'` is percent-encoded in the query of an http URL).
fn is_plain_query(query: &str) -> bool {
    query.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~!$&()*+,;=:@/?%".contains(&b))
}

/// Whether `text` holds `%2e` or `%2E`, a dot the URL parser reads as one in a dot segment.
fn has_encoded_dot(text: &str) -> bool {
    text.as_bytes().windows(3).any(|w| w[0] == b'%' && w[1] == b'2' && w[2] | 0x20 == b'e')
}

/// A request path as an origin-form path: `/` for the empty path of an absolute URL without one.
fn origin_path(path: &str) -> &str {
    if path.is_empty() {
        "/"
    } else {
        path
    }
}

/// The upstream URL's origin and path, without a trailing slash.
fn base(url: &Url) -> String {
    url.as_str().trim_end_matches('/').to_owned()
}

fn client(timeout: Duration, connections: usize) -> Result<Client, Error> {
    Client::builder().connect_timeout(timeout).read_timeout(timeout).max_connections_per_host(connections).build()
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Proxy")
            .field("upstream", &self.base)
            .field("timeout", &self.timeout)
            .field("connections", &self.connections)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The target a URL parsed whole asks for.
    fn parsed_target(text: &str) -> String {
        Url::parse(text).unwrap()[Position::BeforePath..Position::AfterQuery].to_owned()
    }

    #[test]
    fn a_request_goes_under_the_upstreams_path_as_a_url_parsed_whole_would() {
        for upstream in ["http://127.0.0.1:3000", "http://127.0.0.1:3000/", "http://app.local:81/base/", "http://h/a/b"]
        {
            let proxy = Proxy::new(upstream).unwrap();
            for (path, query) in [("/", None), ("/x/y", Some("q=1&r")), ("/a%20b/%2F", Some("")), ("/é ~", Some("v=ü"))]
            {
                let made = proxy.target(path, query);
                let text = match query {
                    Some(query) => format!("{}{path}?{query}", proxy.base),
                    None => format!("{}{path}", proxy.base),
                };
                assert_eq!(made, parsed_target(&text), "{upstream} {path} {query:?}");
            }
        }
        let proxy = Proxy::new("http://h:8/app/").unwrap();
        assert_eq!(proxy.target("", Some("a")), "/app/?a", "an empty path is /");
    }

    /// The target the URL parser makes of the upstream's URL with `path` (after its own) and
    /// `query` set.
    fn set_in_url(proxy: &Proxy, path: &str, query: Option<&str>) -> String {
        let mut url = Url::clone(&proxy.url);
        url.set_path(&[proxy.prefix.as_str(), path].concat());
        url.set_query(query);
        url[Position::BeforePath..Position::AfterQuery].to_owned()
    }

    #[test]
    fn a_target_put_together_as_it_came_is_what_the_url_parser_makes_of_it() {
        // Every path and query of up to three of these pieces, plain or not: the proxy's target is
        // the parser's whether or not it took the parser's way.
        let pieces = [
            "/", "a", ".", "..", "%2e", "%2E", "%", "%41", "'", "\"", "#", "?", "\\", "é", " ", "~", "//", "@", ":",
            "[", "{", "|", "^", "`", "=", "&", "+", ";", ",", "*", "$", "!", "(",
        ];
        let mut texts = vec![String::new()];
        for _ in 0..3 {
            let longer: Vec<String> =
                texts.iter().flat_map(|text| pieces.iter().map(move |piece| format!("{text}{piece}"))).collect();
            texts.extend(longer);
            texts.dedup();
        }
        let (mut plain, mut parsed) = (0, 0);
        for upstream in ["http://h:1", "http://h:1/app/"] {
            let proxy = Proxy::new(upstream).unwrap();
            for text in &texts {
                let path = format!("/{text}");
                let whole = set_in_url(&proxy, &path, Some(text));
                assert_eq!(proxy.target(&path, Some(text)), whole, "{upstream} {path:?} {text:?}");
                let whole = set_in_url(&proxy, &path, None);
                match proxy.target(&path, None) {
                    Cow::Borrowed(target) => {
                        plain += 1;
                        assert_eq!(target, whole, "{upstream} {path:?}");
                    }
                    Cow::Owned(target) => {
                        parsed += usize::from(!is_plain_path(&path));
                        assert_eq!(target, whole, "{upstream} {path:?}");
                    }
                }
            }
        }
        assert!(plain > 1000 && parsed > 1000, "both ways were taken: {plain} plain, {parsed} parsed");
    }
}
