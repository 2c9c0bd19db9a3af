//! Waiting for a file descriptor without blocking the thread: the primitive the
//! socket types are built on.

use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::time::Instant;

use crate::reactor::{poll_blocking, Interest};
use crate::runtime::scheduler::{self, Scheduler, Woken};

/// Parks the calling fiber until `fd` is readable (or its peer hung up).
/// Readiness is edge-triggered: read until `WouldBlock` before waiting again.
/// Outside a runtime, blocks the thread in `poll(2)`.
///
/// # Errors
///
/// `TimedOut` inside an expired [`timeout`](crate::timeout); an error from the poller.
///
/// # Examples
///
/// ```
/// use std::io::{Read, Write};
/// use std::os::unix::net::UnixStream;
///
/// neverblock::run(|| {
///     let (mut a, mut b) = UnixStream::pair().unwrap();
///     b.set_nonblocking(true).unwrap();
///     let writer = neverblock::spawn(move || a.write_all(b"ping").unwrap());
///     neverblock::io::wait_readable(&b).unwrap();
///     let mut buf = [0; 4];
///     b.read_exact(&mut buf).unwrap();
///     assert_eq!(&buf, b"ping");
///     writer.join().unwrap();
/// });
/// ```
pub fn wait_readable(fd: &impl AsFd) -> io::Result<()> {
    wait(fd, Interest::READABLE)
}

/// Parks the calling fiber until `fd` is writable (see [`wait_readable`]).
///
/// # Errors
///
/// As [`wait_readable`].
///
/// # Examples
///
/// ```
/// let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
/// neverblock::run(move || neverblock::io::wait_writable(&a).unwrap());
/// ```
pub fn wait_writable(fd: &impl AsFd) -> io::Result<()> {
    wait(fd, Interest::WRITABLE)
}

fn wait(fd: &impl AsFd, interest: Interest) -> io::Result<()> {
    let raw = fd.as_fd().as_raw_fd();
    let Some(s) = scheduler::in_task() else { return poll_blocking(raw, interest, None).map(drop) };
    s.reactor.register_unless_ready(raw, interest)?;
    match park_on_fd(&s, raw, interest, None) {
        Woken::TimedOut => Err(io::Error::new(io::ErrorKind::TimedOut, "timed out waiting for the fd")),
        Woken::Ready => Ok(()),
    }
}

/// Parks the running task until `fd`, registered with `s`'s reactor, is ready
/// for `interest` (at once if readiness is cached), or until `deadline` or an
/// enclosing `timeout` passes (`TimedOut`). A park that ends any other way than
/// by readiness takes its wake-up back, so none is left on the fd.
pub(crate) fn park_on_fd(s: &Scheduler, fd: RawFd, interest: Interest, deadline: Option<Instant>) -> Woken {
    /// Takes the wake-up back unless readiness ended the park (also on a cancellation's unwind).
    struct Unwait<'a> {
        s: &'a Scheduler,
        fd: RawFd,
        interest: Interest,
        task: Option<u64>,
    }
    impl Drop for Unwait<'_> {
        fn drop(&mut self) {
            if let Some(task) = self.task {
                self.s.reactor.unwait(self.fd, self.interest, task);
            }
        }
    }
    let mut unwait = Unwait { s, fd, interest, task: s.current_task() };
    let register = |wake| s.reactor.wait_fd(fd, interest, wake);
    let woken = match deadline {
        None => s.park_unless(register),
        Some(deadline) => s.park_unless_until(register, deadline),
    };
    if woken == Woken::Ready {
        unwait.task = None;
    }
    woken
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::rc::Rc;
    use std::time::Duration;

    use crate::net::UnixStream;
    use crate::runtime::scheduler;

    fn timers_pending() -> bool {
        scheduler::current().expect("inside run").reactor.has_timers()
    }

    fn fd_waiters_pending() -> bool {
        scheduler::current().expect("inside run").reactor.has_fd_waiters()
    }

    #[test]
    fn a_socket_wait_under_a_timeout_leaves_no_timer_and_no_fd_waiter_however_it_ends() {
        crate::run(|| {
            let (a, mut b) = UnixStream::pair().unwrap();
            // Shared, so the cancelled reader does not close the socket (which would
            // drop its registration and hide a wake-up left on it).
            let a = Rc::new(a);
            a.set_read_timeout(Some(Duration::from_secs(3600))).unwrap();
            let writer = crate::spawn(move || {
                crate::yield_now();
                b.write_all(b"x").unwrap();
                b
            });
            let mut byte = [0];
            assert_eq!((&*a).read(&mut byte).unwrap(), 1, "the read parked, then the data came");
            assert!(!timers_pending(), "readiness ended the wait: its timer is gone");

            a.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
            let err = (&*a).read(&mut byte).unwrap_err();
            assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
            assert!(!fd_waiters_pending(), "a timed-out wait takes its wake-up off the fd");

            a.set_read_timeout(Some(Duration::from_secs(3600))).unwrap();
            let held = a.clone();
            let reader = crate::spawn(move || (&*held).read(&mut [0]).map(|_| ()));
            crate::yield_now();
            reader.cancel();
            assert!(reader.join().is_err(), "cancelled while parked");
            assert!(!timers_pending(), "a cancelled wait takes its timer back");
            assert!(!fd_waiters_pending(), "a cancelled wait takes its wake-up off the fd");
            drop(writer.join().unwrap());
        });
    }
}
