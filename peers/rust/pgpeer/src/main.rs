//! tokio-postgres peer of `neverblock bench pg-select1` and `pg-mix`: the same
//! workloads on tokio, through deadpool (a connection per query) or through
//! clients shared by every task (tokio-postgres pipelines their queries).
//! Prints one JSON row per run, in the benchmarks' row format.
//!
//! pgpeer select1 --url URL --pool deadpool|shared --threads N --connections 16 --fibers 256 --seconds 3
//! pgpeer mix --url URL --threads N --connections 16 --concurrency C --per-client 20 --k K --long-ms 50

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::{Client, NoTls};

struct Args {
    mode: String,
    flags: Vec<(String, String)>,
}

impl Args {
    fn parse() -> Args {
        let mut argv = std::env::args().skip(1);
        let mode = argv.next().expect("a mode: select1 or mix");
        let rest: Vec<String> = argv.collect();
        let flags = rest.chunks(2).map(|p| (p[0].trim_start_matches("--").to_string(), p[1].clone())).collect();
        Args { mode, flags }
    }

    fn get(&self, name: &str, default: &str) -> String {
        self.flags.iter().find(|(k, _)| k == name).map_or(default.to_string(), |(_, v)| v.clone())
    }

    fn num(&self, name: &str, default: f64) -> f64 {
        self.get(name, &default.to_string()).parse().expect("a number")
    }
}

fn main() {
    let args = Args::parse();
    let threads = args.num("threads", 1.0) as usize;
    let runtime = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build()
    }
    .expect("a tokio runtime");
    let row = runtime.block_on(async {
        match args.mode.as_str() {
            "select1" => select1(&args, threads).await,
            "mix" => mix(&args, threads).await,
            other => panic!("unknown mode {other}"),
        }
    });
    println!("{row}");
}

fn pool(url: &str, size: usize) -> Pool {
    let config: tokio_postgres::Config = url.parse().expect("a postgres URL");
    let manager = Manager::from_config(config, NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
    Pool::builder(manager).max_size(size).build().expect("a deadpool pool")
}

async fn clients(url: &str, n: usize) -> Vec<Client> {
    let mut clients = Vec::new();
    for _ in 0..n {
        let (client, connection) = tokio_postgres::connect(url, NoTls).await.expect("connect");
        tokio::spawn(connection);
        clients.push(client);
    }
    clients
}

/// `select 1`, prepared, by `fibers` tasks for `seconds` (after a 0.5 s warm-up): queries per second.
async fn select1(args: &Args, threads: usize) -> serde_json::Value {
    let url = args.get("url", "");
    let (connections, fibers, seconds) =
        (args.num("connections", 16.0) as usize, args.num("fibers", 256.0) as usize, args.num("seconds", 3.0));
    let kind = args.get("pool", "deadpool");
    let counting = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    if kind == "shared" {
        let clients = Arc::new(clients(&url, connections).await);
        let mut statements = Vec::new();
        for c in clients.iter() {
            statements.push(c.prepare("select 1").await.expect("prepare"));
        }
        let statements = Arc::new(statements);
        for i in 0..fibers {
            let (clients, statements, counting, stop, done) =
                (clients.clone(), statements.clone(), counting.clone(), stop.clone(), done.clone());
            tasks.push(tokio::spawn(async move {
                let k = i % clients.len();
                while !stop.load(Ordering::Relaxed) {
                    let row = clients[k].query_one(&statements[k], &[]).await.expect("select 1");
                    assert_eq!(row.get::<_, i32>(0), 1);
                    if counting.load(Ordering::Relaxed) {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
    } else {
        let pool = pool(&url, connections);
        for _ in 0..fibers {
            let (pool, counting, stop, done) = (pool.clone(), counting.clone(), stop.clone(), done.clone());
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let client = pool.get().await.expect("a pooled connection");
                    let statement = client.prepare_cached("select 1").await.expect("prepare");
                    let row = client.query_one(&statement, &[]).await.expect("select 1");
                    assert_eq!(row.get::<_, i32>(0), 1);
                    if counting.load(Ordering::Relaxed) {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    counting.store(true, Ordering::Relaxed);
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    let count = done.load(Ordering::Relaxed);
    let elapsed = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("a task");
    }
    serde_json::json!({
        "bench": "pg-select1",
        "impl": format!("tokio-postgres-{kind}"),
        "params": {"connections": connections, "fibers": fibers},
        "metrics": {"queries_per_s": (count as f64 / elapsed).round(), "threads": threads},
    })
}

/// `concurrency` tasks, `per-client` queries each; every k-th query overall is
/// `pg_sleep(long-ms)`, the rest `select 1`; through a deadpool pool: wall seconds.
async fn mix(args: &Args, threads: usize) -> serde_json::Value {
    let url = args.get("url", "");
    let connections = args.num("connections", 16.0) as usize;
    let (concurrency, per_client, k) =
        (args.num("concurrency", 100.0) as usize, args.num("per-client", 20.0) as usize, args.num("k", 5.0) as usize);
    let long = format!("select pg_sleep({})", args.num("long-ms", 50.0) / 1000.0);
    let pool = pool(&url, connections);
    // Open the connections first, as the neverblock pool's warm-up does.
    let warm: Vec<_> = (0..connections).map(|_| pool.get()).collect();
    let mut held = Vec::new();
    for w in warm {
        held.push(w.await.expect("connect"));
    }
    drop(held);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..concurrency {
        let (pool, long) = (pool.clone(), long.clone());
        tasks.push(tokio::spawn(async move {
            for j in 0..per_client {
                let client = pool.get().await.expect("a pooled connection");
                let sql = if (i * per_client + j) % k == 0 { long.as_str() } else { "select 1" };
                let statement = client.prepare_cached(sql).await.expect("prepare");
                client.query(&statement, &[]).await.expect("query");
            }
        }));
    }
    for t in tasks {
        t.await.expect("a task");
    }
    serde_json::json!({
        "bench": "pg-mix",
        "impl": "tokio-postgres-deadpool",
        "params": {"k": k, "concurrency": concurrency},
        "metrics": {"seconds": (start.elapsed().as_secs_f64() * 1000.0).round() / 1000.0, "threads": threads},
    })
}
