//! The fibered pool: lazy opening, FIFO checkout with a timeout, health checks,
//! replacement of broken connections, and a server restart mid-run.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use neverblock::sync::Notify;
use neverblock_pg::throwaway::Postgres;
use neverblock_pg::{Error, Pool};

use crate::support::{admin, config, run, sessions_named, unique};

/// Waits until the server no longer lists `pid`.
fn wait_gone(admin: &mut neverblock_pg::Connection, pid: i32) {
    loop {
        let n: i64 = admin.query_one("select count(*) from pg_stat_activity where pid = $1", &[&pid]).unwrap().get(0);
        if n == 0 {
            return;
        }
        neverblock::sleep(Duration::from_millis(5));
    }
}

#[test]
fn connections_open_lazily_and_never_beyond_the_size() {
    run(|| {
        let name = unique("lazy");
        let pool = Pool::new(config().application_name(&name), 3);
        let mut admin = admin();
        assert_eq!((pool.status().open, sessions_named(&mut admin, &name)), (0, 0));
        pool.query("select 1", &[]).unwrap();
        assert_eq!((pool.status().open, pool.status().idle), (1, 1), "one query, one connection");
        let fibers: Vec<_> = (0..20)
            .map(|_| {
                let pool = pool.clone();
                neverblock::spawn(move || pool.query("select pg_sleep(0.01)", &[]).map(drop))
            })
            .collect();
        fibers.into_iter().for_each(|f| f.join().unwrap().unwrap());
        assert_eq!(pool.status().open, 3);
        assert_eq!(sessions_named(&mut admin, &name), 3);
    });
}

#[test]
fn checkout_times_out_when_every_connection_stays_busy() {
    run(|| {
        let pool = Pool::builder(config()).max_size(1).checkout_timeout(Duration::from_millis(100)).build();
        let held = pool.get().unwrap();
        assert!(matches!(pool.get(), Err(Error::PoolTimeout)));
        assert_eq!(pool.status().waiting, 0, "the timed-out waiter left the line");
        drop(held);
        let mut conn = pool.get().unwrap();
        assert_eq!(conn.query_one("select 1::int4", &[]).unwrap().get::<i32>(0), 1);
    });
}

#[test]
fn waiting_fibers_are_served_first_come_first_served() {
    run(|| {
        let pool = Pool::new(config(), 1);
        let order = Rc::new(RefCell::new(Vec::new()));
        let held = pool.get().unwrap();
        let fibers: Vec<_> = (0..5)
            .map(|i| {
                let (pool, order) = (pool.clone(), order.clone());
                let fiber = neverblock::spawn(move || {
                    let mut conn = pool.get().unwrap();
                    order.borrow_mut().push(i);
                    conn.query("select 1", &[]).unwrap();
                });
                neverblock::yield_now(); // let it join the line before the next
                fiber
            })
            .collect();
        assert_eq!(pool.status().waiting, 5);
        drop(held);
        fibers.into_iter().for_each(|f| f.join().unwrap());
        assert_eq!(*order.borrow(), [0, 1, 2, 3, 4]);
    });
}

#[test]
fn queries_from_one_fiber_run_in_order_while_fibers_interleave() {
    run(|| {
        let pool = Pool::new(config(), 2);
        let table = unique("order");
        pool.execute(&format!("create table {table} (seq serial, fiber int4, n int4)"), &[]).unwrap();
        let done = Rc::new(RefCell::new(Vec::new()));
        let slow = {
            let (pool, done) = (pool.clone(), done.clone());
            neverblock::spawn(move || {
                pool.query("select pg_sleep(0.5)", &[]).unwrap();
                done.borrow_mut().push("slow");
            })
        };
        let quick = {
            let (pool, done, table) = (pool.clone(), done.clone(), table.clone());
            neverblock::spawn(move || {
                for n in 0..10i32 {
                    pool.execute(&format!("insert into {table} (fiber, n) values (1, $1)"), &[&n]).unwrap();
                }
                done.borrow_mut().push("quick");
            })
        };
        slow.join().unwrap();
        quick.join().unwrap();
        assert_eq!(*done.borrow(), ["quick", "slow"], "ten queries ran while the other fiber's query waited");
        let ns: Vec<i32> =
            pool.query(&format!("select n from {table} order by seq"), &[]).unwrap().iter().map(|r| r.get(0)).collect();
        assert_eq!(ns, (0..10).collect::<Vec<_>>(), "one fiber's queries in its order");
        pool.execute(&format!("drop table {table}"), &[]).unwrap();
    });
}

#[test]
fn a_backend_killed_fails_only_its_fiber_and_is_replaced() {
    run(|| {
        let name = unique("killed");
        let pool = Pool::new(config().application_name(&name), 4);
        let started = Rc::new(Notify::new());
        let pid_cell = Rc::new(RefCell::new(0));
        let victim = {
            let (pool, started, pid_cell) = (pool.clone(), started.clone(), pid_cell.clone());
            neverblock::spawn(move || {
                let mut conn = pool.get().unwrap();
                let pid = conn.backend_pid().unwrap();
                *pid_cell.borrow_mut() = pid;
                started.notify_one();
                (pid, conn.query("select pg_sleep(30)", &[]).map(drop))
            })
        };
        started.notified().unwrap();
        let others: Vec<_> = (0..3)
            .map(|i| {
                let pool = pool.clone();
                neverblock::spawn(move || {
                    (0..20i32)
                        .map(|n| pool.query_one("select $1::int4", &[&(i * 100 + n)]).map(|r| r.get::<i32>(0)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut admin = admin();
        let victim_pid = *pid_cell.borrow();
        loop {
            let running: i64 = admin
                .query_one(
                    "select count(*) from pg_stat_activity where pid = $1 and query = 'select pg_sleep(30)' and state = 'active'",
                    &[&victim_pid],
                )
                .unwrap()
                .get(0);
            if running == 1 {
                break;
            }
            neverblock::sleep(Duration::from_millis(5));
        }
        let killed: bool = admin.query_one("select pg_terminate_backend($1)", &[&victim_pid]).unwrap().get(0);
        assert!(killed);
        let (pid, outcome) = victim.join().unwrap();
        let err = outcome.unwrap_err();
        assert!(err.code() == Some("57P01") || matches!(err, Error::Closed | Error::Io(_)), "{err}");
        for (i, fiber) in others.into_iter().enumerate() {
            let got: Vec<i32> = fiber.join().unwrap().into_iter().map(Result::unwrap).collect();
            assert_eq!(got, (0..20).map(|n| i as i32 * 100 + n).collect::<Vec<_>>());
        }
        // All four at once, so each is a different connection.
        let held: Vec<_> = (0..4).map(|_| pool.get().unwrap()).collect();
        let pids: Vec<i32> = held.iter().map(|conn| conn.backend_pid().unwrap()).collect();
        assert!(!pids.contains(&pid), "the killed connection was replaced");
        assert_eq!(pool.status().open, 4);
    });
}

#[test]
fn an_idle_connection_the_server_closed_is_not_lent() {
    run(|| {
        let pool = Pool::new(config(), 2);
        let pid = pool.get().unwrap().backend_pid().unwrap();
        let mut admin = admin();
        admin.query("select pg_terminate_backend($1)", &[&pid]).unwrap();
        wait_gone(&mut admin, pid);
        let mut conn = pool.get().unwrap();
        assert_ne!(conn.backend_pid(), Some(pid));
        assert_eq!(conn.query_one("select 3::int4", &[]).unwrap().get::<i32>(0), 3, "works first time");
    });
}

#[test]
fn the_pool_recovers_from_a_server_restart() {
    let postgres = Arc::new(Postgres::start().unwrap());
    let config = postgres.config();
    neverblock::run(move || {
        let pool = Pool::new(config, 4);
        let warm: Vec<_> = (0..8)
            .map(|_| {
                let pool = pool.clone();
                neverblock::spawn(move || pool.query("select pg_sleep(0.01)", &[]).map(drop))
            })
            .collect();
        warm.into_iter().for_each(|f| f.join().unwrap().unwrap());
        assert_eq!(pool.status().idle, 4);
        // Mid-run: a fiber keeps querying while the server restarts; each query
        // succeeds or fails cleanly, never hangs.
        let restarted = Rc::new(Cell::new(false));
        let busy = {
            let (pool, restarted) = (pool.clone(), restarted.clone());
            neverblock::spawn(move || {
                let mut answered = 0;
                while !restarted.get() {
                    let _ = pool.query("select 1", &[]);
                    answered += 1;
                    neverblock::sleep(Duration::from_millis(1));
                }
                answered
            })
        };
        let restarter = postgres.clone();
        neverblock::spawn_blocking(move || restarter.restart()).unwrap();
        restarted.set(true);
        assert!(busy.join().unwrap() > 1, "queries were answered around the restart");
        // Failed dials during the restart make the pool wait before the next (at most
        // about a second); once one succeeds, every query does.
        let back = std::time::Instant::now();
        while pool.query("select 1", &[]).is_err() {
            assert!(back.elapsed() < Duration::from_secs(5), "the pool never dialled again");
            neverblock::sleep(Duration::from_millis(10));
        }
        let after: Vec<_> = (0..12)
            .map(|i| {
                let pool = pool.clone();
                neverblock::spawn(move || pool.query_one("select $1::int4", &[&i]).map(|r| r.get::<i32>(0)))
            })
            .collect();
        let got: Vec<i32> = after.into_iter().map(|f| f.join().unwrap().unwrap()).collect();
        assert_eq!(got, (0..12).collect::<Vec<_>>(), "every query after the first succeeds");
    });
}

#[test]
fn a_fiber_cancelled_in_line_passes_on_the_connection_it_was_handed() {
    run(|| {
        let pool = Pool::builder(config()).max_size(1).checkout_timeout(Duration::from_secs(20)).build();
        let held = pool.get().unwrap();
        let waiter = {
            let pool = pool.clone();
            neverblock::spawn(move || pool.get().map(drop))
        };
        neverblock::yield_now();
        assert_eq!(pool.status().waiting, 1);
        drop(held); // handed to the waiter, which has not run since
        waiter.cancel();
        assert!(waiter.join().is_err(), "cancelled in line");
        assert_eq!(pool.status().waiting, 0);
        let mut conn = pool.get().expect("the connection came back to the pool, not lost with the waiter");
        assert_eq!(conn.query_one("select 1::int4", &[]).unwrap().get::<i32>(0), 1);
    });
}

#[test]
fn a_pool_whose_server_is_down_reports_it_to_every_fiber_and_holds_no_permit() {
    run(|| {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let pool = Pool::new(neverblock_pg::Config::new().tcp("127.0.0.1", port), 2);
        let fibers: Vec<_> = (0..6)
            .map(|_| {
                let pool = pool.clone();
                neverblock::spawn(move || pool.query("select 1", &[]).map(drop))
            })
            .collect();
        for f in fibers {
            // The first dial's error, or the same at once while the pool waits to dial again.
            let err = f.join().unwrap().unwrap_err();
            let dial_error = match &err {
                Error::Unavailable { last, .. } => last,
                other => other,
            };
            assert!(matches!(dial_error, Error::Connect { .. }), "{err}");
        }
        let status = pool.status();
        assert_eq!((status.open, status.waiting), (0, 0), "no permit is held by a failed connect");
    });
}
