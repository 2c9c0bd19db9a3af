//! The runtime: order, fairness, timers, cancellation, timeouts, threads, blocking mode.

use std::cell::{Cell, RefCell};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::panic::{self, AssertUnwindSafe};
use std::rc::Rc;
use std::time::{Duration, Instant};

use neverblock::fiber::{stack_stats, Fiber};
use neverblock::runtime::{LoopStats, TaskBuilder};
use neverblock::sync::{bounded, unbounded, RecvError};
use neverblock::{run, sleep, spawn, timeout, yield_now, Elapsed, JoinError};

use crate::support::Tracked;

#[test]
fn spawned_fibers_run_in_fifo_order() {
    let order = run(|| {
        let log = Rc::new(RefCell::new(Vec::new()));
        let tasks: Vec<_> = (0..5)
            .map(|i| {
                let log = log.clone();
                spawn(move || log.borrow_mut().push(i))
            })
            .collect();
        tasks.into_iter().for_each(|t| t.join().unwrap());
        log.take()
    });
    assert_eq!(order, [0, 1, 2, 3, 4]);
}

#[test]
fn a_yield_loop_does_not_starve_timers_or_io() {
    run(|| {
        let (mut writer, mut reader) = UnixStream::pair().unwrap();
        reader.set_nonblocking(true).unwrap();
        let done = Rc::new(Cell::new(0));
        let d = done.clone();
        let sleeper = spawn(move || {
            sleep(Duration::from_millis(5));
            d.set(d.get() + 1);
            writer.write_all(b"x").unwrap();
        });
        let d = done.clone();
        let io = spawn(move || {
            neverblock::io::wait_readable(&reader).unwrap();
            let mut byte = [0];
            reader.read_exact(&mut byte).unwrap();
            d.set(d.get() + 1);
        });
        // The sleeper is due after 5 ms and a yield costs microseconds: a few
        // thousand spins are expected. Starved timers or I/O would spin on forever.
        let mut spins = 0u64;
        while done.get() < 2 && spins < 2_000_000 {
            spins += 1;
            yield_now();
        }
        assert_eq!(done.get(), 2, "the timer and the fd were served while a fiber kept yielding");
        sleeper.join().unwrap();
        io.join().unwrap();
    });
}

#[test]
fn a_yield_continues_behind_the_fibers_its_loops_next_look_for_io_wakes() {
    let order = run(|| {
        let order = Rc::new(RefCell::new(Vec::new()));
        let (mut writer, mut reader) = UnixStream::pair().unwrap();
        reader.set_nonblocking(true).unwrap();
        let o = order.clone();
        let io = spawn(move || {
            neverblock::io::wait_readable(&reader).unwrap();
            reader.read_exact(&mut [0]).unwrap();
            o.borrow_mut().push("readable");
        });
        yield_now(); // it runs and parks on the socket
        writer.write_all(b"x").unwrap();
        order.borrow_mut().push("yielding");
        yield_now(); // before this continues, the loop finds the socket readable
        order.borrow_mut().push("yielded");
        io.join().unwrap();
        order.take()
    });
    assert_eq!(order, ["yielding", "readable", "yielded"]);
}

#[test]
fn a_hundred_thousand_sleeping_fibers_all_wake_in_deadline_order() {
    let woke = run(|| {
        let log = Rc::new(RefCell::new(Vec::with_capacity(100_000)));
        // Every sleeper first parks at a gate; the gate opens (and the base is set)
        // only after all have run once, so the cost of their first runs (fresh
        // stacks, slow under a sanitizer) cannot eat into the margin.
        let base = Rc::new(Cell::new(None));
        let gate = Rc::new(neverblock::sync::Notify::new());
        // Set by a task queued after every woken sleeper, so it runs last in their batch.
        // No timer expires within a batch: a fiber that logs after the marker parked;
        // one that logs before it found its deadline already past and rightly did not park.
        let marker_ran = Rc::new(Cell::new(false));
        let tasks: Vec<_> = (0..100_000u64)
            .map(|i| {
                let (log, base, gate, marker_ran) = (log.clone(), base.clone(), gate.clone(), marker_ran.clone());
                spawn(move || {
                    gate.notified().unwrap();
                    let base: Instant = base.get().expect("set before the gate opens");
                    let deadline = base + Duration::from_micros((i * 7919) % 500_000);
                    neverblock::sleep_until(deadline);
                    assert!(Instant::now() >= deadline);
                    log.borrow_mut().push((deadline, marker_ran.get()));
                })
            })
            .collect();
        let opener = spawn(move || {
            base.set(Some(Instant::now() + Duration::from_millis(1000)));
            gate.notify_all();
            let m = marker_ran.clone();
            spawn(move || m.set(true))
        });
        let marker = opener.join().unwrap();
        tasks.into_iter().for_each(|t| t.join().unwrap());
        marker.join().unwrap();
        log.take()
    });
    assert_eq!(woke.len(), 100_000);
    let parked: Vec<Instant> = woke.iter().filter(|(_, parked)| *parked).map(|(d, _)| *d).collect();
    assert!(parked.len() > 10_000, "fibers parked before their deadline: {}", parked.len());
    assert!(parked.windows(2).all(|w| w[0] <= w[1]), "parked fibers woke in deadline order");
}

#[test]
fn a_panicking_fiber_does_not_bring_down_the_runtime() {
    let survived = run(|| {
        let doomed = spawn(|| -> u8 { panic!("fiber failed") });
        let healthy = spawn(|| {
            yield_now();
            7
        });
        let JoinError::Panicked(payload) = doomed.join().unwrap_err() else { panic!("expected a panic") };
        assert_eq!(payload.message(), Some("fiber failed"));
        healthy.join().unwrap()
    });
    assert_eq!(survived, 7);
}

#[test]
fn a_panic_in_the_main_fiber_leaves_run_with_its_payload() {
    let payload = panic::catch_unwind(|| run(|| panic!("main failed"))).unwrap_err();
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"main failed"));
    assert_eq!(run(|| 1), 1, "a new runtime starts on the same thread");
}

#[test]
fn cancel_releases_everything_the_fiber_held() {
    let drops = Rc::new(Cell::new(0));
    let d = drops.clone();
    let outcome = run(move || {
        let d2 = d.clone();
        let task = spawn(move || {
            let _held = Tracked(d2.clone());
            // A fiber the task resumed parks inside it, holding its own value.
            let inner = Fiber::new(move |()| {
                let _also_held = Tracked(d2);
                sleep(Duration::from_secs(3600));
            })
            .unwrap();
            inner.resume(()).unwrap();
        });
        yield_now();
        task.cancel();
        task.join()
    });
    assert!(matches!(outcome, Err(JoinError::Cancelled)), "{outcome:?}");
    assert_eq!(drops.get(), 2, "both values on both stacks were dropped");
}

#[test]
fn a_fiber_cancelled_before_it_starts_never_runs() {
    let ran = Rc::new(Cell::new(false));
    let r = ran.clone();
    let outcome = run(move || {
        let task = spawn(move || r.set(true));
        task.cancel();
        task.join()
    });
    assert!(matches!(outcome, Err(JoinError::Cancelled)));
    assert!(!ran.get());
}

#[test]
fn tasks_started_when_readable_hold_no_stack_until_their_sockets_have_data() {
    run(|| {
        let before = stack_stats().live;
        let (mut peers, mut tasks) = (Vec::new(), Vec::new());
        for _ in 0..200 {
            let (quiet, peer) = neverblock::net::UnixStream::pair().unwrap();
            tasks.push(TaskBuilder::new().when_readable(&quiet, None).spawn(move || {
                let mut byte = [0];
                (&quiet).read_exact(&mut byte).map(|()| byte[0])
            }));
            peers.push(peer);
        }
        sleep(Duration::from_millis(5));
        assert_eq!(stack_stats().live, before, "none has started: each would hold a stack");
        for (i, peer) in peers.iter_mut().enumerate().rev() {
            peer.write_all(&[i as u8]).unwrap();
        }
        let got: Vec<u8> = tasks.into_iter().map(|task| task.join().unwrap().unwrap()).collect();
        assert_eq!(got, (0..200).map(|i| i as u8).collect::<Vec<_>>());
    });
}

#[test]
fn a_task_started_when_readable_starts_at_its_deadline_when_nothing_comes() {
    let (started, by) = run(|| {
        let (quiet, _peer) = neverblock::net::UnixStream::pair().unwrap();
        let by = Instant::now() + Duration::from_millis(30);
        let task = TaskBuilder::new().when_readable(&quiet, Some(by)).spawn(move || {
            quiet.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
            let read = (&quiet).read(&mut [0]);
            (Instant::now(), read.map_err(|e| e.kind()))
        });
        // Bounded: a task that never started would leave this join parked for good, and a
        // socket waited on keeps the loop from reporting a deadlock.
        let (started, read) = timeout(Duration::from_secs(20), || task.join()).expect("it started").unwrap();
        assert_eq!(read, Err(std::io::ErrorKind::TimedOut), "nothing had come");
        (started, by)
    });
    assert!(started >= by, "started {:?} early", by - started);
}

#[test]
fn a_task_waiting_to_start_when_readable_can_be_cancelled_and_drops_its_socket() {
    run(|| {
        let (quiet, mut peer) = neverblock::net::UnixStream::pair().unwrap();
        let ran = Rc::new(Cell::new(false));
        let r = ran.clone();
        let task = TaskBuilder::new().when_readable(&quiet, None).spawn(move || {
            r.set(true);
            drop(quiet);
        });
        sleep(Duration::from_millis(2));
        task.cancel();
        assert!(matches!(task.join(), Err(JoinError::Cancelled)));
        assert!(!ran.get(), "it never ran");
        let mut rest = Vec::new();
        assert_eq!(peer.read_to_end(&mut rest).unwrap(), 0, "its socket was closed with it");
    });
}

#[test]
fn a_burst_of_tasks_leaves_only_the_kept_idle_workers_holding_stacks_once_they_sit_unused() {
    run(|| {
        let before = stack_stats().live;
        let gate = Rc::new(neverblock::sync::Notify::new());
        let tasks: Vec<_> = (0..1000)
            .map(|_| {
                let gate = gate.clone();
                spawn(move || gate.notified())
            })
            .collect();
        yield_now(); // behind all 1000, each parked on the gate when this runs again
        assert!(stack_stats().live >= before + 1000, "all 1000 park on stacks of their own");
        gate.notify_all();
        for task in tasks {
            task.join().unwrap().unwrap();
        }
        assert!(stack_stats().live >= before + 1000, "their workers wait, warm, for the next burst");
        // Unused for a whole period of a second, the idle workers beyond the 64 kept are let go.
        sleep(Duration::from_millis(2500));
        let after = stack_stats();
        assert!(after.live <= before + 64, "idle workers kept: {} (from {before})", after.live);
        assert!(after.free >= 1000 - 64, "the others' stacks went back to the pool: {after:?}");
        let again: Vec<_> = (0..200).map(|i| spawn(move || i * 2)).collect();
        assert_eq!(again.into_iter().map(|t| t.join().unwrap()).sum::<i32>(), 199 * 200);
    });
}

#[test]
fn idle_workers_are_let_go_when_run_is_called_inside_a_fiber_entered_by_transfer() {
    // There a finishing worker would hand control to the thread's root, not to the loop: the
    // loop drops the idle workers it lets go instead.
    let outer = Fiber::new(|()| {
        run(|| {
            let before = stack_stats().live;
            let tasks: Vec<_> = (0..200).map(|i| spawn(move || sleep(Duration::from_millis(1 + i % 2)))).collect();
            tasks.into_iter().for_each(|task| task.join().unwrap());
            sleep(Duration::from_millis(2500));
            let live = stack_stats().live;
            assert!(live <= before + 64, "idle workers kept: {live} (from {before})");
        })
    })
    .unwrap();
    outer.transfer(()).expect("run returned into the fiber, which finished");
}

#[test]
fn timeout_interrupts_a_parked_channel_receive_and_cleans_up() {
    run(|| {
        let (tx, rx) = unbounded::<u32>();
        let mut inner = None;
        let outer = timeout(Duration::from_millis(10), || inner = Some(rx.recv()));
        assert_eq!(outer, Err(Elapsed));
        assert_eq!(inner, Some(Err(RecvError::TimedOut)));
        // The channel is still whole: the stale wait left the line.
        let sender = spawn(move || tx.send(5).unwrap());
        assert_eq!(rx.recv(), Ok(5));
        sender.join().unwrap();
        // No timer of the expired scope is left to fire later.
        let start = Instant::now();
        sleep(Duration::from_millis(20));
        assert!(start.elapsed() >= Duration::from_millis(20));
    });
}

#[test]
fn timeout_interrupts_sleep_and_join_and_passes_when_in_time() {
    run(|| {
        let start = Instant::now();
        assert_eq!(timeout(Duration::from_millis(5), || sleep(Duration::from_secs(60))), Err(Elapsed));
        assert!(start.elapsed() < Duration::from_secs(5));
        let slow = spawn(|| sleep(Duration::from_millis(200)));
        let joined = timeout(Duration::from_millis(5), || slow.join());
        assert!(matches!(joined, Err(Elapsed)));
        assert_eq!(timeout(Duration::from_secs(5), || 3), Ok(3));
    });
}

#[test]
fn a_runtime_where_nothing_can_wake_a_fiber_reports_a_deadlock() {
    let payload = panic::catch_unwind(AssertUnwindSafe(|| {
        run(|| {
            // The task transfers to a fiber that finishes: by Ruby's rules control goes
            // to the root (the scheduler), and nothing will ever continue the task.
            let lost = spawn(|| {
                let elsewhere = Fiber::new(|()| ()).unwrap();
                let _ = elsewhere.transfer(());
            });
            let _ = lost.join();
        })
    }))
    .unwrap_err();
    let message = payload.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.contains("deadlock"), "{message}");
    assert!(message.contains("waits on the end of task"), "the main fiber's wait is named: {message}");
    assert!(message.contains("tests/it/runtime.rs:"), "and where each was spawned: {message}");
}

/// Runs `body` in a runtime on a thread of its own and returns the message the runtime ends with;
/// fails if it has not ended within 30 seconds (a hang).
fn deadlock_message_of(body: fn()) -> String {
    let (done, ended) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| run(body)));
        let message = match outcome {
            Ok(()) => "the runtime ended without an error".to_owned(),
            Err(payload) => payload.downcast_ref::<String>().cloned().unwrap_or_default(),
        };
        let _ = done.send(message);
    });
    ended.recv_timeout(Duration::from_secs(30)).expect("the runtime reported the deadlock instead of hanging")
}

/// A raw fiber resumed by the main task locks a Mutex the task holds itself.
fn lock_held_by_the_resuming_task() {
    let lock = Rc::new(neverblock::sync::Mutex::new(0));
    let _held = lock.lock().unwrap();
    let inner = lock.clone();
    let fiber = Fiber::new(move |()| drop(inner.lock().unwrap())).unwrap();
    let _ = fiber.resume(());
}

/// A raw fiber locks a Mutex and yields; another raw fiber of the same task then locks it.
fn lock_held_by_a_fiber_that_yielded() {
    let lock = Rc::new(neverblock::sync::Mutex::new(0));
    let first = lock.clone();
    let holder = Fiber::new(move |()| {
        let _held = first.lock().unwrap();
        neverblock::fiber::yield_now(()).unwrap();
    })
    .unwrap();
    holder.resume(()).unwrap();
    let second = lock.clone();
    let waiter = Fiber::new(move |()| drop(second.lock().unwrap())).unwrap();
    let _ = waiter.resume(());
}

#[test]
fn a_raw_fiber_waiting_on_a_mutex_held_on_its_own_thread_is_reported_as_a_deadlock() {
    // The test harness's threads live in this process: only knowing that the lock is held on
    // the runtime's own thread tells the runtime that nothing else can release it.
    for (scenario, body) in [
        ("held by its task", lock_held_by_the_resuming_task as fn()),
        ("held by a fiber that yielded", lock_held_by_a_fiber_that_yielded),
    ] {
        let message = deadlock_message_of(body);
        assert!(message.contains("deadlock") && message.contains("waits on a Mutex"), "{scenario}: {message}");
    }
}

#[test]
fn a_deadlock_unwinds_every_fiber_before_it_is_reported() {
    // The task and the raw fiber it resumed each own a clone: both stacks must unwind, though
    // the two fibers hold each other (the resumer link one way, the handle the other).
    let witness = Rc::new(());
    let (in_task, in_fiber) = (witness.clone(), witness.clone());
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
        run(move || {
            let _owned = in_task;
            let lock = Rc::new(neverblock::sync::Mutex::new(0));
            let _held = lock.lock().unwrap();
            let inner = lock.clone();
            let fiber = Fiber::new(move |()| {
                let _owned = in_fiber;
                drop(inner.lock().unwrap());
            })
            .unwrap();
            let _ = fiber.resume(());
        })
    }));
    let message = outcome.unwrap_err().downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.contains("deadlock"), "{message}");
    assert_eq!(Rc::strong_count(&witness), 1, "what the deadlocked fibers owned was dropped");
}

#[test]
fn a_mutex_held_on_another_thread_is_waited_for_not_reported() {
    let lock = std::sync::Arc::new(neverblock::sync::Mutex::new(0));
    let (locked, go) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
    let held = lock.clone();
    let holder = std::thread::spawn(move || {
        let mut guard = held.lock().unwrap();
        locked.0.send(()).unwrap();
        go.1.recv().unwrap();
        *guard += 1;
    });
    locked.1.recv().unwrap();
    let value = run(move || {
        let releaser = std::thread::spawn(move || {
            sleep(Duration::from_millis(50)); // no runtime on this thread: it sleeps
            go.0.send(()).unwrap();
        });
        let value = *lock.lock().unwrap();
        releaser.join().unwrap();
        value
    });
    holder.join().unwrap();
    assert_eq!(value, 1, "the fiber waited for the other thread's unlock");
}

#[test]
fn cross_thread_send_wakes_a_parked_fiber() {
    let (tx, rx) = unbounded();
    let sender = std::thread::spawn(move || {
        for i in 0..100 {
            tx.send(i).unwrap();
            std::thread::yield_now();
        }
    });
    let got = run(move || std::iter::from_fn(|| rx.recv().ok()).collect::<Vec<i32>>());
    sender.join().unwrap();
    assert_eq!(got, (0..100).collect::<Vec<_>>());
}

#[test]
fn two_runtimes_on_two_threads_ping_pong() {
    let (to_b, from_a) = bounded::<u32>(0);
    let (to_a, from_b) = bounded::<u32>(0);
    let b = std::thread::spawn(move || {
        run(move || {
            while let Ok(n) = from_a.recv() {
                to_a.send(n + 1).unwrap();
            }
        })
    });
    let last = run(move || {
        let mut n = 0;
        for _ in 0..1000 {
            to_b.send(n).unwrap();
            n = from_b.recv().unwrap();
        }
        n
    });
    b.join().unwrap();
    assert_eq!(last, 1000);
}

#[test]
fn outside_a_runtime_the_same_calls_block_the_thread() {
    let start = Instant::now();
    sleep(Duration::from_millis(10));
    assert!(start.elapsed() >= Duration::from_millis(10));
    yield_now();
    assert_eq!(timeout(Duration::from_millis(1), || sleep(Duration::from_millis(5))), Err(Elapsed));
    assert_eq!(timeout(Duration::from_secs(1), || 4), Ok(4));

    let (tx, rx) = bounded(0);
    let producer = std::thread::spawn(move || tx.send("from a thread").unwrap());
    assert_eq!(rx.recv(), Ok("from a thread"));
    producer.join().unwrap();

    let lock = std::sync::Arc::new(neverblock::sync::Mutex::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let lock = lock.clone();
            std::thread::spawn(move || (0..1000).for_each(|_| *lock.lock().unwrap() += 1))
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(*lock.lock().unwrap(), 4000);

    let (mut a, b) = UnixStream::pair().unwrap();
    a.write_all(b"y").unwrap();
    neverblock::io::wait_readable(&b).unwrap();
    assert!(neverblock::try_spawn(|| ()).is_err());
}

#[test]
fn outside_a_runtime_a_timeout_ends_the_waits_of_the_runtimes_own_calls() {
    // Each would wait for ever: nothing releases the permit, sends the message or writes the byte.
    let (done, ended) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let gate = neverblock::sync::Semaphore::new(0);
        let permit = timeout(Duration::from_millis(50), || gate.acquire().map(drop));
        let (_keep, rx) = unbounded::<u8>();
        let message = timeout(Duration::from_millis(50), || rx.recv());
        let (_writer, mut reader) = neverblock::net::UnixStream::pair().unwrap();
        let read = timeout(Duration::from_millis(50), || reader.read(&mut [0; 1]).map_err(|e| e.kind()));
        let started = Instant::now();
        let slept = timeout(Duration::from_millis(50), || sleep(Duration::from_secs(30)));
        let _ = done.send((permit, message, read, slept, started.elapsed()));
    });
    let (permit, message, read, slept, sleep_took) =
        ended.recv_timeout(Duration::from_secs(20)).expect("every wait ended at its deadline");
    assert_eq!(permit, Err(Elapsed));
    assert_eq!(message, Err(Elapsed));
    assert_eq!(read, Err(Elapsed));
    assert_eq!(slept, Err(Elapsed));
    assert!(sleep_took < Duration::from_secs(10), "the sleep ended at the deadline: {sleep_took:?}");
    // Nested scopes: the inner one ends first, and the outer one still holds after it.
    let inner = timeout(Duration::from_secs(20), || {
        let gate = neverblock::sync::Semaphore::new(0);
        let inner = timeout(Duration::from_millis(20), || gate.acquire().map(drop));
        (inner, timeout(Duration::from_millis(20), || gate.acquire().map(drop)))
    });
    assert_eq!(inner, Ok((Err(Elapsed), Err(Elapsed))));
}

#[test]
fn blocking_work_parks_only_its_fiber() {
    let (ticks, value) = run(|| {
        let ticks = Rc::new(Cell::new(0));
        let t = ticks.clone();
        let ticker = spawn(move || {
            for _ in 0..5 {
                sleep(Duration::from_millis(2));
                t.set(t.get() + 1);
            }
        });
        #[allow(clippy::disallowed_methods)] // the point: this blocks a pool thread, not the loop
        let value = neverblock::spawn_blocking(|| {
            std::thread::sleep(Duration::from_millis(50));
            "slow result"
        });
        // Counted before the join: ticks that only ran after the blocking work would not count.
        let ticked = ticks.get();
        ticker.join().unwrap();
        (ticked, value)
    });
    assert_eq!(value, "slow result");
    assert_eq!(ticks, 5, "the loop kept running other fibers meanwhile");
}

#[test]
fn a_panic_in_blocking_work_reaches_its_fiber() {
    let caught = run(|| spawn(|| neverblock::spawn_blocking(|| -> u8 { panic!("in the pool") })).join());
    let Err(JoinError::Panicked(payload)) = caught else { panic!("expected the panic") };
    assert_eq!(payload.message(), Some("in the pool"));
}

#[test]
fn a_loop_per_thread_runs_fibers_where_they_are_placed() {
    let (places, total) = neverblock::runtime::Builder::new().threads(3).run(|| {
        assert_eq!(neverblock::runtime::thread_count(), 3);
        let placed: Vec<_> =
            (0..3).map(|i| neverblock::runtime::spawn_on(i, neverblock::runtime::thread_index)).collect();
        let places: Vec<usize> = placed.into_iter().map(|h| h.join().unwrap()).collect();
        // A channel across loops: workers on every thread feed one receiver here.
        let (tx, rx) = unbounded();
        let feeders: Vec<_> = (0..30)
            .map(|i| {
                let tx = tx.clone();
                neverblock::runtime::spawn_least_loaded(move || {
                    sleep(Duration::from_millis(1));
                    tx.send(i).unwrap();
                })
            })
            .collect();
        drop(tx);
        let total: i32 = std::iter::from_fn(|| rx.recv().ok()).sum();
        feeders.into_iter().for_each(|f| f.join().unwrap());
        (places, total)
    });
    assert_eq!(places, [0, 1, 2]);
    assert_eq!(total, (0..30).sum());
}

#[test]
fn a_panic_on_another_loop_reaches_its_joiner() {
    let outcome = neverblock::runtime::Builder::new()
        .threads(2)
        .run(|| neverblock::runtime::spawn_on(1, || -> u8 { panic!("on loop 1") }).join());
    let Err(JoinError::Panicked(payload)) = outcome else { panic!("expected the panic") };
    assert_eq!(payload.message(), Some("on loop 1"));
}

/// A loop's stats as `(index, tasks, runnable, [sleep, fd, join, other_loop, sync, blocking], fds, timers)`.
fn summary(stats: &LoopStats) -> (usize, usize, usize, [usize; 6], usize, usize) {
    let p = stats.parked;
    (
        stats.index,
        stats.tasks,
        stats.runnable,
        [p.sleep, p.fd, p.join, p.other_loop, p.sync, p.blocking],
        stats.fds,
        stats.timers,
    )
}

#[test]
fn stats_count_each_loops_tasks_by_what_they_wait_on() {
    let stats = neverblock::runtime::Builder::new().threads(2).run(|| {
        // Loop 1: three sleepers, parked before the task that started them ends.
        neverblock::runtime::spawn_on(1, || {
            (0..3).for_each(|_| drop(spawn(|| sleep(Duration::from_secs(3600)))));
            yield_now();
        })
        .join()
        .unwrap();
        // Loop 0: four receivers, a joiner of the first, a listener's accept, a blocking-pool job.
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..4)
            .map(|_| {
                let (tx, rx) = bounded::<()>(1);
                (tx, spawn(move || rx.recv()))
            })
            .unzip();
        let mut receivers = receivers.into_iter();
        let first = receivers.next().unwrap();
        let joiner = spawn(move || first.join());
        let listener = neverblock::net::TcpListener::bind("127.0.0.1:0").unwrap();
        drop(spawn(move || drop(listener.accept())));
        let (gate, closed) = std::sync::mpsc::channel::<()>();
        let blocking = spawn(move || neverblock::spawn_blocking(move || closed.recv()));
        yield_now(); // each of them runs and parks
        let fresh: Vec<_> = (0..2).map(|_| spawn(|| ())).collect();
        let stats = neverblock::runtime::stats();
        assert!(neverblock::spawn_blocking(neverblock::runtime::stats).is_empty(), "a pool thread runs no loop");
        drop((gate, senders));
        assert!(blocking.join().unwrap().is_err(), "the job ends when its gate closes");
        assert_eq!(joiner.join().unwrap().unwrap(), Err(RecvError::Disconnected));
        receivers.for_each(|task| assert_eq!(task.join().unwrap(), Err(RecvError::Disconnected)));
        fresh.into_iter().for_each(|task| task.join().unwrap());
        stats
    });
    let summaries: Vec<_> = stats.iter().map(summary).collect();
    assert_eq!(
        summaries,
        [
            // The main task (running), 2 fresh tasks (runnable), and parked: the receivers, the
            // joiner, the accept and the blocking job; the listener's fd, no timer.
            (0, 10, 2, [0, 1, 1, 0, 4, 1], 1, 0),
            // Its main task waits for loop 0's to end; a timer per sleeper.
            (1, 4, 0, [3, 0, 0, 1, 0, 0], 0, 3),
        ]
    );
    assert!(neverblock::runtime::stats().is_empty(), "no runtime on this thread");
    assert_eq!(run(|| neverblock::runtime::stats().iter().map(summary).collect::<Vec<_>>()), [(0, 1, 0, [0; 6], 0, 0)]);
}

#[test]
fn a_burst_of_short_tasks_runs_on_a_few_recycled_stacks() {
    std::thread::spawn(|| {
        run(|| {
            let tasks: Vec<_> = (0..10_000u32).map(|i| spawn(move || i)).collect();
            let sum: u32 = tasks.into_iter().map(|t| t.join().unwrap()).sum();
            assert_eq!(sum, (0..10_000).sum());
        });
        let stats = neverblock::fiber::stack_stats();
        // Each task takes its stack when it first runs and gives it back when it ends.
        assert!(stats.live + stats.free < 64, "10,000 tasks used {} stacks", stats.live + stats.free);
    })
    .join()
    .unwrap();
}

neverblock::fiber_local!(static SEEN: Cell<u32> = Cell::new(0));
neverblock::fiber_local!(static HELD: RefCell<Option<Tracked>> = RefCell::new(None));

#[test]
fn tasks_sharing_a_worker_fiber_never_see_each_others_locals() {
    let dropped = Rc::new(Cell::new(0));
    let d = dropped.clone();
    run(move || {
        let tasks: Vec<_> = (1..=100u32)
            .map(|i| {
                let d = d.clone();
                spawn(move || {
                    let before = SEEN.with(Cell::get);
                    SEEN.with(|s| s.set(i));
                    HELD.with(|h| *h.borrow_mut() = Some(Tracked(d)));
                    if i % 10 == 0 {
                        panic!("task {i} fails; its worker goes on");
                    }
                    before
                })
            })
            .collect();
        for (i, task) in (1..=100u32).zip(tasks) {
            match task.join() {
                Ok(before) => assert_eq!(before, 0, "task {i} started with another task's value"),
                Err(JoinError::Panicked(_)) => assert_eq!(i % 10, 0),
                Err(other) => panic!("task {i}: {other}"),
            }
        }
        // Each task's values are dropped when it ends, not when its worker does.
        assert_eq!(d.get(), 100);
    });
    assert_eq!(dropped.get(), 100);
}

#[test]
fn a_detached_tasks_value_is_dropped_when_it_ends_not_kept_by_its_worker() {
    run(|| {
        let (tx, rx) = unbounded::<u32>();
        drop(spawn(move || tx)); // its value, the only sender, has no joiner
        let got = timeout(Duration::from_secs(5), || rx.recv());
        assert_eq!(got, Ok(Err(RecvError::Disconnected)));
    });
}

/// A task parked on a user fiber F (F yielded to the scheduler) whose F another
/// task then transfers into and lets finish: the scheduler must refuse to continue
/// the task at F, whose stack is gone, rather than switch into it.
#[test]
fn the_scheduler_refuses_to_continue_a_task_at_a_fiber_that_has_since_finished() {
    let shared: Rc<RefCell<Option<Fiber<()>>>> = Rc::default();
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
        run(move || {
            let (left, taken) = (shared.clone(), shared);
            let _a = spawn(move || {
                let f = Fiber::new(|()| yield_now()).unwrap();
                *left.borrow_mut() = Some(f.clone());
                let _ = f.transfer(());
            });
            let _b = spawn(move || {
                let f = taken.borrow_mut().take().expect("A ran first");
                let _ = f.transfer(());
            });
            for _ in 0..3 {
                yield_now();
            }
        })
    }));
    let payload = outcome.expect_err("continuing the task must be refused");
    let message = payload.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.contains("dead fiber called"), "{message}");
}

#[test]
fn a_worker_fiber_carried_out_of_run_and_continued_after_it_ended_is_refused_cleanly() {
    // A task's worker, its handle carried out of `run`, outlives the runtime parked
    // in the scheduler's switch. Continuing it then must reach no freed scheduler
    // (the AddressSanitizer run would see it) and must not take up a task.
    let worker = run(|| spawn(Fiber::<()>::current).join().unwrap());
    let refused = worker.transfer(()).expect_err("a worker outside its runtime has no task to run");
    assert!(refused.to_string().contains("a worker is switched to for a task"), "{refused}");
    // The thread can run a runtime again.
    assert_eq!(run(|| spawn(|| 7).join().unwrap()), 7);
}

#[test]
fn cancelling_a_task_parked_in_a_fiber_it_resumed_kills_both_and_its_worker_serves_on() {
    let dropped = Rc::new(Cell::new(0));
    let counter = dropped.clone();
    let next = run(move || {
        let (outer, inner) = (Tracked(counter.clone()), Tracked(counter));
        let task = spawn(move || {
            let _outer = outer;
            let parked = Fiber::new(move |_: ()| {
                let _inner = inner;
                sleep(Duration::from_secs(3600));
            })
            .unwrap();
            let _ = parked.resume(());
            unreachable!("the task unwinds from the sleep inside the fiber it resumed");
        });
        yield_now();
        task.cancel();
        assert!(matches!(task.join(), Err(JoinError::Cancelled)));
        spawn(|| "served").join().unwrap()
    });
    assert_eq!(dropped.get(), 2, "what the task and the fiber it resumed held was dropped");
    assert_eq!(next, "served", "a worker that ran the cancelled task runs the next one");
}

#[test]
fn a_deadlock_on_sync_primitives_is_reported_with_each_fiber_not_a_hang() {
    for (scenario, expected) in [
        ("mutex", &["task", "\"left\"", "\"right\"", "waits on a Mutex", "waits on the end of task"][..]),
        ("channel", &["\"echo\"", "waits on a channel message"][..]),
    ] {
        let out = crate::support::run_example_bounded("deadlock", &[scenario], 60);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{scenario}: the program ends with an error, not a hang");
        assert!(stderr.contains("every fiber is parked and nothing can wake one (deadlock)"), "{scenario}: {stderr}");
        for line in expected {
            assert!(stderr.contains(line), "{scenario}: the report says {line:?}: {stderr}");
        }
        assert!(stderr.contains("examples/deadlock.rs:"), "{scenario}: where each fiber was spawned: {stderr}");
    }
}

#[test]
fn a_task_of_the_default_size_never_starts_on_a_smaller_workers_stack() {
    use neverblock::runtime::TaskBuilder;
    let sum = run(|| {
        // Queued right behind the small task, the default one is next when the small worker frees:
        // it must get a worker of the default 128 KiB, where a 32 KiB frame fits (on the 8 KiB
        // one it would overflow, and the process would abort).
        let small = TaskBuilder::new().stack_size(8 << 10).spawn(|| 1u32);
        let default = spawn(|| std::hint::black_box([1u8; 32 * 1024]).iter().map(|&b| u32::from(b)).sum::<u32>());
        small.join().unwrap() + default.join().unwrap()
    });
    assert_eq!(sum, 1 + 32 * 1024);
}

#[test]
fn tasks_asking_for_other_stack_sizes_get_workers_of_their_own_size_and_reuse_them() {
    use neverblock::runtime::TaskBuilder;
    let sums = run(|| {
        // A 300 KiB frame fits only a stack larger than the default 128 KiB.
        let deep = || {
            let frame = std::hint::black_box([1u8; 300 * 1024]);
            frame.iter().map(|&b| u32::from(b)).sum::<u32>()
        };
        let mut sums = Vec::new();
        for _ in 0..3 {
            sums.push(TaskBuilder::new().stack_size(1 << 20).spawn(deep).join().unwrap());
            sums.push(spawn(|| 5).join().unwrap());
        }
        let before = neverblock::fiber::stack_stats();
        sums.push(TaskBuilder::new().stack_size(1 << 20).spawn(deep).join().unwrap());
        assert_eq!(
            neverblock::fiber::stack_stats().live,
            before.live,
            "the large worker was reused, not a new one made"
        );
        sums
    });
    assert_eq!(sums, [307200, 5, 307200, 5, 307200, 5, 307200]);
}
