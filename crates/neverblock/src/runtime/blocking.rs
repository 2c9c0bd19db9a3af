//! The blocking pool: a bounded set of OS threads for work that would block a
//! loop (DNS, file metadata, CPU-heavy work, C libraries that block). Its result
//! parks only the calling fiber.

use std::collections::VecDeque;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Duration;

use super::reply::{reply, NoReply, ReplyReceiver};
use super::scheduler::Wait;
use super::waiter;
use crate::poison::IgnorePoison;
use crate::Elapsed;

/// Threads the pool may run at once; more work waits in line.
pub const MAX_BLOCKING_THREADS: usize = 64;
/// An idle pool thread exits after this long.
const IDLE: Duration = Duration::from_secs(10);

type BlockingCall = Box<dyn FnOnce() + Send>;

struct Pool {
    state: Mutex<State>,
    work: Condvar,
}

struct State {
    jobs: VecDeque<BlockingCall>,
    threads: usize,
    /// Threads waiting for a job; one woken for a job counts until it wakes and takes one.
    idle: usize,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool {
        state: Mutex::new(State { jobs: VecDeque::new(), threads: 0, idle: 0 }),
        work: Condvar::new(),
    })
}

/// Runs `f` on the blocking pool and parks the calling fiber until it returns
/// its value. Outside a runtime, `f` simply runs on the calling thread.
///
/// # Panics
///
/// With `f`'s payload if `f` panics; if no pool thread can be started and none runs.
///
/// # Examples
///
/// ```
/// let len = neverblock::run(|| neverblock::spawn_blocking(|| std::fs::metadata("Cargo.toml").map(|m| m.len())));
/// assert!(len.unwrap() > 0);
/// ```
pub fn spawn_blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    if super::scheduler::in_task().is_none() {
        return f();
    }
    // The job runs on a thread and cannot be abandoned: a `timeout` waits it out.
    let result = submit_returning(f).wait_through_timeouts(Wait::Blocking);
    value_of(result.expect("a pool job runs, so it replies"))
}

/// Like [`spawn_blocking`], for work whose result may be given up: an enclosing `timeout` scope
/// ends the wait with [`Elapsed`], and the job goes on in the pool, its value dropped when it ends
/// (a name lookup: Go's resolver gives up the same way). Outside a runtime `f` runs on the
/// calling thread, unless a `timeout` scope is open there: then it runs on the pool and the thread
/// waits for it until the scope's deadline.
pub(crate) fn spawn_blocking_abandonable<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Elapsed> {
    if super::scheduler::in_task().is_none() && waiter::thread_deadline().is_none() {
        return Ok(f());
    }
    match submit_returning(f).wait(Wait::Blocking) {
        Ok(result) => Ok(value_of(result)),
        Err(NoReply::TimedOut) => Err(Elapsed),
        Err(NoReply::SenderGone) => unreachable!("a pool job runs, so it replies"),
    }
}

/// Queues `f` on the pool; its result (or panic) comes back as the returned reply.
fn submit_returning<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> ReplyReceiver<std::thread::Result<T>> {
    let (tx, rx) = reply();
    submit(Box::new(move || tx.send(panic::catch_unwind(AssertUnwindSafe(f)))));
    rx
}

/// A job's value, or its panic resumed here.
fn value_of<T>(result: std::thread::Result<T>) -> T {
    result.unwrap_or_else(|payload| panic::resume_unwind(payload))
}

/// Jobs queued or running on the pool, from any runtime.
pub(crate) fn jobs_in_flight() -> usize {
    let state = pool().state.lock().ignore_poison();
    state.jobs.len() + (state.threads - state.idle)
}

/// Pool threads waiting for a job: they can wake no fiber until one comes.
pub(crate) fn idle_threads() -> usize {
    pool().state.lock().ignore_poison().idle
}

fn submit(job: BlockingCall) {
    let pool = pool();
    queue(pool, &mut pool.state.lock().ignore_poison(), job);
}

/// Queues `job` under the pool's lock (`state`), waking an idle thread for it or starting one.
fn queue(pool: &Pool, state: &mut State, job: BlockingCall) {
    state.jobs.push_back(job);
    // A thread woken for an earlier job counts as idle until it runs, so a job has an idle
    // thread of its own only while the queue is no longer than the idle threads.
    if state.jobs.len() <= state.idle {
        pool.work.notify_one();
        return;
    }
    if state.threads < MAX_BLOCKING_THREADS {
        let started = super::pinning::spawn_helper("neverblock-blocking", work);
        match started {
            Ok(_) => state.threads += 1,
            Err(e) if state.threads == 0 => panic!("neverblock: cannot start a blocking-pool thread: {e}"),
            Err(_) => {} // the running threads will take the job in turn
        }
    }
}

fn work() {
    let pool = pool();
    let mut state = pool.state.lock().ignore_poison();
    loop {
        if let Some(job) = state.jobs.pop_front() {
            drop(state);
            job();
            state = pool.state.lock().ignore_poison();
            continue;
        }
        state.idle += 1;
        let (next, timeout) = pool.work.wait_timeout(state, IDLE).ignore_poison();
        state = next;
        state.idle -= 1;
        if timeout.timed_out() && state.jobs.is_empty() {
            state.threads -= 1;
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{mpsc, Arc, Mutex};
    use std::time::Duration;

    use super::{idle_threads, pool, queue, spawn_blocking_abandonable, submit};
    use crate::poison::IgnorePoison;
    use crate::Elapsed;

    #[test]
    fn jobs_queued_before_the_idle_threads_wake_get_a_thread_each() {
        let (done, finished) = mpsc::channel();
        submit(Box::new(move || done.send(()).unwrap()));
        finished.recv().unwrap();
        while idle_threads() == 0 {
            std::thread::yield_now(); // the thread that ran it goes idle
        }
        let gate = Arc::new(Mutex::new(()));
        let closed = gate.lock().unwrap();
        let (started, last) = mpsc::channel();
        {
            // Under one hold of the lock no woken thread has taken a job yet: one job per idle
            // thread, each held at the gate, and one more that must not wait behind them.
            let pool = pool();
            let mut state = pool.state.lock().ignore_poison();
            for _ in 0..state.idle {
                let gate = gate.clone();
                queue(pool, &mut state, Box::new(move || drop(gate.lock())));
            }
            queue(pool, &mut state, Box::new(move || started.send(()).unwrap()));
        }
        assert!(last.recv_timeout(Duration::from_secs(10)).is_ok(), "the last job waited behind the held ones");
        drop(closed);
    }

    #[test]
    fn a_job_that_may_be_given_up_is_given_up_at_the_deadline_in_a_fiber_and_outside_a_runtime() {
        for in_runtime in [false, true] {
            let (release, held) = std::sync::mpsc::channel::<()>();
            let job = move || {
                let _ = held.recv();
                7
            };
            let within = move || crate::timeout(Duration::from_millis(50), || spawn_blocking_abandonable(job));
            let outcome = if in_runtime { crate::run(within) } else { within() };
            assert_eq!(outcome, Err(Elapsed), "in a runtime: {in_runtime}");
            drop(release);
        }
        assert_eq!(crate::run(|| spawn_blocking_abandonable(|| 7)), Ok(7), "without a deadline it runs to its end");
        assert_eq!(spawn_blocking_abandonable(|| 8), Ok(8), "outside a runtime, on the calling thread");
    }
}
