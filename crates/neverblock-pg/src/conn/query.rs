//! The extended protocol (Parse/Describe to prepare; Bind/Execute/Sync to run,
//! in one write, with Parse and a Describe of the portal in front and behind
//! Bind for an unnamed statement) and the simple one (Query), and reading one
//! request's reply.

use std::sync::Arc;

use bytes::BytesMut;
use fallible_iterator::FallibleIterator;
use postgres_protocol::message::backend::{ErrorResponseBody, Message, ParameterDescriptionBody, RowDescriptionBody};
use postgres_protocol::message::frontend::{self, BindError};

use super::Connection;
use crate::row::{Column, Row, SimpleRow};
use crate::statement::{self, Statement};
use crate::types::{IsNull, ToSql, Type};
use crate::{DbError, Error};

/// What one request (up to its `ReadyForQuery`) brought back.
#[derive(Debug, Default)]
pub(crate) struct Reply {
    pub(crate) rows: Vec<Row>,
    pub(crate) affected: u64,
    /// An unnamed statement's columns as its portal described them, when they
    /// differ from its cached description (the rows were read with these).
    pub(crate) columns: Option<Arc<[Column]>>,
}

/// Keeps a server error until its request's `ReadyForQuery` arrives; a fatal one
/// (the session is ending, nothing more will come) is returned at once.
pub(crate) fn defer_error(body: &ErrorResponseBody, error: &mut Option<DbError>) -> Result<(), Error> {
    let db = DbError::parse(body.fields());
    if db.is_fatal() {
        return Err(Error::Db(Box::new(db)));
    }
    *error = Some(db);
    Ok(())
}

/// A reply's outcome at its `ReadyForQuery`: the server error it carried, else `ok`.
fn finish<T>(error: Option<DbError>, ok: T) -> Result<T, Error> {
    error.map_or(Ok(ok), |db| Err(Error::Db(Box::new(db))))
}

/// Appends Bind + Execute + Sync for `stmt` with `params` to `out`, for an
/// unnamed statement Parse + Bind + Describe (portal) + Execute + Sync; on an
/// error `out` is left as it was.
pub(crate) fn encode_query(out: &mut BytesMut, stmt: &Statement, params: &[&dyn ToSql]) -> Result<(), Error> {
    encode_bind(out, stmt, params)?;
    encode_describe_portal(out, stmt);
    encode_execute(out, 0);
    frontend::sync(out);
    Ok(())
}

/// For an unnamed statement, appends Describe of the portal: the reply's
/// RowDescription says how its rows read (the cached one may have gone stale).
pub(super) fn encode_describe_portal(out: &mut BytesMut, stmt: &Statement) {
    if stmt.is_unnamed() {
        // Only a portal name with a NUL byte fails to encode; the unnamed portal's is empty.
        frontend::describe(b'P', "", out).expect("the unnamed portal's name encodes");
    }
}

/// Appends Execute of the unnamed portal, for at most `max_rows` rows (0: all of them).
pub(super) fn encode_execute(out: &mut BytesMut, max_rows: i32) {
    // Only a portal name with a NUL byte fails to encode; the unnamed portal's is empty.
    frontend::execute("", max_rows, out).expect("the unnamed portal's name encodes");
}

/// Appends Bind of `stmt` with `params` into the unnamed portal, its results
/// asked in each column's format; on an error `out` is left as it was.
pub(super) fn encode_bind(out: &mut BytesMut, stmt: &Statement, params: &[&dyn ToSql]) -> Result<(), Error> {
    let types = stmt.params();
    if params.len() != types.len() {
        let n = types.len();
        return Err(Error::Param(format!("the statement takes {n} parameter{}, {} given", plural(n), params.len())));
    }
    for (i, (param, ty)) in params.iter().zip(types).enumerate() {
        if !param.accepts(*ty) {
            return Err(Error::Param(format!("parameter ${}: a {} cannot be sent as {ty}", i + 1, param.rust_type())));
        }
    }
    let start = out.len();
    if stmt.is_unnamed() {
        frontend::parse("", stmt.sql(), types.iter().map(|t| t.oid()), out).map_err(|e| {
            out.truncate(start);
            Error::Param(format!("cannot send the query: {e}"))
        })?;
    }
    let bound = frontend::bind(
        "",
        stmt.name(),
        params.iter().zip(types).map(|(p, ty)| p.format(*ty).code()),
        params.iter().zip(types).enumerate(),
        |(i, (param, ty)), buf| match param.to_sql(*ty, buf) {
            Ok(IsNull::Yes) => Ok(postgres_protocol::IsNull::Yes),
            Ok(IsNull::No) => Ok(postgres_protocol::IsNull::No),
            Err(m) => Err(format!("parameter ${}: {m}", i + 1).into()),
        },
        stmt.columns().iter().map(|c| c.format().code()),
        out,
    );
    bound.map_err(|e| {
        out.truncate(start);
        match e {
            BindError::Conversion(e) => Error::Param(e.to_string()),
            BindError::Serialization(e) => Error::Param(e.to_string()),
        }
    })
}

/// Appends Parse + Describe + Sync for a statement `name` of `sql`.
pub(crate) fn encode_prepare(out: &mut BytesMut, name: &str, sql: &str) -> Result<(), Error> {
    let start = out.len();
    let encoded =
        frontend::parse(name, sql, std::iter::empty(), out).and_then(|()| frontend::describe(b'S', name, out));
    if let Err(e) = encoded {
        out.truncate(start);
        return Err(Error::Param(format!("cannot send the query: {e}")));
    }
    frontend::sync(out);
    Ok(())
}

/// Appends a simple-protocol Query for `sql`; on an error (a NUL byte in it) `out` is left as it was.
fn encode_simple(out: &mut BytesMut, sql: &str) -> Result<(), Error> {
    let start = out.len();
    frontend::query(sql, out).map_err(|e| {
        out.truncate(start);
        Error::Param(format!("cannot send the query: {e}"))
    })
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// The row count at the end of a command tag (`INSERT 0 5`, `UPDATE 3`, `SELECT 2`).
pub(crate) fn affected(tag: &str) -> u64 {
    tag.rsplit(' ').next().and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// The parameter types of a `ParameterDescription`.
pub(crate) fn describe_params(body: &ParameterDescriptionBody) -> Result<Vec<Type>, Error> {
    body.parameters()
        .map(|oid| Ok(Type::from_oid(oid)))
        .collect()
        .map_err(|e| Error::protocol(format!("malformed parameter description: {e}")))
}

/// The columns of a `RowDescription`.
pub(crate) fn describe_columns(body: &RowDescriptionBody) -> Result<Vec<Column>, Error> {
    body.fields()
        .map(|f| Ok(Column::new(f.name(), Type::from_oid(f.type_oid()))))
        .collect()
        .map_err(|e| Error::protocol(format!("malformed row description: {e}")))
}

impl Connection {
    /// Sends a pipeline's encoded requests (`replies` of them) in one write.
    pub(crate) fn send_batch(&mut self, batch: &[u8], replies: usize) -> Result<(), Error> {
        self.drain_unread_replies()?;
        self.out.extend_from_slice(batch);
        self.unread_replies += replies;
        self.release_closes();
        self.flush()
    }

    /// Reads one of a pipeline's replies.
    pub(crate) fn read_batch_reply(&mut self, stmt: &Statement) -> Result<Vec<Row>, Error> {
        let reply = self.read_reply(Some(stmt.columns_arc()));
        self.check(reply).map(|reply| self.learn(stmt, reply).rows).map_err(|e| self.forget(stmt, e))
    }

    /// Runs a statement: Bind + Execute + Sync in one write (Parse and Describe
    /// too for an unnamed one), then its reply.
    pub(crate) fn run(&mut self, sql: &str, params: &[&dyn ToSql]) -> Result<Reply, Error> {
        let stmt = self.statement(sql)?;
        self.drain_unread_replies()?;
        encode_query(&mut self.out, &stmt, params)?;
        self.unread_replies += 1;
        self.flush()?;
        let reply = self.read_reply(Some(stmt.columns_arc()));
        self.check(reply).map(|reply| self.learn(&stmt, reply)).map_err(|e| self.forget(&stmt, e))
    }

    /// Runs `sql` with the simple protocol.
    pub(crate) fn simple(&mut self, sql: &str) -> Result<Vec<SimpleRow>, Error> {
        self.drain_unread_replies()?;
        encode_simple(&mut self.out, sql)?;
        self.unread_replies += 1;
        self.flush()?;
        let reply = self.read_simple_reply();
        self.check(reply)
    }

    /// Reads one request's messages up to its `ReadyForQuery`; rows are typed by
    /// `columns` (`None`: rows are dropped), or by the portal's description where
    /// an unnamed statement's differs from them. A server error is returned once its
    /// `ReadyForQuery` is read, except a fatal one, returned at once.
    pub(crate) fn read_reply(&mut self, columns: Option<&Arc<[Column]>>) -> Result<Reply, Error> {
        let mut reply = Reply::default();
        let mut error = None;
        loop {
            match self.framed.next_message()? {
                Message::DataRow(body) => {
                    if let (Some(columns), None) = (reply.columns.as_ref().or(columns), &error) {
                        reply.rows.push(Row::new(columns.clone(), body)?);
                    }
                }
                Message::RowDescription(body) => {
                    if let Some(expected) = columns {
                        reply.columns = statement::fresh_columns(&body, expected)?;
                    }
                }
                Message::CommandComplete(body) => reply.affected = body.tag().map(affected).unwrap_or(0),
                Message::ReadyForQuery(body) => {
                    self.ready(body.status());
                    return finish(error, reply);
                }
                Message::ErrorResponse(body) => defer_error(&body, &mut error)?,
                Message::ParseComplete
                | Message::BindComplete
                | Message::CloseComplete
                | Message::NoData
                | Message::EmptyQueryResponse
                | Message::PortalSuspended
                | Message::ParameterDescription(_) => {}
                other if self.background(&other) => {}
                _ => return Err(Error::protocol("unexpected message in a query's reply")),
            }
        }
    }

    /// Reads the reply to Parse + Describe + Sync: the statement's parameter and column types.
    pub(crate) fn read_description(&mut self) -> Result<(Vec<Type>, Vec<Column>), Error> {
        let mut params = Vec::new();
        let mut columns = Vec::new();
        let mut error = None;
        loop {
            match self.framed.next_message()? {
                Message::ParameterDescription(body) => params = describe_params(&body)?,
                Message::RowDescription(body) => columns = describe_columns(&body)?,
                Message::ReadyForQuery(body) => {
                    self.ready(body.status());
                    return finish(error, (params, columns));
                }
                Message::ErrorResponse(body) => defer_error(&body, &mut error)?,
                Message::ParseComplete | Message::NoData | Message::CloseComplete => {}
                other if self.background(&other) => {}
                _ => return Err(Error::protocol("unexpected message while preparing a statement")),
            }
        }
    }

    /// Reads a simple query's reply: each statement's rows, as text.
    fn read_simple_reply(&mut self) -> Result<Vec<SimpleRow>, Error> {
        let mut rows = Vec::new();
        let mut names: Arc<[String]> = Arc::new([]);
        let mut error = None;
        loop {
            match self.framed.next_message()? {
                Message::RowDescription(body) => {
                    names = describe_columns(&body)?.into_iter().map(|c| c.name().to_owned()).collect();
                }
                Message::DataRow(body) => rows.push(SimpleRow::new(names.clone(), body)?),
                Message::ReadyForQuery(body) => {
                    self.ready(body.status());
                    return finish(error, rows);
                }
                Message::ErrorResponse(body) => defer_error(&body, &mut error)?,
                // A CloseComplete: a statement the cache gave up was closed in front of this query.
                Message::CommandComplete(_) | Message::EmptyQueryResponse | Message::CloseComplete => {}
                other if self.background(&other) => {}
                _ => return Err(Error::protocol("unexpected message in a simple query's reply")),
            }
        }
    }
}
