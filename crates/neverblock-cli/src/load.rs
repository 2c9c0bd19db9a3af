//! A closed-loop load generator: `concurrency` fibers, spread over the runtime's
//! threads, each sending its next GET as soon as its last one is answered.
//!
//! The generator's own bookkeeping per request touches only the fiber's thread:
//! request numbers are claimed from the shared counter a batch at a time, and
//! answers are tallied per thread, merged at the end. (The shared `Client` still
//! takes its pool's locks for each request.)

use std::cell::{Cell, RefCell};
use std::ops::Range;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use neverblock::runtime::{self, Builder, JoinError};
use neverblock::sync::WaitGroup;
use neverblock_http::{Client, Request};

pub(crate) use interrupt::Interrupt;
use progress::Counts;
pub(crate) use tally::Outcome;
use tally::Tally;

mod interrupt;
mod progress;
mod tally;

/// At most how many request numbers a thread claims from the shared counter at once.
const BATCH: usize = 64;

/// What to send.
#[derive(Clone, Debug)]
pub(crate) struct Load {
    pub(crate) url: String,
    pub(crate) requests: usize,
    pub(crate) concurrency: usize,
    /// Reuse connections; otherwise every request opens its own (`Connection: close`).
    pub(crate) keepalive: bool,
    pub(crate) threads: usize,
    /// The connect and read timeout.
    pub(crate) timeout: Duration,
    /// How long one request may take, its body included.
    pub(crate) total_timeout: Option<Duration>,
    /// Print a progress line on stderr every second: requests finished, and how many failed.
    pub(crate) progress: bool,
}

/// The request numbers one thread's fibers share: a batch claimed from the
/// counter all threads share, taken one by one, then the next batch.
struct Claims {
    next: Arc<AtomicUsize>,
    total: usize,
    size: usize,
    batch: Cell<Range<usize>>,
}

impl Claims {
    /// Claims of `total` requests shared by `fibers` fibers over all threads, for a
    /// thread running `here` of them. A batch is at most one request per fiber's
    /// share and one per fiber of this thread: numbers a thread holds while all its
    /// fibers are busy would otherwise wait for them while another thread's fibers
    /// are idle (1000 requests on 1000 fibers take one each; one fiber per thread
    /// claims one at a time).
    fn new(next: Arc<AtomicUsize>, total: usize, fibers: usize, here: usize) -> Claims {
        let size = (total / fibers.max(1)).min(here).clamp(1, BATCH);
        Claims { next, total, size, batch: Cell::new(0..0) }
    }

    /// Claims the next request; false once every request has been claimed.
    fn claim(&self) -> bool {
        let mut batch = self.batch.take();
        if batch.is_empty() {
            let start = self.next.fetch_add(self.size, Ordering::Relaxed);
            batch = start.min(self.total)..(start + self.size).min(self.total);
        }
        let claimed = batch.next().is_some();
        self.batch.set(batch);
        claimed
    }
}

/// Runs `load` on a runtime of its own and waits for every request.
pub(crate) fn run(load: Load) -> anyhow::Result<Outcome> {
    run_until(load, None)
}

/// Runs `load` on a runtime of its own and waits for every request, or, once `interrupt` has
/// come, for none: each loop's fibers are cancelled where they are, requests in flight are not
/// counted, and the outcome says it was interrupted.
pub(crate) fn run_until(load: Load, interrupt: Option<Arc<Interrupt>>) -> anyhow::Result<Outcome> {
    let mut client = Client::builder()
        .max_connections_per_host(load.concurrency)
        .connect_timeout(load.timeout)
        .read_timeout(load.timeout);
    if let Some(total) = load.total_timeout {
        client = client.total_timeout(total);
    }
    let client = client.build()?;
    let next = Arc::new(AtomicUsize::new(0));
    let threads = load.threads.clamp(1, load.concurrency.max(1));
    let counts: Arc<[Counts]> = (0..threads).map(|_| Counts::default()).collect();
    let interrupted = interrupt.clone();
    // Timed from when every loop is up until the last answer, as the peers time themselves.
    let (tallies, elapsed) = Builder::new().threads(threads).run(move || {
        let started = Instant::now();
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (client, next, load) = (client.clone(), next.clone(), load.clone());
                let here = Here { counts: counts.clone(), index: t, interrupt: interrupt.clone() };
                runtime::spawn_on(t, move || {
                    let fibers = load.concurrency / threads + usize::from(t < load.concurrency % threads);
                    let progress = (t == 0 && load.progress).then(|| {
                        let (counts, total) = (here.counts.clone(), load.requests);
                        neverblock::spawn(move || progress::report(&counts, total, started))
                    });
                    let claims = Claims::new(next, load.requests, load.concurrency, fibers);
                    let tally = run_thread(&client, claims, &load, fibers, here);
                    if let Some(progress) = progress {
                        progress.cancel();
                    }
                    tally
                })
            })
            .collect();
        let tallies = handles.into_iter().map(|h| h.join().expect("a load thread panicked")).collect::<Vec<_>>();
        (tallies, started.elapsed())
    });
    let interrupted = interrupted.is_some_and(|i| i.happened());
    let mut outcome = Outcome { elapsed, interrupted, ..Outcome::default() };
    for tally in tallies {
        outcome.add(tally);
    }
    Ok(outcome)
}

/// What a loop's fibers share besides the client, the claims and the tally.
struct Here {
    /// Every loop's progress counts; this loop's are `counts[index]`.
    counts: Arc<[Counts]>,
    index: usize,
    interrupt: Option<Arc<Interrupt>>,
}

/// Runs `fibers` fibers on this thread until `claims` runs out, or the interrupt comes; returns
/// their tally.
fn run_thread(client: &Client, claims: Claims, load: &Load, fibers: usize, here: Here) -> Tally {
    let (claims, tally) = (Rc::new(claims), Rc::new(RefCell::new(Tally::default())));
    // Every worker counts itself out when it ends, is cancelled, or is cancelled before it starts
    // (its closure, and so the guard, is dropped unrun).
    let ended = Rc::new(WaitGroup::new());
    ended.add(fibers);
    let workers: Rc<Vec<_>> = Rc::new(
        (0..fibers)
            .map(|_| {
                let (client, claims, tally, load) = (client.clone(), claims.clone(), tally.clone(), load.clone());
                let (counts, index, out) = (here.counts.clone(), here.index, Out(ended.clone()));
                neverblock::spawn(move || {
                    let _out = out;
                    work(&client, &claims, &tally, &load, &counts[index]);
                })
            })
            .collect(),
    );
    let watcher = here.interrupt.map(|interrupt| {
        let workers = workers.clone();
        neverblock::spawn(move || match interrupt.wait() {
            Ok(()) => workers.iter().for_each(|worker| worker.cancel()),
            Err(e) => log::warn!("Ctrl-C cannot stop this run: {e}"),
        })
    });
    ended.wait().expect("no timeout is around the wait");
    if let Some(watcher) = watcher {
        watcher.cancel();
        let _ = watcher.join();
    }
    let workers = Rc::into_inner(workers).expect("the watcher, the only other holder, has ended");
    for worker in workers {
        match worker.join() {
            Ok(()) | Err(JoinError::Cancelled) => {}
            Err(e) => panic!("a load fiber failed: {e}"),
        }
    }
    Rc::into_inner(tally).expect("every fiber holding the tally has ended").into_inner()
}

/// Marks a worker ended in its group when dropped.
struct Out(Rc<WaitGroup>);

impl Drop for Out {
    fn drop(&mut self) {
        self.0.done();
    }
}

/// One fiber's loop: claim the next request until there are none left. A request
/// is timed from the end of the one before (the bookkeeping between them is a few
/// instructions), so each costs one clock read. Its body is read to the end and
/// dropped as it arrives (at most one read's worth held), which also gives a
/// kept-alive connection back to the pool.
fn work(client: &Client, claims: &Claims, tally: &RefCell<Tally>, load: &Load, counts: &Counts) {
    let request = match load.keepalive {
        true => Request::new("GET", load.url.as_str()),
        false => Request::new("GET", load.url.as_str()).header("Connection", "close"),
    };
    let mut start = Instant::now();
    while claims.claim() {
        let result = client.send(&request).and_then(|mut response| {
            response.copy_to(&mut std::io::sink())?;
            Ok(response)
        });
        let end = Instant::now();
        let mut tally = tally.borrow_mut();
        counts.finish(!result.as_ref().is_ok_and(|r| (200..300).contains(&r.status())));
        match result {
            Ok(r) if (200..300).contains(&r.status()) => tally.success(end - start),
            Ok(r) => tally.failure(format!("status {}", r.status()), end, || {
                format!("GET {}: {} {}", r.url(), r.status(), r.reason())
            }),
            Err(e) => tally.failure(format!("{:?}", e.kind()), end, || e.to_string()),
        }
        start = end;
    }
}

#[cfg(test)]
mod tests;
