//! libpq on fibers: `QUERIES` connections through libpq (`pq-sys`), then one
//! `select pg_sleep(SECONDS)` on each from a fiber of one loop, all at once;
//! prints the seconds the queries took. libpq waits in `poll(2)`, which the
//! `hooks` feature turns into a park of the calling fiber: about one sleep in all.
//! With `NEVERBLOCK_HOOKS=off` each query blocks the loop: one sleep each.
//!
//! ```text
//! cargo run --release --features hooks --example libpq_sleep -- postgres://postgres@127.0.0.1:5432/postgres 10 1
//! ```
//!
//! `neverblock bench libpq-sleep` runs it both ways.

use std::ffi::{CStr, CString};
use std::time::Instant;

/// One libpq connection, in libpq's blocking API.
struct Pq(*mut pq_sys::PGconn);

impl Pq {
    fn connect(url: &str) -> Result<Pq, String> {
        let url = CString::new(url).map_err(|e| e.to_string())?;
        // SAFETY: a NUL-terminated string; the connection is finished by Drop, even a failed one.
        let conn = Pq(unsafe { pq_sys::PQconnectdb(url.as_ptr()) });
        // SAFETY: a connection PQconnectdb returned.
        match unsafe { pq_sys::PQstatus(conn.0) } {
            pq_sys::ConnStatusType::CONNECTION_OK => Ok(conn),
            _ => Err(conn.error()),
        }
    }

    /// Runs `sql`, a query that returns rows.
    fn query(&self, sql: &CStr) -> Result<(), String> {
        // SAFETY: a live connection and a NUL-terminated query; the result is cleared below.
        let result = unsafe { pq_sys::PQexec(self.0, sql.as_ptr()) };
        // SAFETY: a result of PQexec (null only when out of memory, which PQresultStatus reports).
        let status = unsafe { pq_sys::PQresultStatus(result) };
        // SAFETY: the result, cleared once (PQclear takes null too).
        unsafe { pq_sys::PQclear(result) };
        match status {
            pq_sys::ExecStatusType::PGRES_TUPLES_OK => Ok(()),
            _ => Err(self.error()),
        }
    }

    fn error(&self) -> String {
        // SAFETY: the connection's message, a NUL-terminated string it owns.
        unsafe { CStr::from_ptr(pq_sys::PQerrorMessage(self.0)) }.to_string_lossy().trim().to_owned()
    }
}

impl Drop for Pq {
    fn drop(&mut self) {
        // SAFETY: the connection, finished once.
        unsafe { pq_sys::PQfinish(self.0) }
    }
}

fn main() -> Result<(), String> {
    let usage = "usage: libpq_sleep URL QUERIES SECONDS";
    let mut args = std::env::args().skip(1);
    let url = args.next().ok_or(usage)?;
    let queries: usize = args.next().and_then(|n| n.parse().ok()).ok_or(usage)?;
    let seconds: f64 = args.next().and_then(|s| s.parse().ok()).ok_or(usage)?;
    let sql = CString::new(format!("select pg_sleep({seconds})")).map_err(|e| e.to_string())?;
    let elapsed = neverblock::run(move || {
        let conns = (0..queries).map(|_| Pq::connect(&url)).collect::<Result<Vec<_>, _>>()?;
        let start = Instant::now();
        let fibers: Vec<_> = conns
            .into_iter()
            .map(|conn| {
                let sql = sql.clone();
                neverblock::spawn(move || conn.query(&sql))
            })
            .collect();
        for fiber in fibers {
            fiber.join().map_err(|e| e.to_string())??;
        }
        Ok::<_, String>(start.elapsed())
    })?;
    #[allow(clippy::print_stdout)] // the example's answer, which `bench libpq-sleep` reads
    {
        println!("{}", elapsed.as_secs_f64());
    }
    Ok(())
}
