//! Origins (scheme, host, port): where a connection goes and the pool's key, which the
//! pool finds by parts borrowed from a URL, so a request to a known origin allocates nothing.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};

use url::Url;

/// Where a connection goes, owned: the key the pool stores.
#[derive(Clone, Debug)]
pub(crate) struct Origin {
    pub(crate) tls: bool,
    pub(crate) host: Box<str>,
    pub(crate) port: u16,
}

/// Where a connection goes, borrowed from a URL: the key the pool looks up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OriginRef<'a> {
    pub(crate) tls: bool,
    pub(crate) host: &'a str,
    pub(crate) port: u16,
}

impl<'a> OriginRef<'a> {
    /// The origin of an http(s) URL with a host.
    ///
    /// # Panics
    ///
    /// If `url` has no host, or a scheme without a default port: the client checks both first.
    pub(crate) fn of(url: &'a Url) -> OriginRef<'a> {
        OriginRef {
            tls: url.scheme() == "https",
            host: url.host_str().expect("checked by the client"),
            port: url.port_or_known_default().expect("http and https have default ports"),
        }
    }

    /// The same origin, owned.
    pub(crate) fn to_origin(self) -> Origin {
        Origin { tls: self.tls, host: self.host.into(), port: self.port }
    }
}

/// What `Origin` and `OriginRef` share, so that a map keyed by `Origin` can be
/// searched with an `OriginRef` (`Origin: Borrow<dyn Key>`): both hash and compare
/// as their parts.
pub(crate) trait Key {
    /// The parts, borrowed.
    fn parts(&self) -> OriginRef<'_>;
}

impl Key for Origin {
    fn parts(&self) -> OriginRef<'_> {
        OriginRef { tls: self.tls, host: &self.host, port: self.port }
    }
}

impl Key for OriginRef<'_> {
    fn parts(&self) -> OriginRef<'_> {
        *self
    }
}

impl<'a> Borrow<dyn Key + 'a> for Origin {
    fn borrow(&self) -> &(dyn Key + 'a) {
        self
    }
}

impl Hash for dyn Key + '_ {
    /// Two writes (the host, then port and scheme in one word), not four.
    fn hash<H: Hasher>(&self, state: &mut H) {
        let OriginRef { tls, host, port } = self.parts();
        state.write(host.as_bytes());
        state.write_u32(u32::from(port) << 1 | u32::from(tls));
    }
}

impl PartialEq for dyn Key + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn Key + '_ {}

impl Hash for Origin {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self as &dyn Key).hash(state);
    }
}

impl PartialEq for Origin {
    fn eq(&self, other: &Origin) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for Origin {}
