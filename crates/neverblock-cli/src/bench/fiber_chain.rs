//! fiber_chain (the TruffleRuby fibres article's first benchmark): each fiber creates the next and transfers to it;
//! the last transfers back to the root, and every fiber stays alive.
//!
//! Timed: from creating the first fiber to the root receiving t + 1. Teardown
//! (unwinding every suspended fiber's stack) is reported separately, since the
//! peers' garbage collectors do that work outside the timed region.

use std::cell::RefCell;
use std::process::Command;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use neverblock::fiber::{Builder, Fiber, StackError};
use serde_json::json;

use super::{peers, raw, report, Common, Row};

#[derive(Args, Debug)]
pub(crate) struct ChainArgs {
    /// Length of the chain.
    #[arg(long, default_value_t = 10_000)]
    t: u64,
    /// Untimed runs first.
    #[arg(long, default_value_t = 20)]
    warmup: u32,
    /// Timed runs.
    #[arg(long, default_value_t = 20)]
    runs: u32,
    /// Find the largest t that succeeds (doubling, then bisection), each attempt in
    /// a child process; report its peak RSS and the limit that stopped it.
    #[arg(long)]
    max: bool,
    /// The largest t that --max tries.
    #[arg(long, default_value_t = 2_000_000)]
    cap: u64,
    /// Make guard pages with mprotect, as kernels before 6.13 must (two mappings per fiber).
    #[arg(long)]
    mprotect_guards: bool,
    /// Usable bytes of each fiber's stack.
    #[arg(long, default_value_t = neverblock::fiber::DEFAULT_STACK_SIZE)]
    stack_size: usize,
    /// Run one chain of t fibers, print its outcome and exit (one --max attempt).
    #[arg(long, hide = true)]
    probe: bool,
    #[command(flatten)]
    common: Common,
}

impl ChainArgs {
    /// The published configuration: t = 10,000, 20 warm-ups, 20 timed runs.
    pub(crate) fn defaults(common: Common) -> ChainArgs {
        ChainArgs {
            t: 10_000,
            warmup: 20,
            runs: 20,
            max: false,
            cap: 2_000_000,
            mprotect_guards: false,
            stack_size: neverblock::fiber::DEFAULT_STACK_SIZE,
            probe: false,
            common,
        }
    }
}

/// One fiber of the chain; a stack error ends the chain early and is kept in `failed`.
fn link(
    t: u64,
    root: Fiber<u64>,
    builder: Builder,
    failed: Rc<RefCell<Option<StackError>>>,
) -> Result<Fiber<u64>, StackError> {
    builder.clone().build(move |x: u64| {
        if x > t {
            return root.transfer(x).expect("the root waits in transfer");
        }
        match link(t, root.clone(), builder, failed.clone()) {
            Ok(next) => next.transfer(x + 1).expect("a new fiber accepts transfer"),
            Err(e) => {
                *failed.borrow_mut() = Some(e);
                root.transfer(x).expect("the root waits in transfer")
            }
        }
    })
}

/// Builds and runs one chain of `t` fibers; returns its run time and its head,
/// which holds every fiber of the chain alive.
fn run_chain(t: u64, builder: &Builder) -> Result<(Duration, Fiber<u64>), StackError> {
    let failed = Rc::new(RefCell::new(None));
    let start = Instant::now();
    let first = link(t, Fiber::current(), builder.clone(), failed.clone())?;
    let result = first.transfer(0).expect("the chain transfers back to the root");
    let run = start.elapsed();
    if let Some(e) = failed.take() {
        return Err(e);
    }
    assert_eq!(result, t + 1, "the chain counts every fiber");
    Ok((run, first))
}

/// One chain of `t` fibers: its run time and the time to drop (unwind) it.
fn chain(t: u64, builder: &Builder) -> Result<(Duration, Duration), StackError> {
    let (run, first) = run_chain(t, builder)?;
    let start = Instant::now();
    drop(first);
    Ok((run, start.elapsed()))
}

fn mean_stddev(samples: &[f64]) -> (f64, f64) {
    let n = samples.len() as f64;
    let mean = samples.iter().sum::<f64>() / n;
    let var = samples.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    (mean, var.sqrt())
}

/// Warm-ups, then timed runs, of `one` (returning run and teardown times).
fn measure(
    args: &ChainArgs,
    mut one: impl FnMut() -> anyhow::Result<(Duration, Duration)>,
) -> anyhow::Result<[f64; 3]> {
    for _ in 0..args.warmup {
        one()?;
    }
    let mut runs = Vec::new();
    let mut teardowns = Vec::new();
    for _ in 0..args.runs {
        let (run, teardown) = one()?;
        runs.push(run.as_secs_f64());
        teardowns.push(teardown.as_secs_f64());
    }
    let (mean, stddev) = mean_stddev(&runs);
    Ok([mean, stddev, mean_stddev(&teardowns).0])
}

fn builder(args: &ChainArgs) -> Builder {
    Builder::new().stack_size(args.stack_size).mprotect_guards(args.mprotect_guards)
}

pub(crate) fn run(args: ChainArgs) -> anyhow::Result<()> {
    if args.probe {
        return probe(&args);
    }
    if args.max {
        return find_max(&args);
    }
    let params = json!({"t": args.t, "warmup": args.warmup, "runs": args.runs});
    let row = |name: &str, [mean, stddev, teardown]: [f64; 3]| {
        Row::new("fiber-chain", name, params.clone())
            .metric("mean_s", mean)
            .metric("stddev_s", stddev)
            .metric("teardown_s", teardown)
    };
    let b = builder(&args);
    let mut rows = vec![row("neverblock", measure(&args, || Ok(chain(args.t, &b)?))?)];
    if args.common.peers {
        let pool = raw::StackPool::new(args.stack_size);
        let floor = measure(&args, || {
            let (result, run, teardown) = raw::chain(args.t, &pool);
            anyhow::ensure!(result == args.t + 1, "raw chain counted {result}");
            Ok((run, teardown))
        })?;
        rows.push(row("corosensei", floor));
        let peer_params =
            [("t", args.t.to_string()), ("warmup", args.warmup.to_string()), ("runs", args.runs.to_string())];
        rows.extend(peers::run("fiber-chain", &peer_params));
    }
    report::print(rows, "mean_s", &args.common)?;
    Ok(())
}

/// One --max attempt, in its own process: prints `ok <seconds> <peak rss bytes>`,
/// or the error and exit status 3.
fn probe(args: &ChainArgs) -> anyhow::Result<()> {
    // The process exits with the chain alive: an attempt measures holding t fibers.
    match run_chain(args.t, &builder(args)) {
        Ok((run, _alive)) => {
            println!("ok {} {}", run.as_secs_f64(), peak_rss().unwrap_or(0));
            std::process::exit(0);
        }
        Err(e) => {
            println!("error {e}");
            std::process::exit(3);
        }
    }
}

/// Peak resident memory of this process, in bytes.
fn peak_rss() -> Option<u64> {
    super::status_bytes("VmHWM:")
}

enum Attempt {
    Ok { seconds: f64, rss: u64 },
    Failed(String),
}

fn attempt(args: &ChainArgs, t: u64) -> anyhow::Result<Attempt> {
    let exe = std::env::current_exe().context("find the neverblock binary")?;
    let mut cmd = Command::new(exe);
    cmd.args(["bench", "fiber-chain", "--probe", "--t", &t.to_string(), "--stack-size", &args.stack_size.to_string()]);
    if args.mprotect_guards {
        cmd.arg("--mprotect-guards");
    }
    let out = cmd.output().context("run an attempt")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or("");
    if let Some(rest) = line.strip_prefix("ok ") {
        let mut parts = rest.split_whitespace();
        let seconds = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0.0);
        let rss = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
        return Ok(Attempt::Ok { seconds, rss });
    }
    if let Some(rest) = line.strip_prefix("error ") {
        return Ok(Attempt::Failed(rest.to_string()));
    }
    Ok(Attempt::Failed(format!("the attempt died ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim())))
}

/// The largest chain that succeeded so far.
struct Success {
    t: u64,
    seconds: f64,
    rss: u64,
}

/// The smallest chain that failed so far, and why.
struct Failure {
    t: u64,
    reason: String,
}

fn find_max(args: &ChainArgs) -> anyhow::Result<()> {
    let mut good: Option<Success> = None;
    let mut bad: Option<Failure> = None;
    let record = |t: u64, outcome: Attempt, good: &mut Option<Success>, bad: &mut Option<Failure>| match outcome {
        Attempt::Ok { seconds, rss } => {
            eprintln!("  t = {t:>9}: ok in {seconds:.3} s, peak RSS {:.1} MiB", rss as f64 / 1048576.0);
            *good = Some(Success { t, seconds, rss });
        }
        Attempt::Failed(reason) => {
            eprintln!("  t = {t:>9}: failed: {reason}");
            *bad = Some(Failure { t, reason });
        }
    };
    // Doubling up to the first failure (or the cap)...
    let mut t = args.t.min(args.cap);
    while bad.is_none() {
        record(t, attempt(args, t)?, &mut good, &mut bad);
        if t == args.cap {
            break;
        }
        t = (t * 2).min(args.cap);
    }
    // ...then bisection, to within 1%.
    while let (Some(lo), Some(hi)) = (&good, &bad) {
        if hi.t - lo.t <= (lo.t / 100).max(1) {
            break;
        }
        let mid = lo.t + (hi.t - lo.t) / 2;
        record(mid, attempt(args, mid)?, &mut good, &mut bad);
    }
    let Some(best) = good else {
        bail!("no chain succeeded; the first attempt failed: {}", bad.map(|b| b.reason).unwrap_or_default());
    };
    let stopped_by = match &bad {
        None => format!("the cap of {} (--cap)", args.cap),
        Some(failure) => format!("t = {}: {}", failure.t, failure.reason),
    };
    let guards = if args.mprotect_guards { "mprotect" } else { "auto" };
    let row = Row::new(
        "fiber-chain-max",
        "neverblock",
        json!({"cap": args.cap, "stack_size": args.stack_size, "guards": guards, "stopped_by": stopped_by}),
    )
    .metric("max_fibers_count", best.t)
    .metric("run_s", best.seconds)
    .metric("peak_rss_bytes", best.rss)
    .metric("rss_per_fiber_bytes", best.rss / best.t.max(1));
    report::print(vec![row], "max_fibers_count", &args.common)?;
    Ok(())
}
