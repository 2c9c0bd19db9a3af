//! A query whose fiber's timeout expires is cancelled on the server, and its
//! connection drains to `ReadyForQuery` and goes on.

use std::time::Duration;

use neverblock_pg::{Connection, Error, Pool};

use crate::support::{admin, config, run, unique};

/// A table and a function that sleeps `secs`, then inserts a row: the row
/// exists only if the sleep ran to its end.
fn slow_insert(conn: &mut Connection) -> (String, String) {
    let table = unique("cancelled");
    let function = format!("{table}_fn");
    conn.batch_execute(&format!(
        "create table {table} (n int4);
         create function {function}(secs float8) returns int4 language plpgsql as
         $$ begin perform pg_sleep(secs); insert into {table} values (1); return 1; end $$"
    ))
    .unwrap();
    (table, function)
}

fn state_of(admin: &mut Connection, pid: i32) -> String {
    admin.query_one("select state from pg_stat_activity where pid = $1", &[&pid]).unwrap().get(0)
}

fn rows_in(admin: &mut Connection, table: &str) -> i64 {
    admin.query_one(&format!("select count(*) from {table}"), &[]).unwrap().get(0)
}

#[test]
fn a_timed_out_query_is_cancelled_on_the_server_and_the_connection_goes_on() {
    run(|| {
        let mut watcher = admin();
        let mut conn = admin();
        let (table, function) = slow_insert(&mut conn);
        let pid = conn.backend_pid().unwrap();
        let call = format!("select {function}(30)");
        let timed_out = neverblock::timeout(Duration::from_millis(300), || conn.query(&call, &[]));
        assert!(matches!(timed_out, Ok(Err(Error::Timeout)) | Err(_)), "{timed_out:?}");
        // The next call waits for the cancel to land and drains the reply: it does not
        // wait out the 30-second sleep (the test's one-minute hang guard would fire).
        assert_eq!(conn.query_one("select 5::int4", &[]).unwrap().get::<i32>(0), 5);
        assert_eq!(state_of(&mut watcher, pid), "idle");
        assert_eq!(rows_in(&mut watcher, &table), 0, "the function never got past its sleep");
        assert!(!conn.is_broken());
        watcher.batch_execute(&format!("drop function {function}; drop table {table}")).unwrap();
    });
}

#[test]
fn a_read_timeout_cancels_like_a_timeout() {
    run(|| {
        let mut conn = Connection::connect(&config().read_timeout(Duration::from_millis(200))).unwrap();
        let err = conn.query("select pg_sleep(30)", &[]).unwrap_err();
        assert!(matches!(err, Error::Timeout), "{err}");
        assert_eq!(conn.query_one("select 6::int4", &[]).unwrap().get::<i32>(0), 6);
    });
}

#[test]
fn a_cancel_token_cancels_the_running_query_from_another_fiber() {
    run(|| {
        let mut conn = admin();
        let pid = conn.backend_pid().unwrap();
        let token = conn.cancel_token().unwrap();
        let canceller = neverblock::spawn(move || {
            let mut watcher = admin();
            // Cancel once the query runs (a cancel before it starts would be ignored).
            while state_of(&mut watcher, pid) != "active" {
                neverblock::sleep(Duration::from_millis(5));
            }
            token.cancel_query()
        });
        let err = conn.query("select pg_sleep(30)", &[]).unwrap_err();
        assert_eq!(err.code(), Some("57014"), "query_canceled: {err}");
        canceller.join().unwrap().unwrap();
        assert_eq!(conn.query_one("select 8::int4", &[]).unwrap().get::<i32>(0), 8);
    });
}

#[test]
fn a_pooled_connection_that_timed_out_is_cleaned_and_lent_again() {
    run(|| {
        let pool = Pool::new(config(), 1);
        let mut watcher = admin();
        let pid = {
            let mut conn = pool.get().unwrap();
            let pid = conn.backend_pid().unwrap();
            let timed_out = neverblock::timeout(Duration::from_millis(200), || conn.query("select pg_sleep(30)", &[]));
            assert!(!matches!(timed_out, Ok(Ok(_))));
            pid
        };
        let mut conn = pool.get().unwrap();
        assert_eq!(conn.backend_pid(), Some(pid), "the same connection, not a replacement");
        assert_eq!(conn.query_one("select 9::int4", &[]).unwrap().get::<i32>(0), 9);
        let last: String =
            watcher.query_one("select query from pg_stat_activity where pid = $1", &[&pid]).unwrap().get(0);
        assert_eq!(
            (state_of(&mut watcher, pid).as_str(), last.as_str()),
            ("idle", "select 9::int4"),
            "the sleep is gone"
        );
    });
}
