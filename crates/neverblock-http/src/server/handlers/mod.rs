//! The handlers that come with the server, each built on the server's public API alone: static
//! files (with X-Sendfile, and files-then-another-handler), the reverse proxy, and HTTPS only.

mod files;
mod https_only;
#[cfg(feature = "client")]
mod proxy;

pub use files::{FilesThen, StaticFiles, XSendfile};
pub use https_only::HttpsOnly;
#[cfg(feature = "client")]
pub use proxy::{Proxy, ProxyEvent, UpstreamFailure};
