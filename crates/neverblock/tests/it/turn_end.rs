//! `runtime::at_turn_end`: a callback runs once when the loop's turn ends, before the loop looks
//! for I/O or timers, whether that look waits or not.

use std::cell::Cell;
use std::io::{Read, Write};
use std::time::Duration;

use neverblock::runtime::at_turn_end;
use neverblock::{run, sleep, spawn, yield_now};

thread_local! {
    static ENDS: Cell<u32> = const { Cell::new(0) };
    static AGAIN: Cell<u32> = const { Cell::new(0) };
}

fn count_end() {
    ENDS.set(ENDS.get() + 1);
}

/// Registers itself again from the end of the turn: it runs at the end of the next one, not now.
fn count_and_register_again() {
    AGAIN.set(AGAIN.get() + 1);
    if AGAIN.get() < 3 {
        assert!(at_turn_end(count_and_register_again));
    }
}

fn yield_now_then_true() -> bool {
    yield_now();
    true
}

fn panics() {
    panic!("a callback's bug");
}

#[test]
fn a_callback_registered_twice_in_a_turn_runs_once_when_the_loop_next_waits() {
    run(|| {
        ENDS.set(0);
        assert!(at_turn_end(count_end));
        assert!(at_turn_end(count_end));
        let helper = spawn(|| assert!(at_turn_end(count_end)));
        helper.join().unwrap();
        assert_eq!(ENDS.get(), 0, "the turn has not ended: the loop has not looked for I/O");
        sleep(Duration::from_millis(1));
        assert_eq!(ENDS.get(), 1);
        sleep(Duration::from_millis(1));
        assert_eq!(ENDS.get(), 1, "one-shot");
    });
}

#[test]
fn tasks_that_never_wait_still_end_turns() {
    run(|| {
        ENDS.set(0);
        assert!(at_turn_end(count_end));
        // Nothing waits: the tasks only yield, and the loop's root looks at its timers (no system
        // call) each time all of them have yielded.
        let busy: Vec<_> =
            (0..4).map(|_| spawn(|| (0..1000).find(|_| ENDS.get() == 1 || !yield_now_then_true()))).collect();
        let seen: Vec<_> = busy.into_iter().map(|task| task.join().unwrap()).collect();
        assert!(seen.iter().all(Option::is_some), "every busy task saw the turn end: {seen:?}");
        assert_eq!(ENDS.get(), 1);
    });
}

#[test]
fn a_turn_ends_at_a_look_for_io_that_does_not_wait() {
    run(|| {
        ENDS.set(0);
        let (mut ours, mut theirs) = neverblock::net::UnixStream::pair().unwrap();
        // A task waits on a socket, another stays runnable: the loop looks at the reactor
        // without waiting.
        let reader = spawn(move || {
            let mut byte = [0u8; 1];
            ours.read_exact(&mut byte).unwrap();
        });
        yield_now();
        assert!(at_turn_end(count_end));
        let busy = spawn(|| (0..1000).find(|_| ENDS.get() == 1 || !yield_now_then_true()));
        assert!(busy.join().unwrap().is_some(), "the busy task saw the turn end");
        theirs.write_all(b"x").unwrap();
        reader.join().unwrap();
    });
}

#[test]
fn a_callback_that_registers_again_runs_at_the_next_turns_end() {
    run(|| {
        AGAIN.set(0);
        assert!(at_turn_end(count_and_register_again));
        sleep(Duration::from_millis(1));
        assert_eq!(AGAIN.get(), 1, "not again in the same turn's end");
        sleep(Duration::from_millis(1));
        assert_eq!(AGAIN.get(), 2);
        sleep(Duration::from_millis(1));
        sleep(Duration::from_millis(1));
        assert_eq!(AGAIN.get(), 3);
    });
}

#[test]
fn the_loops_end_ends_its_last_turn_and_outside_a_loop_nothing_registers() {
    ENDS.set(0);
    run(|| assert!(at_turn_end(count_end)));
    assert_eq!(ENDS.get(), 1);
    assert!(!at_turn_end(count_end));
    run(|| sleep(Duration::from_millis(1)));
    assert_eq!(ENDS.get(), 1, "nothing was left for the next loop on this thread");
}

#[test]
fn a_panicking_callback_is_logged_and_the_loop_goes_on() {
    run(|| {
        ENDS.set(0);
        assert!(at_turn_end(panics));
        assert!(at_turn_end(count_end));
        sleep(Duration::from_millis(1));
        assert_eq!(ENDS.get(), 1, "the callback after the panicking one ran");
    });
}
