//! The pool through faults: a restart, terminated backends, a server stopped for 5 s, a
//! listener that never answers, a server down when the pool starts. In each, requests fail
//! quickly and for a bounded time (never hanging), and the pool refills once the server
//! answers: its size in connections, each running queries.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use neverblock::net::{TcpListener, TcpStream};
use neverblock_pg::throwaway::Postgres;
use neverblock_pg::{Config, Error, Pool};

/// The pool waits at most about a second between dials; with this much slack on a
/// loaded machine, it has served again by then after the server's return.
const SERVED_AGAIN_WITHIN: Duration = Duration::from_secs(4);
/// What no failed request may take: well under the 10 s connect timeout, as failures
/// during an outage are quick refusals or the pool's answer at once.
const FAILS_WITHIN: Duration = Duration::from_secs(2);

const SIZE: usize = 4;

/// `SIZE` fibers each hold a connection for a moment at once: the pool opens `SIZE`;
/// every one answers.
fn refilled(pool: &Pool) {
    let fibers: Vec<_> = (0..SIZE as i32)
        .map(|i| {
            let pool = pool.clone();
            neverblock::spawn(move || {
                let mut conn = pool.get()?;
                conn.query_one("select $1::int4 from pg_sleep(0.05)", &[&i]).map(|r| r.get::<i32>(0))
            })
        })
        .collect();
    let got: Vec<i32> = fibers.into_iter().map(|f| f.join().unwrap().expect("the pool serves again")).collect();
    assert_eq!(got, (0..SIZE as i32).collect::<Vec<_>>());
    let status = pool.status();
    assert!((SIZE..=status.max_size).contains(&status.open), "the pool is back to its size: {status:?}");
}

/// Queries every 10 ms until one succeeds; returns how long that took, checking that
/// each failure came back within [`FAILS_WITHIN`].
fn until_served(pool: &Pool) -> Duration {
    let start = Instant::now();
    loop {
        let asked = Instant::now();
        match pool.query("select 1", &[]) {
            Ok(_) => return start.elapsed(),
            Err(e) => assert!(asked.elapsed() < FAILS_WITHIN, "a failure took {:?}: {e}", asked.elapsed()),
        }
        assert!(start.elapsed() < Duration::from_secs(30), "never served again");
        neverblock::sleep(Duration::from_millis(10));
    }
}

/// Runs `f` on a blocking-pool thread (the throwaway server's controls block).
fn blocking(postgres: &Arc<Postgres>, f: fn(&Postgres) -> Result<(), Error>) {
    let postgres = postgres.clone();
    neverblock::spawn_blocking(move || f(&postgres)).expect("the throwaway server obeys");
}

/// Whether `e` is the pool's own answer during an outage (it dialled nobody).
fn answered_at_once(e: &Error) -> bool {
    matches!(e, Error::Unavailable { .. })
}

#[test]
fn after_a_restart_the_pool_serves_within_a_second_and_refills() {
    let postgres = Arc::new(Postgres::start().unwrap());
    let config = postgres.tcp_config();
    neverblock::run(move || {
        let pool = Pool::new(config, SIZE);
        refilled(&pool);
        blocking(&postgres, Postgres::restart);
        let took = until_served(&pool);
        assert!(took < SERVED_AGAIN_WITHIN, "served again {took:?} after the server's return");
        refilled(&pool);
    });
}

#[test]
fn terminated_backends_fail_their_queries_and_are_replaced_at_once() {
    let postgres = Arc::new(Postgres::start().unwrap());
    let config = postgres.tcp_config().application_name("faults_terminated");
    let admin_config = postgres.config();
    neverblock::run(move || {
        let pool = Pool::new(config, SIZE);
        refilled(&pool);
        let in_flight = {
            let pool = pool.clone();
            neverblock::spawn(move || pool.query("select pg_sleep(30)", &[]).map(drop))
        };
        neverblock::sleep(Duration::from_millis(100));
        let mut admin = neverblock_pg::Connection::connect(&admin_config).unwrap();
        let killed = admin
            .query(
                "select pg_terminate_backend(pid) from pg_stat_activity where application_name = 'faults_terminated'",
                &[],
            )
            .unwrap();
        assert_eq!(killed.len(), SIZE);
        let err = in_flight.join().unwrap().expect_err("the query in flight fails");
        assert!(err.is_fatal(), "{err}");
        let took = until_served(&pool);
        assert!(took < SERVED_AGAIN_WITHIN, "{took:?}");
        refilled(&pool);
    });
}

/// Stops the server for 5 s under steady queries: every failure is quick, few of them
/// dial (the pool backs off), and the pool serves again soon after the server is back.
fn stopped_for_five_seconds(shared: usize) {
    let postgres = Arc::new(Postgres::start().unwrap());
    let config = postgres.tcp_config();
    neverblock::run(move || {
        let pool = Pool::builder(config).max_size(SIZE + shared).shared(shared).build();
        refilled(&pool);
        blocking(&postgres, Postgres::stop);
        let (mut dialled, mut at_once) = (0, 0);
        let outage = Instant::now();
        while outage.elapsed() < Duration::from_secs(5) {
            let asked = Instant::now();
            let err = pool.query("select 1", &[]).expect_err("nothing serves");
            assert!(asked.elapsed() < FAILS_WITHIN, "a failure took {:?}: {err}", asked.elapsed());
            if answered_at_once(&err) {
                at_once += 1;
            } else {
                dialled += 1;
            }
            neverblock::sleep(Duration::from_millis(5));
        }
        // Waits of 25 ms doubling up to 1 s: about ten dials in 5 s (a few more for the
        // connections found closed), where a pool without them dials for every request.
        assert!(dialled <= 20, "{dialled} requests dialled, {at_once} were answered at once");
        assert!(at_once > 10 * dialled, "{dialled} requests dialled, {at_once} were answered at once");
        blocking(&postgres, Postgres::start_again);
        let took = until_served(&pool);
        assert!(took < SERVED_AGAIN_WITHIN, "served again {took:?} after the server's return");
        refilled(&pool);
    });
}

#[test]
fn a_server_stopped_for_five_seconds_costs_lent_connections_few_dials_and_they_refill() {
    stopped_for_five_seconds(0);
}

#[test]
fn a_server_stopped_for_five_seconds_costs_shared_connections_few_dials_and_they_refill() {
    stopped_for_five_seconds(2);
}

#[test]
fn a_pool_started_while_its_server_is_down_serves_once_it_is_up() {
    let postgres = Arc::new(Postgres::start().unwrap());
    let config = postgres.tcp_config();
    neverblock::run(move || {
        blocking(&postgres, Postgres::stop);
        let pool = Pool::new(config, SIZE);
        let first = pool.query("select 1", &[]).unwrap_err();
        assert!(matches!(first, Error::Connect { .. }), "the first request dials: {first}");
        let second = pool.query("select 1", &[]).unwrap_err();
        assert!(answered_at_once(&second), "the next is answered at once: {second}");
        assert!(second.to_string().contains(&first.to_string()), "with the dial's error: {second}");
        blocking(&postgres, Postgres::start_again);
        let took = until_served(&pool);
        assert!(took < SERVED_AGAIN_WITHIN, "{took:?}");
        refilled(&pool);
    });
}

/// A listener in front of `upstream` that, while `answering` is false, accepts
/// connections and never says a word (a server wedged, or a load balancer whose
/// backend is gone); once it is true, relays new connections to `upstream`.
fn front(upstream: u16, answering: Rc<Cell<bool>>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    neverblock::spawn(move || {
        let mut silent = Vec::new();
        while let Ok((client, _)) = listener.accept() {
            if !answering.get() {
                silent.push(client);
                continue;
            }
            let server = TcpStream::connect(("127.0.0.1", upstream)).unwrap();
            let (client, server) = (Rc::new(client), Rc::new(server));
            neverblock::spawn({
                let (client, server) = (client.clone(), server.clone());
                move || std::io::copy(&mut &*client, &mut &*server)
            });
            neverblock::spawn(move || std::io::copy(&mut &*server, &mut &*client));
        }
    });
    port
}

#[test]
fn a_listener_that_never_answers_fails_checkouts_after_the_connect_timeout_then_serves() {
    let postgres = Postgres::start().unwrap();
    let upstream = postgres.port();
    neverblock::run(move || {
        let answering = Rc::new(Cell::new(false));
        let port = front(upstream, answering.clone());
        let config = Config::new()
            .tcp("127.0.0.1", port)
            .user("postgres")
            .dbname("postgres")
            .connect_timeout(Duration::from_millis(500));
        let pool = Pool::new(config, SIZE);
        let asked = Instant::now();
        let first = pool.query("select 1", &[]).unwrap_err();
        let took = asked.elapsed();
        assert!(
            matches!(&first, Error::Connect { source, .. } if source.kind() == std::io::ErrorKind::TimedOut),
            "{first}"
        );
        assert!(took >= Duration::from_millis(500) && took < FAILS_WITHIN, "gave up after {took:?}");
        let asked = Instant::now();
        let second = pool.query("select 1", &[]).unwrap_err();
        assert!(answered_at_once(&second) && asked.elapsed() < Duration::from_millis(400), "{second}");
        answering.set(true);
        let took = until_served(&pool);
        assert!(took < SERVED_AGAIN_WITHIN, "{took:?}");
        refilled(&pool);
        drop(postgres);
    });
}
