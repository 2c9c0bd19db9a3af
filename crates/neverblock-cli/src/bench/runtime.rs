//! The runtime's experiments (issue: scheduler and event loop), each beside Go:
//! spawn+join, channel ping-pong between two fibers, and a million sleepers.

use std::rc::Rc;
use std::time::{Duration, Instant};

use clap::Args;
use neverblock::sync::bounded;
use serde_json::json;

use super::{peers, report, status_bytes, Common, Row};

/// Resident memory of this process, in bytes.
fn resident() -> u64 {
    status_bytes("VmRSS:").unwrap_or(0)
}

#[derive(Args, Debug)]
pub(crate) struct SpawnJoinArgs {
    /// Fibers spawned (and joined) per timed run.
    #[arg(long, default_value_t = SpawnJoinArgs::N)]
    n: usize,
    #[command(flatten)]
    common: Common,
}

impl SpawnJoinArgs {
    const N: usize = 100_000;

    pub(crate) fn defaults(common: Common) -> SpawnJoinArgs {
        SpawnJoinArgs { n: Self::N, common }
    }
}

#[derive(Args, Debug)]
pub(crate) struct PingPongArgs {
    /// Round trips.
    #[arg(long, default_value_t = PingPongArgs::N)]
    n: usize,
    #[command(flatten)]
    common: Common,
}

impl PingPongArgs {
    const N: usize = 1_000_000;

    pub(crate) fn defaults(common: Common) -> PingPongArgs {
        PingPongArgs { n: Self::N, common }
    }
}

#[derive(Args, Debug)]
pub(crate) struct SleepersArgs {
    /// Sleeping fibers.
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) n: usize,
    /// How long they sleep once all are spawned, in milliseconds (all wake at the
    /// same deadline); it must outlast their first runs.
    #[arg(long, default_value_t = 5000)]
    sleep_ms: u64,
    #[command(flatten)]
    pub(crate) common: Common,
}

/// Go peer processes behind the spawn-join and ping-pong baselines (see `peers::run_go_best`).
const GO_PROCESSES: usize = 3;

/// Timed spawn-join runs, the fastest reported; Go's peer takes the fastest of as many.
const SPAWN_JOIN_RUNS: usize = 5;

/// Timed ping-pong runs, the fastest reported; Go's peer takes the fastest of as many.
const PING_PONG_RUNS: usize = 3;

pub(crate) fn spawn_join(args: SpawnJoinArgs) -> anyhow::Result<()> {
    let n = args.n;
    let elapsed = neverblock::run(move || {
        let once = || {
            let start = Instant::now();
            let handles: Vec<_> = (0..n).map(|i| neverblock::spawn(move || i)).collect();
            let sum: usize = handles.into_iter().map(|h| h.join().expect("no panic")).sum();
            assert_eq!(sum, n * (n - 1) / 2);
            start.elapsed()
        };
        once();
        (0..SPAWN_JOIN_RUNS).map(|_| once()).min().expect("at least one run")
    });
    let mut rows = vec![Row::new("spawn-join", "neverblock", json!({"n": n}))
        .metric("total_s", elapsed.as_secs_f64())
        .metric("per_fiber_ns", elapsed.as_secs_f64() * 1e9 / n as f64)];
    if args.common.peers {
        rows.extend(peers::run_go_best("spawn-join", &[("n", n.to_string())], "per_fiber_ns", GO_PROCESSES));
    }
    report::print(rows, "per_fiber_ns", &args.common)?;
    Ok(())
}

pub(crate) fn ping_pong(args: PingPongArgs) -> anyhow::Result<()> {
    let n = args.n;
    let elapsed = neverblock::run(move || {
        let once = |rounds: usize| {
            let (ping_tx, ping_rx) = bounded::<usize>(0);
            let (pong_tx, pong_rx) = bounded::<usize>(0);
            let echo = neverblock::spawn(move || {
                while let Ok(v) = ping_rx.recv() {
                    pong_tx.send(v + 1).expect("the driver waits");
                }
            });
            let start = Instant::now();
            let mut v = 0;
            for _ in 0..rounds {
                ping_tx.send(v).expect("the echo fiber waits");
                v = pong_rx.recv().expect("the echo fiber answers");
            }
            let elapsed = start.elapsed();
            drop(ping_tx);
            echo.join().expect("no panic");
            assert_eq!(v, rounds);
            elapsed
        };
        once(n / 10);
        (0..PING_PONG_RUNS).map(|_| once(n)).min().expect("at least one run")
    });
    let mut rows = vec![Row::new("channel-ping-pong", "neverblock", json!({"n": n}))
        .metric("total_s", elapsed.as_secs_f64())
        .metric("round_trip_ns", elapsed.as_secs_f64() * 1e9 / n as f64)];
    if args.common.peers {
        rows.extend(peers::run_go_best("channel-ping-pong", &[("n", n.to_string())], "round_trip_ns", GO_PROCESSES));
    }
    report::print(rows, "round_trip_ns", &args.common)?;
    Ok(())
}

pub(crate) fn sleepers(args: SleepersArgs) -> anyhow::Result<()> {
    let (n, sleep) = (args.n, Duration::from_millis(args.sleep_ms));
    let measured = neverblock::run(move || -> anyhow::Result<[f64; 3]> {
        // The handles are made before the first reading: Go's goroutines have none.
        let mut handles = Vec::with_capacity(n);
        let before = resident();
        let start = Instant::now();
        // The deadline is set once every fiber has been made (run once), before any sleeps.
        let deadline = Rc::new(std::cell::Cell::new(None));
        let woke = Rc::new(std::cell::Cell::new(0usize));
        for _ in 0..n {
            let (woke, deadline) = (woke.clone(), deadline.clone());
            handles.push(neverblock::try_spawn(move || {
                // The first run makes the fiber (and takes its stack); the second sleeps.
                neverblock::yield_now();
                neverblock::sleep_until(deadline.get().expect("set before the second runs"));
                woke.set(woke.get() + 1);
            })?);
        }
        neverblock::yield_now();
        let spawned = start.elapsed();
        let wake_at = Instant::now() + sleep;
        deadline.set(Some(wake_at));
        neverblock::yield_now();
        anyhow::ensure!(Instant::now() < wake_at, "the fibers' first runs outlasted the sleep; raise --sleep-ms");
        let asleep = resident().saturating_sub(before);
        // This fiber's timer was entered after every sleeper's, at the same deadline:
        // equal deadlines fire in order, so all have woken when it does.
        neverblock::sleep_until(wake_at);
        let wake = wake_at.elapsed();
        anyhow::ensure!(woke.get() == n, "only {} of {n} sleepers woke", woke.get());
        for h in handles {
            h.join().map_err(|e| anyhow::anyhow!("a sleeper failed: {e}"))?;
        }
        Ok([(asleep / n as u64) as f64, wake.as_secs_f64(), spawned.as_secs_f64()])
    })?;
    let [bytes, wake, spawned] = measured;
    let mut rows = vec![Row::new("sleepers", "neverblock", json!({"n": n}))
        .metric("bytes_per_sleeper_bytes", bytes)
        .metric("wake_all_s", wake)
        .metric("spawn_all_s", spawned)];
    if args.common.peers {
        rows.extend(peers::run_go("sleepers", &[("n", n.to_string()), ("sleep_ms", args.sleep_ms.to_string())]));
    }
    report::print(rows, "wake_all_s", &args.common)?;
    Ok(())
}
