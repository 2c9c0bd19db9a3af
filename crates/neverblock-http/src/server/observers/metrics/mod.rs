//! Metrics for Prometheus: what the server does (connections, requests by method and status class,
//! bytes, a request-duration histogram, files and proxied requests in flight, upstream failures)
//! and what its runtime holds (live fibers and run-queue length per event loop), served as a page
//! in the text exposition format.
//!
//! The counters are sharded by event loop (`counters.rs`) and summed when the page is made
//! (`exposition.rs`); the runtime's state is its `runtime::stats()`, which each loop counts on its
//! own thread when asked.

mod counters;
mod exposition;

use std::cell::Cell;
use std::fmt;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, OnceLock};

#[cfg(feature = "client")]
use counters::UPSTREAM_ERRORS;
use counters::{Counters, TLS_VERSIONS};
use exposition::{Page, CONTENT_TYPE};

use crate::server::{Body, Exchange, Handler, Handshake, HandshakeOutcome, Request, Response, ServerHandle};
#[cfg(feature = "client")]
use crate::server::{ProxyEvent, UpstreamFailure};
use crate::Version;

neverblock::fiber_local!(static SENDING_FILE: Cell<bool> = Cell::new(false));

/// A server's metrics: counters its response hook feeds, and a page of them in Prometheus' text
/// exposition format (0.0.4); cheap to clone (clones share the counters).
///
/// Feed it with [`hook`](Metrics::hook) (or [`record`](Metrics::record) from a hook of your
/// own), wrap the handler with [`serve`](Metrics::serve) to answer the page at a path and count
/// files in flight, and [`watch`](Metrics::watch) the server for its connection counts. The page
/// has `neverblock_connections_open`, `neverblock_connections_accepted_total`,
/// `neverblock_connections_shed_total`, by protocol `neverblock_connections_served_total{protocol}`
/// and `neverblock_connections_serving{protocol}` (`HTTP/1`, `HTTP/2`),
/// `neverblock_http_requests_total{method,status}` (status class `2xx` …; methods other than the
/// nine of RFC 9110 as `other`), `neverblock_http_requests_by_version_total{version}` (`HTTP/1.0`,
/// `HTTP/1.1`, `HTTP/2.0`: an HTTP/2 request is a stream),
/// `neverblock_http_response_body_bytes_total`, the histogram
/// `neverblock_http_request_duration_seconds`, `neverblock_downloads_in_flight`,
/// `neverblock_proxy_requests_in_flight`, `neverblock_proxy_requests_total`,
/// `neverblock_proxy_upstream_errors_total{kind}` (fed by a reverse proxy that
/// [`proxy_observer`](Metrics::proxy_observer) observes),
/// `neverblock_tls_handshakes_total{outcome,version,resumed}` (fed by the
/// [`handshake_hook`](Metrics::handshake_hook)), and per event loop `neverblock_fibers{loop}` and
/// `neverblock_run_queue_length{loop}`.
///
/// # Examples
///
/// ```
/// use std::io::{Read, Write};
/// use neverblock_http::server::{Metrics, Request, Response, Server};
///
/// let metrics = Metrics::new();
/// let server = Server::builder().workers(1).on_response(metrics.hook()).bind("127.0.0.1:0").unwrap();
/// metrics.watch(&server.handle());
/// let handler = metrics.serve("/metrics", |_: &mut Request<'_>| Response::new(200).body("app\n"));
/// let (addr, handle) = (server.local_addr(), server.handle());
/// let running = std::thread::spawn(move || server.run(handler));
///
/// let get = |target: &str| {
///     let mut client = std::net::TcpStream::connect(addr).unwrap();
///     write!(client, "GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
///     let mut answer = String::new();
///     client.read_to_string(&mut answer).unwrap();
///     answer
/// };
/// get("/");
/// let page = get("/metrics");
/// assert!(page.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
/// assert!(page.contains("\nneverblock_http_requests_total{method=\"GET\",status=\"2xx\"} 1\n"), "{page}");
/// assert!(page.contains("\nneverblock_connections_accepted_total 2\n"), "{page}");
///
/// handle.shutdown();
/// running.join().unwrap().unwrap();
/// ```
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    counters: Counters,
    server: OnceLock<ServerHandle>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    /// Metrics with every counter at zero.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Metrics;
    ///
    /// let metrics = Metrics::new();
    /// assert!(metrics.page().contains("neverblock_http_response_body_bytes_total 0\n"));
    /// ```
    pub fn new() -> Metrics {
        let shards = neverblock::runtime::available_threads();
        Metrics { inner: Arc::new(Inner { counters: Counters::new(shards), server: OnceLock::new() }) }
    }

    /// Shows `server`'s connection counts on the page (the first server watched; later calls do
    /// nothing).
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Metrics, Server};
    ///
    /// let metrics = Metrics::new();
    /// let server = Server::bind("127.0.0.1:0").unwrap();
    /// metrics.watch(&server.handle());
    /// assert!(metrics.page().contains("neverblock_connections_open 0\n"));
    /// ```
    pub fn watch(&self, server: &ServerHandle) {
        let _ = self.inner.server.set(server.clone());
    }

    /// Counts `exchange`: its method and status, body bytes, duration, and the end of its file.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Exchange, Metrics, Server};
    ///
    /// let metrics = Metrics::new();
    /// let counted = metrics.clone();
    /// let server = Server::builder()
    ///     .on_response(move |x: &Exchange<'_>| counted.record(x))
    ///     .bind("127.0.0.1:0")
    ///     .unwrap();
    /// # drop(server);
    /// ```
    pub fn record(&self, exchange: &Exchange<'_>) {
        let counters = &self.inner.counters;
        counters.request(exchange.method(), exchange.status(), exchange.body_bytes(), exchange.duration());
        let version = match exchange.version() {
            Some(Version::Http10) => Some(0),
            Some(Version::Http11) => Some(1),
            Some(Version::Http2) => Some(2),
            // Refused before its version was read, or a version added since.
            _ => None,
        };
        if let Some(version) = version {
            counters.version(version);
        }
        if neverblock::current_task_id().is_some() && SENDING_FILE.with(|sending| sending.replace(false)) {
            counters.downloads.fetch_sub(1, Relaxed);
        }
    }

    /// Counts `handshake`: how it ended, the TLS version it agreed on, whether it resumed a session.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Handshake, Metrics, Server};
    ///
    /// let metrics = Metrics::new();
    /// let counted = metrics.clone();
    /// let server = Server::builder().on_handshake(move |h: &Handshake<'_>| counted.record_handshake(h)).bind("127.0.0.1:0").unwrap();
    /// # drop(server);
    /// ```
    pub fn record_handshake(&self, handshake: &Handshake<'_>) {
        let outcome = match handshake.outcome() {
            HandshakeOutcome::Completed => 0,
            HandshakeOutcome::PlainHttp => 1,
            HandshakeOutcome::TimedOut => 2,
            HandshakeOutcome::Closed => 3,
            _ => 4,
        };
        let tls = handshake.tls();
        let version = tls
            .and_then(|tls| TLS_VERSIONS.iter().position(|v| *v == tls.protocol()))
            .unwrap_or(TLS_VERSIONS.len() - 1);
        self.inner.counters.handshake(outcome, version, tls.is_some_and(|tls| tls.resumed()));
    }

    /// A handshake hook that counts every TLS handshake, for
    /// [`ServerBuilder::on_handshake`](crate::server::ServerBuilder::on_handshake).
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Metrics, Server};
    ///
    /// let metrics = Metrics::new();
    /// let server = Server::builder().on_response(metrics.hook()).on_handshake(metrics.handshake_hook()).bind("127.0.0.1:0").unwrap();
    /// # drop(server);
    /// ```
    pub fn handshake_hook(&self) -> impl Fn(&Handshake<'_>) + Send + Sync + 'static {
        let metrics = self.clone();
        move |handshake: &Handshake<'_>| metrics.record_handshake(handshake)
    }

    /// A response hook that counts every exchange, for
    /// [`ServerBuilder::on_response`](crate::server::ServerBuilder::on_response).
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Metrics, Server};
    ///
    /// let metrics = Metrics::new();
    /// let server = Server::builder().on_response(metrics.hook()).bind("127.0.0.1:0").unwrap();
    /// # drop(server);
    /// ```
    pub fn hook(&self) -> impl Fn(&Exchange<'_>) + Send + Sync + 'static {
        let metrics = self.clone();
        move |exchange: &Exchange<'_>| metrics.record(exchange)
    }

    /// A handler that answers `GET path` (and `HEAD`) with the page and passes every other request
    /// to `inner`, counting the files its responses send while they are sent.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Metrics, StaticFiles};
    ///
    /// let metrics = Metrics::new();
    /// let handler = metrics.serve("/metrics", StaticFiles::new(".").unwrap());
    /// # drop(handler);
    /// ```
    pub fn serve<H: Handler>(&self, path: &str, inner: H) -> Instrumented<H> {
        Instrumented { metrics: self.clone(), path: path.into(), inner }
    }

    /// The page: every metric in the text exposition format. Inside a runtime it includes each
    /// event loop's fibers and run queue (`neverblock::runtime::stats`).
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Metrics;
    ///
    /// let page = Metrics::new().page();
    /// assert!(page.contains("# TYPE neverblock_http_request_duration_seconds histogram\n"));
    /// ```
    pub fn page(&self) -> String {
        let counters = &self.inner.counters;
        let totals = counters.totals();
        let loops = neverblock::runtime::stats();
        Page {
            totals: &totals,
            downloads: counters.downloads.load(Relaxed),
            proxied_in_flight: counters.proxied_in_flight.load(Relaxed),
            server: self.inner.server.get().map(ServerHandle::stats),
            loops: &loops,
        }
        .render()
    }

    /// An observer for a [`Proxy`](crate::server::Proxy) ([`Proxy::observe`](crate::server::Proxy::observe)):
    /// it counts the requests sent on and those in flight, and the upstream's failures by kind.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Metrics, Proxy};
    ///
    /// let metrics = Metrics::new();
    /// let proxy = Proxy::new("http://127.0.0.1:3000").unwrap().observe(metrics.proxy_observer());
    /// # drop(proxy);
    /// ```
    #[cfg(feature = "client")]
    pub fn proxy_observer(&self) -> impl Fn(ProxyEvent) + Send + Sync + 'static {
        let metrics = self.clone();
        move |event| {
            let counters = &metrics.inner.counters;
            match event {
                ProxyEvent::Sent => {
                    counters.proxied();
                    counters.proxied_in_flight.fetch_add(1, Relaxed);
                }
                ProxyEvent::Done => {
                    counters.proxied_in_flight.fetch_sub(1, Relaxed);
                }
                ProxyEvent::UpstreamFailed(failure) => {
                    let kind = match failure {
                        UpstreamFailure::Refused => "refused",
                        UpstreamFailure::Reset => "reset",
                        UpstreamFailure::Timeout => "timeout",
                        _ => "other",
                    };
                    let index = UPSTREAM_ERRORS.iter().position(|k| *k == kind).unwrap_or(UPSTREAM_ERRORS.len() - 1);
                    counters.upstream_error(index);
                }
            }
        }
    }
}

/// The handler [`Metrics::serve`] makes: the page at its path, the inner handler for the rest.
///
/// # Examples
///
/// ```
/// use neverblock_http::server::{Instrumented, Metrics, Request, Response};
///
/// let app = |_: &mut Request<'_>| Response::new(204);
/// let handler: Instrumented<_> = Metrics::new().serve("/metrics", app);
/// # drop(handler);
/// ```
pub struct Instrumented<H> {
    metrics: Metrics,
    path: Box<str>,
    inner: H,
}

impl<H: Handler> Handler for Instrumented<H> {
    fn handle(&self, request: &mut Request<'_>) -> Response {
        if request.path() == &*self.path {
            return match request.method() {
                "GET" | "HEAD" => Response::new(200)
                    .header("Content-Type", CONTENT_TYPE)
                    .header("Cache-Control", "no-store")
                    .body(self.metrics.page()),
                _ => Response::error(405, "the metrics page is read with GET").header("Allow", "GET, HEAD"),
            };
        }
        let response = self.inner.handle(request);
        if matches!(response.body_ref(), Body::File { len, .. } if *len > 0) && request.method() != "HEAD" {
            self.metrics.inner.counters.downloads.fetch_add(1, Relaxed);
            SENDING_FILE.with(|sending| sending.set(true));
        }
        response
    }
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics").field("watching", &self.inner.server.get().is_some()).finish_non_exhaustive()
    }
}

impl<H> fmt::Debug for Instrumented<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Instrumented").field("path", &self.path).finish_non_exhaustive()
    }
}
