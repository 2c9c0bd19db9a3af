//! What can go wrong talking to PostgreSQL: one `Error` variant per cause, and
//! the server's own errors as structured [`DbError`] values.

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use fallible_iterator::FallibleIterator;
use postgres_protocol::message::backend::ErrorFields;

/// Why an operation failed.
///
/// # Examples
///
/// ```
/// let err = neverblock_pg::Config::parse("mysql://localhost/db").unwrap_err();
/// assert!(matches!(err, neverblock_pg::Error::Config(_)));
/// assert!(err.to_string().contains("mysql://"));
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The connection string or a [`Config`](crate::Config) setting is invalid.
    Config(String),
    /// The server could not be reached: nothing listens there (refused, no such
    /// socket file), the host did not resolve, or connecting timed out.
    Connect {
        /// Where we tried to connect (`host:port` or the socket's path).
        target: String,
        /// The cause.
        source: io::Error,
    },
    /// Authentication could not be carried out on our side: the server asked for a
    /// password and none was given, asked for a method this client does not speak,
    /// or its SCRAM proof did not check out. (A wrong password is the server's
    /// [`Error::Db`] with SQLSTATE `28P01`.) Also `channel_binding=require` unmet.
    Auth(String),
    /// TLS could not be set up as `sslmode` asks: the server offers no TLS and the mode
    /// requires it, its certificate is not trusted or does not name the host, or the
    /// handshake failed. (Unreadable certificate or key files are [`Error::Config`].)
    Tls(String),
    /// The server reported an error: SQLSTATE, message, detail, hint, position…
    /// A `FATAL` one (a terminated backend, an unknown database) also ends the connection.
    Db(Box<DbError>),
    /// Reading from or writing to an established connection failed (reset, broken pipe);
    /// the connection is closed.
    Io(io::Error),
    /// The server closed the connection (end of stream) while a reply was awaited.
    Closed,
    /// The reply did not come before a deadline (a neverblock `timeout` around the
    /// call, or the connection's read timeout). The query was cancelled on the
    /// server; the connection is drained and usable again on its next call.
    Timeout,
    /// The server sent something the protocol does not allow here.
    Protocol(String),
    /// The query's parameters do not fit the statement: wrong count, or a Rust
    /// value that cannot be sent as the parameter's SQL type. Nothing was run.
    Param(String),
    /// A column could not be read as the asked Rust type (type mismatch, NULL into a
    /// non-`Option`, no such column, a value out of range).
    Column(String),
    /// A query expected exactly one row ([`query_one`](crate::Connection::query_one)) got another number.
    RowCount(usize),
    /// Every connection of the pool stayed busy past the pool's checkout timeout.
    PoolTimeout,
    /// The pool's last attempt to connect failed, and it waits before the next (twice as
    /// long after each failure, at most about a second): a checkout that needed a new
    /// connection failed at once, with that attempt's error.
    Unavailable {
        /// How long until the pool tries again.
        retry_in: Duration,
        /// Why the last attempt failed.
        last: Arc<Error>,
    },
    /// The call is not allowed in this state (a transaction inside a transaction,
    /// a shared pool outside a runtime, …).
    Usage(String),
}

impl Error {
    /// The server's error, if this is one.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(neverblock_pg::Error::Closed.as_db().is_none());
    /// ```
    pub fn as_db(&self) -> Option<&DbError> {
        match self {
            Error::Db(db) => Some(db),
            Error::Unavailable { last, .. } => last.as_db(),
            _ => None,
        }
    }

    /// The SQLSTATE code of a server error (`"42P01"`: undefined table, …).
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(neverblock_pg::Error::Timeout.code(), None);
    /// ```
    pub fn code(&self) -> Option<&str> {
        self.as_db().map(|db| db.code.as_str())
    }

    /// Whether the connection that returned this error can no longer be used.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(neverblock_pg::Error::Closed.is_fatal());
    /// assert!(!neverblock_pg::Error::Timeout.is_fatal());
    /// ```
    pub fn is_fatal(&self) -> bool {
        match self {
            Error::Io(_) | Error::Closed | Error::Protocol(_) | Error::Connect { .. } | Error::Auth(_) => true,
            Error::Tls(_) => true,
            Error::Db(db) => db.is_fatal(),
            _ => false,
        }
    }

    /// Whether this error, from an attempt to connect, says nothing about the server:
    /// the caller's own `timeout` expired, or the call was refused before dialling.
    pub(crate) fn says_nothing_of_the_server(&self) -> bool {
        matches!(self, Error::Timeout | Error::Usage(_) | Error::Config(_) | Error::Unavailable { .. })
    }

    /// A copy of this error (an I/O error keeps its kind and message), for a pool that
    /// reports its last failed connect to later checkouts.
    pub(crate) fn duplicate(&self) -> Error {
        let io_copy = |e: &io::Error| io::Error::new(e.kind(), e.to_string());
        match self {
            Error::Config(m) => Error::Config(m.clone()),
            Error::Connect { target, source } => Error::Connect { target: target.clone(), source: io_copy(source) },
            Error::Auth(m) => Error::Auth(m.clone()),
            Error::Tls(m) => Error::Tls(m.clone()),
            Error::Db(db) => Error::Db(db.clone()),
            Error::Io(e) => Error::Io(io_copy(e)),
            Error::Closed => Error::Closed,
            Error::Timeout => Error::Timeout,
            Error::Protocol(m) => Error::Protocol(m.clone()),
            Error::Param(m) => Error::Param(m.clone()),
            Error::Column(m) => Error::Column(m.clone()),
            Error::RowCount(n) => Error::RowCount(*n),
            Error::PoolTimeout => Error::PoolTimeout,
            Error::Unavailable { retry_in, last } => Error::Unavailable { retry_in: *retry_in, last: last.clone() },
            Error::Usage(m) => Error::Usage(m.clone()),
        }
    }

    pub(crate) fn protocol(what: impl Into<String>) -> Error {
        Error::Protocol(what.into())
    }

    /// Classifies an I/O error on an established connection.
    pub(crate) fn io(e: io::Error) -> Error {
        match e.kind() {
            io::ErrorKind::TimedOut => Error::Timeout,
            io::ErrorKind::UnexpectedEof => Error::Closed,
            _ => Error::Io(e),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config(m) => write!(f, "invalid configuration: {m}"),
            Error::Connect { target, source } => write!(f, "cannot connect to PostgreSQL at {target}: {source}"),
            Error::Auth(m) => write!(f, "authentication failed: {m}"),
            Error::Tls(m) => write!(f, "TLS failed: {m}"),
            Error::Db(db) => db.fmt(f),
            Error::Io(e) => write!(f, "connection to PostgreSQL failed: {e}"),
            Error::Closed => f.write_str("the server closed the connection"),
            Error::Timeout => f.write_str("the query timed out and was cancelled"),
            Error::Protocol(m) => write!(f, "protocol error: {m}"),
            Error::Param(m) => write!(f, "bad query parameters: {m}"),
            Error::Column(m) => write!(f, "cannot read column: {m}"),
            Error::RowCount(n) => write!(f, "expected exactly one row, got {n}"),
            Error::PoolTimeout => f.write_str("no pooled connection became free before the checkout timeout"),
            Error::Unavailable { retry_in, last } => {
                write!(f, "{last} (the pool tries again in {} ms)", retry_in.as_millis())
            }
            Error::Usage(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Connect { source, .. } => Some(source),
            Error::Io(e) => Some(e),
            Error::Db(db) => Some(&**db),
            Error::Unavailable { last, .. } => Some(&**last),
            _ => None,
        }
    }
}

/// An error reported by the server (an `ErrorResponse`), field by field.
///
/// # Examples
///
/// ```no_run
/// # neverblock::run(|| {
/// let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
/// let err = conn.query("select * from no_such_table", &[]).unwrap_err();
/// let db = err.as_db().unwrap();
/// assert_eq!(db.code, "42P01");
/// assert_eq!(db.message, r#"relation "no_such_table" does not exist"#);
/// assert_eq!(db.position, Some(15));
/// # });
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DbError {
    /// `ERROR`, `FATAL` or `PANIC` (not localised).
    pub severity: String,
    /// The SQLSTATE code, five characters (`23505`: unique violation).
    pub code: String,
    /// The primary message.
    pub message: String,
    /// More detail, when the server gives it.
    pub detail: Option<String>,
    /// A suggestion what to do about it.
    pub hint: Option<String>,
    /// Where in the query text the error is: a 1-based character index.
    pub position: Option<u32>,
    /// The call stack in the server (PL/pgSQL functions, …).
    pub where_: Option<String>,
    /// The schema of the object concerned.
    pub schema: Option<String>,
    /// The table concerned.
    pub table: Option<String>,
    /// The column concerned.
    pub column: Option<String>,
    /// The constraint concerned.
    pub constraint: Option<String>,
}

impl DbError {
    /// Reads an `ErrorResponse`'s (or a `NoticeResponse`'s) fields.
    pub(crate) fn parse(mut fields: ErrorFields<'_>) -> DbError {
        let mut db = DbError::default();
        let mut localised_severity = String::new();
        while let Ok(Some(field)) = fields.next() {
            let value = String::from_utf8_lossy(field.value_bytes()).into_owned();
            match field.type_() {
                b'S' => localised_severity = value,
                b'V' => db.severity = value,
                b'C' => db.code = value,
                b'M' => db.message = value,
                b'D' => db.detail = Some(value),
                b'H' => db.hint = Some(value),
                b'P' => db.position = value.parse().ok(),
                b'W' => db.where_ = Some(value),
                b's' => db.schema = Some(value),
                b't' => db.table = Some(value),
                b'c' => db.column = Some(value),
                b'n' => db.constraint = Some(value),
                _ => {}
            }
        }
        if db.severity.is_empty() {
            db.severity = localised_severity;
        }
        db
    }

    /// Whether the server ends the session after it (`FATAL`, `PANIC`).
    ///
    /// # Examples
    ///
    /// ```
    /// let mut db = neverblock_pg::DbError::default();
    /// db.severity = "FATAL".into();
    /// assert!(db.is_fatal());
    /// ```
    pub fn is_fatal(&self) -> bool {
        matches!(self.severity.as_str(), "FATAL" | "PANIC")
    }
}

impl fmt::Display for DbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.severity, self.code, self.message)?;
        if let Some(detail) = &self.detail {
            write!(f, " (detail: {detail})")?;
        }
        if let Some(hint) = &self.hint {
            write!(f, " (hint: {hint})")?;
        }
        Ok(())
    }
}

impl std::error::Error for DbError {}
