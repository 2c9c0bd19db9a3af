//! Waiting for any file descriptor without blocking the thread, for fds the
//! socket types do not wrap (a pipe, a device, another library's socket).

use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use crate::runtime::registration::Direction;
use crate::runtime::registration::Registration;

/// Parks the calling fiber until `fd` is readable (or its peer hung up).
/// Outside a runtime, blocks the thread in `poll(2)`.
///
/// Each call registers `fd` with the loop for this one wait and takes it out
/// after, so the fd may be closed or handed on in between; a socket that waits
/// often is cheaper as a [`net`](crate::net) type, registered once.
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
    wait(fd, Direction::Read)
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
    wait(fd, Direction::Write)
}

/// One wait on a registration of its own, ended (and the fd taken out of the
/// poller) before returning. An fd its owner has registered already (a socket of
/// [`net`](crate::net)) is waited on through a duplicate, which the poller keeps apart.
fn wait(fd: &impl AsFd, direction: Direction) -> io::Result<()> {
    let fd = fd.as_fd();
    match wait_once(fd, direction) {
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::EXIST.raw_os_error()) => {
            let duplicate = fd.try_clone_to_owned()?;
            wait_once(duplicate.as_fd(), direction)
        }
        waited => waited,
    }
}

fn wait_once(fd: BorrowedFd<'_>, direction: Direction) -> io::Result<()> {
    let mut registration = Registration::new();
    let waited = registration.wait(fd, direction, None);
    registration.deregister(Some(fd));
    waited
}
