//! Pipelining on one connection: several queries written at once, their replies
//! read back in order. Each query has its own `Sync`, so one failing does not
//! stop the others (outside a transaction).

use bytes::BytesMut;

use crate::conn::encode_query;
use crate::row::Row;
use crate::statement::Statement;
use crate::types::ToSql;
use crate::{Connection, Error};

/// Queries queued on a connection, sent together by [`run`](Pipeline::run).
/// A query text seen for the first time is prepared when queued (one round
/// trip, then cached); `run` costs one write and the server's work.
///
/// # Examples
///
/// ```no_run
/// # neverblock::run(|| {
/// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
/// let mut batch = conn.pipeline();
/// for i in 0..3i32 {
///     batch.query("select $1::int4 * 10", &[&i]).unwrap();
/// }
/// batch.query("select 1/0", &[]).unwrap();
/// let results = batch.run().unwrap();
/// let tens: Vec<i32> = results[..3].iter().map(|r| r.as_ref().unwrap()[0].get(0)).collect();
/// assert_eq!(tens, [0, 10, 20]);
/// assert_eq!(results[3].as_ref().unwrap_err().code(), Some("22012"), "division by zero, alone");
/// # });
/// ```
#[derive(Debug)]
pub struct Pipeline<'a> {
    conn: &'a mut Connection,
    out: BytesMut,
    queued: Vec<Statement>,
}

impl<'a> Pipeline<'a> {
    pub(crate) fn new(conn: &'a mut Connection) -> Pipeline<'a> {
        conn.hold_closes();
        Pipeline { conn, out: BytesMut::new(), queued: Vec::new() }
    }

    /// Queues `sql` with `params`.
    ///
    /// # Errors
    ///
    /// [`Error::Param`] when `params` do not fit; preparing a new statement's errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// let mut batch = conn.pipeline();
    /// batch.query("select $1::int4", &[&1i32]).unwrap().query("select 2", &[]).unwrap();
    /// assert_eq!(batch.len(), 2);
    /// # });
    /// ```
    pub fn query(&mut self, sql: &str, params: &[&dyn ToSql]) -> Result<&mut Self, Error> {
        let stmt = self.conn.statement(sql)?;
        encode_query(&mut self.out, &stmt, params)?;
        self.queued.push(stmt);
        Ok(self)
    }

    /// How many queries are queued.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// let mut batch = conn.pipeline();
    /// assert_eq!(batch.len(), 0);
    /// # });
    /// ```
    pub fn len(&self) -> usize {
        self.queued.len()
    }

    /// Whether nothing is queued.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// let mut batch = conn.pipeline();
    /// assert!(batch.is_empty());
    /// # });
    /// ```
    pub fn is_empty(&self) -> bool {
        self.queued.is_empty()
    }

    /// Sends every queued query in one write and returns their results in order.
    ///
    /// # Errors
    ///
    /// The outer error when the connection fails or a `timeout` expires (the
    /// rest is then drained or cancelled, as for one query); each query's own
    /// server error in its place.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// let mut batch = conn.pipeline();
    /// batch.query("select 1", &[]).unwrap();
    /// let results = batch.run().unwrap();
    /// assert_eq!(results[0].as_ref().unwrap().len(), 1);
    /// # });
    /// ```
    pub fn run(mut self) -> Result<Vec<Result<Vec<Row>, Error>>, Error> {
        let (out, queued) = (std::mem::take(&mut self.out), std::mem::take(&mut self.queued));
        let conn = &mut *self.conn;
        conn.send_batch(&out, queued.len())?;
        let mut results = Vec::with_capacity(queued.len());
        for stmt in &queued {
            match conn.read_batch_reply(stmt) {
                Ok(rows) => results.push(Ok(rows)),
                Err(e @ Error::Db(_)) if !e.is_fatal() => results.push(Err(e)),
                Err(e) => return Err(e),
            }
        }
        Ok(results)
    }
}

impl Drop for Pipeline<'_> {
    /// Lets the statements the cache gave up meanwhile be closed (after a
    /// [`run`](Pipeline::run), already done).
    fn drop(&mut self) {
        self.conn.release_closes();
    }
}
