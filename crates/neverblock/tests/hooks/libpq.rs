//! libpq, a C library that waits in `poll(2)`, on fibers through `pq-sys`, against
//! a throwaway PostgreSQL.

use std::ffi::{CStr, CString};
use std::sync::OnceLock;
use std::time::Instant;

use neverblock_pg::throwaway::Postgres;

use crate::support::{overlapped, DELAY, FIBERS};

/// The binary's server, started outside any runtime (its start-up blocks the thread).
fn postgres() -> &'static Postgres {
    static POSTGRES: OnceLock<Postgres> = OnceLock::new();
    POSTGRES.get_or_init(|| Postgres::start().unwrap_or_else(|e| panic!("cannot start a throwaway PostgreSQL: {e}")))
}

/// One libpq connection, in libpq's blocking API.
struct Pq(*mut pq_sys::PGconn);

impl Pq {
    fn connect(url: &str) -> Pq {
        let url = CString::new(url).unwrap();
        // SAFETY: a NUL-terminated string; the connection is finished by Drop, even a failed one.
        let conn = Pq(unsafe { pq_sys::PQconnectdb(url.as_ptr()) });
        // SAFETY: a connection PQconnectdb returned.
        let status = unsafe { pq_sys::PQstatus(conn.0) };
        assert_eq!(status, pq_sys::ConnStatusType::CONNECTION_OK, "{}", conn.error());
        conn
    }

    /// The first value of the first row of `sql`'s answer, as text.
    fn query_one(&self, sql: &str) -> String {
        let sql = CString::new(sql).unwrap();
        // SAFETY: a live connection and a NUL-terminated query; the result is cleared below.
        let result = unsafe { pq_sys::PQexec(self.0, sql.as_ptr()) };
        // SAFETY: a result PQexec returned (null only when out of memory, which PQresultStatus reports).
        let status = unsafe { pq_sys::PQresultStatus(result) };
        assert_eq!(status, pq_sys::ExecStatusType::PGRES_TUPLES_OK, "{}", self.error());
        // SAFETY: a result with a row and a column: its value is a NUL-terminated string it owns.
        let value = unsafe { CStr::from_ptr(pq_sys::PQgetvalue(result, 0, 0)) }.to_string_lossy().into_owned();
        // SAFETY: the result, cleared once; `value` is a copy.
        unsafe { pq_sys::PQclear(result) };
        value
    }

    fn error(&self) -> String {
        // SAFETY: the connection's message, a NUL-terminated string it owns.
        unsafe { CStr::from_ptr(pq_sys::PQerrorMessage(self.0)) }.to_string_lossy().into_owned()
    }
}

impl Drop for Pq {
    fn drop(&mut self) {
        // SAFETY: the connection, finished once.
        unsafe { pq_sys::PQfinish(self.0) }
    }
}

#[test]
fn libpq_queries_on_fibers_of_one_loop_overlap() {
    let url = postgres().url();
    let elapsed = neverblock::run(move || {
        let connecting: Vec<_> = (0..FIBERS)
            .map(|_| {
                let url = url.clone();
                neverblock::spawn(move || Pq::connect(&url))
            })
            .collect();
        let conns: Vec<Pq> = connecting.into_iter().map(|c| c.join().unwrap()).collect();
        let start = Instant::now();
        let sql = format!("select 'slept' from pg_sleep({})", DELAY.as_secs_f64());
        let queries: Vec<_> = conns
            .into_iter()
            .map(|conn| {
                let sql = sql.clone();
                neverblock::spawn(move || conn.query_one(&sql))
            })
            .collect();
        for query in queries {
            assert_eq!(query.join().unwrap(), "slept");
        }
        start.elapsed()
    });
    assert!(overlapped(elapsed), "{FIBERS} pg_sleep({DELAY:?}) through libpq took {elapsed:?}");
}
