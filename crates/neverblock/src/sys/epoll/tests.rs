use super::*;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsFd;

/// Long enough for an event that is already pending; a wait this long means a missed event.
const SOON: Option<Duration> = Some(Duration::from_secs(5));
/// Poll without blocking.
const NOW: Option<Duration> = Some(Duration::ZERO);

/// A non-blocking, close-on-exec pipe: (read end, write end).
fn pipe() -> (File, File) {
    let flags = rustix::pipe::PipeFlags::NONBLOCK | rustix::pipe::PipeFlags::CLOEXEC;
    let (r, w) = rustix::pipe::pipe_with(flags).expect("pipe2");
    (File::from(r), File::from(w))
}

/// Writes one byte.
fn write_byte(mut w: &File) {
    w.write_all(b"x").expect("write to pipe");
}

/// Reads until `EAGAIN`; returns how many bytes there were.
fn drain(mut r: &File) -> usize {
    let mut buf = [0u8; 64];
    let mut total = 0;
    loop {
        match r.read(&mut buf) {
            Ok(0) => return total,
            Ok(n) => total += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return total,
            Err(e) => panic!("read from pipe: {e}"),
        }
    }
}

/// Waits and returns the events.
fn wait(poller: &Poller, timeout: Option<Duration>) -> Vec<Event> {
    let mut events =
        vec![Event { token: 999, readable: false, writable: false, read_closed: false, write_closed: false }];
    let n = poller.wait(&mut events, timeout).expect("epoll_wait");
    assert_eq!(n, events.len(), "the count matches the events appended to a cleared vector");
    events
}

fn readable(token: u64) -> Event {
    Event { token, readable: true, writable: false, read_closed: false, write_closed: false }
}

fn writable(token: u64) -> Event {
    Event { token, readable: false, writable: true, read_closed: false, write_closed: false }
}

#[test]
fn wait_times_out_with_no_events() {
    let poller = Poller::new().unwrap();
    for timeout in [Duration::from_millis(20), Duration::from_micros(300)] {
        let start = Instant::now();
        assert_eq!(wait(&poller, Some(timeout)), []);
        let elapsed = start.elapsed();
        assert!(elapsed >= timeout, "returned after {elapsed:?}, before the {timeout:?} timeout");
        assert!(elapsed < Duration::from_secs(2), "returned after {elapsed:?}, long after {timeout:?}");
    }
    assert_eq!(wait(&poller, NOW), []);
}

#[test]
fn pipe_becomes_readable() {
    let poller = Poller::new().unwrap();
    let (r, w) = pipe();
    poller.add(r.as_fd(), 7).unwrap();
    assert_eq!(wait(&poller, NOW), []);
    write_byte(&w);
    assert_eq!(wait(&poller, SOON), [readable(7)]);
}

#[test]
fn edge_triggered_reports_once_until_drained() {
    let poller = Poller::new().unwrap();
    let (r, w) = pipe();
    poller.add(r.as_fd(), 1).unwrap();
    write_byte(&w);
    assert_eq!(wait(&poller, SOON), [readable(1)]);
    assert_eq!(wait(&poller, NOW), [], "still readable, but the edge was already reported");
    assert_eq!(drain(&r), 1);
    assert_eq!(wait(&poller, NOW), []);
    write_byte(&w);
    assert_eq!(wait(&poller, SOON), [readable(1)], "new data after draining is a new edge");
}

#[test]
fn writable_interest_on_empty_pipe() {
    let poller = Poller::new().unwrap();
    let (_r, w) = pipe();
    poller.add(w.as_fd(), 2).unwrap();
    assert_eq!(wait(&poller, SOON), [writable(2)]);
    assert_eq!(wait(&poller, NOW), []);
}

#[test]
fn hangup_when_peer_closes() {
    let poller = Poller::new().unwrap();
    let (r, w) = pipe();
    poller.add(r.as_fd(), 9).unwrap();
    assert_eq!(wait(&poller, NOW), []);
    drop(w);
    let events = wait(&poller, SOON);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].token, 9);
    assert!(events[0].read_closed, "{events:?}");
    assert_eq!(drain(&r), 0, "end of file");
}

#[test]
fn an_eventfd_wakes_a_wait_from_another_thread() {
    const WAKE: u64 = u64::MAX;
    let poller = Poller::new().unwrap();
    let waker = EventFd::new(&poller, WAKE).unwrap();
    let start = Instant::now();
    let events = std::thread::scope(|s| {
        s.spawn(|| {
            #[expect(clippy::disallowed_methods, reason = "a plain OS thread, not a fiber, waits here")]
            std::thread::sleep(Duration::from_millis(20));
            waker.wake().unwrap();
        });
        wait(&poller, None)
    });
    assert_eq!(events, [readable(WAKE)]);
    assert!(start.elapsed() >= Duration::from_millis(20), "woke after {:?}", start.elapsed());
}

#[test]
fn wake_twice_then_reset_drains() {
    let poller = Poller::new().unwrap();
    let waker = EventFd::new(&poller, 0).unwrap();
    waker.wake().unwrap();
    waker.wake().unwrap();
    let events = wait(&poller, SOON);
    assert!(!events.is_empty() && events.iter().all(|e| *e == readable(0)), "{events:?}");
    waker.reset().unwrap();
    assert_eq!(wait(&poller, NOW), []);
    let mut counter = [0u8; 8];
    let read = rustix::io::read(&waker.fd, &mut counter);
    assert_eq!(read, Err(rustix::io::Errno::AGAIN), "reset left the counter at zero, so a read would block");
    waker.reset().unwrap();
    waker.wake().unwrap();
    assert_eq!(wait(&poller, SOON), [readable(0)], "a wake after reset is a new edge");
}

#[test]
fn a_thousand_fds() {
    raise_fd_limit(2 * 1000 + 200);
    let poller = Poller::new().unwrap();
    let pipes: Vec<(File, File)> = (0..1000).map(|_| pipe()).collect();
    for (i, (r, _)) in pipes.iter().enumerate() {
        poller.add(r.as_fd(), i as u64).unwrap();
    }
    for (_, w) in pipes.iter().step_by(10) {
        write_byte(w);
    }
    let mut events = wait(&poller, SOON);
    assert_eq!(events.len(), 100);
    events.sort_by_key(|e| e.token);
    let expected: Vec<Event> = (0..1000).step_by(10).map(readable).collect();
    assert_eq!(events, expected);
    assert_eq!(wait(&poller, NOW), []);
}

/// Raises the soft limit on open files to at least `wanted`, if the hard limit allows.
fn raise_fd_limit(wanted: u64) {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current.is_some_and(|current| current < wanted) {
        limit.current = Some(limit.maximum.map_or(wanted, |max| wanted.min(max)));
        setrlimit(Resource::Nofile, limit).expect("setrlimit");
    }
}
