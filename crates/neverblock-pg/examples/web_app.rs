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
//! `LISTEN=127.0.0.1:0` picks a free port; the first line printed says which.

#![allow(clippy::print_stdout)] // an example program prints where it listens

use neverblock_http::server::{Request, Response, Server};
use neverblock_pg::{throwaway, Config, LoopPools, Pool};
use serde_json::json;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (config, _throwaway) = match std::env::var("DATABASE_URL") {
        Ok(url) => (Config::parse(&url)?, None),
        Err(_) => {
            let postgres = throwaway::Postgres::start()?;
            (postgres.config(), Some(postgres))
        }
    };
    let setup = config.clone();
    neverblock::run(move || -> Result<(), neverblock_pg::Error> {
        let mut db = neverblock_pg::Connection::connect(&setup)?;
        db.execute("create table if not exists items (id int primary key, name text not null)", &[])?;
        db.execute("insert into items values (1, 'fiber'), (2, 'loop'), (3, 'pool') on conflict do nothing", &[])?;
        Ok(())
    })?;

    let pools = LoopPools::new(Pool::builder(config).max_size(10)); // a pool per event loop
    let listen = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:8080".into());
    let server = Server::builder().shutdown_on_signals().bind(listen.as_str())?;
    println!("http://{}/items", server.local_addr());
    server.run(move |request: &mut Request<'_>| match request.path() {
        "/items" => match pools.pool().query("select id, name from items order by id", &[]) {
            Ok(rows) => {
                let items: Vec<_> =
                    rows.iter().map(|r| json!({"id": r.get::<i32>(0), "name": r.get::<String>(1)})).collect();
                Response::new(200).header("Content-Type", "application/json").body(json!(items).to_string())
            }
            Err(e) => Response::new(500).body(format!("{e}\n")),
        },
        _ => Response::new(404),
    })?;
    Ok(())
}
