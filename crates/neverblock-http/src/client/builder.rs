//! [`ClientBuilder`]: a client's timeouts, limits, pool sizes and trusted roots.

use std::sync::Arc;
use std::time::Duration;

use super::conn::tls_config;
use super::pool::Pool;
use super::{Client, Inner};
use crate::error::Error;
use crate::wire::Limits;

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
    expect_continue_timeout: Duration,
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
            expect_continue_timeout: Duration::from_secs(1),
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
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let client = neverblock_http::Client::builder().connect_timeout(Duration::from_secs(2)).build().unwrap();
    /// # drop(client);
    /// ```
    pub fn connect_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.connect_timeout = timeout;
        self
    }

    /// How long one read or write may wait (`ErrorKind::ReadTimeout`).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let client = neverblock_http::Client::builder().read_timeout(Duration::from_secs(5)).build().unwrap();
    /// # drop(client);
    /// ```
    pub fn read_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.read_timeout = timeout;
        self
    }

    /// How long a whole request may take, redirects and the body included (`ErrorKind::TotalTimeout`):
    /// in a fiber, whatever it waits on; outside a runtime, each read and write waits no longer
    /// than what is left. A [`ResponseStream`](super::ResponseStream)'s body is read under the same
    /// deadline.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// // Neither a slow server nor one that sends a byte a second keeps a request past 10 s.
    /// let client = neverblock_http::Client::builder().total_timeout(Duration::from_secs(10)).build().unwrap();
    /// # drop(client);
    /// ```
    pub fn total_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.total_timeout = Some(timeout);
        self
    }

    /// How long a request with `Expect: 100-continue` and a body waits for the server's `100
    /// Continue` before it sends the body anyway (default 1 s, as curl and Go's default transport):
    /// a server may not know the expectation. A final answer before then is the response, and the
    /// body is never sent.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let client = neverblock_http::Client::builder().expect_continue_timeout(Duration::from_millis(300)).build().unwrap();
    /// # drop(client);
    /// ```
    pub fn expect_continue_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.expect_continue_timeout = timeout;
        self
    }

    /// At most `n` connections to one origin at once, busy or idle; more requests wait their turn.
    ///
    /// # Examples
    ///
    /// ```
    /// let client = neverblock_http::Client::builder().max_connections_per_host(8).build().unwrap();
    /// # drop(client);
    /// ```
    pub fn max_connections_per_host(mut self, n: usize) -> ClientBuilder {
        self.per_host = n.max(1);
        self
    }

    /// Idle keep-alive connections older than this are closed, not reused.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let client = neverblock_http::Client::builder().idle_timeout(Duration::from_secs(30)).build().unwrap();
    /// # drop(client);
    /// ```
    pub fn idle_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.idle_timeout = timeout;
        self
    }

    /// Follow up to `n` redirects (0, the default: return the 3xx response).
    ///
    /// # Examples
    ///
    /// ```
    /// let client = neverblock_http::Client::builder().redirects(5).build().unwrap();
    /// # drop(client);
    /// ```
    pub fn redirects(mut self, n: usize) -> ClientBuilder {
        self.redirects = n;
        self
    }

    /// Refuse response bodies larger than `bytes` (`ErrorKind::TooLarge`) when reading them into
    /// memory ([`Client::request`], [`ResponseStream::into_response`](super::ResponseStream::into_response));
    /// a body read as a stream is not bounded.
    ///
    /// # Examples
    ///
    /// ```
    /// // Whole responses of at most 1 MiB; streams of any length.
    /// let client = neverblock_http::Client::builder().max_body(1 << 20).build().unwrap();
    /// # drop(client);
    /// ```
    pub fn max_body(mut self, bytes: usize) -> ClientBuilder {
        self.max_body = bytes;
        self
    }

    /// Trust this root certificate (DER) as well as Mozilla's.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let der = std::fs::read("ca.der").unwrap();
    /// let client = neverblock_http::Client::builder().add_root_certificate(der).build().unwrap();
    /// # drop(client);
    /// ```
    pub fn add_root_certificate(mut self, der: Vec<u8>) -> ClientBuilder {
        self.roots.push(der);
        self
    }

    /// The client.
    ///
    /// # Errors
    ///
    /// `ErrorKind::Tls` if a root certificate is not a valid certificate.
    ///
    /// # Examples
    ///
    /// ```
    /// let client = neverblock_http::Client::builder().redirects(3).build().unwrap();
    /// # drop(client);
    /// ```
    pub fn build(self) -> Result<Client, Error> {
        Ok(Client {
            inner: Arc::new(Inner {
                pool: Pool::new(self.per_host, self.idle_timeout),
                tls: tls_config(&self.roots)?,
                connect_timeout: self.connect_timeout,
                read_timeout: self.read_timeout,
                total_timeout: self.total_timeout,
                expect_continue_timeout: self.expect_continue_timeout,
                redirects: self.redirects,
                limits: Limits { max_body: self.max_body as u64, ..Limits::default() },
            }),
        })
    }
}
