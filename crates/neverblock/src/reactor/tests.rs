use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;

use super::*;

fn turn_of(task: u64) -> Turn {
    Turn { task, number: 1 }
}

/// Polls once without blocking and returns the tasks to continue.
fn poll(reactor: &Reactor) -> Vec<Turn> {
    let found = reactor.turn(Some(Duration::ZERO)).unwrap();
    found.woken.into_iter().filter_map(|w| if let Wake::Continue(t) = w { Some(t) } else { None }).collect()
}

#[test]
fn a_wait_taken_back_leaves_no_waiter_behind() {
    let reactor = Reactor::new().unwrap();
    let (a, _b) = UnixStream::pair().unwrap();
    let token = reactor.register(a.as_fd()).unwrap();
    assert!(!reactor.wait(token, Direction::Read, turn_of(7), None), "nothing to read yet");
    assert!(reactor.has_fd_waiters());
    reactor.unwait(token, Direction::Read, 8);
    assert!(reactor.has_fd_waiters(), "another task's wait is not this one's to take back");
    reactor.unwait(token, Direction::Read, 7);
    assert!(!reactor.has_fd_waiters(), "the wait was taken back");
}

#[test]
fn a_new_source_is_not_ready_until_the_kernel_says_so_and_then_wakes_its_waiter() {
    let reactor = Reactor::new().unwrap();
    let (a, mut b) = UnixStream::pair().unwrap();
    let token = reactor.register(a.as_fd()).unwrap();
    assert!(!reactor.is_ready(token, Direction::Read));
    assert!(!reactor.is_ready(token, Direction::Write), "unknown until reported");
    assert_eq!(poll(&reactor), []);
    assert!(reactor.is_ready(token, Direction::Write), "the kernel reported an empty socket writable");
    assert!(!reactor.wait(token, Direction::Read, turn_of(3), None));
    b.write_all(b"x").unwrap();
    assert_eq!(poll(&reactor), [turn_of(3)]);
    assert!(reactor.is_ready(token, Direction::Read));
    reactor.clear_ready(token, Direction::Read);
    assert!(!reactor.is_ready(token, Direction::Read), "an operation would block: wait for the next report");
}

#[test]
fn an_event_for_a_departed_source_does_not_reach_the_one_that_took_its_slot() {
    let reactor = Reactor::new().unwrap();
    let (old, mut old_peer) = UnixStream::pair().unwrap();
    let (new, _new_peer) = UnixStream::pair().unwrap();
    let gone = reactor.register(old.as_fd()).unwrap();
    poll(&reactor);
    // Deregistered without leaving the poller, as when the fd is about to close
    // but a duplicate of it lives on elsewhere.
    assert_eq!(reactor.deregister(gone, None), []);
    let token = reactor.register(new.as_fd()).unwrap();
    assert_eq!(token.key(), gone.key(), "the slot is reused");
    poll(&reactor);
    reactor.clear_ready(token, Direction::Read);
    old_peer.write_all(b"x").unwrap();
    assert_eq!(poll(&reactor), []);
    assert!(!reactor.is_ready(token, Direction::Read), "the old fd's event named the old generation");
    assert_eq!(reactor.registered(), 1);
}

#[test]
fn a_source_deadline_is_one_timer_that_wakes_only_the_expired_and_rearms_for_the_rest() {
    let reactor = Reactor::new().unwrap();
    let (a, _b) = UnixStream::pair().unwrap();
    let token = reactor.register(a.as_fd()).unwrap();
    let soon = Instant::now() + Duration::from_millis(1);
    let later = Instant::now() + Duration::from_secs(3600);
    assert!(!reactor.wait(token, Direction::Read, turn_of(1), Some(later)));
    assert!(!reactor.wait(token, Direction::Read, turn_of(2), Some(later + Duration::from_secs(1))));
    assert_eq!(reactor.timers.borrow().len(), 1, "a later deadline rides on the armed timer");
    assert!(!reactor.wait(token, Direction::Read, turn_of(3), Some(soon)));
    assert_eq!(reactor.timers.borrow().len(), 1, "an earlier deadline re-arms the one timer");
    while Instant::now() < soon {
        std::thread::yield_now();
    }
    assert_eq!(poll(&reactor), [turn_of(3)], "only the expired wait is woken");
    assert_eq!(reactor.timers.borrow().len(), 1, "re-armed for the waits still parked");
    assert_eq!(reactor.timers.borrow_mut().next_deadline(), Some(later));
    reactor.deregister(token, Some(a.as_fd()));
    assert!(!reactor.has_timers(), "a departed source leaves no timer");
}
