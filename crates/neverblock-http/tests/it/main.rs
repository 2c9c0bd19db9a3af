//! One integration-test binary for the HTTP client.

mod client;
mod fixtures;
