//! One connection and its protocol state: what has been sent, how many replies
//! are still unread, and whether the session is in a transaction.
//!
//! Every request ends with a `Sync`, so the server answers each with exactly one
//! `ReadyForQuery`; `unread_replies` counts those not yet read. A call drains
//! what earlier calls left (a query abandoned by a timeout, a dropped
//! transaction's `ROLLBACK`) before it sends anything, so replies never cross.
//! A row stream's request is the one whose `Sync` comes late: its portal stays
//! open (`portal_open`) while it asks for rows batch by batch, and the `Sync`
//! goes out when the stream ends.

mod cancel;
mod query;
pub(crate) mod socket;
mod startup;
mod statements;
mod stream;
mod tls;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use bytes::BytesMut;
use neverblock::sync::WaitGroup;
use postgres_protocol::message::backend::{ErrorFields, Message};
use postgres_protocol::message::frontend;

pub(crate) use cancel::CancelKey;
pub use cancel::CancelToken;
pub(crate) use query::{affected, defer_error, describe_columns, describe_params, encode_prepare, encode_query, Reply};
pub use stream::RowStream;

use crate::config::Host;
use crate::row::{exactly_one, Row, SimpleRow};
use crate::statement::{self, Statement};
use crate::types::ToSql;
use crate::{Config, DbError, Error, Pipeline, Transaction};
use socket::Framed;

/// The session's transaction state, as the last `ReadyForQuery` gave it.
///
/// # Examples
///
/// ```no_run
/// use neverblock_pg::TransactionStatus;
/// # neverblock::run(|| {
/// let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
/// assert_eq!(conn.transaction_status(), TransactionStatus::Idle);
/// # });
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransactionStatus {
    /// Not in a transaction block.
    Idle,
    /// In a transaction block.
    InTransaction,
    /// In a failed transaction block: only `ROLLBACK` is accepted.
    Failed,
}

/// A connection to PostgreSQL. Calls park the calling fiber while the server
/// works (outside a runtime they block the thread). One call at a time: `&mut self`.
///
/// # Examples
///
/// ```no_run
/// neverblock::run(|| {
///     let mut conn = neverblock_pg::connect("postgres://app:secret@localhost/shop").unwrap();
///     conn.batch_execute("create temp table t (id int8, name text)").unwrap();
///     let n = conn.execute("insert into t values ($1, $2), ($3, $4)", &[&1i64, &"one", &2i64, &"two"]).unwrap();
///     assert_eq!(n, 2);
///     for row in conn.query("select id, name from t where id > $1", &[&0i64]).unwrap() {
///         let (id, name): (i64, &str) = (row.get(0), row.get(1));
///         println!("{id}: {name}");
///     }
/// });
/// ```
pub struct Connection {
    framed: Framed,
    /// Requests not yet sent: always written whole, in one write.
    out: BytesMut,
    statements: statement::Cache,
    /// Closes of statements the cache gave up while a pipeline was being queued
    /// (`Some` meanwhile): sent behind its batch, as its queries may name them.
    held_closes: Option<BytesMut>,
    key: Option<CancelKey>,
    host: Host,
    parameters: HashMap<String, String>,
    status: TransactionStatus,
    /// `ReadyForQuery` replies still to be read for requests already sent.
    unread_replies: usize,
    /// A row stream's portal is open: its rows are asked for in batches, and
    /// its `Sync` is not sent yet (see `stream.rs`).
    portal_open: bool,
    /// A cancel request sent after a timeout: the next call waits until the
    /// server has it, so it cannot cancel a later query.
    cancel: Option<Arc<WaitGroup>>,
    /// Why the connection can no longer be used.
    broken: Option<String>,
}

/// A logged-in session's socket alone, for a pool's shared connection: its
/// reader waits on the socket while the connection is idle, so it gets no read
/// timeout (a query there is not cancelled by one either).
pub(crate) fn open_framed(config: &Config) -> Result<Framed, Error> {
    startup::open(config).map(|session| session.framed)
}

impl Connection {
    /// Connects and logs in.
    ///
    /// # Errors
    ///
    /// [`Error::Connect`] when the server cannot be reached; [`Error::Db`] when it
    /// refuses the login (SQLSTATE `28P01`: wrong password, `3D000`: no such
    /// database, `28000`: no `pg_hba.conf` entry); [`Error::Auth`].
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_pg::{Config, Connection, Error};
    ///
    /// let nobody_listens = Config::new().tcp("127.0.0.1", 1);
    /// let err = neverblock::run(move || Connection::connect(&nobody_listens)).unwrap_err();
    /// assert!(matches!(err, Error::Connect { .. }), "{err}");
    /// ```
    pub fn connect(config: &Config) -> Result<Connection, Error> {
        let session = startup::open(config)?;
        if let Some(limit) = config.get_read_timeout() {
            session.framed.socket().set_read_timeout(Some(limit)).map_err(Error::Io)?;
        }
        Ok(Connection {
            framed: session.framed,
            out: BytesMut::with_capacity(4096),
            statements: statement::Cache::new(config.get_statement_cache_capacity(), "nb"),
            held_closes: None,
            key: session.key,
            host: config.get_host().clone(),
            parameters: session.parameters,
            status: TransactionStatus::Idle,
            unread_replies: 0,
            portal_open: false,
            cancel: None,
            broken: None,
        })
    }

    /// Runs `sql` with `params` (`$1`, `$2`, …) and returns its rows. The
    /// statement is prepared on first use and kept in this connection's cache,
    /// so later calls with the same text send only its parameters. With
    /// [`statement_cache_capacity(0)`](Config::statement_cache_capacity) it runs
    /// as the unnamed statement instead, in one round trip (two the first time a
    /// text is seen: its description is cached on this side).
    ///
    /// # Errors
    ///
    /// [`Error::Db`] from the server; [`Error::Param`] when `params` do not fit
    /// the statement (nothing is run); [`Error::Timeout`] when a `timeout` around
    /// the call expires (the query is cancelled on the server); [`Error::Io`],
    /// [`Error::Closed`] when the connection fails.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// let rows = conn.query("select n from generate_series(1, $1) n", &[&3i32]).unwrap();
    /// assert_eq!(rows.iter().map(|r| r.get::<i32>(0)).sum::<i32>(), 6);
    /// # });
    /// ```
    pub fn query(&mut self, sql: &str, params: &[&dyn ToSql]) -> Result<Vec<Row>, Error> {
        self.run(sql, params).map(|reply| reply.rows)
    }

    /// Runs `sql` with `params` like [`query`](Connection::query), and hands its
    /// rows over one at a time as they arrive: the client holds a few rows,
    /// whatever the size of the result. Works through a [`Transaction`] and a
    /// [`PooledConnection`](crate::PooledConnection) too (both deref to the
    /// connection); the pool's shared connections do not stream.
    ///
    /// The server runs the query in batches of a few thousand rows; dropping the
    /// stream before its end reads what is left of the batch in flight and closes
    /// the query, without the rest. A server error part-way (a division by zero
    /// at row 1,000) is the last item, after the rows before it; either way the
    /// connection is ready for its next call.
    ///
    /// # Errors
    ///
    /// As [`query`](Connection::query): preparing the statement and sending it
    /// fail here ([`Error::Param`], a syntax error's [`Error::Db`]); what the
    /// server reports while it runs the query, a timeout ([`Error::Timeout`]:
    /// the query is cancelled on the server) and a failed connection come as
    /// the stream's last item.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// let mut sum = 0i64;
    /// for row in conn.query_stream("select g from generate_series(1, $1) g", &[&5_000_000i32]).unwrap() {
    ///     sum += i64::from(row.unwrap().get::<i32>(0));
    /// }
    /// assert_eq!(sum, 12_500_002_500_000);
    /// # });
    /// ```
    pub fn query_stream(&mut self, sql: &str, params: &[&dyn ToSql]) -> Result<RowStream<'_>, Error> {
        RowStream::start(self, sql, params)
    }

    /// Like [`query`](Connection::query), for a query that returns one row.
    ///
    /// # Errors
    ///
    /// As [`query`](Connection::query); [`Error::RowCount`] for no row or several.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// let now: std::time::SystemTime = conn.query_one("select now()", &[]).unwrap().get(0);
    /// # });
    /// ```
    pub fn query_one(&mut self, sql: &str, params: &[&dyn ToSql]) -> Result<Row, Error> {
        exactly_one(self.query(sql, params)?)
    }

    /// Like [`query`](Connection::query), for a query that returns at most one row.
    ///
    /// # Errors
    ///
    /// As [`query`](Connection::query); [`Error::RowCount`] for several rows.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// assert!(conn.query_opt("select 1 where false", &[]).unwrap().is_none());
    /// # });
    /// ```
    pub fn query_opt(&mut self, sql: &str, params: &[&dyn ToSql]) -> Result<Option<Row>, Error> {
        let mut rows = self.query(sql, params)?;
        match rows.len() {
            0 | 1 => Ok(rows.pop()),
            n => Err(Error::RowCount(n)),
        }
    }

    /// Runs `sql` with `params` and returns how many rows it inserted, updated,
    /// deleted or selected.
    ///
    /// # Errors
    ///
    /// As [`query`](Connection::query).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// conn.batch_execute("create temp table t (n int4)").unwrap();
    /// assert_eq!(conn.execute("insert into t select generate_series(1, 5)", &[]).unwrap(), 5);
    /// # });
    /// ```
    pub fn execute(&mut self, sql: &str, params: &[&dyn ToSql]) -> Result<u64, Error> {
        self.run(sql, params).map(|reply| reply.affected)
    }

    /// Prepares `sql` (or finds it in the cache) and describes its parameters and
    /// columns. With the cache off it is only described: nothing stays prepared
    /// on the server.
    ///
    /// # Errors
    ///
    /// As [`query`](Connection::query) (a syntax error is [`Error::Db`] `42601`).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// let stmt = conn.prepare("select $1::text").unwrap();
    /// assert_eq!(stmt.params(), [neverblock_pg::types::Type::TEXT]);
    /// # });
    /// ```
    pub fn prepare(&mut self, sql: &str) -> Result<Statement, Error> {
        self.statement(sql)
    }

    /// Runs one or more `;`-separated statements with the simple protocol, and no
    /// parameters: DDL, `SET`, scripts.
    ///
    /// # Errors
    ///
    /// As [`query`](Connection::query); execution stops at the first failing statement.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// conn.batch_execute("create temp table a (x int); create temp table b (y int)").unwrap();
    /// # });
    /// ```
    pub fn batch_execute(&mut self, sql: &str) -> Result<(), Error> {
        self.simple(sql).map(drop)
    }

    /// Runs `sql` with the simple protocol and returns every statement's rows, as text.
    ///
    /// # Errors
    ///
    /// As [`batch_execute`](Connection::batch_execute).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// let rows = conn.simple_query("select 'a'; select 'b'").unwrap();
    /// assert_eq!(rows.iter().map(|r| r.get(0).unwrap()).collect::<String>(), "ab");
    /// # });
    /// ```
    pub fn simple_query(&mut self, sql: &str) -> Result<Vec<SimpleRow>, Error> {
        self.simple(sql)
    }

    /// Starts a transaction (`BEGIN`). It rolls back when dropped uncommitted.
    ///
    /// # Errors
    ///
    /// [`Error::Usage`] when a transaction is already open; as [`batch_execute`](Connection::batch_execute).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// # conn.batch_execute("create temp table accounts (id int, balance int)").unwrap();
    /// let mut tx = conn.transaction().unwrap();
    /// tx.execute("update accounts set balance = balance - 10 where id = $1", &[&1i32]).unwrap();
    /// tx.execute("update accounts set balance = balance + 10 where id = $1", &[&2i32]).unwrap();
    /// tx.commit().unwrap();
    /// # });
    /// ```
    pub fn transaction(&mut self) -> Result<Transaction<'_>, Error> {
        self.drain_unread_replies()?;
        if self.status != TransactionStatus::Idle {
            return Err(Error::Usage("a transaction is already open on this connection".into()));
        }
        self.batch_execute("BEGIN")?;
        Ok(Transaction::new(self))
    }

    /// A batch of queries sent together and answered in order (see [`Pipeline`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// let mut batch = conn.pipeline();
    /// batch.query("select 1", &[]).unwrap();
    /// batch.query("select 2", &[]).unwrap();
    /// let results = batch.run().unwrap();
    /// assert_eq!(results.len(), 2);
    /// # });
    /// ```
    pub fn pipeline(&mut self) -> Pipeline<'_> {
        Pipeline::new(self)
    }

    /// A token another fiber (or thread) can use to cancel this connection's running query.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// let token = conn.cancel_token().unwrap();
    /// neverblock::spawn(move || token.cancel_query());
    /// let err = conn.query("select pg_sleep(60)", &[]).unwrap_err();
    /// assert_eq!(err.code(), Some("57014"));
    /// # });
    /// ```
    pub fn cancel_token(&self) -> Option<CancelToken> {
        self.key.map(|key| CancelToken::new(self.host.clone(), key))
    }

    /// The session's transaction state.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use neverblock_pg::TransactionStatus;
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// conn.batch_execute("begin").unwrap();
    /// assert_eq!(conn.transaction_status(), TransactionStatus::InTransaction);
    /// # });
    /// ```
    pub fn transaction_status(&self) -> TransactionStatus {
        self.status
    }

    /// A run-time parameter the server reported (`server_version`, `TimeZone`, …).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// assert_eq!(conn.parameter("client_encoding"), Some("UTF8"));
    /// # });
    /// ```
    pub fn parameter(&self, name: &str) -> Option<&str> {
        self.parameters.get(name).map(String::as_str)
    }

    /// The server process serving this session (`pg_backend_pid()`).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// let pid: i32 = conn.query_one("select pg_backend_pid()", &[]).unwrap().get(0);
    /// assert_eq!(conn.backend_pid(), Some(pid));
    /// # });
    /// ```
    pub fn backend_pid(&self) -> Option<i32> {
        self.key.map(|k| k.process_id)
    }

    /// Whether the connection failed and can no longer be used.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// assert!(!conn.is_broken());
    /// let _ = conn.query("select pg_terminate_backend(pg_backend_pid())", &[]);
    /// assert!(conn.is_broken());
    /// # });
    /// ```
    pub fn is_broken(&self) -> bool {
        self.broken.is_some()
    }

    /// Whether no reply is unread and nothing is unsent, in flight or open: the
    /// state a pool lends a connection in.
    pub(crate) fn is_clean(&self) -> bool {
        self.unread_replies == 0
            && !self.portal_open
            && self.out.is_empty()
            && self.cancel.is_none()
            && self.status == TransactionStatus::Idle
    }

    /// Whether the server has sent something (a goodbye, an error) or closed
    /// since the last reply: checked without waiting.
    pub(crate) fn has_pending_input(&self) -> bool {
        self.framed.socket().has_pending_input()
    }

    /// Reads and drops the replies earlier calls left unread, after sending what
    /// they left unsent, and waits for a cancel request in flight to land.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] inside an expired `timeout` (nothing is lost; the next
    /// call drains again); the connection's failure (it is then broken).
    pub(crate) fn drain_unread_replies(&mut self) -> Result<(), Error> {
        if let Some(why) = &self.broken {
            return Err(Error::Usage(format!("the connection is closed: {why}")));
        }
        if self.portal_open {
            // A row stream was forgotten (`mem::forget`) rather than dropped: end it as its drop would.
            self.end_portal()?;
        }
        if !self.out.is_empty() {
            self.flush()?;
        }
        if let Some(cancel) = &self.cancel {
            cancel.wait().map_err(|_| Error::Timeout)?;
            self.cancel = None;
        }
        while self.unread_replies > 0 {
            let drained = self.read_reply(None).map(drop);
            match drained {
                Err(Error::Db(db)) if !db.is_fatal() => {}
                other => self.check(other)?,
            }
        }
        Ok(())
    }

    /// Writes what is queued. A request cut short (the write failed or timed out
    /// part-way) leaves the session in an unknown state: the connection is broken.
    pub(crate) fn flush(&mut self) -> Result<(), Error> {
        let sent = self.framed.send(&mut self.out);
        if let Err(e) = &sent {
            self.set_broken(format!("a request could not be sent whole: {e}"));
        }
        sent
    }

    /// Nothing more is read or sent: no reply is awaited, no portal is open.
    fn set_broken(&mut self, why: String) {
        self.broken = Some(why);
        self.unread_replies = 0;
        self.portal_open = false;
    }

    /// Marks the connection broken on a fatal error; on a timeout, cancels the
    /// running query so the unread replies come soon.
    fn check<T>(&mut self, result: Result<T, Error>) -> Result<T, Error> {
        match &result {
            Err(Error::Timeout) if self.unread_replies > 0 && self.cancel.is_none() => {
                self.cancel = self.start_cancel()
            }
            Err(e) if e.is_fatal() => self.set_broken(e.to_string()),
            _ => {}
        }
        result
    }

    /// Handles what may come between replies: notices, parameter changes, notifications.
    fn background(&mut self, message: &Message) -> bool {
        match message {
            Message::NoticeResponse(body) => log_notice(body.fields()),
            Message::ParameterStatus(body) => {
                if let (Ok(name), Ok(value)) = (body.name(), body.value()) {
                    self.parameters.insert(name.to_owned(), value.to_owned());
                }
            }
            Message::NotificationResponse(body) => {
                log::debug!("postgres notification on {:?} dropped (LISTEN is not supported)", body.channel().ok());
            }
            _ => return false,
        }
        true
    }

    /// Records a `ReadyForQuery`: one reply fewer unread.
    fn ready(&mut self, status: u8) {
        self.unread_replies = self.unread_replies.saturating_sub(1);
        self.status = match status {
            b'T' => TransactionStatus::InTransaction,
            b'E' => TransactionStatus::Failed,
            _ => TransactionStatus::Idle,
        };
    }

    /// Queues a `ROLLBACK` and sends it now if the socket takes it at once; its
    /// reply is read by the next call. Never parks for long: used from `Drop`.
    pub(crate) fn queue_rollback(&mut self) {
        if self.broken.is_some() {
            return;
        }
        if frontend::query("ROLLBACK", &mut self.out).is_ok() {
            self.unread_replies += 1;
            let _ = self.flush();
        }
    }
}

/// Notices (warnings, `RAISE NOTICE`) go to the log.
pub(crate) fn log_notice(fields: ErrorFields<'_>) {
    let notice = DbError::parse(fields);
    log::info!("postgres {}: {}", notice.severity, notice.message);
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("host", &self.host)
            .field("backend_pid", &self.backend_pid())
            .field("status", &self.status)
            .field("unread_replies", &self.unread_replies)
            .field("portal_open", &self.portal_open)
            .field("statements", &self.statements.len())
            .field("broken", &self.broken)
            .finish_non_exhaustive()
    }
}

impl Drop for Connection {
    /// Says goodbye (`Terminate`) if the socket takes it at once.
    fn drop(&mut self) {
        if self.broken.is_none() {
            frontend::terminate(&mut self.out);
            let _ = self.framed.send(&mut self.out);
        }
    }
}
