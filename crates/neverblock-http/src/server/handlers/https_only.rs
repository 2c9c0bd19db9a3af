//! HTTPS only: requests that came in cleartext are sent to the same URL on https.

use std::fmt;

use crate::server::{Handler, Request, Response};

/// A [`Handler`] that passes requests that came over TLS to `inner` and answers every cleartext one
/// with a `308 Permanent Redirect` to the same URL on https (308 keeps the method and body, unlike
/// 301): the host the client asked for (its `Host`, without the port, else the address it
/// connected to), the HTTPS port (left out when it is 443), the target as sent.
///
/// # Examples
///
/// ```
/// use neverblock_http::server::{HttpsOnly, StaticFiles};
///
/// // Cleartext requests on port 80 go to https://<host>/<same target>; TLS ones get the files.
/// let handler = HttpsOnly::new(StaticFiles::new(std::env::temp_dir()).unwrap(), 443);
/// # drop(handler);
/// ```
pub struct HttpsOnly<H> {
    inner: H,
    port: u16,
}

impl<H: Handler> HttpsOnly<H> {
    /// Redirects cleartext requests to the HTTPS listener on `port`, and passes the rest to `inner`.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{HttpsOnly, Request, Response};
    ///
    /// let handler = HttpsOnly::new(|_: &mut Request<'_>| Response::new(200).body("secure\n"), 8443);
    /// # drop(handler);
    /// ```
    pub fn new(inner: H, port: u16) -> HttpsOnly<H> {
        HttpsOnly { inner, port }
    }

    /// The https URL for `request`.
    fn location(&self, request: &Request<'_>) -> String {
        let host = match request.header("host").map(without_port).filter(|h| !h.is_empty()) {
            Some(host) => host.to_owned(),
            None => match request.local_addr().ip() {
                std::net::IpAddr::V6(v6) => format!("[{v6}]"),
                v4 => v4.to_string(),
            },
        };
        let port = if self.port == 443 { String::new() } else { format!(":{}", self.port) };
        let mut url = format!("https://{host}{port}");
        if request.target().starts_with('/') {
            url.push_str(request.target());
        } else {
            // An absolute target (sent to a proxy): its path and query.
            url.push_str(if request.path().is_empty() { "/" } else { request.path() });
            if let Some(query) = request.query() {
                url.push('?');
                url.push_str(query);
            }
        }
        url
    }
}

/// A `Host` value without its port: `example.org:80` → `example.org`, `[::1]:8080` → `[::1]`.
fn without_port(host: &str) -> &str {
    match host.rfind(':') {
        Some(colon) if !host[colon..].contains(']') => &host[..colon],
        _ => host,
    }
}

impl<H: Handler> Handler for HttpsOnly<H> {
    fn handle(&self, request: &mut Request<'_>) -> Response {
        if request.tls().is_some() {
            return self.inner.handle(request);
        }
        let location = self.location(request);
        Response::error(308, "this site is served over https").header("Location", location)
    }
}

impl<H> fmt::Debug for HttpsOnly<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpsOnly").field("port", &self.port).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::without_port;

    #[test]
    fn a_host_loses_its_port_and_keeps_its_brackets() {
        for (host, bare) in [
            ("example.org", "example.org"),
            ("example.org:80", "example.org"),
            ("[::1]:8080", "[::1]"),
            ("[::1]", "[::1]"),
        ] {
            assert_eq!(without_port(host), bare, "{host}");
        }
    }
}
