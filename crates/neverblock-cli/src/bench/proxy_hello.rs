//! proxy_hello: a small answer through a reverse proxy, requests/s over 100 kept-alive
//! connections: `neverblock serve --upstream` and nginx (`proxy_pass`, `keepalive 128`), one worker
//! each, in front of the same upstream (the delay server answering at once, 2 bytes), and the
//! upstream alone, from neverblock's load generator; rows are medians of alternating runs.

use std::process::Command;
use std::time::Duration;

use clap::Args;
use serde_json::json;

use super::xsendfile::{nginx, start, Process};
use super::{report, Common, Row};
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
    let exe = std::env::current_exe()?;
    let mut upstream = Command::new(&exe);
    upstream.args(["delay-server", "--port", "0", "--delay", "0ms", "--threads", "1"]);
    let (_upstream, url) = start(upstream, "the delay server")?;
    let url = url.trim().trim_end_matches('/').to_owned();
    let port = url.rsplit(':').next().unwrap_or_default().to_owned();
    let mut server = Command::new(&exe);
    server.args(["serve", "--listen", "127.0.0.1:0", "--workers", &args.workers.to_string(), "--upstream", &url]);
    let (_server, line) = start(server, "neverblock serve")?;
    let ours =
        line.split_whitespace().find(|w| w.starts_with("http://")).unwrap_or_default().trim_end_matches('/').to_owned();
    let scratch =
        super::xsendfile::Scratch(std::env::temp_dir().join(format!("neverblock-proxy-hello-{}", std::process::id())));
    std::fs::create_dir_all(&scratch.0)?;
    let nginx: Option<(Process, _, std::net::SocketAddr)> = match args.common.peers {
        true => nginx::start(&scratch.0, &port, args.workers).transpose()?,
        false => None,
    };
    let mut targets = vec![("neverblock", ours), ("upstream-alone", url.clone())];
    if let Some((_, _, addr)) = &nginx {
        targets.push(("nginx", format!("http://{addr}")));
    }
    let params = json!({"connections": args.connections, "workers": args.workers, "requests": args.requests});
    let mut rates: Vec<Vec<f64>> = targets.iter().map(|_| Vec::new()).collect();
    for _ in 0..args.runs.max(1) {
        for ((_, target), rates) in targets.iter().zip(&mut rates) {
            let outcome = load::run(Load {
                url: format!("{target}/"),
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
