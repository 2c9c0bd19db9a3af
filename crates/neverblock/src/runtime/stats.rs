//! `stats()`: every event loop of the runtime asked for its numbers, each on its
//! own thread (what a loop counts, and how, is `scheduler/stats.rs`).

use super::reply::{reply, ReplyReceiver};
use super::scheduler::{self, LoopStats, Wait};
use super::threads;

/// The numbers of every event loop of the runtime running on this thread, one
/// [`LoopStats`] per loop in loop order. Each loop counts its own on its own
/// thread, when its event loop next turns (the caller's loop at once); the
/// calling fiber parks meanwhile. A loop that has stopped, or has not answered
/// when an enclosing [`timeout`](crate::timeout) expires, is left out. Empty
/// outside a runtime (on a plain thread, or a blocking-pool one).
///
/// Nothing is counted until asked: the cost is a walk of each loop's tasks.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// neverblock::runtime::Builder::new().threads(2).run(|| {
///     let sleeper = neverblock::spawn(|| neverblock::sleep(Duration::from_millis(50)));
///     neverblock::yield_now(); // the sleeper parks
///     let stats = neverblock::runtime::stats();
///     assert_eq!(stats.iter().map(|l| l.index).collect::<Vec<_>>(), [0, 1]);
///     assert_eq!((stats[0].tasks, stats[0].parked.sleep, stats[0].timers), (2, 1, 1));
///     assert_eq!(stats[1].tasks, 1, "loop 1 runs its main task alone: it waits for the end of loop 0's");
///     sleeper.join().unwrap();
/// });
/// assert!(neverblock::runtime::stats().is_empty(), "no runtime on this thread");
/// ```
pub fn stats() -> Vec<LoopStats> {
    let Some(here) = scheduler::current() else { return Vec::new() };
    let own = threads::thread_index();
    // Every other loop is asked first, so they count while this one does.
    let asked: Vec<(usize, ReplyReceiver<LoopStats>)> = threads::loop_remotes()
        .into_iter()
        .enumerate()
        .filter(|&(index, _)| index != own)
        .map(|(index, remote)| {
            let (tx, rx) = reply();
            remote.send(Box::new(move |s| tx.send(s.stats(index))));
            (index, rx)
        })
        .collect();
    let mut all = vec![here.stats(own)];
    all.extend(asked.into_iter().filter_map(|(index, rx)| rx.wait(Wait::OtherLoop(index)).ok()));
    all.sort_by_key(|loop_stats| loop_stats.index);
    all
}
