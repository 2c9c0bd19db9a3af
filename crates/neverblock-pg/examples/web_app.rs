//! A small web app in plain blocking style: an HTTP server whose handler reads
//! a table through a fibered connection pool and answers JSON. Every request
//! runs on its own fiber; a query parks only that fiber while PostgreSQL works.
//!
//! ```text
//! cargo run -p neverblock-pg --example web_app          # a throwaway PostgreSQL
//! DATABASE_URL=postgres://me@localhost/db cargo run -p neverblock-pg --example web_app
//! curl http://127.0.0.1:8080/items                      # [{"id":1,"name":"fiber"}, …]
//! ```
//!
//! With `DATABASE_URL` it uses that database, creating the table `items` (three rows) if it is
//! not there; without, it starts a throwaway PostgreSQL in a temporary directory, removed when
//! the app stops. A database that is down at the start, or later, does not stop the app: `/items`
//! answers 503 with the reason until the database is back. `LISTEN=127.0.0.1:0` picks a free
//! port; the first line printed says which.

#![allow(clippy::print_stdout, clippy::print_stderr)] // an example program prints where it listens

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use neverblock_http::server::{Request, Response, Server};
use neverblock_pg::{throwaway, Config, Error, LoopPools, Pool, Row};
use serde_json::json;

fn main() -> ExitCode {
    match serve() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("web_app: {e}");
            ExitCode::FAILURE
        }
    }
}

fn serve() -> Result<(), Box<dyn std::error::Error>> {
    let (config, _throwaway) = match std::env::var("DATABASE_URL") {
        Ok(url) => (Config::parse(&url)?, None),
        Err(_) => {
            let postgres = throwaway::Postgres::start()?;
            (postgres.config(), Some(postgres))
        }
    };
    let pools = LoopPools::new(Pool::builder(config).max_size(10)); // a pool per event loop
    let table_made = AtomicBool::new(false);
    let listen = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:8080".into());
    let server = Server::builder().shutdown_on_signals().bind(listen.as_str())?;
    println!("http://{}/items", server.local_addr());
    server.run(move |request: &mut Request<'_>| match request.path() {
        "/items" => match items(&pools.pool(), &table_made) {
            Ok(rows) => {
                let items: Vec<_> =
                    rows.iter().map(|r| json!({"id": r.get::<i32>(0), "name": r.get::<String>(1)})).collect();
                Response::new(200).header("Content-Type", "application/json").body(json!(items).to_string())
            }
            Err(e) => {
                eprintln!("web_app: /items: {e}");
                let status = match e {
                    Error::Connect { .. } | Error::Unavailable { .. } | Error::PoolTimeout => 503,
                    _ => 500,
                };
                Response::new(status).body(format!("{e}\n"))
            }
        },
        _ => Response::new(404),
    })?;
    Ok(())
}

/// The table's rows, making the table first if this process has not yet.
fn items(pool: &Pool, table_made: &AtomicBool) -> Result<Vec<Row>, Error> {
    if !table_made.load(Ordering::Relaxed) {
        pool.execute("create table if not exists items (id int primary key, name text not null)", &[])?;
        pool.execute("insert into items values (1, 'fiber'), (2, 'loop'), (3, 'pool') on conflict do nothing", &[])?;
        table_made.store(true, Ordering::Relaxed);
    }
    pool.query("select id, name from items order by id", &[])
}
