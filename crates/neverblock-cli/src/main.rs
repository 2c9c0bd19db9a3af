//! The `neverblock` command: a static file server (`serve`), benchmarks that
//! reproduce the published experiments side by side with their peers, a load
//! client (`get`) and the experiments' backend (`delay-server`).

#![forbid(unsafe_code)]
#![allow(clippy::print_stdout)] // a command-line tool prints its results

mod bench;
mod delay_server;
mod get;
mod histogram;
mod load;
mod open_files;
mod serve;

use anyhow::Context;
use clap::{Parser, Subcommand};

/// The command allocates as a server would: a spawned fiber is one allocation, and
/// a burst of them is freed and made again, which glibc's malloc serves slowly
/// (consolidating bins) where mimalloc's free lists serve it at once. mimalloc's v2:
/// v3 serves an allocation of 8- or 16-byte alignment (every Rust allocation goes
/// through its aligned call) from its slow, over-allocating path whenever the block
/// size is not a power of two and the page's free list is empty.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "neverblock",
    version,
    about = "Fibers with Ruby's semantics, an HTTP server on them, and their benchmarks"
)]
struct Cli {
    /// Log more: -v for what the runtime and servers note (info), -vv debug, -vvv trace.
    /// Warnings and errors are always shown; RUST_LOG, when set, chooses instead.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve the files under a directory over HTTP/1.1 and HTTP/2, in cleartext or HTTPS (a loop per
    /// core; Ctrl-C stops gracefully).
    Serve(Box<serve::ServeArgs>),
    /// Run a benchmark (each prints a table, or JSON rows with --json).
    Bench {
        #[command(subcommand)]
        bench: bench::Bench,
    },
    /// Answer every HTTP request `200 OK` after a delay (the experiments' backend).
    DelayServer(delay_server::DelayServerArgs),
    /// GET a URL many times at once and report requests/s, latencies and errors.
    Get(get::GetArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // First, while descriptors 3, 4, … are still the ones a launcher (systemd, or the process
    // this one replaces) handed over, before this process opens any of its own.
    let serving = matches!(cli.command, Command::Serve(_));
    let handed = serving.then(neverblock::net::ListenFds::take).transpose().context("take the sockets handed over")?;
    init_logging(cli.verbose);
    dump_fibers_on_sigquit();
    match cli.command {
        Command::Serve(args) => serve::run(*args, handed.unwrap_or_default()),
        Command::Bench { bench } => bench.run(),
        Command::DelayServer(args) => delay_server::run(args),
        Command::Get(args) => get::run(args),
    }
}

/// Sends the library's log lines to stderr, at the level `-v` asks for.
fn init_logging(verbose: u8) {
    let level = match verbose {
        0 => log::LevelFilter::Warn,
        1 => log::LevelFilter::Info,
        2 => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    };
    let mut logger = env_logger::Builder::new();
    logger.filter_level(level);
    if let Ok(spec) = std::env::var("RUST_LOG") {
        logger.parse_filters(&spec);
    }
    logger.init();
}

/// On `SIGQUIT` (Ctrl-\ in a terminal, or `kill -QUIT`), prints what every fiber
/// of every loop is doing to stderr, as Java does with its threads, and goes on.
fn dump_fibers_on_sigquit() {
    let Ok(mut signals) = signal_hook::iterator::Signals::new([signal_hook::consts::SIGQUIT]) else {
        log::warn!("SIGQUIT cannot be watched; no fiber dump on it");
        return;
    };
    let watcher = std::thread::Builder::new().name("sigquit".into()).spawn(move || {
        for _ in signals.forever() {
            eprint!("fiber dump (SIGQUIT):\n{}", neverblock::runtime::dump_process(std::time::Duration::from_secs(2)));
        }
    });
    if let Err(e) = watcher {
        log::warn!("no thread for the fiber dump on SIGQUIT: {e}");
    }
}
