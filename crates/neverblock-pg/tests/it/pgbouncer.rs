//! Through PgBouncer in transaction pooling mode: with the statement cache off
//! lent and shared connections run everything, from many fibers at once; with
//! it on, a statement prepared on another server session fails with an error
//! that says what to do. The throwaway PgBouncer itself leaves nothing behind.

use neverblock_pg::throwaway::pgbouncer::PgBouncer;
use neverblock_pg::{Connection, Error, Pool};

use crate::support::{
    admin, assert_gone, pgbouncer, postgres, run, signal_group_and_assert_removed, start_example_in_own_group, unique,
};

/// `n` fibers each asking `pool` for `i * 2`, in order.
fn doubled_by_fibers(pool: &Pool, n: i32) -> Vec<i32> {
    let fibers: Vec<_> = (0..n)
        .map(|i| {
            let pool = pool.clone();
            neverblock::spawn(move || pool.query_one("select $1::int4 * 2", &[&i]).map(|r| r.get::<i32>(0)))
        })
        .collect();
    fibers.into_iter().map(|f| f.join().unwrap().unwrap()).collect()
}

#[test]
fn lent_connections_through_pgbouncer_run_params_transactions_and_errors() {
    let config = pgbouncer().config();
    run(move || {
        let table = unique("bounced");
        admin().batch_execute(&format!("create table {table} (id int4 primary key, name text)")).unwrap();
        let pool = Pool::new(config, 4);
        {
            let mut conn = pool.get().unwrap();
            let insert = format!("insert into {table} values ($1, $2)");
            let mut tx = conn.transaction().unwrap();
            tx.execute(&insert, &[&1i32, &"one"]).unwrap();
            tx.execute(&insert, &[&2i32, &"two"]).unwrap();
            tx.commit().unwrap();
            {
                let mut tx = conn.transaction().unwrap();
                tx.execute(&insert, &[&3i32, &"three"]).unwrap();
            }
            let mut tx = conn.transaction().unwrap();
            assert_eq!(tx.execute(&insert, &[&1i32, &"again"]).unwrap_err().code(), Some("23505"));
            assert!(tx.commit().is_err(), "a failed transaction is rolled back");
            assert_eq!(conn.query("select 1/$1::int4", &[&0i32]).unwrap_err().code(), Some("22012"));
            let select = format!("select name from {table} where id = $1");
            assert_eq!(conn.query_one(&select, &[&2i32]).unwrap().get::<&str>(0), "two");
            let count: i64 = conn.query_one(&format!("select count(*) from {table}"), &[]).unwrap().get(0);
            assert_eq!(count, 2, "the dropped transaction was rolled back");
        }
        assert_eq!(doubled_by_fibers(&pool, 200), (0..200).map(|i| i * 2).collect::<Vec<_>>());
        // Four transactions at once hold four server sessions: none has a named statement.
        let mut held: Vec<_> = (0..4).map(|_| pool.get().unwrap()).collect();
        for conn in &mut held {
            conn.batch_execute("begin").unwrap();
            let named: i64 = conn.query_one("select count(*) from pg_prepared_statements", &[]).unwrap().get(0);
            assert_eq!(named, 0);
            conn.batch_execute("commit").unwrap();
        }
        admin().batch_execute(&format!("drop table {table}")).unwrap();
    });
}

#[test]
fn shared_connections_through_pgbouncer_answer_many_fibers() {
    let config = pgbouncer().config();
    run(move || {
        let pool = Pool::builder(config).max_size(4).shared(2).build();
        assert_eq!(doubled_by_fibers(&pool, 500), (0..500).map(|i| i * 2).collect::<Vec<_>>());
        assert_eq!(pool.query("select 1/0", &[]).unwrap_err().code(), Some("22012"));
        let mut conn = pool.get().unwrap();
        let mut tx = conn.transaction().unwrap();
        tx.execute("select pg_sleep(0.01)", &[]).unwrap();
        assert_eq!(pool.query_one("select 5::int4", &[]).unwrap().get::<i32>(0), 5, "shared traffic goes on");
        tx.commit().unwrap();
    });
}

#[test]
fn with_the_cache_on_behind_pgbouncer_a_lost_statement_says_to_turn_it_off() {
    crate::support::postgres();
    // A PgBouncer of its own, so that which server session serves whom is known.
    let pgbouncer = PgBouncer::start(&postgres().config()).unwrap();
    let (cached, uncached) = (pgbouncer.config().statement_cache_capacity(256), pgbouncer.config());
    let err = run(move || {
        let mut a = Connection::connect(&cached).unwrap();
        a.query_one("select 1::int4", &[]).unwrap(); // prepared on the only server session, and run there
        let mut b = Connection::connect(&uncached).unwrap();
        let _holds_that_session = b.transaction().unwrap();
        a.query_one("select 1::int4", &[]).unwrap_err() // run on a new session, where it was never prepared
    });
    assert_eq!(err.code(), Some("26000"), "the server's SQLSTATE stays: {err}");
    let message = err.to_string();
    assert!(message.contains("does not exist"), "the server's message stays: {message}");
    assert!(message.contains("PgBouncer") && message.contains("statement_cache_capacity=0"), "{message}");
    assert!(matches!(err, Error::Db(_)));
}

#[test]
fn a_dropped_pgbouncer_leaves_no_process_and_no_directory() {
    let pgbouncer = PgBouncer::start(&postgres().config()).unwrap();
    let dir = pgbouncer.dir().to_owned();
    let pid = std::fs::read_to_string(dir.join("pgbouncer.pid")).unwrap().trim().to_owned();
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    drop(pgbouncer);
    assert_gone(&pid, &dir);
}

#[test]
fn a_signal_to_the_whole_process_group_still_removes_pgbouncers_directory() {
    for signal in ["TERM", "INT"] {
        let (mut child, line) = start_example_in_own_group("pgbouncer", &[]);
        assert!(line.starts_with("postgres://"), "it prints its URL: {line:?}");
        // The example's throwaway server was made first, its PgBouncer second.
        let dirs: Vec<_> =
            (0..2).map(|n| std::env::temp_dir().join(format!("neverblock-pg-{}-{n}", child.id()))).collect();
        assert!(dirs[1].join("pgbouncer.ini").exists(), "its PgBouncer is at {}", dirs[1].display());
        signal_group_and_assert_removed(&mut child, signal, &dirs);
    }
}
