//! proxy_hello: a small answer through a reverse proxy, requests/s over 100 kept-alive
//! connections: `neverblock serve --upstream` and nginx (`proxy_pass`, `keepalive 128`), one worker
//! each, in front of the same upstream (the delay server answering at once, 2 bytes), and the
//! upstream alone, from neverblock's load generator; rows are medians of alternating runs.

use std::process::Command;
use std::time::Duration;

use clap::Args;
use serde_json::json;

use super::servers::{self, Content, ServerChild, TempDir};
use super::{nginx, report, Common, Row};
use crate::load::{self, Load};

/// Options of `bench proxy-hello`.
#[derive(Args, Debug)]
pub(crate) struct ProxyHelloArgs {
    /// Kept-alive client connections.
    #[arg(short = 'c', long, default_value_t = 100)]
    connections: usize,
    /// Requests per run.
    #[arg(short = 'n', long, default_value_t = 100_000)]
    requests: usize,
    /// The proxies' workers (neverblock's loops, nginx's processes).
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Runs per server, alternating; rows give medians.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    #[command(flatten)]
    common: Common,
}

pub(crate) fn run(args: ProxyHelloArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.connections > 0 && args.requests > 0, "--connections and --requests must be positive");
    let mut upstream = Command::new(std::env::current_exe()?);
    upstream.args(["delay-server", "--port", "0", "--delay", "0ms", "--threads", "1"]);
    let upstream = ServerChild::announced(&mut upstream, "the delay server")?;
    let files = TempDir::new("proxy-hello")?;
    let content = Content::Proxy { upstream: upstream.addr, files: &files.0 };
    let server = servers::neverblock(content, args.workers)?;
    let nginx = match args.common.peers {
        true => nginx::start(content, args.workers).transpose()?,
        false => None,
    };
    let mut targets = vec![("neverblock", server.url()), ("upstream-alone", upstream.url())];
    if let Some(nginx) = &nginx {
        targets.push(("nginx", nginx.url()));
    }
    let params = json!({"connections": args.connections, "workers": args.workers, "requests": args.requests});
    let mut rates: Vec<Vec<f64>> = targets.iter().map(|_| Vec::new()).collect();
    for _ in 0..args.runs.max(1) {
        for ((_, target), rates) in targets.iter().zip(&mut rates) {
            let outcome = load::run(Load {
                url: target.clone(),
                requests: args.requests,
                concurrency: args.connections,
                keepalive: true,
                threads: 1,
                timeout: Duration::from_secs(10),
                total_timeout: None,
                progress: false,
            })?;
            anyhow::ensure!(outcome.failed() == 0, "{target}: {:?}", outcome.errors);
            rates.push(outcome.rate());
        }
    }
    let rows = targets
        .iter()
        .zip(rates)
        .map(|((name, _), mut rates)| {
            rates.sort_by(f64::total_cmp);
            Row::new("proxy-hello", name, params.clone()).metric("requests_per_s", rates[rates.len() / 2].round())
        })
        .collect();
    report::print(rows, "requests_per_s", args.common.json);
    Ok(())
}
