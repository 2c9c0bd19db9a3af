//! A throwaway PostgreSQL with a throwaway PgBouncer (transaction pooling) in
//! front of it, for trying a client behind a pooler by hand: prints the URL
//! through PgBouncer, then runs until its input ends (Ctrl-D) or it is stopped
//! (Ctrl-C); both are stopped and their directories removed either way.
//!
//! ```text
//! cargo run -p neverblock-pg --example pgbouncer      # postgres://postgres@127.0.0.1:PORT/postgres?statement_cache_capacity=0
//! psql postgres://postgres@127.0.0.1:PORT/postgres    # psql knows no statement cache setting: leave it out
//! ```

#![allow(clippy::print_stdout, clippy::print_stderr)] // an example program prints its URL

use std::io::{BufRead, Write};
use std::process::ExitCode;

use neverblock_pg::throwaway::{pgbouncer::PgBouncer, Postgres};

fn main() -> ExitCode {
    let started = Postgres::start().and_then(|postgres| Ok((PgBouncer::start(&postgres.config())?, postgres)));
    let (pgbouncer, postgres) = match started {
        Ok(both) => both,
        Err(e) => {
            eprintln!("pgbouncer example: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{}", pgbouncer.url());
    let _ = std::io::stdout().flush();
    eprintln!(
        "PgBouncer in {}, PostgreSQL in {}; Ctrl-D or Ctrl-C stops both",
        pgbouncer.dir().display(),
        postgres.dir().display()
    );
    for line in std::io::stdin().lock().lines() {
        if line.is_err() {
            break;
        }
    }
    drop(pgbouncer);
    drop(postgres);
    ExitCode::SUCCESS
}
