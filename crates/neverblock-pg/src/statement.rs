//! Prepared statements: named ones, kept in a connection's cache and run by
//! name; unnamed ones, whose text is parsed again with each run (the cache is
//! off, or the text is too long to keep); and how a run learns that the server
//! lost a statement or that its result changed shape.

mod cache;

use std::fmt;
use std::sync::Arc;

use fallible_iterator::FallibleIterator;
use postgres_protocol::message::backend::RowDescriptionBody;

use crate::row::Column;
use crate::types::{Format, Type};
use crate::Error;

pub(crate) use cache::{Cache, DEFAULT_CAPACITY};

/// A statement prepared on one connection: its parameter and result types.
///
/// # Examples
///
/// ```no_run
/// use neverblock_pg::types::Type;
/// # neverblock::run(|| {
/// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
/// let stmt = conn.prepare("select $1::int4 + 1 as next").unwrap();
/// assert_eq!(stmt.params(), [Type::INT4]);
/// assert_eq!(stmt.columns()[0].name(), "next");
/// # });
/// ```
#[derive(Clone)]
pub struct Statement(Arc<Inner>);

struct Inner {
    /// The server-side name; empty for the unnamed statement.
    name: String,
    /// The query text: the cache's key, and what an unnamed statement parses with each run.
    sql: Arc<str>,
    params: Vec<Type>,
    columns: Arc<[Column]>,
}

impl Statement {
    /// `sql` prepared on the server as `name`, or described to run as the
    /// unnamed statement when `name` is empty.
    pub(crate) fn new(name: String, sql: &str, params: Vec<Type>, columns: Arc<[Column]>) -> Statement {
        Statement(Arc::new(Inner { name, sql: sql.into(), params, columns }))
    }

    /// This statement's description, to run as the unnamed statement (its name
    /// was given up while a run was on its way).
    pub(crate) fn to_unnamed(&self) -> Statement {
        let Inner { sql, params, columns, .. } = &*self.0;
        Statement(Arc::new(Inner {
            name: String::new(),
            sql: sql.clone(),
            params: params.clone(),
            columns: columns.clone(),
        }))
    }

    /// The same statement with the columns a run's portal described, each asked
    /// for in its type's own format from the next run on (the portal's formats
    /// are those bound for the columns it had before).
    pub(crate) fn with_columns(&self, described: &[Column]) -> Statement {
        let columns = described.iter().map(|c| Column::new(c.name(), c.type_())).collect();
        let Inner { name, sql, params, .. } = &*self.0;
        Statement(Arc::new(Inner { name: name.clone(), sql: sql.clone(), params: params.clone(), columns }))
    }

    /// The server-side name (empty for the unnamed statement).
    pub(crate) fn name(&self) -> &str {
        &self.0.name
    }

    /// Whether it runs as the unnamed statement: parsed again with each run.
    pub(crate) fn is_unnamed(&self) -> bool {
        self.0.name.is_empty()
    }

    /// The query text.
    pub(crate) fn sql(&self) -> &Arc<str> {
        &self.0.sql
    }

    /// Whether both are the one statement (not merely alike).
    pub(crate) fn same(&self, other: &Statement) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The types of `$1`, `$2`, ….
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// assert_eq!(conn.prepare("select $1::int8, $2::text").unwrap().params().len(), 2);
    /// # });
    /// ```
    pub fn params(&self) -> &[Type] {
        &self.0.params
    }

    /// The result columns (none for a statement that returns no rows).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// assert!(conn.prepare("create temp table t (n int)").unwrap().columns().is_empty());
    /// # });
    /// ```
    pub fn columns(&self) -> &[Column] {
        &self.0.columns
    }

    pub(crate) fn columns_arc(&self) -> &Arc<[Column]> {
        &self.0.columns
    }
}

impl fmt::Debug for Statement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Statement")
            .field("name", &self.0.name)
            .field("params", &self.0.params)
            .field("columns", &self.0.columns)
            .finish()
    }
}

/// The columns a portal's `RowDescription` gives, where they differ from
/// `expected` (a table changed shape since the statement was described); `None`
/// when they are the same, which is checked without allocating.
pub(crate) fn fresh_columns(body: &RowDescriptionBody, expected: &[Column]) -> Result<Option<Arc<[Column]>>, Error> {
    let malformed = |e: std::io::Error| Error::protocol(format!("malformed row description: {e}"));
    let format = |code: i16| if code == 1 { Format::Binary } else { Format::Text };
    let mut fields = body.fields();
    let mut seen = 0;
    let mut same = true;
    while let Some(field) = fields.next().map_err(malformed)? {
        same &= expected.get(seen).is_some_and(|c| {
            c.name() == field.name() && c.type_().oid() == field.type_oid() && c.format() == format(field.format())
        });
        seen += 1;
    }
    if same && seen == expected.len() {
        return Ok(None);
    }
    let fresh: Vec<Column> = body
        .fields()
        .map(|f| Ok(Column::with_format(f.name(), Type::from_oid(f.type_oid()), format(f.format()))))
        .collect()
        .map_err(malformed)?;
    Ok(Some(fresh.into()))
}

/// Whether `error` says a statement's description no longer fits its query: a
/// named statement's plan changed its result type (`0A000`), or the result
/// formats an unnamed statement was bound with do not match its new columns (`08P01`).
pub(crate) fn is_stale(error: &Error) -> bool {
    error.as_db().is_some_and(|db| {
        (db.code == "0A000" && db.message.contains("cached plan"))
            || (db.code == "08P01" && db.message.contains("result formats"))
    })
}

/// Whether `error` is the server saying it has no statement named as `statement`
/// (SQLSTATE `26000`): a pooler sent the run to another server session, or
/// the session ran `DEALLOCATE` / `DISCARD ALL`.
pub(crate) fn is_lost(error: &Error, statement: &Statement) -> bool {
    let name = statement.name();
    !name.is_empty()
        && error.as_db().is_some_and(|db| db.code == "26000" && db.message.contains(&format!("\"{name}\"")))
}

/// What a lost statement (see [`is_lost`]) most likely means, and what to do.
pub(crate) const LOST_HINT: &str = "this connection's prepared statement is not on the server session that \
     ran the query: a pooler in transaction or statement mode (PgBouncer) gives each transaction any server \
     session; set statement_cache_capacity=0 in the connection string (or Config::statement_cache_capacity(0)) \
     to run every query as the unnamed statement";

/// `error` with [`LOST_HINT`] added to the server's hint when it says `statement`
/// was lost; the SQLSTATE and the server's message stay as they were.
pub(crate) fn explain_lost(mut error: Error, statement: &Statement) -> Error {
    if is_lost(&error, statement) {
        if let Error::Db(db) = &mut error {
            db.hint = Some(match db.hint.take() {
                Some(hint) => format!("{hint}; {LOST_HINT}"),
                None => LOST_HINT.to_owned(),
            });
        }
    }
    error
}
