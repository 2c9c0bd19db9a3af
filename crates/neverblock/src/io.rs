//! Waiting for a file descriptor without blocking the thread: the primitive the
//! socket types are built on.

use std::io;
use std::os::fd::{AsFd, AsRawFd};

use crate::reactor::Wake;
use crate::runtime::scheduler::{self, Woken};
use crate::sys::epoll::Interest;

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
    let Some(s) = scheduler::in_task() else { return crate::sys::epoll::poll_blocking(raw, interest, None).map(drop) };
    let mut ready = Ok(false);
    let woken = s.park_unless(|wake: Wake| {
        ready = s.reactor.poll_fd(raw, interest, wake);
        !matches!(ready, Ok(false))
    });
    ready?;
    match woken {
        Woken::TimedOut => Err(io::Error::new(io::ErrorKind::TimedOut, "timed out waiting for the fd")),
        Woken::Ready => Ok(()),
    }
}
