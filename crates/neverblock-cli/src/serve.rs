//! `neverblock serve`: the files under a directory over HTTP/1.1, a loop per core,
//! sent by the kernel (`sendfile`), until SIGTERM or SIGINT (Ctrl-C) shuts it down
//! gracefully.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use neverblock_http::server::{Server, StaticFiles};

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
}

pub(crate) fn run(args: ServeArgs) -> anyhow::Result<()> {
    let workers = args.workers.unwrap_or_else(neverblock::runtime::available_threads);
    anyhow::ensure!(workers > 0, "--workers must be at least 1");
    let files = StaticFiles::new(&args.dir)?;
    let server = Server::builder()
        .workers(workers)
        .shutdown_on_signals()
        .bind(args.listen.as_str())
        .with_context(|| format!("listen on {}", args.listen))?;
    let loops = if workers == 1 { "1 loop".to_owned() } else { format!("{workers} loops") };
    println!("serving {} on http://{}/ with {loops} (Ctrl-C stops)", files.root().display(), server.local_addr());
    server.run(files)?;
    Ok(())
}
