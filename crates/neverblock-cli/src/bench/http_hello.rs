//! http_hello: requests a second for a 13-byte answer (`hello, world\n`) over 100 keep-alive
//! connections, from neverblock's server beside nginx, Go's net/http and may_minihttp with the
//! same number of workers, each loaded by neverblock's own load generator on the CPUs the server
//! does not have (see [`Placement`](super::servers::Placement)).

use clap::Args;
use neverblock_http::server::{Request, Response, Server};
use serde_json::json;

use super::servers::{self, Content};
use super::side_by_side::{self, Case, Contender, LoadArgs};
use super::{nginx, peers, report, Common};

/// Options of `bench http-hello`.
#[derive(Args, Debug)]
pub(crate) struct HelloArgs {
    /// Server workers, one configuration each: neverblock's loops, nginx's worker processes, Go's
    /// GOMAXPROCS, may's scheduler threads.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2])]
    workers: Vec<usize>,
    #[command(flatten)]
    load: LoadArgs,
    #[command(flatten)]
    common: Common,
}

/// Options of `bench serve-hello`.
#[derive(Args, Debug)]
pub(crate) struct ServeHelloArgs {
    /// The address to listen on (port 0: any free port); the URL is printed once it listens.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: String,
    /// Event loops, one thread each (default: one per core).
    #[arg(long)]
    workers: Option<usize>,
}

/// The 13 bytes every server of the benchmark answers with.
pub(crate) const HELLO: &str = "hello, world\n";

pub(crate) fn run(args: HelloArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.workers.iter().all(|&w| w > 0), "--workers must be at least 1");
    let mut contenders = vec![Contender {
        name: "neverblock",
        start: Box::new(|workers| Some(servers::neverblock(Content::Hello, workers))),
    }];
    contenders.extend(args.load.baseline(|bin, workers| servers::neverblock_at(bin, Content::Hello, workers)));
    if args.common.peers {
        // Built now, not on the first start, which runs pinned to the server's CPUs.
        let _ = (peers::go_http_server(), peers::minihttp_binary());
        contenders.push(Contender { name: "nginx", start: Box::new(|workers| nginx::start(Content::Hello, workers)) });
        contenders
            .push(Contender { name: "go-net-http", start: Box::new(|workers| servers::go(Content::Hello, workers)) });
        contenders.push(Contender { name: "may-minihttp", start: Box::new(servers::minihttp) });
    }
    let mut rows = Vec::new();
    for &workers in &args.workers {
        let case = Case {
            bench: "http-hello",
            path: "/",
            expect_len: HELLO.len() as u64,
            workers,
            params: json!({"workers": workers, "connections": args.load.connections}),
            tls: None,
        };
        rows.extend(side_by_side::measure(&case, &contenders, &args.load));
    }
    report::print(rows, "requests_per_s", &args.common)?;
    Ok(())
}

/// Serves the benchmark's hello answer (the server `bench http-hello` measures, also handy to
/// profile on its own).
pub(crate) fn serve(args: ServeHelloArgs) -> anyhow::Result<()> {
    let workers = args.workers.unwrap_or_else(neverblock::runtime::available_threads);
    anyhow::ensure!(workers > 0, "--workers must be at least 1");
    let server = Server::builder().workers(workers).shutdown_on_signals().bind(args.listen.as_str())?;
    println!("http://{}/", server.local_addr());
    server.run(|_: &mut Request<'_>| Response::new(200).header("Content-Type", "text/plain").body(HELLO))?;
    Ok(())
}
