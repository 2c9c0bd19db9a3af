//! What watches the server through its response hook, built on the server's public API alone: the
//! access log and the Prometheus metrics page.

mod access_log;
mod metrics;

pub use access_log::{AccessLog, LogFormat};
pub use metrics::{Instrumented, Metrics};
