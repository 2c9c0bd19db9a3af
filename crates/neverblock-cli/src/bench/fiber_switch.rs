//! fiber_switch (the TruffleRuby fibres article's second benchmark): t fibers each loop `yield(random fiber)`; the
//! driver does `next = next.resume` n·t times. Measures the resume+yield round trip.

use std::time::{Duration, Instant};

use clap::Args;
use neverblock::fiber::{self, Fiber};
use serde_json::json;

use super::{peers, raw, report, Common, Row};

#[derive(Args, Debug)]
pub(crate) struct SwitchArgs {
    /// Fibers (default: the two published configurations, t=100 n=1000 and t=10000 n=100).
    #[arg(long, requires = "n")]
    t: Option<usize>,
    /// Rounds: the driver resumes n·t times.
    #[arg(long, requires = "t")]
    n: Option<usize>,
    #[command(flatten)]
    common: Common,
}

impl SwitchArgs {
    /// Both published configurations.
    pub(crate) fn defaults(common: Common) -> SwitchArgs {
        SwitchArgs { t: None, n: None, common }
    }
}

/// A small, fast generator (xorshift64*) so the benchmark measures switching, not randomness.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub(crate) fn below(&mut self, bound: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) as usize % bound
    }
}

/// Runs fiber_switch on neverblock fibers; returns the time of the timed pass.
fn switch(t: usize, rounds: usize) -> anyhow::Result<Duration> {
    let fibers = (0..t)
        .map(|i| {
            Fiber::new(move |_: usize| {
                let mut rng = Rng::new(i as u64);
                loop {
                    fiber::yield_now(rng.below(t)).expect("the driver resumed this fiber");
                }
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let drive = |rounds: usize| -> anyhow::Result<()> {
        let mut next = 0;
        for _ in 0..rounds {
            next = fibers[next].resume(0)?;
        }
        Ok(())
    };
    drive(rounds)?;
    let start = Instant::now();
    drive(rounds)?;
    Ok(start.elapsed())
}

fn row(implementation: &str, t: usize, n: usize, total: Duration) -> Row {
    let secs = total.as_secs_f64();
    Row::new("fiber-switch", implementation, json!({"t": t, "n": n}))
        .metric("total_s", secs)
        .metric("round_trip_ns", secs * 1e9 / (t * n) as f64)
}

pub(crate) fn run(args: SwitchArgs) -> anyhow::Result<()> {
    let configs = match (args.t, args.n) {
        (Some(t), Some(n)) => vec![(t, n)],
        _ => vec![(100, 1000), (10_000, 100)],
    };
    let mut rows = Vec::new();
    let pool = raw::StackPool::new(fiber::DEFAULT_STACK_SIZE);
    for &(t, n) in &configs {
        rows.push(row("neverblock", t, n, switch(t, t * n)?));
        if args.common.peers {
            rows.push(row("corosensei", t, n, raw::switch(t, t * n, &pool)));
        }
    }
    if args.common.peers {
        for &(t, n) in &configs {
            let params = [("t", t.to_string()), ("n", n.to_string())];
            rows.extend(peers::run("fiber-switch", &params));
        }
    }
    report::print(rows, "round_trip_ns", &args.common)?;
    Ok(())
}
