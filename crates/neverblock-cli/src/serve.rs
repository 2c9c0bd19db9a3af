//! `neverblock serve`: the files under a directory over HTTP/1.1 and HTTP/2, in cleartext or over TLS, a loop
//! per core, sent by the kernel (`sendfile`; read and encrypted over TLS), and what no file answers
//! sent on to an upstream application (whose X-Sendfile answers it honours), with an Apache access
//! log and a Prometheus metrics page when asked, until SIGTERM or SIGINT (Ctrl-C) shuts it down
//! gracefully. SIGHUP reopens the access log and reads the certificates again; SIGUSR2 replaces
//! the process with a new one started from the program's file, which takes the sockets over
//! (`upgrade.rs`). It listens on the sockets systemd's socket activation hands it, when told to
//! (`--listen fd:3`, `listeners.rs`).

mod listeners;
mod pid_file;
mod upgrade;

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use neverblock::net::ListenFds;
use neverblock_http::server::{
    AccessLog, Exchange, Handler, HttpsOnly, LogFormat, Metrics, Proxy, Server, ServerBuilder, StaticFiles, TlsConfig,
    XSendfile,
};

use listeners::{Place, Socket};
use pid_file::PidFile;
use upgrade::{Upgrade, READY_NAME};

/// Options of `neverblock serve`.
#[derive(Args, Debug)]
pub(crate) struct ServeArgs {
    /// The directory to serve (default: `.`, or none with --upstream: every request goes to the
    /// upstream).
    pub(crate) dir: Option<PathBuf>,
    /// An address to listen on for HTTP in cleartext, `HOST:PORT` (port 0: any free port; the
    /// chosen one is printed), or `fd:N`: the socket systemd's socket activation handed over as
    /// descriptor N (3 is the first; LISTEN_FDS and LISTEN_PID say which were handed to this
    /// process). May be given several times. Default: 127.0.0.1:8080, unless --tls-listen is
    /// given (then no cleartext listener is opened without --listen).
    #[arg(long, value_name = "ADDR")]
    pub(crate) listen: Vec<String>,
    /// An address to listen on for HTTPS, `HOST:PORT` or `fd:N` (as --listen), with the
    /// certificates of --tls-cert. May be given several times, beside --listen.
    #[arg(long, value_name = "ADDR", requires = "tls_cert")]
    pub(crate) tls_listen: Vec<String>,
    /// Share the ports of --listen and --tls-listen with other processes (of the same user) that
    /// listen on them with SO_REUSEPORT, such as other `neverblock serve --reuse-port`: the kernel
    /// spreads new connections over all of them. Without it a port in use is an error.
    #[arg(long)]
    pub(crate) reuse_port: bool,
    /// Leave the loops unpinned: they run wherever the scheduler puts them, and the kernel spreads
    /// new connections by a hash of their addresses. By default, with a loop on every CPU, each
    /// loop is pinned to a CPU of its own and takes the connections whose packets arrive on that
    /// CPU, passing new ones (and kept-alive cleartext HTTP/1 ones, between requests) on to the
    /// least busy loop once it has held more than its share for 10 ms.
    #[arg(long)]
    pub(crate) no_pin: bool,
    /// Write the pid of the serving process to this file once it serves; a process started by
    /// SIGUSR2 writes its own once it has taken over. Removed at exit by the process it names.
    #[arg(long, value_name = "PATH")]
    pub(crate) pid_file: Option<PathBuf>,
    /// How long the process SIGUSR2 starts may take to serve before it is stopped and this one
    /// goes on serving.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    pub(crate) upgrade_timeout: Duration,
    /// A certificate chain (PEM, the server's certificate first) for --tls-listen, with the key of
    /// the --tls-key given in the same place. Give several pairs for several names: each client
    /// gets the one whose certificate names the host it asks for (SNI; wildcards as browsers read
    /// them), else the first. SIGHUP reads them again.
    #[arg(long, value_name = "FILE", requires = "tls_listen")]
    pub(crate) tls_cert: Vec<PathBuf>,
    /// The private key (PEM) of the --tls-cert in the same place.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub(crate) tls_key: Vec<PathBuf>,
    /// Cleartext listeners answer every request with a 308 redirect to the same URL on https (at
    /// the first --tls-listen port).
    #[arg(long, requires = "tls_listen")]
    pub(crate) redirect_https: bool,
    /// Event loops, one thread each, each accepting on the port (default: one per core).
    #[arg(long)]
    pub(crate) workers: Option<usize>,
    /// Write an access log line per request in this format: `common`, `combined`, or an Apache
    /// `LogFormat` pattern (`'%h %l %u %t "%r" %>s %b %D'`). To standard output unless
    /// --access-log-file is given.
    #[arg(long, value_name = "FORMAT")]
    pub(crate) access_log: Option<String>,
    /// Append the access log to this file (in the `common` format unless --access-log says
    /// otherwise); SIGHUP reopens it, for log rotation.
    #[arg(long, value_name = "PATH")]
    pub(crate) access_log_file: Option<PathBuf>,
    /// Send every request no file under DIR answers (every request, without DIR) to the
    /// application at this URL (`http://HOST:PORT`), streaming bodies both ways over kept-alive
    /// connections; a refused or reset upstream gets 502, a slow one 504.
    #[arg(long, value_name = "URL")]
    pub(crate) upstream: Option<String>,
    /// How long the upstream may take to accept a connection, and then for each part of its answer,
    /// before the client gets 504.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration, requires = "upstream")]
    pub(crate) upstream_timeout: Duration,
    /// Honour the upstream's `X-Sendfile: PATH` answers for files under this directory (after
    /// resolving symbolic links), and its `X-Accel-Redirect: /URI` answers as paths under it;
    /// the server sends the file itself (sendfile, Range, conditional requests).
    #[arg(long, value_name = "DIR", requires = "upstream")]
    pub(crate) x_sendfile_root: Option<PathBuf>,
    /// The response field that names a file to send (with --x-sendfile-root).
    #[arg(long, value_name = "NAME", default_value = "X-Sendfile", requires = "x_sendfile_root")]
    pub(crate) x_sendfile_header: String,
    /// `X-Accel-Redirect` URIs under PREFIX name files under DIR, as nginx's
    /// `location PREFIX { internal; alias DIR/; }` (repeatable; the longest prefix wins).
    #[arg(long, value_name = "PREFIX=DIR", requires = "upstream", value_parser = parse_location)]
    pub(crate) x_accel_location: Vec<(String, PathBuf)>,
    /// Speak HTTP/1.1 only: TLS offers no `h2` by ALPN, and a cleartext connection that opens
    /// with HTTP/2's preface is answered as HTTP/1.1 answers it (505). By default HTTP/2 is
    /// spoken to clients that ask for it so.
    #[arg(long)]
    pub(crate) no_http2: bool,
    /// Serve Prometheus metrics (text format 0.0.4) at this path, e.g. `/metrics` (default: none).
    #[arg(long, value_name = "PATH")]
    pub(crate) metrics_path: Option<String>,
    /// Warn when a loop has not come back to its event loop for this long (a handler computing or
    /// blocking without parking holds every connection of its loop): the warning names the
    /// connection, its request and how long; a second says when it let go. `0` turns it off.
    #[arg(long, value_name = "DURATION", default_value = "100ms", value_parser = humantime::parse_duration)]
    pub(crate) stall_warning: Duration,
}

/// Serves as `args` say, on the sockets in `handed` that they name.
pub(crate) fn run(args: ServeArgs, mut handed: ListenFds) -> anyhow::Result<()> {
    let workers = args.workers.unwrap_or_else(neverblock::runtime::available_threads);
    anyhow::ensure!(workers > 0, "--workers must be at least 1");
    // Each connection, file sent and upstream connection holds a descriptor.
    crate::open_files::raise_to_hard_limit();
    if let Some(path) = &args.metrics_path {
        anyhow::ensure!(path.starts_with('/'), "--metrics-path must be a path that starts with `/`: {path:?}");
    }
    let dir = match (&args.dir, &args.upstream) {
        (None, Some(_)) => None,
        (dir, _) => Some(dir.clone().unwrap_or_else(|| PathBuf::from("."))),
    };
    anyhow::ensure!(
        args.tls_cert.len() == args.tls_key.len(),
        "--tls-cert and --tls-key go in pairs: {} certificates, {} keys",
        args.tls_cert.len(),
        args.tls_key.len()
    );
    let tls = tls_config(&args)?;
    let pid_file = args.pid_file.as_deref().map(PidFile::new).transpose()?;
    let ready_pipe = handed.take_named(READY_NAME).pop();
    let places = places(&args, &mut handed)?;
    drop(handed);
    let files = dir.as_ref().map(StaticFiles::new).transpose()?;
    let log = access_log(&args)?;
    let metrics = args.metrics_path.as_ref().map(|_| Metrics::new());
    let upstream = upstream(&args, metrics.as_ref())?;
    let mut builder = Server::builder()
        .workers(workers)
        .shutdown_on_signals()
        .http2(!args.no_http2)
        .reuse_port(args.reuse_port)
        .pin_loops(!args.no_pin)
        .on_ready(on_ready(pid_file.clone(), ready_pipe))
        .stall_warning(args.stall_warning);
    if let Some(hook) = response_hook(log.clone(), metrics.clone()) {
        builder = builder.on_response(hook);
    }
    if let Some(metrics) = &metrics {
        builder = builder.on_handshake(metrics.handshake_hook());
    }
    let names = places.iter().map(|place| place.name.clone()).collect();
    let server = listen(builder, places, tls.as_ref())?;
    let loops = if workers == 1 { "1 loop".to_owned() } else { format!("{workers} loops") };
    let urls = server.urls().join(" and ");
    match (&files, &args.upstream) {
        (Some(files), None) => println!("serving {} on {urls} with {loops} (Ctrl-C stops)", files.root().display()),
        (Some(files), Some(url)) => println!(
            "serving on {urls} with {loops}: the files under {}, then the upstream {url} (Ctrl-C stops)",
            files.root().display()
        ),
        (None, url) => {
            println!("serving on {urls} with {loops}: the upstream {} (Ctrl-C stops)", url.as_deref().unwrap_or(""))
        }
    }
    let handler: Box<dyn Handler> = match (files, upstream) {
        (Some(files), Some(upstream)) => Box::new(files.then(upstream)),
        (Some(files), None) => Box::new(files),
        (None, Some(upstream)) => upstream,
        (None, None) => unreachable!("without --upstream there is a directory"),
    };
    let handler: Box<dyn Handler> = match (&metrics, &args.metrics_path) {
        (Some(metrics), Some(path)) => {
            metrics.watch(&server.handle());
            Box::new(metrics.serve(path, handler))
        }
        _ => handler,
    };
    let handler: Box<dyn Handler> = match args.redirect_https {
        true => Box::new(HttpsOnly::new(handler, tls_port(&server))),
        false => handler,
    };
    let reopened = log.clone().filter(|_| args.access_log_file.is_some());
    if reopened.is_some() || tls.is_some() {
        on_sighup(reopened, tls.clone());
    }
    Upgrade::of_this_process(names, args.upgrade_timeout).on_sigusr2(server.handle());
    let served = server.run(handler);
    if let Some(log) = log {
        log.close();
    }
    if let Some(pid_file) = pid_file {
        pid_file.remove_if_ours();
    }
    Ok(served?)
}

/// What the process does once it serves: writes the pid file, and tells the process it replaces
/// (through the pipe that one handed over), if any.
fn on_ready(pid_file: Option<PidFile>, ready_pipe: Option<std::os::fd::OwnedFd>) -> impl Fn() + Send + Sync {
    let ready_pipe = Mutex::new(ready_pipe);
    move || {
        if let Some(Err(e)) = pid_file.as_ref().map(PidFile::write) {
            log::error!("{e:#}");
        }
        if let Some(pipe) = ready_pipe.lock().unwrap_or_else(|p| p.into_inner()).take() {
            upgrade::tell_ready(pipe);
        }
    }
}

/// The upstream handler the options ask for: the proxy, inside X-Sendfile when a root or a
/// location is given.
fn upstream(args: &ServeArgs, metrics: Option<&Metrics>) -> anyhow::Result<Option<Box<dyn Handler>>> {
    let Some(url) = &args.upstream else { return Ok(None) };
    let mut proxy = Proxy::new(url).context("--upstream")?.timeout(args.upstream_timeout);
    if let Some(metrics) = metrics {
        proxy = proxy.observe(metrics.proxy_observer());
    }
    if args.x_sendfile_root.is_none() && args.x_accel_location.is_empty() {
        return Ok(Some(Box::new(proxy)));
    }
    let mut handler = XSendfile::new(proxy).header(args.x_sendfile_header.clone());
    if let Some(root) = &args.x_sendfile_root {
        handler = handler.root(root).context("--x-sendfile-root")?.accel_location("/", root)?;
    }
    for (prefix, dir) in &args.x_accel_location {
        handler = handler.accel_location(prefix, dir).with_context(|| format!("--x-accel-location {prefix}"))?;
    }
    Ok(Some(Box::new(handler)))
}

/// `PREFIX=DIR`.
fn parse_location(text: &str) -> Result<(String, PathBuf), String> {
    match text.split_once('=') {
        Some((prefix, dir)) if prefix.starts_with('/') && !dir.is_empty() => Ok((prefix.to_owned(), dir.into())),
        _ => Err(format!("{text:?} is not PREFIX=DIR with a PREFIX that starts with `/`")),
    }
}

/// The access log the options ask for, if any.
fn access_log(args: &ServeArgs) -> anyhow::Result<Option<AccessLog>> {
    let format = match (&args.access_log, &args.access_log_file) {
        (None, None) => return Ok(None),
        (Some(format), _) => format.parse::<LogFormat>().context("--access-log")?,
        (None, Some(_)) => LogFormat::common(),
    };
    Ok(Some(match &args.access_log_file {
        Some(path) => AccessLog::file(path, format)?,
        None => AccessLog::stdout(format)?,
    }))
}

/// The response hook feeding the access log and the metrics, if either is on.
fn response_hook(
    log: Option<AccessLog>,
    metrics: Option<Metrics>,
) -> Option<impl Fn(&Exchange<'_>) + Send + Sync + 'static> {
    let on = log.is_some() || metrics.is_some();
    on.then_some(move |exchange: &Exchange<'_>| {
        if let Some(log) = &log {
            log.record(exchange);
        }
        if let Some(metrics) = &metrics {
            metrics.record(exchange);
        }
    })
}

/// The certificates the options name, read and checked, if any.
fn tls_config(args: &ServeArgs) -> anyhow::Result<Option<TlsConfig>> {
    if args.tls_listen.is_empty() {
        return Ok(None);
    }
    anyhow::ensure!(!args.tls_cert.is_empty(), "--tls-listen needs --tls-cert and --tls-key");
    let builder = args.tls_cert.iter().zip(&args.tls_key).fold(TlsConfig::builder(), |b, (c, k)| b.cert_pair(c, k));
    Ok(Some(builder.build()?))
}

/// Where the options say to listen (see `listeners.rs`): each --listen in cleartext, each
/// --tls-listen over TLS; 127.0.0.1:8080 in cleartext when neither is given.
fn places(args: &ServeArgs, handed: &mut ListenFds) -> anyhow::Result<Vec<Place>> {
    let cleartext = match (args.listen.is_empty(), args.tls_listen.is_empty()) {
        (true, true) => vec!["127.0.0.1:8080".to_owned()],
        _ => args.listen.clone(),
    };
    listeners::places(&cleartext, &args.tls_listen, handed)
}

/// The server listening at `places`, in their order.
fn listen(builder: ServerBuilder, places: Vec<Place>, tls: Option<&TlsConfig>) -> anyhow::Result<Server> {
    let mut server: Option<Server> = None;
    for Place { given, tls: is_tls, socket, .. } in places {
        let tls = match (is_tls, tls) {
            (true, Some(tls)) => Some(tls),
            (true, None) => anyhow::bail!("{given} needs --tls-cert and --tls-key"),
            (false, _) => None,
        };
        let listening = match (server.take(), socket, tls) {
            (None, Socket::Address(addr), None) => builder.clone().bind(addr.as_str()),
            (None, Socket::Address(addr), Some(tls)) => builder.clone().bind_tls(addr.as_str(), tls),
            (None, Socket::Handed(sockets), None) => builder.clone().bind_sockets(sockets),
            (None, Socket::Handed(sockets), Some(tls)) => builder.clone().bind_sockets_tls(sockets, tls),
            (Some(server), Socket::Address(addr), None) => server.listen(addr.as_str()),
            (Some(server), Socket::Address(addr), Some(tls)) => server.listen_tls(addr.as_str(), tls),
            (Some(server), Socket::Handed(sockets), None) => server.listen_sockets(sockets),
            (Some(server), Socket::Handed(sockets), Some(tls)) => server.listen_sockets_tls(sockets, tls),
        };
        server = Some(listening.with_context(|| given.clone())?);
    }
    server.context("nowhere to listen")
}

/// The port of the server's first HTTPS listener, where --redirect-https sends clients.
fn tls_port(server: &Server) -> u16 {
    server
        .urls()
        .iter()
        .find_map(|url| url.strip_prefix("https://"))
        .and_then(|rest| rest.trim_end_matches('/').rsplit(':').next())
        .and_then(|port| port.parse().ok())
        .unwrap_or(443)
}

/// On each SIGHUP (logrotate's `postrotate` sends one after moving the log; certbot's deploy hook
/// after renewing certificates), reopens the access log and reads the certificates again, from a
/// thread of its own, until the process ends.
fn on_sighup(log: Option<AccessLog>, tls: Option<TlsConfig>) {
    let Ok(mut signals) = signal_hook::iterator::Signals::new([signal_hook::consts::SIGHUP]) else {
        log::warn!("SIGHUP cannot be watched; the access log will not be reopened nor the certificates read again");
        return;
    };
    let watcher = std::thread::Builder::new().name("sighup".into()).spawn(move || {
        for _ in signals.forever() {
            if let Some(log) = &log {
                log::info!("SIGHUP: reopening the access log");
                log.reopen();
            }
            if let Some(tls) = &tls {
                let failed = tls.reload().len();
                log::info!("SIGHUP: certificates read again ({failed} kept their old one)");
            }
        }
    });
    if let Err(e) = watcher {
        log::warn!(
            "no thread to watch for SIGHUP ({e}); the access log will not be reopened nor the certificates read again"
        );
    }
}
