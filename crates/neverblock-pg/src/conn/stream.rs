//! Rows streamed: a query's result handed over one `DataRow` at a time, its
//! portal run in batches (Execute with a row limit, then Flush) so that the
//! client holds a few rows and the server has produced at most one batch ahead.
//!
//! The request is Bind + Execute(`BATCH_ROWS`) + Flush. Each `PortalSuspended`
//! asks for the next batch (Execute + Flush); `CommandComplete` ends the result.
//! Whichever way the stream ends (its last row, a server error, a timeout, a
//! drop part-way) it sends Close (of the portal) + Sync, whose `ReadyForQuery`
//! is read like any other request's: at once, or by the connection's next call.

use std::iter::FusedIterator;
use std::sync::Arc;

use postgres_protocol::message::backend::Message;
use postgres_protocol::message::frontend;

use super::query::{describe_columns, encode_bind, encode_describe_portal, encode_execute};
use super::Connection;
use crate::row::{Column, Row};
use crate::statement::Statement;
use crate::types::ToSql;
use crate::{DbError, Error};

/// Rows the server sends per Execute. Each batch costs one round trip (the
/// server waits for the next Execute), so a batch must take much longer to
/// produce and read than a round trip: 4096 small rows take a few milliseconds
/// against tens of microseconds for a round trip on a local socket (a million
/// rows stream as fast with batches of 256 or 65536). It bounds the server's
/// lead, not the client's memory (the client reads a message at a time whatever
/// the batch): a stream dropped part-way reads and discards the rest of one
/// batch, about 100 KiB of rows of a few dozen bytes.
const BATCH_ROWS: i32 = 4096;

/// A query's rows, read from the connection one at a time as the iterator is
/// advanced (see [`Connection::query_stream`]). It borrows the connection until
/// dropped; dropping it before its end closes the query, and the connection is
/// ready for its next call.
///
/// # Examples
///
/// ```no_run
/// # neverblock::run(|| {
/// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
/// let rows = conn.query_stream("select g, g::int8 * g from generate_series(1, 1000000) g", &[]).unwrap();
/// for row in rows.take(3) {
///     let row = row.unwrap();
///     println!("{} squared is {}", row.get::<i32>(0), row.get::<i64>(1));
/// }
/// // The rest of the million was never sent.
/// assert_eq!(conn.query_one("select 1::int4", &[]).unwrap().get::<i32>(0), 1);
/// # });
/// ```
#[derive(Debug)]
pub struct RowStream<'a> {
    conn: &'a mut Connection,
    /// The statement run: forgotten by the cache if the server says it went stale or lost it.
    stmt: Statement,
    columns: Arc<[Column]>,
}

impl<'a> RowStream<'a> {
    /// Prepares `sql` (or finds it in the cache) and sends Bind + the first Execute.
    pub(super) fn start(conn: &'a mut Connection, sql: &str, params: &[&dyn ToSql]) -> Result<RowStream<'a>, Error> {
        let stmt = conn.statement(sql)?;
        conn.drain_unread_replies()?;
        encode_bind(&mut conn.out, &stmt, params)?;
        encode_describe_portal(&mut conn.out, &stmt);
        encode_execute(&mut conn.out, BATCH_ROWS);
        frontend::flush(&mut conn.out);
        conn.portal_open = true;
        conn.flush()?;
        let columns = stmt.columns_arc().clone();
        Ok(RowStream { conn, stmt, columns })
    }

    /// The result's columns, known before the first row.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// let rows = conn.query_stream("select 1::int4 as id, 'x'::text as name where false", &[]).unwrap();
    /// let names: Vec<&str> = rows.columns().iter().map(|c| c.name()).collect();
    /// assert_eq!(names, ["id", "name"]);
    /// # });
    /// ```
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// The next row; `None` at the end of the result. An error ends the stream.
    fn read_row(&mut self) -> Result<Option<Row>, Error> {
        loop {
            let message = match self.conn.framed.next_message() {
                Ok(message) => message,
                Err(Error::Timeout) => {
                    // Sync now, so the cancel that follows (`check`) leaves one reply to drain.
                    self.conn.end_portal()?;
                    return Err(Error::Timeout);
                }
                Err(e) => return Err(e),
            };
            match message {
                Message::DataRow(body) => return Row::new(self.columns.clone(), body).map(Some),
                Message::PortalSuspended => self.conn.request_rows()?,
                Message::CommandComplete(_) | Message::EmptyQueryResponse => return self.end(None),
                Message::ErrorResponse(body) => {
                    let db = DbError::parse(body.fields());
                    if db.is_fatal() {
                        return Err(Error::Db(Box::new(db)));
                    }
                    return self.end(Some(db));
                }
                // An unnamed statement's portal, described afresh: its rows read by it.
                Message::RowDescription(body) => self.columns = describe_columns(&body)?.into(),
                // A statement evicted from the cache is closed with this request.
                Message::ParseComplete | Message::BindComplete | Message::CloseComplete | Message::NoData => {}
                other if self.conn.background(&other) => {}
                _ => return Err(Error::protocol("unexpected message in a streamed query's reply")),
            }
        }
    }

    /// Ends the portal and reads the reply up to its `ReadyForQuery`: `error`
    /// (what the server reported part-way) if any, else the reply's outcome.
    fn end(&mut self, error: Option<DbError>) -> Result<Option<Row>, Error> {
        self.conn.end_portal()?;
        self.conn.read_reply(None)?;
        match error {
            Some(db) => Err(Error::Db(Box::new(db))),
            None => Ok(None),
        }
    }
}

impl Iterator for RowStream<'_> {
    type Item = Result<Row, Error>;

    fn next(&mut self) -> Option<Result<Row, Error>> {
        if !self.conn.portal_open {
            return None;
        }
        let read = self.read_row().map_err(|e| self.conn.forget(&self.stmt, e));
        // A fatal error breaks the connection; a timeout cancels the query on the server.
        self.conn.check(read).transpose()
    }
}

impl FusedIterator for RowStream<'_> {}

impl Drop for RowStream<'_> {
    /// Sends Close + Sync and reads the rest of the batch in flight up to
    /// `ReadyForQuery`. While unwinding (a panic, a cancelled fiber), which must
    /// not wait, it only sends them, and the connection's next call reads the reply.
    fn drop(&mut self) {
        if !self.conn.portal_open {
            return;
        }
        let sent = self.conn.end_portal();
        if sent.is_ok() && !std::thread::panicking() {
            // A failure here (a timeout: the query is then cancelled) leaves the reply to the next call.
            let _ = self.conn.drain_unread_replies();
        }
    }
}

impl Connection {
    /// Asks for a row stream's next batch.
    fn request_rows(&mut self) -> Result<(), Error> {
        encode_execute(&mut self.out, BATCH_ROWS);
        frontend::flush(&mut self.out);
        self.flush()
    }

    /// Ends a row stream's portal: Close + Sync, sent now. Their reply (after
    /// the rest of the batch in flight) is read like any request's.
    pub(super) fn end_portal(&mut self) -> Result<(), Error> {
        self.portal_open = false;
        // Only a portal name with a NUL byte fails to encode; the unnamed portal's is empty.
        frontend::close(b'P', "", &mut self.out).expect("the unnamed portal's name encodes");
        frontend::sync(&mut self.out);
        self.unread_replies += 1;
        self.flush()
    }
}
