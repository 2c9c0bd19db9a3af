//! One finished request and its response, as the server's `on_response` hook sees it: what an
//! access log line or a metric needs.

use std::fmt;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use super::request::{RequestParts, Version};
use super::response::Response;
use super::tls::TlsInfo;
use crate::head_access::head_accessors;
use crate::wire::head::Head;

/// A request and the response the server sent for it, after the last byte went out (or the
/// sending failed). Requests the server refused before a handler saw them (a malformed head,
/// 414, 431, …) are here too, with what could be parsed of them.
///
/// # Examples
///
/// ```no_run
/// use neverblock_http::server::{Exchange, Response, Server};
///
/// let server = Server::builder()
///     .on_response(|x: &Exchange<'_>| {
///         log::info!("{} {} {} {} {}B {:?}", x.peer_addr(), x.method(), x.target(), x.status(), x.body_bytes(), x.duration());
///     })
///     .bind("127.0.0.1:8080")
///     .unwrap();
/// server.run(|_: &mut neverblock_http::server::Request<'_>| Response::new(204)).unwrap();
/// ```
pub struct Exchange<'a> {
    /// The request's head, if it could be parsed.
    pub(crate) head: Option<&'a Head>,
    /// Without a head: the request line, if it arrived whole.
    pub(crate) line: Option<&'a [u8]>,
    /// What the server made of it, if it took it.
    pub(crate) parts: Option<&'a RequestParts>,
    pub(crate) response: &'a Response,
    pub(crate) peer: SocketAddr,
    pub(crate) local: SocketAddr,
    pub(crate) tls: Option<&'a TlsInfo>,
    pub(crate) body_bytes: u64,
    pub(crate) complete: bool,
    pub(crate) started: SystemTime,
    pub(crate) duration: Duration,
}

// The request's head, and its version if the server took the request.
head_accessors!(Exchange<'_>, "neverblock_http::server::Exchange<'_>", |exchange| head: exchange.head, version: Option<Version> = exchange.parts.map(|parts| parts.version));

impl Exchange<'_> {
    /// The request's method; empty if its head could not be parsed.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Exchange, Server};
    ///
    /// let server = Server::builder()
    ///     .on_response(|x: &Exchange<'_>| log::info!("{}", x.method()))
    ///     .bind("127.0.0.1:0")
    ///     .unwrap();
    /// # drop(server);
    /// ```
    pub fn method(&self) -> &str {
        self.head.map_or("", Head::method)
    }

    /// The request target as sent; empty if the head could not be parsed.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Exchange, Server};
    ///
    /// let server = Server::builder()
    ///     .on_response(|x: &Exchange<'_>| log::info!("{}", x.target()))
    ///     .bind("127.0.0.1:0")
    ///     .unwrap();
    /// # drop(server);
    /// ```
    pub fn target(&self) -> &str {
        self.head.map_or("", Head::target)
    }

    /// The request line as received (`GET /a?b HTTP/1.1`), without its line end; also for a request
    /// the server refused (400, 431, …) once its line had arrived whole (but not for 414). On
    /// HTTP/2, which has no request line, the one its `:method` and `:path` make (`GET /a?b
    /// HTTP/2.0`), as access logs write it.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Exchange, Server};
    ///
    /// let server = Server::builder()
    ///     .on_response(|x: &Exchange<'_>| log::info!("{}", String::from_utf8_lossy(x.request_line().unwrap_or(b"-"))))
    ///     .bind("127.0.0.1:0")
    ///     .unwrap();
    /// # drop(server);
    /// ```
    pub fn request_line(&self) -> Option<&[u8]> {
        self.head.map(Head::request_line).or(self.line)
    }

    /// The target's path, percent-encoded; empty if the request was refused before it was split.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Exchange, Server};
    ///
    /// let server = Server::builder()
    ///     .on_response(|x: &Exchange<'_>| log::info!("{}", x.path()))
    ///     .bind("127.0.0.1:0")
    ///     .unwrap();
    /// # drop(server);
    /// ```
    pub fn path(&self) -> &str {
        match (self.head, self.parts) {
            (Some(head), Some(parts)) => parts.path(head),
            _ => "",
        }
    }

    /// The target's query, after its `?`.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Exchange, Server};
    ///
    /// let server = Server::builder()
    ///     .on_response(|x: &Exchange<'_>| log::info!("{}", x.query().unwrap_or("-")))
    ///     .bind("127.0.0.1:0")
    ///     .unwrap();
    /// # drop(server);
    /// ```
    pub fn query(&self) -> Option<&str> {
        self.parts?.query(self.head?)
    }

    /// The TLS the request came over, on an HTTPS connection.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Exchange, Server};
    ///
    /// let server = Server::builder()
    ///     .on_response(|x: &Exchange<'_>| log::info!("{}", x.tls().map_or("-", |tls| tls.cipher())))
    ///     .bind("127.0.0.1:0")
    ///     .unwrap();
    /// # drop(server);
    /// ```
    pub fn tls(&self) -> Option<&TlsInfo> {
        self.tls
    }

    /// The status sent.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Exchange, Server};
    ///
    /// let server = Server::builder()
    ///     .on_response(|x: &Exchange<'_>| if x.status() >= 500 { log::warn!("{} {} failed", x.method(), x.target()) })
    ///     .bind("127.0.0.1:0")
    ///     .unwrap();
    /// # drop(server);
    /// ```
    pub fn status(&self) -> u16 {
        self.response.status()
    }

    /// The first response field called `name` (any case) the handler set.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Exchange, Server};
    ///
    /// let server = Server::builder()
    ///     .on_response(|x: &Exchange<'_>| log::info!("{}", x.response_header("content-type").unwrap_or("-")))
    ///     .bind("127.0.0.1:0")
    ///     .unwrap();
    /// # drop(server);
    /// ```
    pub fn response_header(&self, name: &str) -> Option<&str> {
        self.response.header_value(name)
    }

    /// Every response field the handler set, in order.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Exchange, Server};
    ///
    /// let server = Server::builder()
    ///     .on_response(|x: &Exchange<'_>| log::info!("{} cookies set", x.response_headers().filter(|(n, _)| n.eq_ignore_ascii_case("set-cookie")).count()))
    ///     .bind("127.0.0.1:0")
    ///     .unwrap();
    /// # drop(server);
    /// ```
    pub fn response_headers(&self) -> impl Iterator<Item = (&str, &str)> {
        self.response.headers()
    }

    /// Body bytes sent (not counting the head or chunked framing).
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Exchange, Server};
    ///
    /// let server = Server::builder()
    ///     .on_response(|x: &Exchange<'_>| log::info!("{} bytes", x.body_bytes()))
    ///     .bind("127.0.0.1:0")
    ///     .unwrap();
    /// # drop(server);
    /// ```
    pub fn body_bytes(&self) -> u64 {
        self.body_bytes
    }

    /// Whether the whole response went out.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Exchange, Server};
    ///
    /// let server = Server::builder()
    ///     .on_response(|x: &Exchange<'_>| if !x.completed() { log::info!("{} left early", x.peer_addr()) })
    ///     .bind("127.0.0.1:0")
    ///     .unwrap();
    /// # drop(server);
    /// ```
    pub fn completed(&self) -> bool {
        self.complete
    }

    /// The client's address.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Exchange, Server};
    ///
    /// let server = Server::builder()
    ///     .on_response(|x: &Exchange<'_>| log::info!("{}", x.peer_addr()))
    ///     .bind("127.0.0.1:0")
    ///     .unwrap();
    /// # drop(server);
    /// ```
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// The address the client connected to.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Exchange, Server};
    ///
    /// let server = Server::builder()
    ///     .on_response(|x: &Exchange<'_>| log::info!("{}", x.local_addr()))
    ///     .bind("127.0.0.1:0")
    ///     .unwrap();
    /// # drop(server);
    /// ```
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// When the request's head had arrived.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Exchange, Server};
    ///
    /// let server = Server::builder()
    ///     .on_response(|x: &Exchange<'_>| log::info!("{:?}", x.started()))
    ///     .bind("127.0.0.1:0")
    ///     .unwrap();
    /// # drop(server);
    /// ```
    pub fn started(&self) -> SystemTime {
        self.started
    }

    /// From the request's head arriving to the response's last byte going out.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Exchange, Server};
    ///
    /// let server = Server::builder()
    ///     .on_response(|x: &Exchange<'_>| log::info!("{:?}", x.duration()))
    ///     .bind("127.0.0.1:0")
    ///     .unwrap();
    /// # drop(server);
    /// ```
    pub fn duration(&self) -> Duration {
        self.duration
    }
}

impl fmt::Debug for Exchange<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Exchange")
            .field("method", &self.method())
            .field("target", &self.target())
            .field("status", &self.status())
            .field("body_bytes", &self.body_bytes)
            .field("peer", &self.peer)
            .finish_non_exhaustive()
    }
}
