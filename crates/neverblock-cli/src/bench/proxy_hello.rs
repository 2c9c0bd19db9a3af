//! proxy_hello: a small answer through a reverse proxy, requests/s over kept-alive connections:
//! `neverblock serve --upstream` and nginx (`proxy_pass`, `keepalive 128`), each in front of its
//! own delay server answering at once (2 bytes), and that upstream alone, as a baseline.
//!
//! Measured as `http-hello` measures servers (see [`side_by_side`]): a proxy and its upstream
//! together are the server, started on the server's CPUs (with one worker: one CPU for both, the
//! load generator on the other), their CPU time counted together; rounds alternate the servers and
//! rows are medians over the calm ones.

use std::time::Duration;

use clap::Args;
use serde_json::json;

use super::servers::{self, Content, ServerChild, TempDir};
use super::side_by_side::{self, Case, Contender, LoadArgs};
use super::{nginx, report, Common};

/// Options of `bench proxy-hello`.
#[derive(Args, Debug)]
pub(crate) struct ProxyHelloArgs {
    /// The proxies' workers (neverblock's loops, nginx's processes), and the upstream's loops.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    #[command(flatten)]
    load: LoadArgs,
    #[command(flatten)]
    common: Common,
}

pub(crate) fn run(args: ProxyHelloArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.workers > 0, "--workers must be at least 1");
    // The proxies' X-Sendfile root: nothing is sent from it here.
    let files = TempDir::new("proxy-hello")?;
    let files = files.0.as_path();
    let mut contenders = vec![
        Contender {
            name: "neverblock",
            start: Box::new(|workers| {
                Some(upstream(workers).and_then(|up| {
                    let proxy = servers::neverblock(Content::Proxy { upstream: up.addr, files }, workers)?;
                    Ok(proxy.in_front_of(up))
                }))
            }),
        },
        Contender { name: "upstream-alone", start: Box::new(|workers| Some(upstream(workers))) },
    ];
    contenders.extend(args.load.baseline(|bin, workers| {
        let up = upstream(workers)?;
        let proxy = servers::neverblock_at(bin, Content::Proxy { upstream: up.addr, files }, workers)?;
        Ok(proxy.in_front_of(up))
    }));
    if args.common.peers {
        contenders.push(Contender {
            name: "nginx",
            start: Box::new(|workers| {
                let up = match upstream(workers) {
                    Ok(up) => up,
                    Err(e) => return Some(Err(e)),
                };
                let proxy = nginx::start(Content::Proxy { upstream: up.addr, files }, workers)?;
                Some(proxy.map(|proxy| proxy.in_front_of(up)))
            }),
        });
    }
    let case = Case {
        bench: "proxy-hello",
        path: "/",
        expect_len: 2,
        workers: args.workers,
        params: json!({"workers": args.workers, "connections": args.load.connections}),
        tls: None,
    };
    let rows = side_by_side::measure(&case, &contenders, &args.load);
    report::print(rows, "requests_per_s", &args.common)?;
    Ok(())
}

/// The upstream: `neverblock delay-server` answering at once with `workers` loops.
fn upstream(workers: usize) -> anyhow::Result<ServerChild> {
    let mut command = servers::delay_server(&std::env::current_exe()?, Duration::ZERO, Some(workers));
    ServerChild::announced(&mut command, "the delay server")
}
