//! neverblock-http: HTTP/1.1 on neverblock's fibers, client and server (which speaks HTTP/2 as
//! well), built only on the runtime's public API.
//!
//! Both are in blocking style (the Net::HTTP and EventMachine server of NeverBlock): inside fibers,
//! many requests are in flight at once on one thread; outside a runtime each client call blocks the
//! thread. The `client` and `server` cargo features (both on by default) select the halves; they
//! share one framing layer (RFC 9112, httparse), its limits and its body decoder.
//!
//! **The client** ([`Client`], [`get`], [`post`]): `http://` and `https://` (rustls over the
//! fiber-aware [`TcpStream`](neverblock::net::TcpStream)); a keep-alive pool per origin with a
//! per-host cap and an idle timeout; Content-Length, chunked and close-delimited bodies; connect,
//! read and total timeouts, each its own [`ErrorKind`]; redirects when asked for; a request on a
//! pooled connection that the server had closed is sent again once on a fresh one when it is
//! replayable (Go's rule). Responses are read whole ([`Client::request`]) or as a stream
//! ([`Client::send`] gives a [`ResponseStream`] once the head has arrived), in reads that grow from
//! 4 KiB to 64 KiB; a request body may be streamed from a reader too ([`Client::send_body`]).
//!
//! **The server** ([`server`]): a fiber per connection (and per HTTP/2 stream: ALPN `h2` over TLS,
//! prior knowledge in cleartext) over a loop per core; a handler is a
//! closure from a request (with its body as a `Read`) to a response (bytes, a stream, or a file
//! range the kernel sends); keep-alive, pipelining, `100 Continue`, limits, timeouts with a
//! minimum data rate, request-smuggling defences, graceful shutdown; [`server::StaticFiles`]
//! serves a directory (`neverblock serve`), [`server::Proxy`] sends requests on to an upstream
//! (a reverse proxy on this crate's client), [`server::XSendfile`] sends the files a handler's
//! `X-Sendfile` answers name, [`server::AccessLog`] writes Apache's access log formats and
//! [`server::Metrics`] serves Prometheus metrics.
//!
//! # Examples
//!
//! Twenty requests at once, each in its own fiber:
//!
//! ```no_run
//! let statuses: Vec<u16> = neverblock::run(|| {
//!     let fibers: Vec<_> = (0..20)
//!         .map(|_| neverblock::spawn(|| neverblock_http::get("http://127.0.0.1:8080/").map(|r| r.status())))
//!         .collect();
//!     fibers.into_iter().map(|f| f.join().unwrap().unwrap()).collect()
//! });
//! ```
//!
//! A server answering on port 8080 until SIGTERM or Ctrl-C:
//!
//! ```no_run
//! use neverblock_http::server::{Request, Response, Server};
//!
//! let server = Server::builder().shutdown_on_signals().bind("127.0.0.1:8080").unwrap();
//! server.run(|request: &mut Request<'_>| Response::new(200).body(format!("you asked for {}\n", request.path()))).unwrap();
//! ```

#![forbid(unsafe_code)]

#[cfg(feature = "client")]
mod client;
mod error;
#[cfg(any(feature = "client", feature = "server"))]
mod head_access;
#[cfg(feature = "server")]
pub mod server;
#[cfg(any(feature = "client", feature = "server"))]
mod turn_clock;
mod version;
#[cfg(any(feature = "client", feature = "server"))]
mod wire;

#[cfg(feature = "client")]
pub use client::{get, post, Client, ClientBuilder, Request, Response, ResponseStream};
pub use error::{Error, ErrorKind};
/// URLs as the client takes them: the `url` crate's.
#[cfg(feature = "client")]
pub use url::Url;
pub use version::Version;
