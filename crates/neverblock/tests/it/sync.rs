//! Fiber-aware sync primitives: limits, order, backpressure, disconnection.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use neverblock::sync::{bounded, oneshot, unbounded, Mutex, Notify, RecvError, Semaphore, SendError, WaitGroup};
use neverblock::{run, sleep, spawn, timeout, yield_now, Elapsed, JoinError};

#[test]
fn a_semaphore_limits_concurrency() {
    let peak = run(|| {
        let sem = Rc::new(Semaphore::new(3));
        let (now, peak) = (Rc::new(Cell::new(0)), Rc::new(Cell::new(0)));
        let tasks: Vec<_> = (0..20)
            .map(|_| {
                let (sem, now, peak) = (sem.clone(), now.clone(), peak.clone());
                spawn(move || {
                    let _permit = sem.acquire().unwrap();
                    now.set(now.get() + 1);
                    peak.set(peak.get().max(now.get()));
                    sleep(Duration::from_millis(1));
                    now.set(now.get() - 1);
                })
            })
            .collect();
        tasks.into_iter().for_each(|t| t.join().unwrap());
        peak.get()
    });
    assert_eq!(peak, 3);
}

#[test]
fn mutex_waiters_get_the_lock_in_arrival_order() {
    let order = run(|| {
        let lock = Rc::new(Mutex::new(Vec::new()));
        let held = lock.lock().unwrap();
        let tasks: Vec<_> = (0..5)
            .map(|i| {
                let lock = lock.clone();
                spawn(move || lock.lock().unwrap().push(i))
            })
            .collect();
        yield_now();
        drop(held);
        tasks.into_iter().for_each(|t| t.join().unwrap());
        let order = lock.lock().unwrap().clone();
        order
    });
    assert_eq!(order, [0, 1, 2, 3, 4]);
}

#[test]
fn a_waiter_that_times_out_leaves_the_line() {
    run(|| {
        let sem = Rc::new(Semaphore::new(1));
        let held = sem.acquire().unwrap();
        let s = sem.clone();
        let hasty = spawn(move || timeout(Duration::from_millis(5), || s.acquire().map(|_| ())));
        let s = sem.clone();
        let patient = spawn(move || timeout(Duration::from_secs(5), || s.acquire().is_ok()) == Ok(true));
        sleep(Duration::from_millis(10));
        drop(held);
        assert!(matches!(hasty.join().unwrap(), Err(Elapsed) | Ok(Err(Elapsed))));
        assert!(patient.join().unwrap(), "the patient waiter still gets the permit");
    });
}

#[test]
fn a_waiter_cancelled_after_its_wakeup_passes_it_on() {
    run(|| {
        let sem = Rc::new(Semaphore::new(1));
        let held = sem.acquire().unwrap();
        let s = sem.clone();
        let first = spawn(move || s.acquire().map(|_| ()));
        let s = sem.clone();
        let patient = spawn(move || timeout(Duration::from_secs(5), || s.acquire().is_ok()) == Ok(true));
        yield_now(); // both wait in line, `first` ahead
        drop(held); // the wake-up goes to `first`…
        first.cancel(); // …which unwinds before taking the permit
        assert!(matches!(first.join(), Err(JoinError::Cancelled)));
        assert!(patient.join().unwrap(), "the patient waiter still gets the permit");
    });
}

#[test]
fn a_bounded_channel_applies_backpressure() {
    run(|| {
        let (tx, rx) = bounded(2);
        let sent = Rc::new(Cell::new(0));
        let s = sent.clone();
        let producer = spawn(move || {
            for i in 0..10 {
                tx.send(i).unwrap();
                s.set(s.get() + 1);
            }
        });
        yield_now();
        assert_eq!(sent.get(), 2, "the producer parks once the channel holds 2");
        let got: Vec<i32> = std::iter::from_fn(|| rx.recv().ok()).collect();
        assert_eq!(got, (0..10).collect::<Vec<_>>());
        producer.join().unwrap();
    });
}

#[test]
fn a_rendezvous_send_waits_for_the_receiver() {
    run(|| {
        let (tx, rx) = bounded(0);
        let delivered = Rc::new(Cell::new(false));
        let d = delivered.clone();
        let producer = spawn(move || {
            tx.send("hand-off").unwrap();
            d.set(true);
        });
        yield_now();
        yield_now();
        assert!(!delivered.get(), "send returns only once the value is taken");
        assert_eq!(rx.recv(), Ok("hand-off"));
        producer.join().unwrap();
        assert!(delivered.get());
    });
}

#[test]
fn a_rendezvous_sender_that_gives_up_leaves_its_value_to_be_received() {
    run(|| {
        let (tx, rx) = bounded(0);
        let tx2 = tx.clone();
        let hasty = spawn(move || timeout(Duration::from_millis(2), || tx.send(1)));
        let patient = spawn(move || tx2.send(2));
        sleep(Duration::from_millis(10));
        assert_eq!(hasty.join().unwrap(), Err(Elapsed), "the value is queued, the sender gone");
        assert_eq!((rx.recv(), rx.recv()), (Ok(1), Ok(2)));
        patient.join().unwrap().unwrap();

        let (tx, rx) = bounded(0);
        let tx2 = tx.clone();
        let cancelled = spawn(move || tx.send(3));
        let patient = spawn(move || tx2.send(4));
        yield_now(); // 3 is queued and its sender parked; 4 waits for room
        cancelled.cancel();
        assert!(matches!(cancelled.join(), Err(JoinError::Cancelled)));
        assert_eq!((rx.recv(), rx.recv()), (Ok(3), Ok(4)));
        patient.join().unwrap().unwrap();
    });
}

#[test]
fn rendezvous_senders_on_other_threads_each_wait_for_their_value() {
    let (tx, rx) = bounded(0);
    let receiving = Arc::new(AtomicBool::new(false));
    // Sends returned so far, per sender thread.
    let returned: Arc<[AtomicUsize; 4]> = Arc::new(Default::default());
    let senders: Vec<_> = (0..4)
        .map(|t| {
            let (tx, receiving, returned) = (tx.clone(), receiving.clone(), returned.clone());
            std::thread::spawn(move || {
                for i in 0..200 {
                    tx.send(t * 1000 + i).unwrap();
                    assert!(receiving.load(Ordering::SeqCst), "a rendezvous send returned before any receive");
                    returned[t].fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    drop(tx);
    // Let the senders block first; the assertion holds however the threads run.
    #[allow(clippy::disallowed_methods)] // no runtime on this thread yet: blocking it is the point
    std::thread::sleep(Duration::from_millis(20));
    let got = run(move || {
        receiving.store(true, Ordering::SeqCst);
        let next = || {
            let v = timeout(Duration::from_secs(10), || rx.recv()).expect("no wake-up is lost").ok()?;
            // Send i may have returned once its value was taken, send i + 1 not before the next receive.
            let (t, i) = (v / 1000, v % 1000);
            assert!(returned[t].load(Ordering::SeqCst) <= i + 1, "sender {t}'s send {} returned untaken", i + 1);
            Some(v)
        };
        std::iter::from_fn(next).collect::<Vec<_>>()
    });
    senders.into_iter().for_each(|t| t.join().unwrap());
    for t in 0..4 {
        let mine: Vec<_> = got.iter().copied().filter(|v| v / 1000 == t).collect();
        assert_eq!(mine, (0..200).map(|i| t * 1000 + i).collect::<Vec<_>>(), "each sender's values in order");
    }
}

#[test]
fn dropping_either_end_disconnects_the_other() {
    run(|| {
        let (tx, rx) = unbounded::<u8>();
        let waiter = spawn(move || rx.recv());
        yield_now();
        drop(tx);
        assert_eq!(waiter.join().unwrap(), Err(RecvError::Disconnected));

        let (tx, rx) = bounded::<u8>(1);
        drop(rx);
        assert_eq!(tx.send(1), Err(SendError::Disconnected(1)));

        let (tx, rx) = oneshot::<u8>();
        drop(tx);
        assert_eq!(rx.recv(), Err(RecvError::Disconnected));
    });
}

#[test]
fn notify_all_wakes_every_waiter_and_wait_group_counts_down() {
    let woken = run(|| {
        let notify = Rc::new(Notify::new());
        let wg = Rc::new(WaitGroup::new());
        let woken = Rc::new(RefCell::new(Vec::new()));
        for i in 0..4 {
            wg.add(1);
            let (notify, wg, woken) = (notify.clone(), wg.clone(), woken.clone());
            spawn(move || {
                notify.notified().unwrap();
                woken.borrow_mut().push(i);
                wg.done();
            });
        }
        yield_now();
        notify.notify_all();
        wg.wait().unwrap();
        woken.take()
    });
    assert_eq!(woken, [0, 1, 2, 3]);
}

#[test]
fn added_permits_wake_that_many_waiters_in_order_and_owned_permits_move_between_fibers() {
    let order = run(|| {
        let gate = Arc::new(Semaphore::new(0));
        let order = Rc::new(RefCell::new(Vec::new()));
        let waiters: Vec<_> = (0..3)
            .map(|i| {
                let (gate, order) = (gate.clone(), order.clone());
                spawn(move || {
                    let permit = gate.acquire_owned().unwrap();
                    order.borrow_mut().push(i);
                    permit
                })
            })
            .collect();
        yield_now();
        gate.add_permits(2);
        let mut waiters = waiters.into_iter();
        let first = waiters.next().unwrap().join().unwrap();
        let second = waiters.next().unwrap().join().unwrap();
        assert_eq!(gate.available(), 0, "two permits, two waiters served");
        drop(first);
        let third = waiters.next().unwrap().join().unwrap();
        drop((second, third));
        assert_eq!(gate.available(), 2, "every permit came back");
        let (tx, rx) = oneshot::<u8>();
        drop(rx);
        assert_eq!(tx.send(9), Err(9), "no receiver: the value comes back");
        order.take()
    });
    assert_eq!(order, [0, 1, 2]);
}
