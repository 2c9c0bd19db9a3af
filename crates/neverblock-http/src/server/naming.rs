//! How the server names its fibers, for the fiber dump and the runtime's stall
//! warnings: each accept loop by the URL it listens on, each connection by its
//! scheme and peer, and, while a request is answered, the request's method and path
//! as the connection fiber's activity (copied into the runtime's inline buffer: no
//! allocation per request).

use std::net::SocketAddr;

use neverblock::runtime::TaskActivity;

/// `accept http://127.0.0.1:8080/`.
pub(super) fn accept_loop(url: &str) -> String {
    format!("accept {url}")
}

/// `http 127.0.0.1:50312`, or `https …` on a TLS listener.
pub(super) fn connection(peer: SocketAddr, tls: bool) -> String {
    format!("{} {peer}", if tls { "https" } else { "http" })
}

/// Says which request the running fiber answers until this drops.
#[derive(Debug)]
pub(super) struct Answering<'a>(&'a TaskActivity);

impl<'a> Answering<'a> {
    /// `GET /path` (the query left out: it may carry what a dump should not show).
    pub(super) fn start(activity: &'a TaskActivity, method: &str, target: &str) -> Answering<'a> {
        let path = target.as_bytes().iter().position(|&b| b == b'?').map_or(target, |q| &target[..q]);
        activity.set_parts(&[method, " ", path]);
        Answering(activity)
    }
}

impl Drop for Answering<'_> {
    fn drop(&mut self) {
        self.0.clear();
    }
}
