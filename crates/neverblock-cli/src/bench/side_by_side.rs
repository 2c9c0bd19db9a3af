//! Request-rate measurements of several servers in one run: each server started on its CPUs, loaded
//! by [`http_load`](super::http_load) from the others, measured in rounds that alternate the
//! servers (so a slow spell of the machine falls on all of them), and reported as medians.
//!
//! A machine shared with other work (a CI runner, a developer's build) steals CPU time from
//! whichever server it happens to meet. So a round in which everything else on the machine kept
//! more than [`DISTURBED`] of a CPU busy during any server's measurement is disturbed: rounds go on
//! (up to three times `--runs`) until `--runs` of them are calm, and rows are medians over the calm
//! rounds (`calm` 1), where every server met the same quiet machine, or over all rounds (`calm` 0)
//! when none was.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use serde_json::Value;

use super::http_load::{self, Load, Tally};
use super::https_load::Tls;
use super::servers::{machine_cpu_time, own_cpu_time, pinned, Placement, ServerChild};
use super::{report, Row};

/// The load each measurement puts on a server.
#[derive(Args, Debug, Clone)]
pub(crate) struct LoadArgs {
    /// Connections at once, each a fiber sending its next request when the last is answered (on
    /// the same connection, kept alive, unless the bench opens a new one for every request).
    #[arg(short = 'c', long, default_value_t = 100)]
    pub(crate) connections: usize,
    /// How long each measurement counts responses.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub(crate) duration: Duration,
    /// How long each measurement loads the server before counting.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub(crate) warmup: Duration,
    /// Calm rounds wanted, each measuring every server once (at most three times as many rounds
    /// run); rows give medians.
    #[arg(long, default_value_t = 3)]
    pub(crate) runs: usize,
    /// Also measure the `neverblock` binary at this path (another build) in the same alternating
    /// rounds, as the row `baseline`: a change's speed, before against after, in one run.
    #[arg(long, value_name = "BIN")]
    pub(crate) baseline: Option<PathBuf>,
}

impl LoadArgs {
    /// The `baseline` contender, when `--baseline` names a binary: `start` given its path.
    pub(crate) fn baseline<'a>(
        &'a self,
        start: impl Fn(&Path, usize) -> anyhow::Result<ServerChild> + 'a,
    ) -> Option<Contender<'a>> {
        let bin = self.baseline.as_deref()?;
        Some(Contender { name: "baseline", start: Box::new(move |workers| Some(start(bin, workers))) })
    }
}

/// One server to measure: its row name and how to start it with a number of workers (`None`: not
/// available here, a note already said why).
pub(crate) struct Contender<'a> {
    pub(crate) name: &'static str,
    pub(crate) start: Box<dyn Fn(usize) -> Option<anyhow::Result<ServerChild>> + 'a>,
}

/// What one configuration asks of every server: the target, the body length it answers with, the
/// workers, the row's parameters, and whether the load speaks HTTPS (and how often it handshakes).
pub(crate) struct Case<'a> {
    pub(crate) bench: &'a str,
    pub(crate) path: &'a str,
    pub(crate) expect_len: u64,
    pub(crate) workers: usize,
    pub(crate) params: Value,
    pub(crate) tls: Option<Tls>,
}

/// Measures every contender `args.runs` times on `case` and returns a row of medians for each that
/// ran. A contender that is not available, fails to start, or does not answer a first request
/// right, is left out with a note.
pub(crate) fn measure(case: &Case<'_>, contenders: &[Contender<'_>], args: &LoadArgs) -> Vec<Row> {
    let placement = Placement::for_workers(case.workers);
    eprintln!(
        "note: {} {}: {}, load generator on {} thread(s)",
        case.bench,
        case.params,
        placement.describe(),
        placement.load_threads
    );
    // Each round measures every contender once; `rounds[r][i]` is contender i's measurement.
    let mut rounds: Vec<Vec<Option<Measured>>> = Vec::new();
    let mut dropped = vec![false; contenders.len()];
    let wanted = args.runs.max(1);
    while rounds.iter().filter(|round| is_calm(round)).count() < wanted && rounds.len() < 3 * wanted {
        let mut round = Vec::new();
        for (i, contender) in contenders.iter().enumerate() {
            let measured = match dropped[i] {
                true => None,
                false => once(case, contender, &placement, args, rounds.is_empty()),
            };
            round.push(match measured {
                Some(Ok(measured)) => Some(measured),
                Some(Err(e)) => {
                    eprintln!("note: {} skipped: {e:#}", contender.name);
                    dropped[i] = true;
                    None
                }
                None => {
                    dropped[i] = true;
                    None
                }
            });
        }
        rounds.push(round);
    }
    // The calm rounds if there are any (every server met the same quiet machine), else all.
    let calm = rounds.iter().any(|round| is_calm(round));
    let used: Vec<&Vec<Option<Measured>>> = rounds.iter().filter(|round| !calm || is_calm(round)).collect();
    contenders
        .iter()
        .enumerate()
        .filter_map(|(i, contender)| {
            let runs: Vec<&Measured> = used.iter().filter_map(|round| round[i].as_ref()).collect();
            (!runs.is_empty()).then(|| row(case, contender.name, &runs, rounds.len(), calm))
        })
        .collect()
}

/// Whether nothing else on the machine disturbed any measurement of the round.
fn is_calm(round: &[Option<Measured>]) -> bool {
    round.iter().flatten().all(|m| m.others_cpus <= DISTURBED)
}

/// How much of a CPU everything else on the machine may keep busy during a measurement that counts
/// as undisturbed.
const DISTURBED: f64 = 0.1;

/// One measurement's figures.
struct Measured {
    rate: f64,
    p50_ms: f64,
    p99_ms: f64,
    errors: u64,
    /// CPUs the server kept busy, on average, while loaded.
    server_cpus: f64,
    /// CPUs the load generator kept busy.
    load_cpus: f64,
    /// CPUs kept busy by everything else on the machine (neither the server nor the load
    /// generator): more than a few hundredths and the figures were disturbed.
    others_cpus: f64,
}

/// Starts the contender on the server's CPUs, checks that it answers (saying what its TLS
/// handshake agreed when `first`), loads it from the load generator's CPUs, stops it.
fn once(
    case: &Case<'_>,
    contender: &Contender<'_>,
    placement: &Placement,
    args: &LoadArgs,
    first: bool,
) -> Option<anyhow::Result<Measured>> {
    let server = match pinned(placement.server.as_ref(), || (contender.start)(case.workers))? {
        Ok(server) => server,
        Err(e) => return Some(Err(e)),
    };
    let load = Load {
        addr: server.addr,
        path: case.path.to_owned(),
        expect_len: case.expect_len,
        connections: args.connections,
        threads: placement.load_threads,
        warmup: args.warmup,
        duration: args.duration,
        tls: case.tls.clone(),
    };
    match pinned(placement.load.as_ref(), || http_load::probe(&load)) {
        Ok(Some(agreed)) if first => eprintln!("note: {}: {agreed}", contender.name),
        Ok(_) => {}
        Err(e) => return Some(Err(anyhow::anyhow!("it did not answer a first request right: {e}"))),
    }
    let before = [server.cpu_time(), own_cpu_time(), machine_cpu_time()];
    let tally = pinned(placement.load.as_ref(), || http_load::run(&load));
    let [server_cpu, own, machine] = [server.cpu_time(), own_cpu_time(), machine_cpu_time()];
    let seconds = (args.warmup + args.duration).as_secs_f64();
    let server_cpus = (server_cpu - before[0]).as_secs_f64() / seconds;
    let others =
        machine.saturating_sub(before[2]).saturating_sub(server_cpu - before[0]).saturating_sub(own - before[1]);
    drop(server);
    let cpus = Cpus {
        server: server_cpus,
        load: (own - before[1]).as_secs_f64() / seconds,
        others: others.as_secs_f64() / seconds,
    };
    Some(summarise(contender.name, &tally, args.duration, cpus))
}

/// CPUs kept busy while loaded, on average: by the server, the load generator, everything else.
struct Cpus {
    server: f64,
    load: f64,
    others: f64,
}

fn summarise(name: &str, tally: &Tally, duration: Duration, cpus: Cpus) -> anyhow::Result<Measured> {
    if let Some(error) = &tally.first_error {
        eprintln!("note: {name}: {} failed exchanges in the window; the first failure: {error}", tally.errors);
    }
    anyhow::ensure!(tally.latencies.count() > 0, "no request was answered in the window");
    let ms = |p: f64| tally.latencies.percentile(p).map_or(0.0, |d| d.as_secs_f64() * 1e3);
    Ok(Measured {
        rate: tally.latencies.count() as f64 / duration.as_secs_f64(),
        p50_ms: ms(50.0),
        p99_ms: ms(99.0),
        errors: tally.errors,
        server_cpus: cpus.server,
        load_cpus: cpus.load,
        others_cpus: cpus.others,
    })
}

/// A row of medians over `runs`, from `rounds` rounds, which were `calm` ones or all of them.
fn row(case: &Case<'_>, name: &str, runs: &[&Measured], rounds: usize, calm: bool) -> Row {
    let median_of = |f: fn(&Measured) -> f64| median(runs.iter().map(|m| f(m)).collect());
    Row::new(case.bench, name, case.params.clone())
        .metric("requests_per_s", median_of(|m| m.rate).round())
        .metric("p50_ms", report::round(median_of(|m| m.p50_ms)))
        .metric("p99_ms", report::round(median_of(|m| m.p99_ms)))
        .metric("server_cpus", report::round(median_of(|m| m.server_cpus)))
        .metric("server_cpu_us_per_req", report::round(median_of(|m| m.server_cpus / m.rate * 1e6)))
        .metric("load_cpus", report::round(median_of(|m| m.load_cpus)))
        .metric("others_cpus", report::round(median_of(|m| m.others_cpus)))
        .metric("errors", runs.iter().map(|m| m.errors).sum::<u64>())
        .metric("runs", runs.len())
        .metric("rounds", rounds)
        .metric("calm", u8::from(calm))
}

/// The median (the mean of the middle two for an even count); 0 for none.
pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn the_median_is_the_middle_value_or_the_mean_of_the_middle_two() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(vec![7.0]), 7.0);
        assert_eq!(median(vec![]), 0.0);
    }
}
