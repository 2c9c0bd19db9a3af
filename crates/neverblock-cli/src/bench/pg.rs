//! NeverBlock's PostgreSQL experiments: ten `pg_sleep(1)` at once
//! (`pg-sleep`), one long query every k short ones (`pg-mix`), and `select 1`
//! throughput through a 16-connection pool (`pg-select1`; with
//! `--via-pgbouncer` also through PgBouncer), each beside one blocking
//! connection and, with `--peers`, Go pgx and tokio-postgres. Without `--url`
//! (or `DATABASE_URL`) each starts a throwaway PostgreSQL.

mod libpq_sleep;
mod peers;
mod via_pgbouncer;

pub(crate) use libpq_sleep::run as libpq_sleep;

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use neverblock_pg::throwaway::Postgres;
use neverblock_pg::{Config, Connection, Pool};
use serde_json::json;

use super::{report, Common, Row};

/// Where the benchmarks connect: `--url`, `DATABASE_URL`, or a throwaway server.
#[derive(Args, Debug, Clone)]
pub(crate) struct Database {
    /// The server to use (postgres://user:pass@host:port/db); default: $DATABASE_URL, else a throwaway
    /// PostgreSQL started for the run.
    #[arg(long)]
    url: Option<String>,
}

/// A server to run against, kept running while the benchmark runs.
pub(crate) struct Target {
    url: String,
    pub(crate) config: Config,
    _throwaway: Option<Postgres>,
}

impl Database {
    pub(crate) fn open(&self) -> anyhow::Result<Target> {
        if let Some(url) = self.url.clone().or_else(|| std::env::var("DATABASE_URL").ok()) {
            let config = Config::parse(&url)?;
            return Ok(Target { url, config, _throwaway: None });
        }
        let postgres =
            Postgres::start().context("no --url or DATABASE_URL, so a throwaway PostgreSQL was to be started")?;
        eprintln!(
            "note: started a throwaway PostgreSQL in {} (give --url or DATABASE_URL for another)",
            postgres.dir().display()
        );
        Ok(Target { url: postgres.url(), config: postgres.tcp_config(), _throwaway: Some(postgres) })
    }
}

/// Options of `bench pg-sleep` and `bench libpq-sleep`.
#[derive(Args, Debug)]
pub(crate) struct SleepArgs {
    /// Concurrent `select pg_sleep(s)` queries.
    #[arg(long, default_value_t = 10)]
    queries: usize,
    /// Each query's sleep, in seconds.
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    #[command(flatten)]
    database: Database,
    #[command(flatten)]
    common: Common,
}

/// Options of `bench pg-mix`.
#[derive(Args, Debug)]
pub(crate) struct MixArgs {
    /// One long query every k queries.
    #[arg(long, value_delimiter = ',', default_values_t = [5usize, 10, 20, 50, 100])]
    ks: Vec<usize>,
    /// Concurrent clients (fibers).
    #[arg(long, value_delimiter = ',', default_values_t = [10usize, 100, 1000])]
    concurrency: Vec<usize>,
    /// Queries each client runs.
    #[arg(long, default_value_t = 20)]
    per_client: usize,
    /// The fibered pool's connections.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// The long query's `pg_sleep`, in milliseconds.
    #[arg(long, default_value_t = 50.0)]
    long_ms: f64,
    /// The longest the blocking row may take per configuration: past it, it times a sample and extrapolates.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    blocking_budget: Duration,
    #[command(flatten)]
    database: Database,
    #[command(flatten)]
    common: Common,
}

/// Options of `bench pg-select1`.
#[derive(Args, Debug)]
pub(crate) struct Select1Args {
    /// Pool connections.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Fibers querying at once.
    #[arg(long, default_value_t = 256)]
    fibers: usize,
    /// Measured seconds per row (after half a second of warm-up).
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Event loops (threads) to run the fibered rows with, each count a row; each loop has its own pool
    /// with its share of the connections and fibers.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2])]
    threads: Vec<usize>,
    /// Also run the fibered rows with the statement cache off, straight to the server and through a
    /// throwaway PgBouncer (transaction pooling) in front of it: each PgBouncer row's
    /// `vs_direct_ratio` is the hop's cost.
    #[arg(long)]
    via_pgbouncer: bool,
    #[command(flatten)]
    database: Database,
    #[command(flatten)]
    common: Common,
}

/// Opens `n` of the pool's connections at once (each fiber holds its own until
/// all are open), so no timed query pays for a connect.
fn warm(pool: &Pool, n: usize) -> anyhow::Result<()> {
    let fibers: Vec<_> = (0..n)
        .map(|_| {
            let pool = pool.clone();
            neverblock::spawn(move || pool.get())
        })
        .collect();
    let mut held = Vec::with_capacity(n);
    for f in fibers {
        held.push(f.join().map_err(|e| anyhow::anyhow!("{e}"))??);
    }
    Ok(())
}

pub(crate) fn sleep(args: SleepArgs) -> anyhow::Result<()> {
    let target = args.database.open()?;
    let sql = format!("select pg_sleep({})", args.seconds);
    let params = json!({"queries": args.queries, "sleep_s": args.seconds});
    let row = |name: &str, seconds: f64| {
        Row::new("pg-sleep", name, params.clone())
            .metric("seconds", (seconds * 1000.0).round() / 1000.0)
            .metric("queries_per_s", (args.queries as f64 / seconds * 100.0).round() / 100.0)
    };
    let (config, n, query) = (target.config.clone(), args.queries, sql.clone());
    let fibered = neverblock::run(move || -> anyhow::Result<f64> {
        let pool = Pool::new(config, n);
        warm(&pool, n)?;
        let start = Instant::now();
        let fibers: Vec<_> = (0..n)
            .map(|_| {
                let (pool, query) = (pool.clone(), query.clone());
                neverblock::spawn(move || pool.query(&query, &[]).map(drop))
            })
            .collect();
        for f in fibers {
            f.join().map_err(|e| anyhow::anyhow!("{e}"))??;
        }
        Ok(start.elapsed().as_secs_f64())
    })?;
    // One connection in blocking mode: the calls block the thread, one after another.
    let mut conn = Connection::connect(&target.config)?;
    let start = Instant::now();
    for _ in 0..args.queries {
        conn.query(&sql, &[])?;
    }
    let blocking = start.elapsed().as_secs_f64();
    report::print(vec![row("neverblock", fibered), row("blocking", blocking)], "seconds", &args.common)?;
    Ok(())
}

/// Whether query `j` of client `i` is the long one: every k-th query overall.
fn is_long(i: usize, j: usize, per_client: usize, k: usize) -> bool {
    (i * per_client + j).is_multiple_of(k)
}

pub(crate) fn mix(args: MixArgs) -> anyhow::Result<()> {
    let target = args.database.open()?;
    let long = format!("select pg_sleep({})", args.long_ms / 1000.0);
    let go = if args.common.peers { peers::go() } else { None };
    let tokio = if args.common.peers { peers::tokio() } else { None };
    let mut rows = Vec::new();
    for &concurrency in &args.concurrency {
        for &k in &args.ks {
            let params = json!({"k": k, "concurrency": concurrency});
            let row = |name: &str, seconds: f64| {
                Row::new("pg-mix", name, params.clone()).metric("seconds", (seconds * 1000.0).round() / 1000.0)
            };
            let fibered = mix_fibered(&target.config, &args, concurrency, k, &long)?;
            let (blocking, sampled) = mix_blocking(&target.config, &args, concurrency, k, &long)?;
            let advantage = blocking / fibered;
            rows.push(
                row("neverblock", fibered)
                    .metric("advantage_x", (advantage * 100.0).round() / 100.0)
                    .metric("faster_pct", ((advantage - 1.0) * 100.0).round()),
            );
            let mut blocking_row = row("blocking", blocking);
            if sampled < concurrency * args.per_client {
                blocking_row = blocking_row.metric("note", format!("extrapolated from {sampled} sequential queries"));
            }
            rows.push(blocking_row);
            let flags = [
                ("url", target.url.clone()),
                ("connections", args.connections.to_string()),
                ("concurrency", concurrency.to_string()),
                ("per-client", args.per_client.to_string()),
                ("k", k.to_string()),
                ("long-ms", args.long_ms.to_string()),
            ];
            for peer in go.iter().chain(tokio.iter()) {
                rows.extend(peer.run("mix", &flags));
            }
        }
    }
    report::print(rows, "seconds", &args.common)?;
    Ok(())
}

/// `concurrency` fibers through a pool: wall seconds.
fn mix_fibered(config: &Config, args: &MixArgs, concurrency: usize, k: usize, long: &str) -> anyhow::Result<f64> {
    let (config, connections, per_client, long) = (config.clone(), args.connections, args.per_client, long.to_owned());
    neverblock::run(move || {
        let pool = Pool::new(config, connections);
        warm(&pool, connections)?;
        let start = Instant::now();
        let fibers: Vec<_> = (0..concurrency)
            .map(|i| {
                let (pool, long) = (pool.clone(), long.clone());
                neverblock::spawn(move || -> Result<(), neverblock_pg::Error> {
                    for j in 0..per_client {
                        pool.query(if is_long(i, j, per_client, k) { &long } else { "select 1" }, &[])?;
                    }
                    Ok(())
                })
            })
            .collect();
        for f in fibers {
            f.join().map_err(|e| anyhow::anyhow!("{e}"))??;
        }
        Ok(start.elapsed().as_secs_f64())
    })
}

/// The same queries one after another on one blocking connection, within the
/// budget: (seconds, extrapolated to all queries; queries actually run).
fn mix_blocking(
    config: &Config,
    args: &MixArgs,
    concurrency: usize,
    k: usize,
    long: &str,
) -> anyhow::Result<(f64, usize)> {
    let mut conn = Connection::connect(config)?;
    let total = concurrency * args.per_client;
    let start = Instant::now();
    let mut done = 0usize;
    for i in 0..concurrency {
        for j in 0..args.per_client {
            conn.query(if is_long(i, j, args.per_client, k) { long } else { "select 1" }, &[])?;
            done += 1;
        }
        // Stop at a whole period of the long/short cycle, so the sample is representative.
        if start.elapsed() > args.blocking_budget && done.is_multiple_of(k) {
            break;
        }
    }
    Ok((start.elapsed().as_secs_f64() * total as f64 / done as f64, done))
}

pub(crate) fn select1(args: Select1Args) -> anyhow::Result<()> {
    let target = args.database.open()?;
    let params = json!({"connections": args.connections, "fibers": args.fibers});
    let row =
        |name: &str, per_s: f64| Row::new("pg-select1", name, params.clone()).metric("queries_per_s", per_s.round());
    let mut rows = Vec::new();
    for &threads in &args.threads {
        for (name, shared) in [("neverblock", false), ("neverblock-shared", true)] {
            let per_s = select1_fibered(&target.config, &args, shared, threads)?;
            let name = if threads == 1 { name.to_owned() } else { format!("{name}-{threads}loops") };
            rows.push(row(&name, per_s).metric("threads", threads));
        }
    }
    rows.push(row("blocking-1-connection", select1_blocking(&target.config, args.seconds)?));
    if args.via_pgbouncer {
        rows.extend(via_pgbouncer::rows(&target.config, &args, &row)?);
    }
    if args.common.peers {
        let base = [
            ("url", target.url.clone()),
            ("connections", args.connections.to_string()),
            ("fibers", args.fibers.to_string()),
            ("seconds", args.seconds.to_string()),
        ];
        if let Some(go) = peers::go() {
            rows.extend(go.run("select1", &base));
        }
        if let Some(tokio) = peers::tokio() {
            for (pool, threads) in [("deadpool", "1"), ("deadpool", "2"), ("shared", "1"), ("shared", "2")] {
                let mut flags = base.to_vec();
                flags.extend([("pool", pool.to_owned()), ("threads", threads.to_owned())]);
                rows.extend(tokio.run("select1", &flags).into_iter().map(|r| {
                    let name = format!("{}-{threads}thread", r.implementation);
                    Row { implementation: name, ..r }
                }));
            }
        }
    }
    report::print(rows, "queries_per_s", &args.common)?;
    Ok(())
}

/// `fibers` fibers each running the prepared `select 1` in a loop through the
/// pool (lent per query, or shared and pipelined): queries per second. With
/// `threads` loops, each loop has its own pool and its share of the
/// connections and fibers (a pool belongs to one loop).
fn select1_fibered(config: &Config, args: &Select1Args, shared: bool, threads: usize) -> anyhow::Result<f64> {
    let start = Instant::now() + Duration::from_millis(500);
    let end = start + Duration::from_secs_f64(args.seconds);
    let (connections, fibers) = (args.connections / threads, args.fibers / threads);
    let config = config.clone();
    let per_loop = neverblock::runtime::Builder::new().threads(threads).run(move || {
        let loops: Vec<_> = (0..threads)
            .map(|i| {
                let config = config.clone();
                neverblock::runtime::spawn_on(i, move || select1_loop(config, connections, fibers, shared, start, end))
            })
            .collect();
        loops.into_iter().map(|l| l.join().map_err(|e| anyhow::anyhow!("{e}"))?).collect::<anyhow::Result<Vec<u64>>>()
    })?;
    Ok(per_loop.iter().sum::<u64>() as f64 / (end - start).as_secs_f64())
}

/// One loop's share of `select1_fibered`: the queries its fibers finished between `start` and `end`.
fn select1_loop(
    config: Config,
    connections: usize,
    fibers: usize,
    shared: bool,
    start: Instant,
    end: Instant,
) -> anyhow::Result<u64> {
    let builder = Pool::builder(config).max_size(connections);
    let pool = if shared { builder.shared(connections).build() } else { builder.build() };
    if !shared {
        warm(&pool, connections)?;
    }
    let done = Rc::new(Cell::new(0u64));
    let workers: Vec<_> = (0..fibers)
        .map(|_| {
            let (pool, done) = (pool.clone(), done.clone());
            neverblock::spawn(move || -> Result<(), neverblock_pg::Error> {
                loop {
                    let one: i32 = pool.query_one("select 1", &[])?.get(0);
                    debug_assert_eq!(one, 1);
                    let now = Instant::now();
                    if now >= end {
                        return Ok(());
                    }
                    if now >= start {
                        done.set(done.get() + 1);
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().map_err(|e| anyhow::anyhow!("{e}"))??;
    }
    Ok(done.get())
}

/// One connection in blocking mode, `select 1` after `select 1`: queries per second.
fn select1_blocking(config: &Config, seconds: f64) -> anyhow::Result<f64> {
    let mut conn = Connection::connect(config)?;
    let (mut count, start) = (0u64, Instant::now());
    while start.elapsed().as_secs_f64() < seconds {
        conn.query_one("select 1", &[])?;
        count += 1;
    }
    Ok(count as f64 / start.elapsed().as_secs_f64())
}
