//! neverblock-http: HTTP/1.1 on neverblock's fibers, built only on the runtime's
//! public API.
//!
//! The client is in blocking style (the Net::HTTP of NeverBlock): inside
//! fibers, many requests are in flight at once on one thread; outside a runtime
//! each call blocks the thread.
//!
//! `http://` and `https://` (rustls over the fiber-aware [`TcpStream`](neverblock::net::TcpStream));
//! a keep-alive pool per origin with a per-host cap and an idle timeout;
//! Content-Length, chunked and close-delimited bodies framed as RFC 9112 says;
//! connect, read and total timeouts, each its own [`ErrorKind`]; redirects when
//! asked for; a request on a pooled connection that the server had closed is
//! sent again once on a fresh one when it is replayable (Go's rule). Responses
//! are read whole, in reads that grow from 4 KiB to 64 KiB.
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

#![forbid(unsafe_code)]

#[cfg(feature = "client")]
mod client;
mod error;
#[cfg(feature = "server")]
pub mod server;
#[cfg(any(feature = "client", feature = "server"))]
mod wire;

#[cfg(feature = "client")]
pub use client::{get, post, Client, ClientBuilder, Request, Response};
pub use error::{Error, ErrorKind};
