//! Addresses to connect to or bind, resolved without stalling the event loop.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// What can name one or more socket addresses, like [`std::net::ToSocketAddrs`],
/// except that a host name is looked up on the blocking pool
/// ([`spawn_blocking`](crate::spawn_blocking)), so only the calling fiber waits
/// for DNS, and an enclosing [`timeout`](crate::timeout) ends that wait (in
/// blocking mode too) with a `TimedOut` error, the lookup left to finish in the
/// pool. Literal addresses are parsed in place.
///
/// Implemented for the same types as the std trait; it is sealed.
///
/// # Examples
///
/// ```
/// use neverblock::net::ToSocketAddrs;
///
/// let addrs = neverblock::run(|| ("localhost", 80).resolve()).unwrap();
/// assert!(addrs.iter().all(|a| a.port() == 80 && a.ip().is_loopback()));
/// ```
pub trait ToSocketAddrs: sealed::Sealed {
    /// The addresses this names, in the order the resolver gave them.
    ///
    /// # Errors
    ///
    /// A malformed address, or the resolver's error.
    fn resolve(&self) -> io::Result<Vec<SocketAddr>>;
}

mod sealed {
    /// Keeps [`super::ToSocketAddrs`] to the types this module implements it for.
    pub trait Sealed {}
}

/// Parses `host:port` in place when the host is a literal IP, else asks the resolver.
fn resolve_str(s: &str) -> io::Result<Vec<SocketAddr>> {
    if let Ok(addr) = s.parse::<SocketAddr>() {
        return Ok(vec![addr]);
    }
    lookup(s.to_owned())
}

/// Parses `host` in place when it is a literal IP, else asks the resolver.
fn resolve_host(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    lookup((host.to_owned(), port))
}

/// Asks the system resolver on the blocking pool, so only the calling fiber waits, and no longer
/// than an enclosing `timeout` allows.
fn lookup(name: impl std::net::ToSocketAddrs + Send + 'static) -> io::Result<Vec<SocketAddr>> {
    crate::runtime::spawn_blocking_abandonable(move || name.to_socket_addrs().map(Iterator::collect))
        .unwrap_or_else(|_| Err(io::Error::new(io::ErrorKind::TimedOut, "the name lookup timed out")))
}

macro_rules! literal_addrs {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl ToSocketAddrs for $t {
            fn resolve(&self) -> io::Result<Vec<SocketAddr>> {
                Ok(std::net::ToSocketAddrs::to_socket_addrs(self)?.collect())
            }
        }
    )*};
}

literal_addrs!(SocketAddr, SocketAddrV4, SocketAddrV6, (IpAddr, u16), (Ipv4Addr, u16), (Ipv6Addr, u16));

impl sealed::Sealed for str {}
impl ToSocketAddrs for str {
    fn resolve(&self) -> io::Result<Vec<SocketAddr>> {
        resolve_str(self)
    }
}

impl sealed::Sealed for String {}
impl ToSocketAddrs for String {
    fn resolve(&self) -> io::Result<Vec<SocketAddr>> {
        resolve_str(self)
    }
}

impl sealed::Sealed for (&str, u16) {}
impl ToSocketAddrs for (&str, u16) {
    fn resolve(&self) -> io::Result<Vec<SocketAddr>> {
        resolve_host(self.0, self.1)
    }
}

impl sealed::Sealed for (String, u16) {}
impl ToSocketAddrs for (String, u16) {
    fn resolve(&self) -> io::Result<Vec<SocketAddr>> {
        resolve_host(&self.0, self.1)
    }
}

impl sealed::Sealed for [SocketAddr] {}
impl ToSocketAddrs for [SocketAddr] {
    fn resolve(&self) -> io::Result<Vec<SocketAddr>> {
        Ok(self.to_vec())
    }
}

impl<T: ToSocketAddrs + ?Sized> sealed::Sealed for &T {}
impl<T: ToSocketAddrs + ?Sized> ToSocketAddrs for &T {
    fn resolve(&self) -> io::Result<Vec<SocketAddr>> {
        (**self).resolve()
    }
}

/// Tries each address in turn, like std: the first success, else the last error.
pub(crate) fn each_addr<T>(
    addrs: &(impl ToSocketAddrs + ?Sized),
    mut f: impl FnMut(&SocketAddr) -> io::Result<T>,
) -> io::Result<T> {
    let mut last = None;
    for addr in addrs.resolve()? {
        match f(&addr) {
            Ok(t) => return Ok(t),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the name resolved to no address")))
}
