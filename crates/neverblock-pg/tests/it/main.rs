//! One integration-test binary for the PostgreSQL client: every test runs
//! against a real server that `support` starts once (a throwaway PostgreSQL in
//! a temporary directory, gone when the binary exits).

mod auth;
mod cancel;
mod errors;
mod example;
mod faults;
mod pgbouncer;
mod pipeline;
mod pool;
mod shared;
mod statements;
mod stream;
mod support;
mod throwaway;
mod tls;
mod transactions;
mod types;
