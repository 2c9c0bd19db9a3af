//! Shared mode: many fibers' queries pipelined on a few connections; a long
//! query does not hold the short ones behind it.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use neverblock_pg::{Error, Pool};

use crate::support::{admin, config, run, sessions_named, unique};

#[test]
fn many_fibers_share_a_few_connections_and_each_gets_its_own_answer() {
    run(|| {
        let name = unique("shared");
        let pool = Pool::builder(config().application_name(&name)).max_size(2).shared(2).build();
        let fibers: Vec<_> = (0..200i32)
            .map(|i| {
                let pool = pool.clone();
                neverblock::spawn(move || pool.query_one("select $1::int4 + 1", &[&i]).map(|r| r.get::<i32>(0)))
            })
            .collect();
        let got: Vec<i32> = fibers.into_iter().map(|f| f.join().unwrap().unwrap()).collect();
        assert_eq!(got, (1..201).collect::<Vec<_>>());
        assert!(pool.status().open <= 2);
        assert!(sessions_named(&mut admin(), &name) <= 2);
        let err = pool.query("select $1::int4", &[]).unwrap_err();
        assert!(matches!(err, Error::Param(_)), "{err}");
        assert_eq!(pool.query("select 1/0", &[]).unwrap_err().code(), Some("22012"));
        assert_eq!(pool.query_one("select 4::int4", &[]).unwrap().get::<i32>(0), 4, "errors stay with their query");
    });
}

#[test]
fn a_read_timeout_does_not_close_an_idle_shared_connection() {
    run(|| {
        let pool = Pool::builder(config().read_timeout(Duration::from_millis(100))).max_size(1).shared(1).build();
        let pid = |pool: &Pool| pool.query_one("select pg_backend_pid()", &[]).unwrap().get::<i32>(0);
        let before = pid(&pool);
        neverblock::sleep(Duration::from_millis(400));
        assert_eq!(pid(&pool), before, "the same session after four read timeouts' worth of quiet");
    });
}

#[test]
fn a_long_query_does_not_hold_the_short_ones() {
    run(|| {
        let pool = Pool::builder(config()).max_size(2).shared(2).stall_after(Duration::from_millis(10)).build();
        pool.query("select 1", &[]).unwrap();
        let done = Rc::new(RefCell::new(Vec::new()));
        let long = {
            let (pool, done) = (pool.clone(), done.clone());
            neverblock::spawn(move || {
                pool.query("select pg_sleep(1)", &[]).unwrap();
                done.borrow_mut().push(-1);
            })
        };
        neverblock::sleep(Duration::from_millis(50)); // the long query's connection is now passed over
        let short: Vec<_> = (0..50i32)
            .map(|i| {
                let (pool, done) = (pool.clone(), done.clone());
                neverblock::spawn(move || {
                    pool.query("select 1", &[]).unwrap();
                    done.borrow_mut().push(i);
                })
            })
            .collect();
        short.into_iter().for_each(|f| f.join().unwrap());
        long.join().unwrap();
        assert_eq!(done.borrow().last(), Some(&-1), "all fifty short queries finished before the long one");
    });
}

#[test]
fn a_pool_lends_its_unshared_connections_whole() {
    run(|| {
        let pool = Pool::builder(config()).max_size(3).shared(2).build();
        let mut conn = pool.get().unwrap();
        let mut tx = conn.transaction().unwrap();
        tx.execute("select pg_sleep(0.01)", &[]).unwrap();
        assert_eq!(pool.query_one("select 2::int4", &[]).unwrap().get::<i32>(0), 2, "shared traffic goes on");
        tx.commit().unwrap();
        let all_shared = Pool::builder(config()).max_size(2).shared(2).build();
        assert!(matches!(all_shared.get(), Err(Error::Usage(_))));
    });
}

#[test]
fn a_shared_connection_killed_fails_its_queries_and_is_replaced() {
    run(|| {
        let name = unique("shared_kill");
        let pool = Pool::builder(config().application_name(&name)).max_size(1).shared(1).build();
        let pid: i32 = pool.query_one("select pg_backend_pid()", &[]).unwrap().get(0);
        // Queries pipelined on the one connection, one of which ends its backend.
        let fibers: Vec<_> = (0..20i32)
            .map(|i| {
                let pool = pool.clone();
                neverblock::spawn(move || match i {
                    10 => pool.query("select pg_terminate_backend(pg_backend_pid())", &[]).map(drop),
                    _ => pool.query("select pg_sleep(0.01)", &[]).map(drop),
                })
            })
            .collect();
        let results: Vec<_> = fibers.into_iter().map(|f| f.join().unwrap()).collect();
        let err = results[10].as_ref().unwrap_err();
        assert!(err.code() == Some("57P01") || matches!(err, Error::Closed | Error::Io(_)), "{err}");
        for r in &results[11..] {
            assert!(r.is_err(), "queries behind it on the dead connection fail: {r:?}");
        }
        let now: i32 = pool.query_one("select pg_backend_pid()", &[]).unwrap().get(0);
        assert_ne!(now, pid, "a new connection");
        assert_eq!(pool.status().open, 1, "the dead one is gone from the pool");
    });
}

#[test]
fn a_timeout_in_shared_mode_abandons_only_that_wait() {
    run(|| {
        let pool = Pool::builder(config()).max_size(2).shared(2).build();
        let timed_out = neverblock::timeout(Duration::from_millis(100), || pool.query("select pg_sleep(0.5)", &[]));
        assert!(!matches!(timed_out, Ok(Ok(_))));
        assert_eq!(pool.query_one("select 6::int4", &[]).unwrap().get::<i32>(0), 6);
    });
}

#[test]
fn shared_mode_outside_a_runtime_is_a_clear_error() {
    crate::support::postgres();
    let pool = Pool::builder(config()).max_size(1).shared(1).build();
    assert!(matches!(pool.query("select 1", &[]), Err(Error::Usage(_))));
}

#[test]
fn the_dump_names_each_shared_connections_reader_and_writer() {
    run(|| {
        let pool = Pool::builder(config()).max_size(1).shared(1).build();
        pool.query("select 1", &[]).unwrap();
        let dump = neverblock::runtime::dump().unwrap();
        let host = config().get_host().to_string();
        for fiber in ["reader", "writer"] {
            let line = dump
                .lines()
                .find(|l| l.contains(&format!("\"pg shared {fiber} {host}\"")))
                .unwrap_or_else(|| panic!("{dump}"));
            assert!(line.contains("is parked on"), "{line}");
        }
    });
}
