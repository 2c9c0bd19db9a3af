//! Shared connections: many fibers' short queries pipelined on a few
//! connections, as tokio-postgres's clients share a connection task.
//!
//! Each shared connection has two fibers: a writer that sends whatever
//! requests fibers appended to its buffer since it last ran, in one write, and
//! a reader that parses the replies and hands each to the fiber waiting for it,
//! in the order they were sent. A query costs its fiber an append and a park;
//! a burst of fibers' queries costs one write.
//!
//! **Long queries.** The server runs one connection's requests one after
//! another, so a slow query holds the ones sent behind it. Three things bound
//! that: a new query goes to the connection with the fewest in flight, passing
//! over any whose oldest query has run past `stall_after` while another is
//! free; at most `max_in_flight` queries wait on one connection; and queries
//! known to be long (and transactions) belong on the pool's lent connections
//! ([`Pool::get`](super::Pool::get)), which never carry shared traffic. A fiber
//! whose `timeout` expires stops waiting, but its query is not cancelled (a
//! cancel request would hit whichever query the connection runs then): its
//! reply is dropped when it comes.
//!
//! **No streaming.** A reply is read whole before it is handed over: a row
//! stream would hold the connection, and every query behind it, until its
//! reader finished. Large results go through the lent connections'
//! `Connection::query_stream`.

use std::cell::{Cell, RefCell};
use std::collections::{HashSet, VecDeque};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use neverblock::sync::Notify;
use postgres_protocol::message::backend::Message;
use postgres_protocol::message::frontend;

use super::redial::Redial;
use super::PoolBuilder;
use crate::conn::socket::{Framed, TcpOrUnixStream};
use crate::conn::{
    affected, defer_error, describe_columns, describe_params, encode_prepare, encode_query, open_framed, Reply,
};
use crate::row::{Column, Row};
use crate::statement::{self, Statement};
use crate::types::{ToSql, Type};
use crate::{Config, DbError, Error};

/// The pool's shared connections, the statements prepared on them, and what
/// fibers wait on while every one is full.
pub(super) struct SharedConnections {
    config: Config,
    size: usize,
    max_in_flight: usize,
    stall_after: Duration,
    checkout_timeout: Duration,
    conns: RefCell<Vec<Rc<Conn>>>,
    opening: Cell<usize>,
    /// Statements by query text, prepared under the same name on every
    /// connection that ran them (or, with the cache off, descriptions to run unnamed).
    statements: RefCell<statement::Cache>,
    capacity: Rc<Capacity>,
    /// The pool's: when a new connection may be dialled.
    redial: Rc<Redial>,
}

/// What fibers wait on for a connection with room for one more query: woken
/// when a reply makes room, a connection closes, or one being opened is done.
#[derive(Default)]
struct Capacity {
    notify: Notify,
    waiting: Cell<usize>,
    /// A connection closed since the pool last pruned its list.
    conn_closed: Cell<bool>,
}

/// One shared connection, as its fibers and the pool see it.
struct Conn {
    socket: Arc<TcpOrUnixStream>,
    /// Requests appended by fibers, not yet written.
    out: RefCell<BytesMut>,
    /// Requests written or to be written, oldest first: each gets one reply.
    pending: RefCell<VecDeque<Rc<PendingRequest>>>,
    /// Statement names parsed on this connection.
    prepared: RefCell<HashSet<String>>,
    wake_writer: Notify,
    closed: Cell<bool>,
    capacity: Rc<Capacity>,
}

/// A request written or to be written, and where its reply is left for its fiber.
struct PendingRequest {
    kind: Kind,
    queued_at: Instant,
    /// The statement parsed with this request, to forget if parsing failed.
    parsed: Option<String>,
    result: RefCell<Option<Result<Outcome, Error>>>,
    done: Notify,
}

enum Kind {
    Query(Arc<[Column]>),
    Describe,
}

enum Outcome {
    Rows(Reply),
    Described(Vec<Type>, Vec<Column>),
}

impl SharedConnections {
    pub(super) fn new(settings: &PoolBuilder, redial: Rc<Redial>) -> SharedConnections {
        SharedConnections {
            config: settings.config.clone(),
            size: settings.shared,
            max_in_flight: settings.max_in_flight,
            stall_after: settings.stall_after,
            checkout_timeout: settings.checkout_timeout,
            conns: RefCell::new(Vec::new()),
            opening: Cell::new(0),
            statements: RefCell::new(statement::Cache::new(settings.config.get_statement_cache_capacity(), "nbs")),
            capacity: Rc::new(Capacity::default()),
            redial,
        }
    }

    /// Connections open or being opened.
    pub(super) fn open(&self) -> usize {
        self.conns.borrow().iter().filter(|c| !c.closed.get()).count() + self.opening.get()
    }

    /// Runs `sql` pipelined on the least-loaded shared connection.
    pub(super) fn run(&self, sql: &str, params: &[&dyn ToSql]) -> Result<Reply, Error> {
        let stmt = self.statement(sql)?;
        let conn = self.pick()?;
        // Given up by the cache (and closed) while this fiber waited for a connection: run it unnamed.
        let stmt = if stmt.is_unnamed() || self.statements.borrow().holds(&stmt) { stmt } else { stmt.to_unnamed() };
        let name = stmt.name();
        let parsed = {
            let mut out = conn.out.borrow_mut();
            let first = out.is_empty();
            let parse = !stmt.is_unnamed() && !conn.prepared.borrow().contains(name);
            let start = out.len();
            if parse {
                let oids = stmt.params().iter().map(|t| t.oid());
                frontend::parse(name, sql, oids, &mut out).map_err(|e| Error::Param(e.to_string()))?;
            }
            if let Err(e) = encode_query(&mut out, &stmt, params) {
                out.truncate(start);
                return Err(e);
            }
            if parse {
                conn.prepared.borrow_mut().insert(name.to_owned());
            }
            if first {
                conn.wake_writer.notify_one();
            }
            parse.then(|| name.to_owned())
        };
        match conn.send(Kind::Query(stmt.columns_arc().clone()), parsed) {
            Ok(Outcome::Rows(reply)) => Ok(self.learn(&stmt, reply)),
            Ok(Outcome::Described(..)) => Err(Error::protocol("a description answered a query")),
            Err(e) => Err(self.forget(&conn, &stmt, e)),
        }
    }

    /// The statement for `sql`; on a miss, described through a shared
    /// connection, and prepared there under a name unless the cache is off or
    /// the text is over its byte bound (then it runs unnamed).
    fn statement(&self, sql: &str) -> Result<Statement, Error> {
        if let Some(stmt) = self.statements.borrow_mut().get(sql) {
            return Ok(stmt);
        }
        let conn = self.pick()?;
        let name = {
            let mut cache = self.statements.borrow_mut();
            if cache.prepares(sql) {
                cache.next_name()
            } else {
                String::new()
            }
        };
        {
            let mut out = conn.out.borrow_mut();
            if out.is_empty() {
                conn.wake_writer.notify_one();
            }
            encode_prepare(&mut out, &name, sql)?;
        }
        let parsed = (!name.is_empty()).then(|| name.clone());
        if let Some(name) = &parsed {
            conn.prepared.borrow_mut().insert(name.clone());
        }
        match conn.send(Kind::Describe, parsed)? {
            Outcome::Described(params, columns) => {
                let stmt = Statement::new(name, sql, params, columns.into());
                let gone = self.statements.borrow_mut().insert(stmt.clone());
                self.close_everywhere(&gone);
                Ok(stmt)
            }
            Outcome::Rows(_) => Err(Error::protocol("rows answered a description")),
        }
    }

    /// Queues a Close for each named statement of `gone` on every connection
    /// that prepared it, behind the requests already queued there (which may
    /// name it); the next request's Sync covers it.
    fn close_everywhere(&self, gone: &[Statement]) {
        for stmt in gone.iter().filter(|s| !s.is_unnamed()) {
            for conn in self.conns.borrow().iter().filter(|c| !c.closed.get()) {
                if conn.prepared.borrow_mut().remove(stmt.name()) {
                    let mut out = conn.out.borrow_mut();
                    if out.is_empty() {
                        conn.wake_writer.notify_one();
                    }
                    let _ = frontend::close(b'S', stmt.name(), &mut out);
                }
            }
        }
    }

    /// Keeps the columns an unnamed statement's portal described, where they
    /// differ from its cached description.
    fn learn(&self, stmt: &Statement, reply: Reply) -> Reply {
        if let Some(columns) = &reply.columns {
            let mut cache = self.statements.borrow_mut();
            if stmt.is_unnamed() && cache.holds(stmt) {
                let gone = cache.insert(stmt.with_columns(columns));
                drop(cache);
                self.close_everywhere(&gone);
            }
        }
        reply
    }

    /// After `stmt`'s run on `conn` failed with `error`: forgets it when its
    /// description went stale; when `conn`'s server session lost it (a pooler),
    /// parses it there again next time, and says what that means.
    fn forget(&self, conn: &Conn, stmt: &Statement, error: Error) -> Error {
        if statement::is_stale(&error) && self.statements.borrow().holds(stmt) {
            let gone: Vec<Statement> = self.statements.borrow_mut().remove(stmt.sql()).into_iter().collect();
            self.close_everywhere(&gone);
        } else if statement::is_lost(&error, stmt) {
            conn.prepared.borrow_mut().remove(stmt.name());
        }
        statement::explain_lost(error, stmt)
    }

    /// The connection a new request should go to: the fiber's own (its task
    /// number picks one, so the queries of fibers woken together by one batch of
    /// replies go back out together in one write) unless that one is stalled on
    /// a long query or full; else the least loaded of those not stalled; a new
    /// one while the pool has room and every open one is busy; or (all full)
    /// the first to make room.
    fn pick(&self) -> Result<Rc<Conn>, Error> {
        loop {
            if self.capacity.conn_closed.take() {
                self.conns.borrow_mut().retain(|c| !c.closed.get());
            }
            let room_to_grow = self.open() < self.size;
            let now = Instant::now();
            let stalled = |c: &Conn| c.oldest().is_some_and(|t| now.duration_since(t) > self.stall_after);
            let best = {
                let conns = self.conns.borrow();
                let home = (!conns.is_empty())
                    .then(|| &conns[neverblock::current_task_id().unwrap_or(0) as usize % conns.len()]);
                match home {
                    Some(c) if c.load() == 0 || (!room_to_grow && c.load() < self.max_in_flight && !stalled(c)) => {
                        return Ok(c.clone());
                    }
                    _ => conns
                        .iter()
                        .filter(|c| !c.closed.get() && c.load() < self.max_in_flight)
                        .min_by_key(|c| (stalled(c), c.load()))
                        .map(|c| (c.clone(), stalled(c))),
                }
            };
            match best {
                Some((conn, false)) if conn.load() == 0 || !room_to_grow => return Ok(conn),
                _ if room_to_grow => return self.open_conn(),
                // Every open one is stalled, but another is on its way: wait for it.
                Some((_, true)) if self.opening.get() > 0 => self.wait_for_capacity()?,
                Some((conn, _)) => return Ok(conn),
                None => self.wait_for_capacity()?,
            }
        }
    }

    fn wait_for_capacity(&self) -> Result<(), Error> {
        /// Counts a waiting fiber until it stops waiting, however it stops.
        struct Waiting<'a>(&'a Capacity);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.waiting.set(self.0.waiting.get() - 1);
            }
        }
        let capacity = &self.capacity;
        capacity.waiting.set(capacity.waiting.get() + 1);
        let _waiting = Waiting(capacity);
        let waited = neverblock::timeout(self.checkout_timeout, || capacity.notify.notified());
        match waited {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(Error::Timeout),
            Err(_) => Err(Error::PoolTimeout),
        }
    }

    /// Opens a shared connection and starts its writer and reader fibers.
    fn open_conn(&self) -> Result<Rc<Conn>, Error> {
        if neverblock::current_task_id().is_none() {
            return Err(Error::Usage("a pool with shared connections needs a neverblock runtime".into()));
        }
        self.opening.set(self.opening.get() + 1);
        let opening = Opening(self);
        let framed = self.redial.dial(|| open_framed(&self.config))?;
        let conn = Rc::new(Conn {
            socket: framed.socket().clone(),
            out: RefCell::new(BytesMut::with_capacity(8192)),
            pending: RefCell::new(VecDeque::new()),
            prepared: RefCell::new(HashSet::new()),
            wake_writer: Notify::new(),
            closed: Cell::new(false),
            capacity: self.capacity.clone(),
        });
        let (writer, reader) = (conn.clone(), conn.clone());
        let host = self.config.get_host();
        neverblock::spawn_named(&format!("pg shared writer {host}"), move || writer.write_loop());
        neverblock::spawn_named(&format!("pg shared reader {host}"), move || reader.read_loop(framed));
        self.conns.borrow_mut().push(conn.clone());
        drop(opening);
        Ok(conn)
    }
}

/// A connection being opened: counted until it is open, has failed, or its
/// fiber unwound; then fibers waiting for capacity look again.
struct Opening<'a>(&'a SharedConnections);

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        self.0.opening.set(self.0.opening.get() - 1);
        self.0.capacity.notify.notify_all();
    }
}

impl Drop for SharedConnections {
    /// Closes the shared connections: their fibers see the end of stream and finish.
    fn drop(&mut self) {
        for conn in self.conns.borrow().iter() {
            conn.fail(Error::Closed);
        }
    }
}

impl Conn {
    fn load(&self) -> usize {
        self.pending.borrow().len()
    }

    fn oldest(&self) -> Option<Instant> {
        self.pending.borrow().front().map(|request| request.queued_at)
    }

    /// Queues the request just appended as pending, and parks until its reply.
    fn send(&self, kind: Kind, parsed: Option<String>) -> Result<Outcome, Error> {
        let request = Rc::new(PendingRequest {
            kind,
            queued_at: Instant::now(),
            parsed,
            result: RefCell::new(None),
            done: Notify::new(),
        });
        self.pending.borrow_mut().push_back(request.clone());
        loop {
            if let Some(result) = request.result.borrow_mut().take() {
                return result;
            }
            // A timeout stops the wait; the reply, when it comes, is dropped.
            request.done.notified().map_err(|_| Error::Timeout)?;
        }
    }

    /// Sends what fibers appended, one write per wake-up.
    fn write_loop(&self) {
        let mut batch = BytesMut::with_capacity(8192);
        while !self.closed.get() {
            let empty = {
                let mut out = self.out.borrow_mut();
                std::mem::swap(&mut *out, &mut batch);
                batch.is_empty()
            };
            if empty {
                if self.wake_writer.notified().is_err() {
                    return;
                }
                continue;
            }
            if let Err(e) = self.socket.write_all(&batch) {
                return self.fail(Error::io(e));
            }
            batch.clear();
        }
    }

    /// Reads replies and hands each to its pending request, in order.
    fn read_loop(&self, mut framed: Framed) {
        let mut reply = Reply::default();
        let mut described = (Vec::new(), Vec::new());
        let mut error: Option<DbError> = None;
        loop {
            let message = match framed.next_message() {
                Ok(message) => message,
                Err(e) => return self.fail(e),
            };
            match message {
                Message::DataRow(body) => {
                    let pending = self.pending.borrow();
                    if let (Some(Kind::Query(columns)), None) = (pending.front().map(|s| &s.kind), &error) {
                        match Row::new(reply.columns.as_ref().unwrap_or(columns).clone(), body) {
                            Ok(row) => reply.rows.push(row),
                            Err(e) => {
                                drop(pending);
                                return self.fail(e);
                            }
                        }
                    }
                }
                Message::CommandComplete(body) => reply.affected = body.tag().map(affected).unwrap_or(0),
                Message::ParameterDescription(body) => match describe_params(&body) {
                    Ok(params) => described.0 = params,
                    Err(e) => return self.fail(e),
                },
                Message::RowDescription(body) => {
                    let pending = self.pending.borrow();
                    let read = match pending.front().map(|s| &s.kind) {
                        // An unnamed statement's portal: its columns, where they changed.
                        Some(Kind::Query(expected)) => {
                            statement::fresh_columns(&body, expected).map(|c| reply.columns = c)
                        }
                        _ => describe_columns(&body).map(|c| described.1 = c),
                    };
                    drop(pending);
                    if let Err(e) = read {
                        return self.fail(e);
                    }
                }
                Message::ErrorResponse(body) => {
                    if let Err(fatal) = defer_error(&body, &mut error) {
                        return self.fail(fatal);
                    }
                }
                Message::ReadyForQuery(_) => {
                    let Some(request) = self.pending.borrow_mut().pop_front() else {
                        return self.fail(Error::protocol("a reply nobody asked for"));
                    };
                    let result = match (error.take(), &request.kind) {
                        (Some(db), _) => {
                            if let Some(name) = &request.parsed {
                                self.prepared.borrow_mut().remove(name);
                            }
                            Err(Error::Db(Box::new(db)))
                        }
                        (None, Kind::Query(_)) => Ok(Outcome::Rows(std::mem::take(&mut reply))),
                        (None, Kind::Describe) => {
                            Ok(Outcome::Described(std::mem::take(&mut described.0), std::mem::take(&mut described.1)))
                        }
                    };
                    reply = Reply::default();
                    *request.result.borrow_mut() = Some(result);
                    request.done.notify_one();
                    if self.capacity.waiting.get() > 0 {
                        self.capacity.notify.notify_one();
                    }
                }
                Message::NoticeResponse(body) => crate::conn::log_notice(body.fields()),
                _ => {}
            }
        }
    }

    /// Closes the connection: the first waiting fiber gets `error`, the others `Closed`.
    fn fail(&self, error: Error) {
        if self.closed.replace(true) {
            return;
        }
        log::debug!("shared postgres connection closed: {error}");
        self.capacity.conn_closed.set(true);
        self.socket.shutdown();
        self.wake_writer.notify_one();
        let pending: Vec<Rc<PendingRequest>> = self.pending.borrow_mut().drain(..).collect();
        let mut error = Some(error);
        for request in pending {
            *request.result.borrow_mut() = Some(Err(error.take().unwrap_or(Error::Closed)));
            request.done.notify_one();
        }
        self.capacity.notify.notify_all();
    }
}
