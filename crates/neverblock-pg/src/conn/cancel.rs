//! Cancel requests: the backend's key, sent on a fresh socket, as libpq's
//! `PQcancel` does; and what a connection does when a query times out.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use neverblock::sync::WaitGroup;
use postgres_protocol::message::frontend;

use super::socket::TcpOrUnixStream;
use super::Connection;
use crate::config::Host;
use crate::Error;

/// How long a cancel request may take to be delivered before it is given up.
const CANCEL_DEADLINE: Duration = Duration::from_secs(10);

/// What identifies a session to the postmaster: its process id and secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CancelKey {
    pub(crate) process_id: i32,
    pub(crate) secret: i32,
}

/// Cancels whatever query its connection is running. `Send` and `Clone`: any
/// fiber or thread may use it.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// # neverblock::run(|| {
/// let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
/// let token = conn.cancel_token().unwrap();
/// neverblock::spawn(move || {
///     neverblock::sleep(Duration::from_millis(100));
///     token.cancel_query().unwrap();
/// });
/// let err = conn.query("select pg_sleep(60)", &[]).unwrap_err();
/// assert_eq!(err.code(), Some("57014"), "query_canceled");
/// assert_eq!(conn.query_one("select 1", &[]).unwrap().get::<i32>(0), 1);
/// # });
/// ```
#[derive(Clone, Debug)]
pub struct CancelToken {
    host: Host,
    key: CancelKey,
}

impl CancelToken {
    pub(crate) fn new(host: Host, key: CancelKey) -> CancelToken {
        CancelToken { host, key }
    }

    /// Asks the server to cancel the connection's running query, on a new
    /// connection, and waits until the server has taken the request. A
    /// connection that runs nothing is left alone.
    ///
    /// # Errors
    ///
    /// [`Error::Connect`] when the server cannot be reached; [`Error::Io`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # neverblock::run(|| {
    /// # let mut conn = neverblock_pg::connect("postgres://postgres@localhost/postgres").unwrap();
    /// let token = conn.cancel_token().unwrap();
    /// token.cancel_query().unwrap(); // nothing runs: nothing is cancelled
    /// # });
    /// ```
    pub fn cancel_query(&self) -> Result<(), Error> {
        let target = || self.host.to_string();
        let socket =
            TcpOrUnixStream::connect(&self.host).map_err(|source| Error::Connect { target: target(), source })?;
        let mut out = BytesMut::with_capacity(16);
        frontend::cancel_request(self.key.process_id, self.key.secret, &mut out);
        socket.write_all(&out).map_err(Error::io)?;
        // The server closes the socket once it has signalled the backend.
        let mut sink = [0u8; 64];
        loop {
            match socket.read(&mut sink) {
                Ok(0) => return Ok(()),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(()),
                Err(e) => return Err(Error::io(e)),
            }
        }
    }
}

impl Connection {
    /// Sends a cancel request for the query this connection awaits: from a new
    /// fiber inside a runtime (the caller's `timeout` has expired, so it may not
    /// wait), else right here. The next call waits for it before sending anything.
    pub(super) fn start_cancel(&self) -> Option<Arc<WaitGroup>> {
        let token = self.cancel_token()?;
        let in_flight = Arc::new(WaitGroup::new());
        in_flight.add(1);
        let landed = in_flight.clone();
        let send = move || {
            match neverblock::timeout(CANCEL_DEADLINE, || token.cancel_query()) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => log::warn!("postgres cancel request failed: {e}"),
                Err(_) => log::warn!("postgres cancel request took over {CANCEL_DEADLINE:?}; given up"),
            }
            landed.done();
        };
        // Outside a runtime nothing has expired: send it here.
        if neverblock::current_task_id().is_some() {
            neverblock::spawn_named("pg cancel request", send);
        } else {
            send();
        }
        Some(in_flight)
    }
}
