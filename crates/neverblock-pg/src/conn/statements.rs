//! The statement cache at work on one connection: the statement for a query
//! text (found, prepared under a name, or described to run unnamed), the Close
//! of each one the cache gives up, and what a run's reply teaches it: a
//! portal's fresh description, a stale plan, a statement the server lost.

use bytes::BytesMut;
use postgres_protocol::message::frontend;

use super::{encode_prepare, Connection, Reply};
use crate::statement::{self, Statement};
use crate::Error;

impl Connection {
    /// The cached statement for `sql`. On a miss one round trip (Parse +
    /// Describe + Sync) prepares it under a new name, or, when the cache is off
    /// or the text is over its byte bound, describes it as the unnamed statement.
    pub(crate) fn statement(&mut self, sql: &str) -> Result<Statement, Error> {
        if let Some(stmt) = self.statements.get(sql) {
            return Ok(stmt);
        }
        self.drain_unread_replies()?;
        let name = if self.statements.prepares(sql) { self.statements.next_name() } else { String::new() };
        encode_prepare(&mut self.out, &name, sql)?;
        self.unread_replies += 1;
        self.flush()?;
        let described = self.read_description();
        let (params, columns) = self.check(described)?;
        let stmt = Statement::new(name, sql, params, columns.into());
        self.keep(stmt.clone());
        Ok(stmt)
    }

    /// Caches `stmt`; the statements it displaces are closed.
    fn keep(&mut self, stmt: Statement) {
        let gone = self.statements.insert(stmt);
        self.close(&gone);
    }

    /// Queues a Close for each named statement of `gone`. It goes out in front
    /// of the next request, whose reply skips its CloseComplete: no round trip
    /// of its own. (Closing a statement the server no longer has is no error.)
    fn close(&mut self, gone: &[Statement]) {
        let out = self.held_closes.as_mut().unwrap_or(&mut self.out);
        for stmt in gone.iter().filter(|s| !s.is_unnamed()) {
            let _ = frontend::close(b'S', stmt.name(), out);
        }
    }

    /// Holds back the Closes of statements given up from now on, while a
    /// pipeline is queued: its queries, sent later, may name them.
    pub(crate) fn hold_closes(&mut self) {
        self.held_closes.get_or_insert_with(BytesMut::new);
    }

    /// Queues the held Closes, with a Sync of their own, behind what is queued
    /// (a pipeline's batch); their reply is read with the next call's.
    pub(crate) fn release_closes(&mut self) {
        let Some(held) = self.held_closes.take() else { return };
        if !held.is_empty() {
            self.out.extend_from_slice(&held);
            frontend::sync(&mut self.out);
            self.unread_replies += 1;
        }
    }

    /// Keeps the columns an unnamed statement's portal described, where they
    /// differ from its cached description, for the next run's Bind.
    pub(crate) fn learn(&mut self, stmt: &Statement, reply: Reply) -> Reply {
        if let Some(columns) = &reply.columns {
            if stmt.is_unnamed() && self.statements.holds(stmt) {
                self.keep(stmt.with_columns(columns));
            }
        }
        reply
    }

    /// After `stmt`'s run failed with `error`: forgets it when its description
    /// went stale (the next run describes it again), and every statement when the
    /// server lost one of them (a pooler, `DISCARD ALL`); a lost statement's error
    /// says what that means.
    pub(crate) fn forget(&mut self, stmt: &Statement, error: Error) -> Error {
        if statement::is_stale(&error) && self.statements.holds(stmt) {
            let gone: Vec<Statement> = self.statements.remove(stmt.sql()).into_iter().collect();
            self.close(&gone);
        } else if statement::is_lost(&error, stmt) {
            let gone = self.statements.clear();
            self.close(&gone);
        }
        statement::explain_lost(error, stmt)
    }
}
