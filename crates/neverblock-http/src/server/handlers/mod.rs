//! The handlers that come with the server, each built on the server's public API alone: static
//! files (with X-Sendfile, and files-then-another-handler), and the reverse proxy.

mod files;
#[cfg(feature = "client")]
mod proxy;

pub use files::{FilesThen, StaticFiles, XSendfile};
#[cfg(feature = "client")]
pub use proxy::{Proxy, ProxyEvent, UpstreamFailure};
