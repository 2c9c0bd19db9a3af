//! Which statements a connection (or a pool's shared connections) keeps by
//! query text: at most a count and a total of SQL text, the least recently
//! used given up first.

use std::collections::HashMap;
use std::sync::Arc;

use super::Statement;

/// How many statements a connection keeps prepared unless
/// [`Config::statement_cache_capacity`](crate::Config::statement_cache_capacity)
/// says otherwise; also how many descriptions it keeps with the cache off.
pub(crate) const DEFAULT_CAPACITY: usize = 256;

/// The most SQL text one cache keeps, in bytes: 1 MiB.
///
/// The count alone does not bound memory: 256 distinct 1 MiB texts hold
/// 256 MiB in the client, and the server keeps each prepared statement's parse
/// and plan trees beside its text, about five times the text (1.3 GiB in that
/// backend). 1 MiB fits 256 statements of 4 KiB each, several times an ordinary
/// query's length, so for ordinary applications the count is what binds; and a
/// backend then spends about 5 MiB on this connection's statements, the order
/// of PostgreSQL's default `work_mem` (4 MiB). A text longer than this is
/// never kept: it runs as the unnamed statement, described first.
pub(crate) const MAX_BYTES: usize = 1 << 20;

/// Statements by query text. With a capacity of 0 it prepares nothing on the
/// server and keeps the descriptions of unnamed statements instead (up to
/// [`DEFAULT_CAPACITY`]), so their rows can be read without describing them again.
#[derive(Debug)]
pub(crate) struct Cache {
    entries: HashMap<Arc<str>, Entry>,
    /// The most entries; the cache is off (descriptions only) when `prepares` is false.
    capacity: usize,
    prepares: bool,
    /// The SQL text held, in bytes: at most [`MAX_BYTES`].
    bytes: usize,
    /// Ticks at each use: an entry's `used` says how recently it served.
    clock: u64,
    /// The prefix of this cache's statement names, and how many it has named.
    prefix: &'static str,
    named: u64,
}

#[derive(Debug)]
struct Entry {
    used: u64,
    statement: Statement,
}

impl Cache {
    /// A cache of `capacity` named statements (0: off), named `<prefix>1`, `<prefix>2`, ….
    pub(crate) fn new(capacity: usize, prefix: &'static str) -> Cache {
        let prepares = capacity > 0;
        Cache {
            entries: HashMap::new(),
            capacity: if prepares { capacity } else { DEFAULT_CAPACITY },
            prepares,
            bytes: 0,
            clock: 0,
            prefix,
            named: 0,
        }
    }

    /// Whether `sql` is to be prepared under a name of its own and kept: the
    /// cache is on and the text fits in it. Else it runs as the unnamed statement.
    pub(crate) fn prepares(&self, sql: &str) -> bool {
        self.prepares && sql.len() <= MAX_BYTES
    }

    /// The statement kept for `sql`, now the most recently used.
    pub(crate) fn get(&mut self, sql: &str) -> Option<Statement> {
        let entry = self.entries.get_mut(sql)?;
        self.clock += 1;
        entry.used = self.clock;
        Some(entry.statement.clone())
    }

    /// Whether `statement` is still the one kept for its text.
    pub(crate) fn holds(&self, statement: &Statement) -> bool {
        self.entries.get(&**statement.sql()).is_some_and(|e| e.statement.same(statement))
    }

    /// A fresh statement name.
    pub(crate) fn next_name(&mut self) -> String {
        self.named += 1;
        format!("{}{}", self.prefix, self.named)
    }

    /// Keeps `statement` for its text (unless the text alone is over the byte
    /// bound); returns what it displaced or evicted to make room, least
    /// recently used first: named ones are to be closed on the server.
    pub(crate) fn insert(&mut self, statement: Statement) -> Vec<Statement> {
        let sql = statement.sql().clone();
        let mut gone: Vec<Statement> = self.remove(&sql).into_iter().collect();
        if sql.len() > MAX_BYTES {
            gone.push(statement);
            return gone;
        }
        while self.entries.len() >= self.capacity || self.bytes + sql.len() > MAX_BYTES {
            let Some(oldest) = self.entries.iter().min_by_key(|(_, e)| e.used).map(|(k, _)| k.clone()) else {
                break;
            };
            gone.extend(self.remove(&oldest));
        }
        self.clock += 1;
        self.bytes += sql.len();
        self.entries.insert(sql, Entry { used: self.clock, statement });
        gone
    }

    /// Forgets `sql`'s statement (its plan went stale, or its result changed shape).
    pub(crate) fn remove(&mut self, sql: &str) -> Option<Statement> {
        let entry = self.entries.remove(sql)?;
        self.bytes -= sql.len();
        Some(entry.statement)
    }

    /// Forgets every statement (the server lost them), returning them to be closed.
    pub(crate) fn clear(&mut self) -> Vec<Statement> {
        self.bytes = 0;
        self.entries.drain().map(|(_, e)| e.statement).collect()
    }

    /// How many statements (or, with the cache off, descriptions) are kept.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests;
