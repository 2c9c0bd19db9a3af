//! One integration-test binary for neverblock-http: the client against scripted std-thread
//! servers, and the server (core, limits, timeouts, shutdown, static files) against raw-bytes
//! clients, all on loopback.

mod client;
mod fixtures;
mod server;
mod server_limits;
mod server_shutdown;
mod server_timeouts;
mod serving;
mod static_files;
