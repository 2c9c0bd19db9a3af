//! The `hooks` feature's tests: plain `std` code, and C libraries through their
//! own calls of libc, run on fibers and park only their fiber. Loopback only;
//! each bound on elapsed time is a few delays where one call after another would
//! take twenty.

mod http;
mod libpq;
mod std_net;
mod support;
