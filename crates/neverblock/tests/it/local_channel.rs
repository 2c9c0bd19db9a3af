//! `sync::local`: the one-thread channels, their waits, and their ends.

use std::cell::Cell;
use std::panic;
use std::rc::Rc;
use std::time::Duration;

use neverblock::sync::{local, RecvError, SendError, TryRecvError};
use neverblock::{run, sleep, spawn, timeout, yield_now, Elapsed, JoinError};

#[test]
fn a_bounded_local_channel_applies_backpressure_in_order() {
    run(|| {
        let (tx, rx) = local::bounded(2);
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
fn a_local_rendezvous_send_returns_once_its_value_is_taken() {
    run(|| {
        let (tx, rx) = local::bounded(0);
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
fn dropping_an_end_of_a_local_channel_wakes_the_other() {
    run(|| {
        let (tx, rx) = local::unbounded::<u8>();
        let receiver = spawn(move || rx.recv());
        yield_now();
        drop(tx);
        assert_eq!(receiver.join().unwrap(), Err(RecvError::Disconnected));

        let (tx, rx) = local::bounded::<u8>(1);
        tx.send(1).unwrap();
        let sender = spawn(move || tx.send(2));
        yield_now();
        drop(rx);
        assert_eq!(sender.join().unwrap(), Err(SendError::Disconnected(2)), "a sender waiting for room hears");
    });
}

#[test]
fn a_timed_out_local_wait_leaves_the_line() {
    run(|| {
        let (tx, rx) = local::bounded::<u8>(1);
        let waited = timeout(Duration::from_millis(5), || rx.recv());
        assert!(matches!(waited, Err(Elapsed) | Ok(Err(RecvError::TimedOut))), "{waited:?}");
        tx.send(1).unwrap();
        let tx = Rc::new(tx);
        let t = tx.clone();
        let hasty = spawn(move || timeout(Duration::from_millis(5), || t.send(2)));
        let t = tx.clone();
        let patient = spawn(move || t.send(3));
        sleep(Duration::from_millis(10));
        let hasty = hasty.join().unwrap();
        assert!(matches!(hasty, Err(Elapsed) | Ok(Err(SendError::TimedOut(2)))), "{hasty:?}");
        assert_eq!(rx.recv(), Ok(1));
        assert_eq!(rx.recv(), Ok(3), "the room goes to the sender still waiting");
        patient.join().unwrap().unwrap();
    });
}

#[test]
fn a_local_receiver_cancelled_after_its_wakeup_passes_it_on() {
    run(|| {
        let (tx, rx) = local::unbounded::<u8>();
        let rx = Rc::new(rx);
        let r = rx.clone();
        let first = spawn(move || r.recv());
        let r = rx.clone();
        let second = spawn(move || r.recv());
        yield_now(); // both wait, `first` ahead
        tx.send(7).unwrap(); // the wake-up goes to `first`…
        first.cancel(); // …which unwinds before taking the value
        assert!(matches!(first.join(), Err(JoinError::Cancelled)));
        assert_eq!(second.join().unwrap(), Ok(7));
    });
}

#[test]
fn outside_a_runtime_a_local_wait_ends_at_once() {
    let (tx, rx) = local::bounded(0);
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    assert_eq!(rx.recv(), Err(RecvError::TimedOut), "no fiber could ever send");
    tx.send(1).unwrap();
    assert_eq!(tx.send(2), Err(SendError::TimedOut(2)), "a rendezvous channel holds one value");
    assert_eq!(rx.recv(), Ok(1));
}

#[test]
fn fibers_waiting_only_on_local_channels_are_a_deadlock() {
    let ended = panic::catch_unwind(|| {
        run(|| {
            let (tx, rx) = local::bounded::<u8>(0);
            let received = rx.recv();
            drop(tx);
            received
        })
    });
    let message = ended.expect_err("run reports the deadlock").downcast::<String>().expect("a formatted message");
    assert!(message.contains("deadlock"), "{message}");
}
