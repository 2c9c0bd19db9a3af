//! Prepared statements and the per-connection cache that makes every query text
//! a prepared statement after its first run.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use crate::row::Column;
use crate::types::Type;

/// How many statements a connection keeps prepared; past it the oldest is closed.
pub(crate) const CACHE_CAPACITY: usize = 256;

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
    name: String,
    params: Vec<Type>,
    columns: Arc<[Column]>,
}

impl Statement {
    pub(crate) fn new(name: String, params: Vec<Type>, columns: Vec<Column>) -> Statement {
        Statement(Arc::new(Inner { name, params, columns: columns.into() }))
    }

    /// The server-side name.
    pub(crate) fn name(&self) -> &str {
        &self.0.name
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

/// A connection's prepared statements by query text, oldest first out.
#[derive(Debug, Default)]
pub(crate) struct Cache {
    by_sql: HashMap<Box<str>, (u64, Statement)>,
    /// Statements prepared so far: the next one's name and age.
    prepared: u64,
}

impl Cache {
    pub(crate) fn get(&self, sql: &str) -> Option<&Statement> {
        self.by_sql.get(sql).map(|(_, s)| s)
    }

    /// A fresh statement name.
    pub(crate) fn next_name(&mut self) -> String {
        self.prepared += 1;
        format!("nb{}", self.prepared)
    }

    /// Keeps `statement` for `sql`; returns the one evicted to make room, to be closed.
    pub(crate) fn insert(&mut self, sql: &str, statement: Statement) -> Option<Statement> {
        let evicted = if self.by_sql.len() >= CACHE_CAPACITY {
            let oldest = self.by_sql.iter().min_by_key(|(_, (age, _))| *age).map(|(k, _)| k.clone());
            oldest.and_then(|k| self.by_sql.remove(&k)).map(|(_, s)| s)
        } else {
            None
        };
        self.by_sql.insert(sql.into(), (self.prepared, statement));
        evicted
    }

    /// Forgets `sql`'s statement (its plan went stale).
    pub(crate) fn remove(&mut self, sql: &str) -> Option<Statement> {
        self.by_sql.remove(sql).map(|(_, s)| s)
    }

    pub(crate) fn len(&self) -> usize {
        self.by_sql.len()
    }
}
