//! One integration-test binary for neverblock-http: the client against scripted std-thread
//! servers, and the server (core, limits, timeouts, shutdown, static files) against raw-bytes
//! clients, all on loopback.

#[cfg(feature = "server")]
mod access_log;
#[cfg(feature = "client")]
mod client;
#[cfg(feature = "client")]
mod client_expect;
#[cfg(feature = "client")]
mod client_rfc;
#[cfg(feature = "client")]
mod client_stream;
#[cfg(feature = "client")]
mod fixtures;
#[cfg(feature = "server")]
mod h2_frames;
#[cfg(feature = "server")]
mod http2;
#[cfg(feature = "server")]
mod http2_defences;
#[cfg(all(feature = "client", feature = "server"))]
mod http2_sites;
#[cfg(all(feature = "client", feature = "server"))]
mod https;
#[cfg(feature = "server")]
mod listen_sockets;
#[cfg(feature = "server")]
mod logs;
#[cfg(feature = "server")]
mod metrics;
#[cfg(feature = "server")]
mod naming;
#[cfg(all(feature = "client", feature = "server"))]
mod proxy;
#[cfg(feature = "server")]
mod server;
#[cfg(feature = "server")]
mod server_limits;
#[cfg(feature = "server")]
mod server_shutdown;
#[cfg(feature = "server")]
mod server_timeouts;
#[cfg(feature = "server")]
mod serving;
#[cfg(feature = "server")]
mod static_files;
#[cfg(feature = "server")]
mod static_freshness;
#[cfg(feature = "server")]
mod steering;
#[cfg(all(feature = "client", feature = "server"))]
mod upstream;
#[cfg(feature = "server")]
mod xsendfile;
