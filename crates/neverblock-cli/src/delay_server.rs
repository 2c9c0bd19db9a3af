//! `neverblock delay-server`: the seed's EventMachine backend. Every request is
//! answered `200 OK` after a fixed delay, by the library's HTTP server: each
//! connection is a fiber, so one thread holds tens of thousands of them, over a
//! loop per core (each with its own listener on the port, the kernel spreading
//! connections across them).

use std::time::Duration;

use anyhow::Context;
use clap::Args;
use neverblock_http::server::{Request, Response, Server};

/// Options of `neverblock delay-server`.
#[derive(Args, Debug)]
pub(crate) struct DelayServerArgs {
    /// How long to wait before answering each request (`0`, `10ms`, `1s` …).
    #[arg(long, default_value = "100ms", value_parser = humantime::parse_duration)]
    pub(crate) delay: Duration,
    /// The port to listen on (0: any free port; the chosen one is printed).
    #[arg(long, default_value_t = 8080)]
    pub(crate) port: u16,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub(crate) host: String,
    /// Event loops, one thread each, each accepting on the port (default: one per core).
    #[arg(long)]
    pub(crate) threads: Option<usize>,
}

pub(crate) fn run(args: DelayServerArgs) -> anyhow::Result<()> {
    let DelayServerArgs { delay, port, host, threads } = args;
    let threads = threads.unwrap_or_else(neverblock::runtime::available_threads);
    anyhow::ensure!(threads > 0, "--threads must be at least 1");
    let server = Server::builder()
        .workers(threads)
        .shutdown_on_signals()
        .bind((host.as_str(), port))
        .with_context(|| format!("listen on {host}:{port}"))?;
    // The first line on stdout is the URL, once every loop listens: the benchmarks start this server and read it.
    println!("http://{}/", server.local_addr());
    let loops = if threads == 1 { "1 loop".to_owned() } else { format!("{threads} loops") };
    eprintln!("delay-server: answering every request after {delay:?}, on {loops}");
    server.run(move |_: &mut Request<'_>| {
        if !delay.is_zero() {
            neverblock::sleep(delay);
        }
        Response::new(200).body("ok")
    })?;
    Ok(())
}
