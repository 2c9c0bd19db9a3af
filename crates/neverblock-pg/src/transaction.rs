//! Transactions: `BEGIN` on creation, `COMMIT` or `ROLLBACK` to end, and a
//! `ROLLBACK` when dropped unfinished (sent at once, its reply read later).

use std::ops::{Deref, DerefMut};

use crate::conn::TransactionStatus;
use crate::{Connection, Error};

/// An open transaction on a [`Connection`]; run queries through it (it derefs
/// to the connection). Dropping it uncommitted rolls it back, also when the
/// fiber unwinds from a panic or a cancellation: the `ROLLBACK` goes out at
/// once, and the connection reads its reply before its next query.
///
/// # Examples
///
/// ```no_run
/// # neverblock::run(|| {
/// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
/// conn.batch_execute("create temp table t (n int4)").unwrap();
/// {
///     let mut tx = conn.transaction().unwrap();
///     tx.execute("insert into t values (1)", &[]).unwrap();
///     // dropped without commit: rolled back
/// }
/// let n: i64 = conn.query_one("select count(*) from t", &[]).unwrap().get(0);
/// assert_eq!(n, 0);
/// # });
/// ```
#[derive(Debug)]
pub struct Transaction<'a> {
    conn: &'a mut Connection,
    finished: bool,
}

impl<'a> Transaction<'a> {
    pub(crate) fn new(conn: &'a mut Connection) -> Transaction<'a> {
        Transaction { conn, finished: false }
    }

    /// Commits (`COMMIT`).
    ///
    /// # Errors
    ///
    /// [`Error::Usage`] when a statement of the transaction had failed: the
    /// server then rolls it back instead, and so it is; the server's error
    /// (a deferred constraint, a serialization failure); the connection's failure.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// # conn.batch_execute("create temp table t (n int4)").unwrap();
    /// let mut tx = conn.transaction().unwrap();
    /// tx.execute("insert into t values (1)", &[]).unwrap();
    /// tx.commit().unwrap();
    /// # });
    /// ```
    pub fn commit(mut self) -> Result<(), Error> {
        self.finished = true;
        if self.conn.transaction_status() == TransactionStatus::Failed {
            self.conn.batch_execute("ROLLBACK")?;
            return Err(Error::Usage("the transaction had failed, so it was rolled back, not committed".into()));
        }
        self.conn.batch_execute("COMMIT")
    }

    /// Rolls back (`ROLLBACK`).
    ///
    /// # Errors
    ///
    /// The connection's failure.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// # conn.batch_execute("create temp table t (n int4)").unwrap();
    /// let mut tx = conn.transaction().unwrap();
    /// tx.execute("insert into t values (1)", &[]).unwrap();
    /// tx.rollback().unwrap();
    /// # });
    /// ```
    pub fn rollback(mut self) -> Result<(), Error> {
        self.finished = true;
        self.conn.batch_execute("ROLLBACK")
    }
}

impl Deref for Transaction<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl DerefMut for Transaction<'_> {
    fn deref_mut(&mut self) -> &mut Connection {
        self.conn
    }
}

impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.conn.queue_rollback();
        }
    }
}
