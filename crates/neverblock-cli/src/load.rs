//! A closed-loop load generator: `concurrency` fibers, spread over the runtime's
//! threads, each sending its next GET as soon as its last one is answered.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use neverblock::runtime::{self, Builder};
use neverblock_http::{Client, Request};

/// What to send.
#[derive(Clone, Debug)]
pub(crate) struct Load {
    pub(crate) url: String,
    pub(crate) requests: usize,
    pub(crate) concurrency: usize,
    /// Reuse connections; otherwise every request opens its own (`Connection: close`).
    pub(crate) keepalive: bool,
    pub(crate) threads: usize,
    pub(crate) timeout: Duration,
    /// Print a progress line on stderr every second.
    pub(crate) progress: bool,
}

/// What came back.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    pub(crate) elapsed: Duration,
    /// Latencies of the requests answered 2xx, sorted.
    pub(crate) latencies: Vec<Duration>,
    /// Failures by kind or status.
    pub(crate) errors: BTreeMap<String, usize>,
}

impl Outcome {
    pub(crate) fn ok(&self) -> usize {
        self.latencies.len()
    }

    pub(crate) fn failed(&self) -> usize {
        self.errors.values().sum()
    }

    /// Answered requests per second.
    pub(crate) fn rate(&self) -> f64 {
        self.ok() as f64 / self.elapsed.as_secs_f64()
    }

    /// The `p`-th percentile latency (p in 0..=100).
    pub(crate) fn percentile(&self, p: f64) -> Option<Duration> {
        let last = self.latencies.len().checked_sub(1)?;
        Some(self.latencies[((last as f64) * p / 100.0).round() as usize])
    }
}

/// Per fiber: latencies of successes, and failures.
type Tally = (Vec<Duration>, Vec<String>);

/// Runs `load` on a runtime of its own and waits for every request.
pub(crate) fn run(load: Load) -> anyhow::Result<Outcome> {
    let client = Client::builder()
        .max_connections_per_host(load.concurrency)
        .connect_timeout(load.timeout)
        .read_timeout(load.timeout)
        .build()?;
    let next = Arc::new(AtomicUsize::new(0));
    let threads = load.threads.clamp(1, load.concurrency.max(1));
    // Timed from when every loop is up until the last answer, as the peers time themselves.
    let (tallies, elapsed) = Builder::new().threads(threads).run(move || {
        let started = Instant::now();
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (client, next, load) = (client.clone(), next.clone(), load.clone());
                runtime::spawn_on(t, move || {
                    let fibers = load.concurrency / threads + usize::from(t < load.concurrency % threads);
                    let progress = (t == 0 && load.progress).then(|| {
                        let (next, total) = (next.clone(), load.requests);
                        neverblock::spawn(move || report_progress(&next, total, started))
                    });
                    let workers: Vec<_> = (0..fibers)
                        .map(|_| {
                            let (client, next, load) = (client.clone(), next.clone(), load.clone());
                            neverblock::spawn(move || work(&client, &next, &load))
                        })
                        .collect();
                    let tallies: Vec<Tally> =
                        workers.into_iter().map(|w| w.join().expect("a load fiber panicked")).collect();
                    if let Some(progress) = progress {
                        progress.cancel();
                    }
                    tallies
                })
            })
            .collect();
        let tallies = handles.into_iter().flat_map(|h| h.join().expect("a load thread panicked")).collect::<Vec<_>>();
        (tallies, started.elapsed())
    });
    let mut outcome = Outcome { elapsed, ..Outcome::default() };
    for (latencies, errors) in tallies {
        outcome.latencies.extend(latencies);
        for e in errors {
            *outcome.errors.entry(e).or_default() += 1;
        }
    }
    outcome.latencies.sort_unstable();
    Ok(outcome)
}

/// One fiber's loop: take the next request number until there are none left.
fn work(client: &Client, next: &AtomicUsize, load: &Load) -> Tally {
    let request = match load.keepalive {
        true => Request::new("GET", load.url.as_str()),
        false => Request::new("GET", load.url.as_str()).header("Connection", "close"),
    };
    let mut tally = Tally::default();
    while next.fetch_add(1, Ordering::Relaxed) < load.requests {
        let start = Instant::now();
        match client.request(&request) {
            Ok(r) if (200..300).contains(&r.status()) => tally.0.push(start.elapsed()),
            Ok(r) => tally.1.push(format!("status {}", r.status())),
            Err(e) => tally.1.push(format!("{:?}", e.kind())),
        }
    }
    tally
}

/// Prints `done/total, rate` on stderr every second until cancelled.
fn report_progress(next: &AtomicUsize, total: usize, started: Instant) {
    loop {
        neverblock::sleep(Duration::from_secs(1));
        let sent = next.load(Ordering::Relaxed).min(total);
        let rate = sent as f64 / started.elapsed().as_secs_f64();
        eprint!("\r{sent}/{total} requests sent, {rate:.0}/s   ");
    }
}
