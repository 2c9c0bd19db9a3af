//! `neverblock serve`: the files under a directory over HTTP/1.1, a loop per core, sent by the
//! kernel (`sendfile`), with an Apache access log and a Prometheus metrics page when asked, until
//! SIGTERM or SIGINT (Ctrl-C) shuts it down gracefully.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use neverblock_http::server::{
    AccessLog, Exchange, Handler, LogFormat, Metrics, Request, Response, Server, StaticFiles,
};

/// Options of `neverblock serve`.
#[derive(Args, Debug)]
pub(crate) struct ServeArgs {
    /// The directory to serve.
    #[arg(default_value = ".")]
    pub(crate) dir: PathBuf,
    /// The address to listen on, `HOST:PORT` (port 0: any free port; the chosen one is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub(crate) listen: String,
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
    /// Serve Prometheus metrics (text format 0.0.4) at this path, e.g. `/metrics` (default: none).
    #[arg(long, value_name = "PATH")]
    pub(crate) metrics_path: Option<String>,
}

pub(crate) fn run(args: ServeArgs) -> anyhow::Result<()> {
    let workers = args.workers.unwrap_or_else(neverblock::runtime::available_threads);
    anyhow::ensure!(workers > 0, "--workers must be at least 1");
    if let Some(path) = &args.metrics_path {
        anyhow::ensure!(path.starts_with('/'), "--metrics-path must be a path that starts with `/`: {path:?}");
    }
    let files = StaticFiles::new(&args.dir)?;
    let root = files.root().display().to_string();
    let log = access_log(&args)?;
    let metrics = args.metrics_path.as_ref().map(|_| Metrics::new());
    let mut builder = Server::builder().workers(workers).shutdown_on_signals();
    if let Some(hook) = response_hook(log.clone(), metrics.clone()) {
        builder = builder.on_response(hook);
    }
    let server = builder.bind(args.listen.as_str()).with_context(|| format!("listen on {}", args.listen))?;
    let handler: Box<dyn Handler> = match (&metrics, &args.metrics_path) {
        (Some(metrics), Some(path)) => {
            metrics.watch(&server.handle());
            Box::new(metrics.serve(path, files))
        }
        _ => Box::new(files),
    };
    let loops = if workers == 1 { "1 loop".to_owned() } else { format!("{workers} loops") };
    println!("serving {root} on http://{}/ with {loops} (Ctrl-C stops)", server.local_addr());
    if let (Some(log), Some(_)) = (&log, &args.access_log_file) {
        reopen_on_sighup(log.clone());
    }
    let served = server.run(BoxedHandler(handler));
    if let Some(log) = log {
        log.close();
    }
    Ok(served?)
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

/// Reopens the access log on each SIGHUP (logrotate's `postrotate` sends one after moving the
/// file), from a thread of its own, until the process ends.
fn reopen_on_sighup(log: AccessLog) {
    let Ok(mut signals) = signal_hook::iterator::Signals::new([signal_hook::consts::SIGHUP]) else {
        log::warn!("SIGHUP cannot be watched; the access log will not be reopened on it");
        return;
    };
    let watcher = std::thread::Builder::new().name("sighup".into()).spawn(move || {
        for _ in signals.forever() {
            log::info!("SIGHUP: reopening the access log");
            log.reopen();
        }
    });
    if let Err(e) = watcher {
        log::warn!("no thread to watch for SIGHUP ({e}); the access log will not be reopened on it");
    }
}

/// A handler chosen at start-up.
struct BoxedHandler(Box<dyn Handler>);

impl Handler for BoxedHandler {
    fn handle(&self, request: &mut Request<'_>) -> Response {
        self.0.handle(request)
    }
}
