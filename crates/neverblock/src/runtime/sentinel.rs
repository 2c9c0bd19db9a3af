//! The sentinel: one thread for the whole process that looks at every watched
//! loop's beacon a few times per threshold (every quarter of the smallest) and
//! warns when a loop has not come back to its event loop for longer than its
//! threshold, naming the task that holds it, then once more when it comes back,
//! with the total. It only reads the beacons' atomics and the label list: a
//! stalled loop is never asked anything, and never waits for the sentinel.
//!
//! No backtrace of the stalled thread is taken: that would mean interrupting it
//! with a signal and unwinding its stack inside the handler, which is not
//! async-signal-safe (the unwinder allocates and takes locks the thread may hold).
//! The warning names the task's spawn site instead, and its label's activity.

use std::fmt::Write as _;
use std::panic::Location;
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Duration;

use super::beacon::{now_ns, Beacon, Running, WAITING};
use super::label::Label;
use crate::poison::IgnorePoison;

/// The shortest pause between two looks, whatever the thresholds.
const MIN_PERIOD: Duration = Duration::from_millis(1);

/// The loops watched, and whether the thread runs.
struct Watched {
    loops: Vec<Watch>,
    thread_started: bool,
}

/// One loop, as the sentinel follows it (until it has ended and no warning waits for its end).
struct Watch {
    beacon: Arc<Beacon>,
    threshold: Duration,
    /// The stall it warned about and has not yet seen end: the turn's start, and who held it.
    warned: Option<(u64, String)>,
}

static WATCHED: Mutex<Watched> = Mutex::new(Watched { loops: Vec::new(), thread_started: false });
/// Signalled when a loop is added, for a sentinel that watches none.
static ADDED: Condvar = Condvar::new();

/// Watches `beacon`'s loop (if it has a threshold) until it ends; starts the sentinel thread
/// the first time.
pub(crate) fn watch(beacon: &Arc<Beacon>) {
    let Some(threshold) = beacon.threshold else { return };
    let mut watched = WATCHED.lock().ignore_poison();
    watched.loops.push(Watch { beacon: beacon.clone(), threshold, warned: None });
    if !watched.thread_started {
        match super::pinning::spawn_helper("neverblock-sentinel", run) {
            Ok(_) => watched.thread_started = true,
            Err(e) => log::warn!("no sentinel thread ({e}): stalled loops go unreported"),
        }
    }
    ADDED.notify_one();
}

/// The sentinel's threads in the process: 1 once started (it never ends), else 0.
pub(crate) fn threads() -> usize {
    usize::from(WATCHED.lock().ignore_poison().thread_started)
}

/// The sentinel thread: looks, sleeps a quarter of the smallest threshold, looks again.
fn run() {
    loop {
        let period = {
            let mut watched = WATCHED.lock().ignore_poison();
            // A loop is let go once it has ended (or its scheduler is gone without running), unless
            // the end of its stall is still to be told.
            watched.loops.retain(|watch| {
                watch.warned.is_some() || (!watch.beacon.has_ended() && Arc::strong_count(&watch.beacon) > 1)
            });
            while watched.loops.is_empty() {
                watched = ADDED.wait(watched).ignore_poison();
            }
            let smallest = watched.loops.iter().map(|watch| watch.threshold).min().unwrap_or(MIN_PERIOD);
            (smallest / 4).max(MIN_PERIOD)
        };
        #[allow(clippy::disallowed_methods)] // the sentinel's own thread: sleeping is its job
        thread::sleep(period);
        let messages: Vec<String> = {
            let mut watched = WATCHED.lock().ignore_poison();
            let now = now_ns();
            watched.loops.iter_mut().filter_map(|watch| look(watch, now)).collect()
        };
        for message in messages {
            log::warn!("{message}");
        }
    }
}

/// Looks at one loop at `now`: the warning to log, if it has just stalled or just come back.
fn look(watch: &mut Watch, now: u64) -> Option<String> {
    let beacon = &watch.beacon;
    let started = beacon.turn_started();
    if let Some((stalled_at, holder)) = &watch.warned {
        if started == *stalled_at {
            return None; // still held: one warning is enough
        }
        let total =
            beacon.stall_length(*stalled_at).unwrap_or_else(|| Duration::from_nanos(now.saturating_sub(*stalled_at)));
        let message = format!("{} is back in its event loop after {total:.1?}; {holder} held it", loop_name(beacon));
        watch.warned = None;
        return Some(message);
    }
    let held = Duration::from_nanos(now.saturating_sub(started));
    if started == WAITING || held <= watch.threshold {
        return None;
    }
    let running = beacon.running_now();
    if beacon.turn_started() != started {
        return None; // it came back while we read: nothing to report
    }
    let holder = describe(running);
    let message = format!(
        "{} has not come back to its event loop for {held:.1?} (threshold {:?}): {holder} holds it",
        loop_name(beacon),
        watch.threshold
    );
    watch.warned = Some((started, holder));
    Some(message)
}

/// `loop 3 (thread "neverblock-1")`.
fn loop_name(beacon: &Beacon) -> String {
    format!("loop {} (thread {:?})", beacon.loop_id, beacon.thread)
}

/// `task 4294967298 "http 127.0.0.1:5000" doing "GET /" (spawned at src/main.rs:10:5)`, or the
/// loop's own work when no task runs.
fn describe(running: Running) -> String {
    if running.task == 0 {
        return "the loop's own work (timers, work handed in by other threads)".to_string();
    }
    let mut out = format!("task {}", running.task);
    if let Some(label) = Label::find(running.label) {
        let _ = label.write(&mut out);
    }
    if let Some(site) = running.site {
        let _ = write!(out, " (spawned at {})", location(site));
    }
    out
}

/// `src/main.rs:10:5`.
pub(crate) fn location(at: &Location<'_>) -> String {
    format!("{}:{}:{}", at.file(), at.line(), at.column())
}
