//! neverblock-pg: PostgreSQL on neverblock's fibers, built only on the runtime's
//! public API: NeverBlock's fiber-aware client and its fibered connection pool.
//!
//! A query parks its fiber while the server works, and other fibers run; the
//! code reads as plain blocking code. Outside a runtime the same calls block the
//! thread. The wire format is `postgres-protocol`'s: TLS as libpq's `sslmode`
//! says (rustls; see [`Config`]), startup with trust, cleartext, md5 or
//! SCRAM-SHA-256 (bound to the TLS session when it can be); the extended
//! protocol with every query text prepared once per connection and cached
//! (bounded by count and by bytes of text; or off, for PgBouncer's transaction
//! mode: see [`Config::statement_cache_capacity`]); typed rows ([`types`]),
//! collected or streamed one at a time ([`Connection::query_stream`]); pipelines;
//! transactions that roll back when dropped; server errors as [`DbError`]
//! values with their SQLSTATE; a query whose fiber's `timeout` expires is
//! cancelled on the server and its connection stays usable. [`Pool`] lends a
//! connection per query or transaction, or pipelines many fibers' short
//! queries on shared connections ([`PoolBuilder::shared`]).
//!
//! # Examples
//!
//! Ten fibers, each waiting a second on the server, finish together in about a second:
//!
//! ```
//! use std::time::Instant;
//! use neverblock_pg::{throwaway::Postgres, Pool};
//!
//! # if Postgres::binaries().is_err() { return; } // no PostgreSQL installed here
//! let postgres = Postgres::start().unwrap(); // a throwaway PostgreSQL in a temporary directory
//! let config = postgres.config();
//! let start = Instant::now();
//! let woke: Vec<i32> = neverblock::run(move || {
//!     let pool = Pool::new(config, 10);
//!     let fibers: Vec<_> = (0..10)
//!         .map(|i| {
//!             let pool = pool.clone();
//!             neverblock::spawn(move || {
//!                 let row = pool.query_one("select $1::int4 from pg_sleep(1)", &[&i]).unwrap();
//!                 row.get::<i32>(0)
//!             })
//!         })
//!         .collect();
//!     fibers.into_iter().map(|f| f.join().unwrap()).collect()
//! });
//! assert_eq!(woke, (0..10).collect::<Vec<_>>());
//! println!("{:?}", start.elapsed()); // about one second, not ten: the sleeps overlapped
//! ```

#![forbid(unsafe_code)]

pub mod config;
mod conn;
mod error;
mod pipeline;
mod pool;
mod row;
mod statement;
pub mod throwaway;
mod transaction;
pub mod types;

pub use config::Config;
pub use conn::{CancelToken, Connection, RowStream, TransactionStatus};
pub use error::{DbError, Error};
pub use pipeline::Pipeline;
pub use pool::{LoopPools, Pool, PoolBuilder, PoolStatus, PooledConnection};
pub use row::{Column, ColumnIndex, Row, SimpleRow};
pub use statement::Statement;
pub use transaction::Transaction;

/// Connects with a URL or `key=value` string (see [`Config`]).
///
/// # Errors
///
/// [`Error::Config`] for a bad string; as [`Connection::connect`].
///
/// # Examples
///
/// ```
/// let err = neverblock::run(|| neverblock_pg::connect("postgres://u@127.0.0.1:1/db")).unwrap_err();
/// assert!(matches!(err, neverblock_pg::Error::Connect { .. }));
/// ```
pub fn connect(url: &str) -> Result<Connection, Error> {
    Connection::connect(&Config::parse(url)?)
}
