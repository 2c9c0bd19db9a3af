//! app-sleep (NeverBlock's "Rails faster" experiment): an HTTP endpoint that
//! runs `select pg_sleep(1)`, with ten clients asking at once for a fixed window.
//! One blocking worker answers one request at a time (about one a second);
//! neverblock's server, a fiber per request over a pool of connections, answers
//! them all at once (about ten a second).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use clap::Args;
use neverblock_http::server::{Request, Response, Server};
use neverblock_http::{Client, Request as ClientRequest};
use neverblock_pg::{Config, Connection, LoopPools, Pool};
use serde_json::json;

use super::pg::Database;
use super::{report, Common, Row};

/// Options of `bench app-sleep`.
#[derive(Args, Debug)]
pub(crate) struct AppSleepArgs {
    /// Clients asking at once, each one request after another.
    #[arg(long, default_value_t = 10)]
    clients: usize,
    /// Each request's `pg_sleep`, in seconds.
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// How long the clients ask, per row; requests under way when it ends are counted.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    window: Duration,
    #[command(flatten)]
    database: Database,
    #[command(flatten)]
    common: Common,
}

pub(crate) fn run(args: AppSleepArgs) -> anyhow::Result<()> {
    let target = args.database.open()?;
    let sql = format!("select pg_sleep({})", args.seconds);
    let params = json!({"clients": args.clients, "sleep_s": args.seconds});
    let row = |name: &str, (answered, failed, seconds): (usize, usize, f64)| {
        Row::new("app-sleep", name, params.clone())
            .metric("requests_per_s", (answered as f64 / seconds * 100.0).round() / 100.0)
            .metric("answered", answered)
            .metric("errors", failed)
    };
    let fibered = serve_fibered(target.config.clone(), sql.clone(), args.clients)?;
    let fibered_row = row("neverblock", load(&fibered.url, args.clients, args.window));
    drop(fibered);
    let blocking = serve_blocking(Connection::connect(&target.config)?, sql)?;
    let blocking_row = row("blocking", load(&blocking.url, args.clients, args.window));
    drop(blocking);
    report::print(vec![fibered_row, blocking_row], "requests_per_s", &args.common)?;
    Ok(())
}

/// A server on a thread of its own, serving `url` until dropped.
struct Running {
    url: String,
    stop: Option<Box<dyn FnOnce()>>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            stop();
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// neverblock's server, one loop: each request a fiber, its query through a pool of `connections`.
fn serve_fibered(config: Config, sql: String, connections: usize) -> anyhow::Result<Running> {
    let server = Server::builder().workers(1).bind("127.0.0.1:0")?;
    let url = format!("http://{}/", server.local_addr());
    let handle = server.handle();
    let pools = LoopPools::new(Pool::builder(config).max_size(connections));
    let thread = thread::spawn(move || {
        let served = server.run(move |_: &mut Request<'_>| match pools.pool().query(&sql, &[]) {
            Ok(_) => Response::new(200).body("slept\n"),
            Err(e) => Response::new(500).body(format!("{e}\n")),
        });
        if let Err(e) = served {
            eprintln!("note: the app-sleep server stopped: {e}");
        }
    });
    Ok(Running { url, stop: Some(Box::new(move || handle.shutdown())), thread: Some(thread) })
}

/// One blocking worker, as a single-process web app runs: it takes a connection,
/// reads its request, runs the query on its one database connection, answers and
/// closes, then takes the next.
fn serve_blocking(mut db: Connection, sql: String) -> anyhow::Result<Running> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let stopping = Arc::new(AtomicBool::new(false));
    let stopped = stopping.clone();
    let thread = thread::spawn(move || {
        for conn in listener.incoming() {
            if stopped.load(Ordering::Relaxed) {
                return;
            }
            let Ok(mut conn) = conn else { continue };
            let mut head = String::new();
            let mut reader = BufReader::new(&conn);
            while reader.read_line(&mut head).is_ok_and(|n| n > 2) {
                head.clear();
            }
            let body = match db.query(&sql, &[]) {
                Ok(_) => "slept\n".to_owned(),
                Err(e) => format!("{e}\n"),
            };
            let answer =
                format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
            let _ = conn.write_all(answer.as_bytes());
        }
    });
    let stop = move || {
        stopping.store(true, Ordering::Relaxed);
        let _ = std::net::TcpStream::connect(addr); // wakes its accept
    };
    Ok(Running { url: format!("http://{addr}/"), stop: Some(Box::new(stop)), thread: Some(thread) })
}

/// `clients` threads GET `url` one request after another (a connection each) for
/// `window`; returns the requests answered 200, those that failed, and the seconds taken.
fn load(url: &str, clients: usize, window: Duration) -> (usize, usize, f64) {
    let start = Instant::now();
    let deadline = start + window;
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            let request = ClientRequest::new("GET", url).header("Connection", "close");
            thread::spawn(move || {
                let client = Client::new();
                let (mut answered, mut failed) = (0, 0);
                while Instant::now() < deadline {
                    match client.request(&request) {
                        Ok(response) if response.status() == 200 => answered += 1,
                        _ => failed += 1,
                    }
                }
                (answered, failed)
            })
        })
        .collect();
    let (answered, failed) =
        threads.into_iter().map(|t| t.join().unwrap_or((0, 1))).fold((0, 0), |(a, f), (a2, f2)| (a + a2, f + f2));
    (answered, failed, start.elapsed().as_secs_f64())
}
