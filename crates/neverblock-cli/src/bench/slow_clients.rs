//! slow_clients (grizzly-sendfile's experiment): C clients, each downloading a 20 MB file at
//! 1 MB/s for a fixed window, from `neverblock serve` and from nginx: aggregate MB/s against the
//! bound of C MB/s, time to first byte, and whether every byte of every download was right.
//!
//! The clients are those of [`downloads`](super::downloads): fibers in this process over a loop
//! per core, each on a connection of its own, throttled from its first byte, every byte checked.

use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use neverblock::runtime;
use serde_json::json;

use super::downloads::{self, Download};
use super::servers::{self, machine_cpu_time, own_cpu_time, Content, ServerChild, TempDir};
use super::side_by_side::median;
use super::{nginx, report, Common, Row};

/// Options of `bench slow-clients`.
#[derive(Args, Debug)]
pub(crate) struct SlowClientsArgs {
    /// Clients at once, one configuration each.
    #[arg(short = 'c', long, value_delimiter = ',', default_values_t = [50usize, 100, 200, 300, 1000])]
    clients: Vec<usize>,
    /// How long each configuration runs.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    window: Duration,
    /// The file's size (`20MB` = 20,000,000 bytes; kB, MB, KiB, MiB or plain bytes).
    #[arg(long, default_value = "20MB", value_parser = parse_size)]
    file_size: u64,
    /// Each client's download rate, per second (same units).
    #[arg(long, default_value = "1MB", value_parser = parse_size)]
    rate: u64,
    /// Server workers: neverblock's loops, nginx's worker processes (default: one per core).
    #[arg(long)]
    workers: Option<usize>,
    /// Windows per server and configuration, alternating the servers; rows give medians.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    #[command(flatten)]
    common: Common,
}

pub(crate) fn run(args: SlowClientsArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.clients.iter().all(|&c| c > 0), "--clients must be at least 1");
    anyhow::ensure!(args.file_size > 0 && args.rate > 0, "--file-size and --rate must be positive");
    let workers = args.workers.unwrap_or_else(runtime::available_threads);
    anyhow::ensure!(workers > 0, "--workers must be at least 1");
    let dir = TempDir::new("slow-clients")?;
    let file: Arc<Vec<u8>> = Arc::new(downloads::contents(args.file_size));
    std::fs::write(dir.0.join("file.bin"), &*file)?;
    let root = dir.0.as_path();
    let mut rows = Vec::new();
    for &clients in &args.clients {
        let params = json!({"clients": clients, "workers": workers, "window_s": args.window.as_secs_f64()});
        let mut neverblock = Vec::new();
        let mut peer = Vec::new();
        for _ in 0..args.runs.max(1) {
            neverblock.push(measure(servers::neverblock(Content::Files(root), workers)?, &file, clients, &args));
            if args.common.peers {
                if let Some(server) = nginx::start(Content::Files(root), workers) {
                    peer.push(measure(server?, &file, clients, &args));
                }
            }
        }
        rows.push(row("neverblock", &params, clients, &args, &neverblock));
        if !peer.is_empty() {
            rows.push(row("nginx", &params, clients, &args, &peer));
        }
    }
    report::print(rows, "mb_per_s", &args.common)?;
    Ok(())
}

/// Runs the clients against `server` for a window, then stops it; with the CPUs the server and
/// everything else on the machine kept busy meanwhile.
fn measure(server: ServerChild, file: &Arc<Vec<u8>>, clients: usize, args: &SlowClientsArgs) -> Window {
    let before = [server.cpu_time(), own_cpu_time(), machine_cpu_time()];
    let download = Download::get(server.addr, "/file.bin", file.clone(), args.rate);
    let tally = downloads::run(&download, clients, args.window);
    let [server_cpu, own, machine] = [server.cpu_time(), own_cpu_time(), machine_cpu_time()];
    let window = args.window.as_secs_f64();
    let others =
        machine.saturating_sub(before[2]).saturating_sub(server_cpu - before[0]).saturating_sub(own - before[1]);
    Window {
        tally,
        server_cpus: (server_cpu - before[0]).as_secs_f64() / window,
        others_cpus: others.as_secs_f64() / window,
    }
}

/// What one window's clients saw, and the CPUs kept busy meanwhile.
struct Window {
    tally: downloads::Tally,
    /// CPUs the server kept busy, on average.
    server_cpus: f64,
    /// CPUs everything but the server and the clients kept busy.
    others_cpus: f64,
}

fn row(name: &str, params: &serde_json::Value, clients: usize, args: &SlowClientsArgs, runs: &[Window]) -> Row {
    let window = args.window.as_secs_f64();
    let bound = clients as f64 * args.rate as f64 / 1e6;
    let median_of = |f: &dyn Fn(&Window) -> f64| median(runs.iter().map(f).collect());
    let mb_per_s = median_of(&|w| w.tally.bytes as f64 / 1e6 / window);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mean = |w: &Window| ms(w.tally.ttfb_mean());
    let p99 = |w: &Window| w.tally.ttfb.percentile(99.0).map_or(0.0, ms);
    Row::new("slow-clients", name, params.clone())
        .metric("mb_per_s", report::round(mb_per_s))
        .metric("bound_pct", (mb_per_s / bound * 1000.0).round() / 10.0)
        .metric("ttfb_mean_ms", report::round(median_of(&mean)))
        .metric("ttfb_p99_ms", report::round(median_of(&p99)))
        .metric("completed", runs.iter().map(|w| w.tally.completed).sum::<u64>())
        .metric("bad_downloads", runs.iter().map(|w| w.tally.bad).sum::<u64>())
        .metric("server_cpus", report::round(median_of(&|w| w.server_cpus)))
        .metric("others_cpus", report::round(median_of(&|w| w.others_cpus)))
        .metric("runs", runs.len())
}

/// A size: plain bytes, or with a unit (kB, MB, GB: powers of 1000; KiB, MiB, GiB: of 1024).
fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().map_err(|_| format!("{text:?} is not a size"))?;
    let scale = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        other => return Err(format!("unknown unit {other:?} (kB, MB, GB, KiB, MiB, GiB)")),
    };
    Ok((number * scale).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_decimal_and_binary_units() {
        assert_eq!(parse_size("20MB"), Ok(20_000_000));
        assert_eq!(parse_size("1mb"), Ok(1_000_000));
        assert_eq!(parse_size("64KiB"), Ok(65_536));
        assert_eq!(parse_size("1.5kB"), Ok(1_500));
        assert_eq!(parse_size("4096"), Ok(4_096));
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("MB").is_err());
    }
}
