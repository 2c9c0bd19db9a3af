//! NeverBlock's fibered connection pool: connections opened lazily up to a
//! size, lent to one fiber at a time (FIFO when all are busy, under a checkout
//! timeout), checked before reuse and replaced when broken; optionally, some of
//! them shared by many fibers' pipelined short queries (`shared.rs`).
//!
//! **Which thread.** A pool belongs to the loop (thread) that made it: it is
//! `!Send`, so the compiler refuses to move it elsewhere. With
//! `Builder::threads(n)`, make one pool per loop (each with its own
//! connections), for instance in a `thread_local!`:
//!
//! ```compile_fail
//! fn needs_send<T: Send>(_: T) {}
//! needs_send(neverblock_pg::Pool::new(neverblock_pg::Config::new(), 4));
//! ```

mod per_loop;
mod redial;
mod shared;

pub use per_loop::LoopPools;

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::rc::Rc;
use std::time::{Duration, Instant};

use neverblock::sync::Notify;

use crate::row::{exactly_one, Row};
use crate::types::ToSql;
use crate::{Config, Connection, Error};

/// How a [`Pool`] is sized and behaves.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use neverblock_pg::{Config, Pool};
///
/// let pool = Pool::builder(Config::new())
///     .max_size(20)
///     .shared(16) // 16 connections pipeline short queries, 4 are lent whole
///     .checkout_timeout(Duration::from_secs(5))
///     .build();
/// assert_eq!(pool.status().max_size, 20);
/// ```
#[derive(Clone, Debug)]
pub struct PoolBuilder {
    config: Config,
    max_size: usize,
    shared: usize,
    checkout_timeout: Duration,
    check_idle_after: Duration,
    max_in_flight: usize,
    stall_after: Duration,
}

impl PoolBuilder {
    /// At most `n` connections (at least 1; default 10).
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = neverblock_pg::Pool::builder(neverblock_pg::Config::new());
    /// assert_eq!(builder.max_size(4).build().status().max_size, 4);
    /// ```
    pub fn max_size(mut self, n: usize) -> PoolBuilder {
        self.max_size = n.max(1);
        self
    }

    /// Makes `n` of the connections shared (default 0): [`Pool::query`],
    /// [`Pool::query_one`] and [`Pool::execute`] then pipeline many fibers'
    /// queries on them, as tokio-postgres's clients share a connection, while
    /// [`Pool::get`] lends the other `max_size - n` whole.
    ///
    /// # Long queries in shared mode
    ///
    /// The server runs one connection's queries one after another, so a slow
    /// query holds those sent behind it on its connection. Three things bound
    /// that: a new query goes to the shared connection with the fewest queries
    /// in flight, passing over any whose oldest query has run longer than
    /// [`stall_after`](PoolBuilder::stall_after) while another can take it;
    /// at most [`max_in_flight`](PoolBuilder::max_in_flight) queries wait on
    /// one connection; and queries known to be long, and transactions, go
    /// through [`Pool::get`], whose connections never carry shared traffic. A
    /// fiber whose `timeout` expires stops waiting, but its shared query is not
    /// cancelled (a cancel request would hit whatever the connection runs then):
    /// its reply is dropped when it comes. Shared connections need a runtime.
    ///
    /// # Large results in shared mode
    ///
    /// Shared connections do not stream: each reply is read whole, so
    /// [`Pool::query`] holds all of its rows at once. Stream a large result on a
    /// lent connection instead, `pool.get()?.query_stream(sql, params)` (see
    /// [`Connection::query_stream`]), which needs a `max_size` above `n`.
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = neverblock_pg::Pool::builder(neverblock_pg::Config::new());
    /// let pool = builder.max_size(20).shared(16).build(); // 4 lent by get()
    /// ```
    pub fn shared(mut self, n: usize) -> PoolBuilder {
        self.shared = n;
        self
    }

    /// How long [`Pool::get`] waits for a connection before [`Error::PoolTimeout`] (default 30 s).
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = neverblock_pg::Pool::builder(neverblock_pg::Config::new());
    /// let pool = builder.checkout_timeout(std::time::Duration::from_millis(500)).build();
    /// ```
    pub fn checkout_timeout(mut self, timeout: Duration) -> PoolBuilder {
        self.checkout_timeout = timeout;
        self
    }

    /// Checks an idle connection for a close or an error the server sent while it
    /// was idle (one non-blocking peek) when it has been idle at least this long
    /// (default 0: every time).
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = neverblock_pg::Pool::builder(neverblock_pg::Config::new());
    /// let pool = builder.check_idle_after(std::time::Duration::from_secs(1)).build();
    /// ```
    pub fn check_idle_after(mut self, idle: Duration) -> PoolBuilder {
        self.check_idle_after = idle;
        self
    }

    /// Shared mode: at most this many queries in flight on one connection (default 64).
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = neverblock_pg::Pool::builder(neverblock_pg::Config::new());
    /// let pool = builder.shared(10).max_in_flight(16).build();
    /// ```
    pub fn max_in_flight(mut self, n: usize) -> PoolBuilder {
        self.max_in_flight = n.max(1);
        self
    }

    /// Shared mode: a connection whose oldest query has run this long is passed
    /// over by new queries while another is free (default 10 ms).
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = neverblock_pg::Pool::builder(neverblock_pg::Config::new());
    /// let pool = builder.shared(10).stall_after(std::time::Duration::from_millis(5)).build();
    /// ```
    pub fn stall_after(mut self, d: Duration) -> PoolBuilder {
        self.stall_after = d;
        self
    }

    /// The pool. Nothing connects until a fiber asks.
    ///
    /// # Panics
    ///
    /// When more connections are shared than the pool has.
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = neverblock_pg::Pool::builder(neverblock_pg::Config::new());
    /// assert_eq!(builder.build().status().open, 0, "nothing connects yet");
    /// ```
    pub fn build(self) -> Pool {
        assert!(self.shared <= self.max_size, "{} shared connections in a pool of {}", self.shared, self.max_size);
        let redial = Rc::new(redial::Redial::default());
        let shared = (self.shared > 0).then(|| shared::SharedConnections::new(&self, redial.clone()));
        Pool {
            inner: Rc::new(Inner {
                lent_size: self.max_size - self.shared,
                state: RefCell::new(State { idle: Vec::new(), open: 0, waiters: VecDeque::new() }),
                shared,
                redial,
                settings: self,
            }),
        }
    }
}

/// A pool of connections (NeverBlock's `FiberedConnectionPool`). Cheap to clone;
/// `!Send`: it and its connections belong to the loop that made it.
///
/// # Examples
///
/// ```no_run
/// use neverblock_pg::{Config, Pool};
///
/// neverblock::run(|| {
///     let pool = Pool::new(Config::parse("postgres://app@localhost/shop").unwrap(), 16);
///     let fibers: Vec<_> = (0..100)
///         .map(|i| {
///             let pool = pool.clone();
///             neverblock::spawn(move || pool.query_one("select $1::int8 * 2", &[&i]).map(|r| r.get::<i64>(0)))
///         })
///         .collect();
///     for (i, f) in fibers.into_iter().enumerate() {
///         assert_eq!(f.join().unwrap().unwrap(), i as i64 * 2);
///     }
/// });
/// ```
#[derive(Clone)]
pub struct Pool {
    inner: Rc<Inner>,
}

struct Inner {
    settings: PoolBuilder,
    /// Connections [`Pool::get`] may lend (`max_size - shared`).
    lent_size: usize,
    state: RefCell<State>,
    shared: Option<shared::SharedConnections>,
    /// When the lent and the shared connections may dial the server again.
    redial: Rc<redial::Redial>,
}

struct State {
    /// Idle connections, the most recently returned last (lent first: it is warm).
    idle: Vec<(Connection, Instant)>,
    /// Lent, idle or being opened.
    open: usize,
    /// Fibers waiting for a connection, first come first served.
    waiters: VecDeque<Rc<Waiter>>,
}

/// What a checkout gets a fiber, at once or handed to it in line. Moved once
/// per checkout, so the size difference costs less than a box would.
#[allow(clippy::large_enum_variant)]
enum Acquired {
    /// A connection: an idle one, or one just returned.
    Conn(Connection),
    /// A permit to open a new connection: fewer than the pool's size are open,
    /// or a connection closed and its permit passed on.
    Permit,
}

#[derive(Default)]
struct Waiter {
    /// What the fiber was handed, left here for it to take.
    handed: RefCell<Option<Acquired>>,
    notify: Notify,
    /// Taken out of the line (by the `hand` that filled `handed`).
    served: Cell<bool>,
}

/// What a pool holds now.
///
/// # Examples
///
/// ```
/// let status = neverblock_pg::Pool::new(neverblock_pg::Config::new(), 4).status();
/// assert_eq!((status.open, status.idle, status.waiting), (0, 0, 0), "opened lazily");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolStatus {
    /// The most connections it opens.
    pub max_size: usize,
    /// Connections open (lent, idle, being opened, or shared).
    pub open: usize,
    /// Connections idle, ready to lend.
    pub idle: usize,
    /// Fibers waiting for a connection.
    pub waiting: usize,
}

impl Pool {
    /// A pool of at most `max_size` connections to `config`, all lent whole.
    ///
    /// # Examples
    ///
    /// ```
    /// let pool = neverblock_pg::Pool::new(neverblock_pg::Config::new(), 16);
    /// assert_eq!(pool.status().max_size, 16);
    /// ```
    pub fn new(config: Config, max_size: usize) -> Pool {
        Pool::builder(config).max_size(max_size).build()
    }

    /// A builder, with the defaults (10 connections, none shared, 30 s checkout timeout).
    ///
    /// # Examples
    ///
    /// ```
    /// let pool = neverblock_pg::Pool::builder(neverblock_pg::Config::new()).max_size(2).build();
    /// assert_eq!(pool.status().max_size, 2);
    /// ```
    pub fn builder(config: Config) -> PoolBuilder {
        PoolBuilder {
            config,
            max_size: 10,
            shared: 0,
            checkout_timeout: Duration::from_secs(30),
            check_idle_after: Duration::ZERO,
            max_in_flight: 64,
            stall_after: Duration::from_millis(10),
        }
    }

    /// Lends a connection to this fiber until the guard is dropped: an idle one
    /// (checked first), a new one while fewer than the pool's size are open, or
    /// else the next one returned, in the order fibers asked.
    ///
    /// # Errors
    ///
    /// [`Error::PoolTimeout`] after the checkout timeout; [`Error::Timeout`] when
    /// a `timeout` around the call expires first; opening a connection's errors, or at
    /// once [`Error::Unavailable`] while the pool waits to try again after a failed one;
    /// [`Error::Usage`] when every connection is shared.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let pool = neverblock_pg::Pool::new(neverblock_pg::Config::new(), 4);
    /// let mut conn = pool.get().unwrap();
    /// let mut tx = conn.transaction().unwrap();
    /// tx.execute("update counters set n = n + 1", &[]).unwrap();
    /// tx.commit().unwrap();
    /// # });
    /// ```
    pub fn get(&self) -> Result<PooledConnection, Error> {
        if self.inner.lent_size == 0 {
            return Err(Error::Usage(
                "every connection of this pool is shared: give it a max_size above shared".into(),
            ));
        }
        let conn = match self.inner.acquire()? {
            Acquired::Conn(conn) => conn,
            Acquired::Permit => self.inner.open()?,
        };
        Ok(PooledConnection { conn: Some(conn), pool: self.inner.clone() })
    }

    /// Runs one query: pipelined on a shared connection if the pool has any,
    /// else on a connection lent for the query. Its rows come back all at once;
    /// to stream a large result, [`get`](Pool::get) a connection and call
    /// [`Connection::query_stream`].
    ///
    /// # Errors
    ///
    /// As [`get`](Pool::get) and [`Connection::query`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let pool = neverblock_pg::Pool::new(neverblock_pg::Config::new(), 4);
    /// let rows = pool.query("select $1::text", &[&"hi"]).unwrap();
    /// assert_eq!(rows[0].get::<&str>(0), "hi");
    /// # });
    /// ```
    pub fn query(&self, sql: &str, params: &[&dyn ToSql]) -> Result<Vec<Row>, Error> {
        match &self.inner.shared {
            Some(shared) => shared.run(sql, params).map(|reply| reply.rows),
            None => self.get()?.query(sql, params),
        }
    }

    /// Like [`query`](Pool::query), for exactly one row.
    ///
    /// # Errors
    ///
    /// As [`query`](Pool::query); [`Error::RowCount`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let pool = neverblock_pg::Pool::new(neverblock_pg::Config::new(), 4);
    /// assert_eq!(pool.query_one("select 1::int4", &[]).unwrap().get::<i32>(0), 1);
    /// # });
    /// ```
    pub fn query_one(&self, sql: &str, params: &[&dyn ToSql]) -> Result<Row, Error> {
        exactly_one(self.query(sql, params)?)
    }

    /// Runs one statement and returns how many rows it affected (see [`query`](Pool::query)).
    ///
    /// # Errors
    ///
    /// As [`query`](Pool::query).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let pool = neverblock_pg::Pool::new(neverblock_pg::Config::new(), 4);
    /// let n = pool.execute("delete from sessions where expires < now()", &[]).unwrap();
    /// # });
    /// ```
    pub fn execute(&self, sql: &str, params: &[&dyn ToSql]) -> Result<u64, Error> {
        match &self.inner.shared {
            Some(shared) => shared.run(sql, params).map(|reply| reply.affected),
            None => self.get()?.execute(sql, params),
        }
    }

    /// What the pool holds now.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(neverblock_pg::Pool::new(neverblock_pg::Config::new(), 3).status().open, 0);
    /// ```
    pub fn status(&self) -> PoolStatus {
        let state = self.inner.state.borrow();
        let shared = self.inner.shared.as_ref().map_or(0, shared::SharedConnections::open);
        PoolStatus {
            max_size: self.inner.settings.max_size,
            open: state.open + shared,
            idle: state.idle.len(),
            waiting: state.waiters.len(),
        }
    }
}

impl Inner {
    /// An idle connection, a permit to open one, or a wait in line for either.
    fn acquire(&self) -> Result<Acquired, Error> {
        {
            let mut state = self.state.borrow_mut();
            if state.waiters.is_empty() {
                while let Some((conn, since)) = state.idle.pop() {
                    if since.elapsed() < self.settings.check_idle_after || !conn.has_pending_input() {
                        return Ok(Acquired::Conn(conn));
                    }
                    // The server closed it or had something to say while it was idle (a
                    // terminated backend, a restart): replace it.
                    log::debug!("pooled connection closed while idle; replacing it");
                    state.open -= 1;
                }
                if state.open < self.lent_size {
                    state.open += 1;
                    return Ok(Acquired::Permit);
                }
            }
        }
        let queued = QueuedWaiter { pool: self, waiter: Rc::new(Waiter::default()) };
        self.state.borrow_mut().waiters.push_back(queued.waiter.clone());
        let wait = || loop {
            if let Some(acquired) = queued.waiter.handed.borrow_mut().take() {
                return Ok(acquired);
            }
            queued.waiter.notify.notified()?;
        };
        let waited = neverblock::timeout(self.settings.checkout_timeout, wait);
        if let Some(acquired) = queued.waiter.handed.borrow_mut().take() {
            return Ok(acquired);
        }
        match waited {
            Ok(Ok(acquired)) => Ok(acquired),
            Ok(Err(neverblock::Elapsed)) => Err(Error::Timeout),
            Err(neverblock::Elapsed) => Err(Error::PoolTimeout),
        }
    }

    /// Opens a connection under a permit this fiber holds; gives the permit up
    /// if it fails (or the fiber unwinds meanwhile).
    fn open(&self) -> Result<Connection, Error> {
        let mut permit = Permit { pool: self, held: true };
        let conn = self.redial.dial(|| Connection::connect(&self.settings.config))?;
        permit.held = false;
        Ok(conn)
    }

    /// A connection closed (or failed to open): its permit goes to the first
    /// waiter, else is freed.
    fn release_permit(&self) {
        let mut state = self.state.borrow_mut();
        match state.waiters.pop_front() {
            Some(w) => hand(&w, Acquired::Permit),
            None => state.open -= 1,
        }
    }

    /// A clean connection back: to the first waiter, else to the idle list.
    fn put(&self, conn: Connection) {
        let mut state = self.state.borrow_mut();
        match state.waiters.pop_front() {
            Some(w) => hand(&w, Acquired::Conn(conn)),
            None => state.idle.push((conn, Instant::now())),
        }
    }

    /// A connection returned by its fiber: kept when clean; cleaned first (in a
    /// fiber of its own, as its owner may be out of time) when replies are unread
    /// or a transaction is open; replaced when broken.
    fn give_back(self: &Rc<Inner>, mut conn: Connection) {
        if conn.is_broken() {
            drop(conn);
            return self.release_permit();
        }
        if conn.is_clean() {
            return self.put(conn);
        }
        let pool = self.clone();
        let clean = move || match clean_for_reuse(&mut conn) {
            Ok(()) => pool.put(conn),
            Err(e) => {
                log::debug!("pooled connection dropped: {e}");
                drop(conn);
                pool.release_permit();
            }
        };
        // Outside a runtime nothing expires, so cleaning here is fine.
        if neverblock::current_task_id().is_some() {
            neverblock::spawn_named(&format!("pg cleaner {}", self.settings.config.get_host()), clean);
        } else {
            clean();
        }
    }
}

/// Drains unread replies and ends an open transaction, so the next borrower
/// finds the connection as new.
fn clean_for_reuse(conn: &mut Connection) -> Result<(), Error> {
    conn.drain_unread_replies()?;
    if !conn.is_clean() {
        conn.batch_execute("ROLLBACK")?;
    }
    Ok(())
}

/// A waiter in the pool's line: it leaves the line when dropped, also when the
/// fiber unwinds (a cancellation), passing on whatever it was handed meanwhile.
struct QueuedWaiter<'a> {
    pool: &'a Inner,
    waiter: Rc<Waiter>,
}

impl Drop for QueuedWaiter<'_> {
    fn drop(&mut self) {
        if !self.waiter.served.get() {
            self.pool.state.borrow_mut().waiters.retain(|w| !Rc::ptr_eq(w, &self.waiter));
        }
        let handed = self.waiter.handed.borrow_mut().take();
        match handed {
            Some(Acquired::Conn(conn)) => self.pool.put(conn),
            Some(Acquired::Permit) => self.pool.release_permit(),
            None => {}
        }
    }
}

/// A permit held while its connection is being opened; released when dropped
/// still held (connecting failed, or the fiber unwound).
struct Permit<'a> {
    pool: &'a Inner,
    held: bool,
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if self.held {
            self.pool.release_permit();
        }
    }
}

/// Leaves `acquired` for `waiter`, just taken out of the line, and wakes it.
fn hand(waiter: &Waiter, acquired: Acquired) {
    waiter.served.set(true);
    *waiter.handed.borrow_mut() = Some(acquired);
    waiter.notify.notify_one();
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool").field("status", &self.status()).finish_non_exhaustive()
    }
}

/// A connection lent by a [`Pool`]; it derefs to the [`Connection`] and goes
/// back when dropped (replaced if it broke, cleaned first if replies are unread).
///
/// # Examples
///
/// ```no_run
/// # neverblock::run(|| {
/// # let pool = neverblock_pg::Pool::new(neverblock_pg::Config::new(), 4);
/// let mut conn = pool.get().unwrap();
/// conn.batch_execute("set statement_timeout = '5s'").unwrap();
/// drop(conn); // back to the pool
/// # });
/// ```
pub struct PooledConnection {
    conn: Option<Connection>,
    pool: Rc<Inner>,
}

impl Deref for PooledConnection {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn.as_ref().expect("present until dropped")
    }
}

impl DerefMut for PooledConnection {
    fn deref_mut(&mut self) -> &mut Connection {
        self.conn.as_mut().expect("present until dropped")
    }
}

impl Drop for PooledConnection {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.pool.give_back(conn);
        }
    }
}

impl fmt::Debug for PooledConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("PooledConnection").field(&self.conn).finish()
    }
}
