//! The `neverblock` command: benchmarks that reproduce the published experiments
//! side by side with their peers (`serve`, `get` and `delay-server` come with the
//! I/O stack).

#![forbid(unsafe_code)]
#![allow(clippy::print_stdout)] // a command-line tool prints its results

mod bench;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "neverblock", version, about = "Fibers with Ruby's semantics, and their benchmarks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a benchmark (each prints a table, or JSON rows with --json).
    Bench {
        #[command(subcommand)]
        bench: bench::Bench,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Bench { bench } => bench.run(),
    }
}
