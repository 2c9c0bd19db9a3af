//! `neverblock bench …`: the published experiments neverblock reproduces, each against its peers in one run.

mod app_sleep;
mod certificates;
mod chart;
mod delay_client;
mod downloads;
mod fiber_chain;
mod fiber_switch;
mod h2;
mod h2o;
mod http_hello;
mod http_load;
mod http_static;
mod https;
mod https_load;
mod idle_connections;
mod nginx;
mod peers;
mod pg;
mod proxy_hello;
mod raw;
mod report;
mod runtime;
mod servers;
mod side_by_side;
mod slow_clients;
mod std_client;
mod throttle;
mod xsendfile;

use std::path::PathBuf;

use clap::{Args, Subcommand};

pub(crate) use report::Row;

/// The benchmarks.
#[derive(Subcommand, Debug)]
pub(crate) enum Bench {
    /// fiber_chain: a chain of t fibers, each creating the next and transferring to it (TruffleRuby's fibres benchmark).
    FiberChain(fiber_chain::ChainArgs),
    /// fiber_switch: t fibers, each resume+yield to a random next one (TruffleRuby's fibres benchmark).
    FiberSwitch(fiber_switch::SwitchArgs),
    /// Spawn a fiber and join it, many times (vs Go's `go` + WaitGroup).
    SpawnJoin(runtime::SpawnJoinArgs),
    /// Two fibers ping-pong over rendezvous channels (vs Go's unbuffered channel).
    ChannelPingPong(runtime::PingPongArgs),
    /// A million fibers asleep at once: memory each, and time to wake them all (vs goroutines).
    Sleepers(runtime::SleepersArgs),
    /// delay_client: 1000 GETs against a server that answers after D ms (NeverBlock's benchmark).
    DelayClient(delay_client::DelayClientArgs),
    /// 1,000 fibers each doing one GET with a client written for std::net (ureq, a plain
    /// TcpStream), parked by the libc hooks, against a server answering after D ms, beside
    /// neverblock's own client.
    StdClient(std_client::StdClientArgs),
    /// 100 keep-alive connections in a closed loop beside 10,000 idle ones: memory per idle
    /// connection and the active ones' latencies (vs Go net/http, or another build's server).
    IdleConnections(idle_connections::IdleArgs),
    /// sleep queries (NeverBlock's): concurrent `select pg_sleep(1)`, a fibered pool vs one blocking connection.
    PgSleep(pg::SleepArgs),
    /// long/short mix (NeverBlock's): one `pg_sleep` every k `select 1`, at several concurrencies.
    PgMix(pg::MixArgs),
    /// libpq's blocking API on fibers: ten `select pg_sleep(1)` on ten fibers of one loop, with the
    /// libc hooks and without (NEVERBLOCK_HOOKS=off, the blocking row).
    LibpqSleep(pg::SleepArgs),
    /// `select 1` throughput through a 16-connection pool, 256 fibers (lent and shared modes).
    PgSelect1(pg::Select1Args),
    /// An HTTP endpoint that runs `select pg_sleep(1)`, ten clients at once: one blocking worker vs
    /// neverblock's server (NeverBlock's "Rails faster" experiment).
    AppSleep(app_sleep::AppSleepArgs),
    /// A small answer through `serve --upstream` and through nginx (`--peers`), one worker each, and
    /// from the upstream alone: requests/s over 100 kept-alive connections.
    ProxyHello(proxy_hello::ProxyHelloArgs),
    /// X-Sendfile behind `serve --upstream` (grizzly-sendfile's): C clients at 1 MB/s downloading a
    /// 20 MB file from a 4-worker application that streams it or answers X-Sendfile.
    Xsendfile(xsendfile::XSendfileArgs),
    /// Requests/s for a 13-byte answer over 100 keep-alive connections (vs nginx, Go net/http, may_minihttp).
    HttpHello(http_hello::HelloArgs),
    /// Requests/s for a 13-byte and a 1 MiB file from `neverblock serve` (vs nginx with sendfile, h2o, Go's FileServer).
    HttpStatic(http_static::StaticArgs),
    /// HTTPS from `serve --tls-listen` (vs nginx, h2o, Go's ServeTLS), TLS 1.3: full handshakes/s (ECDSA
    /// P-256 and RSA-2048), resumed handshakes/s, kept-alive requests/s, MB/s for a 1 MiB file.
    Https(https::HttpsArgs),
    /// HTTP/2 from `serve` (vs nginx, h2o and Go's net/http) under h2load: 10 connections x 10
    /// streams, a 13-byte and a 1 MiB file, over TLS and in cleartext: requests/s, MB/s, CPU per request.
    H2(h2::H2Args),
    /// C clients each downloading a 20 MB file at 1 MB/s: aggregate MB/s, time to first byte, checked bytes (vs nginx).
    SlowClients(slow_clients::SlowClientsArgs),
    /// The server `http-hello` measures, alone: answers every request `hello, world` (prints its URL).
    #[command(hide = true)]
    ServeHello(http_hello::ServeHelloArgs),
    /// The fiber and runtime benchmarks (fiber-chain, fiber-switch, spawn-join, channel-ping-pong)
    /// with defaults.
    All(AllArgs),
}

/// Options of `bench all`.
#[derive(Args, Debug)]
pub(crate) struct AllArgs {
    /// Draw each benchmark's chart into this directory, as `NAME.svg` (made if missing).
    #[arg(long, value_name = "DIR")]
    charts: Option<PathBuf>,
    #[command(flatten)]
    common: Common,
}

/// Options every benchmark takes.
#[derive(Args, Debug, Clone)]
pub(crate) struct Common {
    /// Print one JSON object per row instead of a table.
    #[arg(long)]
    json: bool,
    /// Also run the peers each benchmark has, when installed: raw corosensei (the floor), MRI Ruby, Go,
    /// Python gevent; Go pgx and tokio-postgres for pg-mix and pg-select1; nginx, h2o (the file
    /// servers), Go net/http and may_minihttp for the HTTP servers.
    #[arg(long)]
    peers: bool,
    /// Also draw the results as an SVG picture into this file: lines against the varied
    /// parameter where the experiment has one (pg-mix, slow-clients, delay-client), else
    /// side-by-side bars of each implementation.
    #[arg(long, value_name = "FILE.svg")]
    chart: Option<PathBuf>,
}

impl Common {
    /// These options, the chart drawn to `DIR/NAME.svg` when `dir` is given.
    fn charted(&self, dir: Option<&PathBuf>, name: &str) -> Common {
        Common { chart: dir.map(|dir| dir.join(format!("{name}.svg"))), ..self.clone() }
    }
}

/// A `/proc/self/status` field given in kB (`VmRSS:`, `VmHWM:`), in bytes.
pub(crate) fn status_bytes(key: &str) -> Option<u64> {
    status_bytes_of("self", key)
}

/// The same field of process `pid` (`self` for this one).
pub(crate) fn status_bytes_of(pid: &str, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let value = status.lines().find_map(|l| l.strip_prefix(key))?;
    Some(value.split_whitespace().next()?.parse::<u64>().ok()? * 1024)
}

impl Bench {
    pub(crate) fn run(self) -> anyhow::Result<()> {
        let _cleanup = peers::WorkDirCleanup;
        match self {
            Bench::FiberChain(args) => fiber_chain::run(args),
            Bench::FiberSwitch(args) => fiber_switch::run(args),
            Bench::SpawnJoin(args) => runtime::spawn_join(args),
            Bench::ChannelPingPong(args) => runtime::ping_pong(args),
            Bench::Sleepers(args) => runtime::sleepers(args),
            Bench::DelayClient(args) => delay_client::run(args),
            Bench::IdleConnections(args) => idle_connections::run(args),
            Bench::PgSleep(args) => pg::sleep(args),
            Bench::PgMix(args) => pg::mix(args),
            Bench::PgSelect1(args) => pg::select1(args),
            Bench::LibpqSleep(args) => pg::libpq_sleep(args),
            Bench::StdClient(args) => std_client::run(args),
            Bench::AppSleep(args) => app_sleep::run(args),
            Bench::HttpHello(args) => http_hello::run(args),
            Bench::HttpStatic(args) => http_static::run(args),
            Bench::Https(args) => https::run(args),
            Bench::H2(args) => h2::run(args),
            Bench::SlowClients(args) => slow_clients::run(args),
            Bench::ServeHello(args) => http_hello::serve(args),
            Bench::ProxyHello(args) => proxy_hello::run(args),
            Bench::Xsendfile(args) => xsendfile::run(args),
            Bench::All(AllArgs { charts, common }) => {
                anyhow::ensure!(common.chart.is_none(), "bench all draws a chart per benchmark: give --charts DIR");
                if let Some(dir) = &charts {
                    std::fs::create_dir_all(dir)?;
                }
                let dir = charts.as_ref();
                fiber_chain::run(fiber_chain::ChainArgs::defaults(common.charted(dir, "fiber-chain")))?;
                fiber_switch::run(fiber_switch::SwitchArgs::defaults(common.charted(dir, "fiber-switch")))?;
                runtime::spawn_join(runtime::SpawnJoinArgs::defaults(common.charted(dir, "spawn-join")))?;
                runtime::ping_pong(runtime::PingPongArgs::defaults(common.charted(dir, "channel-ping-pong")))
            }
        }
    }
}
