//! Rows streamed: in order and complete across batches, dropped part-way
//! without reading the rest, ended by a server error or a timeout after the rows
//! before it; in a transaction and on a pooled connection. (The memory a stream
//! takes is measured by its own binary, `tests/stream_memory.rs`.)

use std::time::Duration;

use neverblock_pg::{Connection, Error, Pool, TransactionStatus};

use crate::support::{admin, config, run, unique};

/// Reads `stream` to its end: the first column of each row (an `int4`), and the error that ended it.
fn read_to_end(stream: impl Iterator<Item = Result<neverblock_pg::Row, Error>>) -> (Vec<i32>, Option<Error>) {
    let mut values = Vec::new();
    for row in stream {
        match row {
            Ok(row) => values.push(row.get(0)),
            Err(e) => return (values, Some(e)),
        }
    }
    (values, None)
}

/// The connection answers its next call, from a clean state.
fn assert_ready(conn: &mut Connection) {
    assert_eq!(conn.query_one("select 7::int4", &[]).unwrap().get::<i32>(0), 7);
    assert!(!conn.is_broken());
}

/// The first batch arrives; row 5000, in the second, sleeps for a minute.
const SLOW: &str = "select g, case when g = 5000 then pg_sleep(60) end from generate_series(1, 10000) g";

fn state_of(watcher: &mut Connection, pid: i32) -> String {
    watcher.query_one("select state from pg_stat_activity where pid = $1", &[&pid]).unwrap().get(0)
}

#[test]
fn rows_arrive_in_order_and_every_one_of_them() {
    run(|| {
        let mut conn = admin();
        // Several batches (a few thousand rows each) and the ends of the range.
        for n in [0, 1, 4095, 4096, 4097, 20_000] {
            let stream = conn.query_stream("select g, 'row ' || g from generate_series(1, $1) g", &[&n]).unwrap();
            let mut seen = 0;
            for row in stream {
                let row = row.unwrap();
                seen += 1;
                assert_eq!((row.get::<i32>(0), row.get::<String>(1)), (seen, format!("row {seen}")));
            }
            assert_eq!(seen, n);
        }
        assert_ready(&mut conn);
    });
}

#[test]
fn a_stream_uses_the_statement_cache_and_the_rows_of_query() {
    run(|| {
        let mut conn = admin();
        let text = format!("select $1::int8 as n, 'x'::text as {}", unique("label"));
        let streamed: Vec<_> = conn.query_stream(&text, &[&5i64]).unwrap().map(Result::unwrap).collect();
        let queried = conn.query(&text, &[&5i64]).unwrap();
        assert_eq!(streamed[0].columns(), queried[0].columns());
        assert_eq!((streamed[0].get::<i64>("n"), streamed[0].get::<&str>(1)), (5, "x"));
        let stream = conn.query_stream(&text, &[&6i64]).unwrap();
        assert_eq!(stream.columns(), queried[0].columns(), "the columns are known before the first row");
        drop(stream);
        let prepared: i64 = conn
            .query_one("select count(*) from pg_prepared_statements where statement = $1", &[&text])
            .unwrap()
            .get(0);
        assert_eq!(prepared, 1, "prepared once for both");
    });
}

#[test]
fn a_stream_dropped_part_way_leaves_the_connection_ready_without_the_rest() {
    run(|| {
        let mut conn = admin();
        let mut watcher = admin();
        let pid = conn.backend_pid().unwrap();
        // A billion rows, produced as they are asked for: reading them all would take
        // minutes (the test's one-minute hang guard would fire).
        let mut stream = conn.query_stream("select generate_series(1, 1000000000)", &[]).unwrap();
        let first: Vec<i32> = stream.by_ref().take(3).map(|row| row.unwrap().get(0)).collect();
        assert_eq!(first, [1, 2, 3]);
        drop(stream);
        assert_eq!(state_of(&mut watcher, pid), "idle", "the query is over on the server");
        assert_eq!(conn.transaction_status(), TransactionStatus::Idle);
        assert_ready(&mut conn);
    });
}

#[test]
fn a_forgotten_stream_is_ended_by_the_next_call() {
    run(|| {
        let mut conn = admin();
        let mut stream = conn.query_stream("select generate_series(1, 1000000000)", &[]).unwrap();
        assert!(stream.next().unwrap().is_ok());
        std::mem::forget(stream);
        assert_ready(&mut conn);
    });
}

#[test]
fn a_server_error_part_way_comes_after_the_rows_before_it() {
    run(|| {
        let mut conn = admin();
        // The division by zero at g = 1000 (first batch) and at g = 5000 (second batch).
        for (sql, rows_before) in [
            ("select 1/(g-1000) from generate_series(1, 2000) g", 999),
            ("select 1/(g-5000) from generate_series(1, 10000) g", 4999),
        ] {
            let mut stream = conn.query_stream(sql, &[]).unwrap();
            let (values, error) = read_to_end(stream.by_ref());
            assert_eq!(values.len(), rows_before, "{sql}");
            assert_eq!(values.last(), Some(&-1), "1/(-1), the row before the error");
            assert_eq!(error.and_then(|e| e.code().map(str::to_owned)).as_deref(), Some("22012"), "{sql}");
            assert!(stream.next().is_none(), "the error ends the stream");
            drop(stream);
            assert_eq!(conn.transaction_status(), TransactionStatus::Idle);
            assert_ready(&mut conn);
        }
    });
}

#[test]
fn a_stream_in_a_transaction_sees_its_writes_and_the_transaction_goes_on() {
    run(|| {
        let mut conn = admin();
        let table = unique("streamed");
        conn.batch_execute(&format!("create table {table} (n int4)")).unwrap();
        let mut tx = conn.transaction().unwrap();
        tx.execute(&format!("insert into {table} select generate_series(1, 10000)"), &[]).unwrap();
        let select = format!("select n from {table} order by n");
        let (values, error) = read_to_end(tx.query_stream(&select, &[]).unwrap());
        assert_eq!((values.len(), values.last(), error.is_none()), (10_000, Some(&10_000), true));
        let first = tx.query_stream(&select, &[]).unwrap().next().unwrap().unwrap();
        assert_eq!(first.get::<i32>(0), 1);
        assert_eq!(tx.transaction_status(), TransactionStatus::InTransaction, "a drop part-way ends the query alone");
        tx.execute(&format!("delete from {table} where n > 10"), &[]).unwrap();
        tx.commit().unwrap();
        let n: i64 = conn.query_one(&format!("select count(*) from {table}"), &[]).unwrap().get(0);
        assert_eq!(n, 10);

        // An error part-way fails the transaction, as any failing statement does.
        let mut tx = conn.transaction().unwrap();
        let (values, error) = read_to_end(tx.query_stream(&format!("select 1/(n-5) from {table}"), &[]).unwrap());
        assert_eq!((values.len(), error.unwrap().code()), (4, Some("22012")));
        assert_eq!(tx.transaction_status(), TransactionStatus::Failed);
        assert!(matches!(tx.commit(), Err(Error::Usage(_))), "rolled back, not committed");
        assert_ready(&mut conn);
        conn.batch_execute(&format!("drop table {table}")).unwrap();
    });
}

#[test]
fn a_stream_runs_on_a_pooled_connection_which_goes_back_clean() {
    run(|| {
        let pool = Pool::new(config(), 1);
        let pid = {
            let mut conn = pool.get().unwrap();
            let (values, error) = read_to_end(conn.query_stream("select generate_series(1, 10000)", &[]).unwrap());
            assert_eq!((values.len(), error.is_none()), (10_000, true));
            let mut part_way = conn.query_stream("select generate_series(1, 1000000000)", &[]).unwrap();
            assert!(part_way.next().unwrap().is_ok());
            drop(part_way);
            let mut forgotten = conn.query_stream("select generate_series(1, 1000000000)", &[]).unwrap();
            assert!(forgotten.next().unwrap().is_ok());
            std::mem::forget(forgotten); // the pool cleans it: Close + Sync, the batch in flight read
            conn.backend_pid().unwrap()
        };
        let mut conn = pool.get().unwrap();
        assert_eq!(conn.backend_pid(), Some(pid), "the same connection, not a replacement");
        assert_ready(&mut conn);
    });
}

#[test]
fn a_timed_out_stream_is_cancelled_on_the_server_and_the_connection_goes_on() {
    run(|| {
        let mut conn = admin();
        let mut watcher = admin();
        let pid = conn.backend_pid().unwrap();
        let (mut values, mut error) = (Vec::new(), None);
        let timed_out = neverblock::timeout(Duration::from_secs(1), || {
            (values, error) = read_to_end(conn.query_stream(SLOW, &[]).unwrap());
        });
        assert!(timed_out.is_err(), "the deadline passed inside the stream");
        assert!(matches!(error, Some(Error::Timeout)), "{error:?}");
        assert!(values.len() >= 4096 && values.len() < 5000, "{} rows before the timeout", values.len());
        assert!(values.iter().copied().eq(1..=values.len() as i32), "in order");
        // The next call waits for the cancel to land and drains the reply, not the sleep.
        assert_ready(&mut conn);
        assert_eq!(state_of(&mut watcher, pid), "idle");
    });
}

#[test]
fn a_read_timeout_ends_a_stream_like_a_timeout() {
    run(|| {
        let mut conn = Connection::connect(&config().read_timeout(Duration::from_millis(300))).unwrap();
        let (values, error) = read_to_end(conn.query_stream(SLOW, &[]).unwrap());
        assert!(matches!(error, Some(Error::Timeout)), "{error:?}");
        assert!(values.len() >= 4096 && values.len() < 5000, "{} rows before the timeout", values.len());
        assert_ready(&mut conn);
    });
}

#[test]
fn a_statement_timeout_ends_a_stream_with_the_servers_error() {
    run(|| {
        let mut conn = admin();
        conn.batch_execute("set statement_timeout = '300ms'").unwrap();
        let (values, error) = read_to_end(conn.query_stream(SLOW, &[]).unwrap());
        assert_eq!(error.and_then(|e| e.code().map(str::to_owned)).as_deref(), Some("57014"), "query_canceled");
        assert!(values.len() >= 4096 && values.len() < 5000, "{} rows before the error", values.len());
        assert_ready(&mut conn);
    });
}

#[test]
fn with_the_statement_cache_off_a_stream_reads_its_portals_description() {
    run(|| {
        let mut conn = Connection::connect(&config().statement_cache_capacity(0)).unwrap();
        let table = unique("stream_uncached");
        conn.batch_execute(&format!(
            "create table {table} (v int4); insert into {table} select generate_series(1, 5000)"
        ))
        .unwrap();
        let sql = format!("select v from {table} order by v");
        let (values, error) = read_to_end(conn.query_stream(&sql, &[]).unwrap());
        assert!(error.is_none(), "{error:?}");
        assert_eq!(values, (1..=5000).collect::<Vec<_>>());
        // The column changes type: the cached description is stale, the portal's is not.
        conn.batch_execute(&format!("alter table {table} alter v type text")).unwrap();
        let texts: Vec<String> = conn.query_stream(&sql, &[]).unwrap().take(2).map(|r| r.unwrap().get(0)).collect();
        assert_eq!(texts, ["1", "10"], "ordered as text now");
        assert_ready(&mut conn);
        let named: i64 = conn.query_one("select count(*) from pg_prepared_statements", &[]).unwrap().get(0);
        assert_eq!(named, 0, "nothing stays prepared");
    });
}
