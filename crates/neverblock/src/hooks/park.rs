//! How a hooked call parks its fiber: tried without waiting, and when it would
//! block, parked on the fd (or on an epoll set of the fds a `poll` watches, or on
//! a timer) and tried again, under the socket's timeout; the caller's `errno` is
//! put back after every park, since the other fibers of the thread ran meanwhile.
//!
//! Each result is libc's: a call ends with the value and `errno` that the real
//! call returned, or with the `errno` a blocking call would have set at its end
//! (`EAGAIN` at `SO_RCVTIMEO`, `EINPROGRESS` for a connect at `SO_SNDTIMEO`), or
//! with one of these, which no blocking call returns: `ETIMEDOUT` when a
//! [`timeout`](crate::timeout) scope around the call expired, `EBADF` when
//! another fiber or thread closed the fd meanwhile, `ECANCELED` when the task was
//! cancelled (its unwind cannot cross the C frames of a libc call; its next park
//! outside a hook unwinds it).

use std::ffi::c_int;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::panic::{self, AssertUnwindSafe};
use std::time::{Duration, Instant};

use super::fds::FdState;
use super::real;
use crate::runtime::fd_waits::{self, FdWaited};
use crate::runtime::registration::Direction;

/// An fd whose call may park the calling fiber: a blocking socket, on a fiber of a loop.
#[derive(Debug)]
pub(super) struct Parkable<'a> {
    pub(super) fd: BorrowedFd<'a>,
    pub(super) state: FdState,
}

/// When a call's timeout ends: unknown until the call first would block (the clock
/// is read only then), and kept across the parts of a call made of several.
#[derive(Debug, Default)]
pub(super) struct Deadline(Option<Option<Instant>>);

/// Runs `attempt` (the call made not to wait: `MSG_DONTWAIT`, or `O_NONBLOCK` for
/// the call's instant) until it does not fail with `EAGAIN`, parking on the fd's
/// `direction` in between, until the socket's timeout for that direction.
pub(super) fn io(
    call: &Parkable<'_>,
    direction: Direction,
    deadline: &mut Deadline,
    mut attempt: impl FnMut() -> isize,
) -> isize {
    let saved = real::errno();
    let timeout = match direction {
        Direction::Read => call.state.recv_timeout,
        Direction::Write => call.state.send_timeout,
    };
    loop {
        let done = attempt();
        if done >= 0 || real::errno() != libc::EAGAIN {
            return done;
        }
        // The clock is read only once the call would block.
        let deadline = *deadline.0.get_or_insert_with(|| timeout.map(|t| Instant::now() + t));
        let code = match wait(&[call.fd.as_raw_fd()], call.fd, direction, deadline) {
            Ok(FdWaited::Ready) => {
                real::set_errno(saved);
                continue;
            }
            Ok(FdWaited::Deadline) => libc::EAGAIN,
            Ok(FdWaited::TimedOut) => libc::ETIMEDOUT,
            Ok(FdWaited::Closed) => libc::EBADF,
            Err(code) => code,
        };
        real::set_errno(code);
        return -1;
    }
}

/// A connect of a blocking socket: started with `attempt` (made non-blocking for
/// its instant), then parked on until the socket is writable, its `SO_SNDTIMEO`
/// passes (`EINPROGRESS`, as the kernel says it), or another end; the result is the
/// socket's `SO_ERROR`.
pub(super) fn connect(call: &Parkable<'_>, attempt: impl FnOnce() -> c_int) -> c_int {
    let saved = real::errno();
    if attempt() == 0 {
        return finish(0, saved);
    }
    if real::errno() != libc::EINPROGRESS {
        return -1;
    }
    let fd = call.fd.as_raw_fd();
    let deadline = call.state.send_timeout.map(|t| Instant::now() + t);
    loop {
        let code = match wait(&[fd], call.fd, Direction::Write, deadline) {
            Ok(FdWaited::Ready) if !real::ready_now(fd, libc::POLLOUT) => continue,
            Ok(FdWaited::Ready) => match real::socket_error(fd) {
                0 => return finish(0, saved),
                error => error,
            },
            Ok(FdWaited::Deadline) => libc::EINPROGRESS,
            Ok(FdWaited::TimedOut) => libc::ETIMEDOUT,
            Ok(FdWaited::Closed) => libc::EBADF,
            Err(code) => code,
        };
        real::set_errno(code);
        return -1;
    }
}

/// `poll`, `ppoll` and `select` in a fiber: `now` answers without waiting (the real
/// call with a zero timeout); while it finds nothing ready and `deadline` has not
/// passed, the fiber parks on an epoll set of `watch` (fd and poll's event bits,
/// duplicates merged), level-triggered for exactly those events.
pub(super) fn poll(watch: &mut [(RawFd, u32)], deadline: Option<Instant>, mut now: impl FnMut() -> c_int) -> c_int {
    let saved = real::errno();
    watch.sort_unstable();
    let mut merged: Vec<(RawFd, u32)> = Vec::with_capacity(watch.len());
    for &(fd, events) in watch.iter() {
        match merged.last_mut() {
            Some((last, all)) if *last == fd => *all |= events,
            _ => merged.push((fd, events)),
        }
    }
    let watched: Vec<RawFd> = merged.iter().map(|&(fd, _)| fd).collect();
    loop {
        let found = now();
        if found != 0 || deadline.is_some_and(|d| Instant::now() >= d) {
            return found;
        }
        let code = match wait_any(&merged, &watched, deadline) {
            Ok(FdWaited::Ready | FdWaited::Deadline | FdWaited::Closed) => {
                // `now` tells what is ready, the deadline's 0, or a closed fd's POLLNVAL.
                real::set_errno(saved);
                continue;
            }
            Ok(FdWaited::TimedOut) => libc::ETIMEDOUT,
            Err(code) => code,
        };
        real::set_errno(code);
        return -1;
    }
}

/// Parks until one of `merged` may be ready: on an epoll set of them. Fds epoll
/// cannot watch (regular files, which `poll` reports ready at once anyway) are left out.
fn wait_any(merged: &[(RawFd, u32)], watched: &[RawFd], deadline: Option<Instant>) -> Result<FdWaited, c_int> {
    let set = real::epoll_create().ok_or_else(real::errno)?;
    let mut added = 0;
    for &(fd, events) in merged {
        // POLLNVAL is an answer, not an event to ask for; the other bits are epoll's.
        if fd >= 0 && real::epoll_add(set.as_fd(), fd, events & !(libc::POLLNVAL as u32)) {
            added += 1;
        }
    }
    if added == 0 {
        return sleep_until(deadline).map(|()| FdWaited::Deadline);
    }
    wait(watched, set.as_fd(), Direction::Read, deadline)
}

/// Parks on one fd through the loop, catching a cancellation's unwind.
fn wait(
    watched: &[RawFd],
    fd: BorrowedFd<'_>,
    direction: Direction,
    deadline: Option<Instant>,
) -> Result<FdWaited, c_int> {
    if deadline.is_some_and(|d| Instant::now() >= d) {
        return Ok(FdWaited::Deadline);
    }
    match catching(|| fd_waits::wait(watched, fd, direction, deadline))? {
        Ok(waited) => Ok(waited),
        Err(e) => Err(e.raw_os_error().unwrap_or(libc::EIO)),
    }
}

/// Parks the fiber until `deadline` (for ever without one), keeping the caller's `errno`.
///
/// # Errors
///
/// `ECANCELED` when the task was cancelled.
pub(super) fn sleep_until(deadline: Option<Instant>) -> Result<(), c_int> {
    let saved = real::errno();
    // A hundred years stand for ever: the park ends only by cancellation.
    let deadline = deadline.unwrap_or_else(|| Instant::now() + Duration::from_secs(100 * 365 * 86_400));
    catching(|| crate::sleep_until(deadline))?;
    real::set_errno(saved);
    Ok(())
}

/// Runs `park`, turning a cancellation's unwind into `ECANCELED` (the unwind may not
/// cross the C caller's frames); any other panic goes on, and stops the process at
/// the hook's boundary.
pub(super) fn catching<T>(park: impl FnOnce() -> T) -> Result<T, c_int> {
    match panic::catch_unwind(AssertUnwindSafe(park)) {
        Ok(value) => Ok(value),
        Err(payload) if crate::runtime::is_cancellation(&*payload) => Err(libc::ECANCELED),
        Err(payload) => panic::resume_unwind(payload),
    }
}

/// Runs `call` with `fd` in non-blocking mode, then puts its mode back (the call's
/// `errno` kept): a connect or accept, which have no `MSG_DONTWAIT`.
pub(super) fn nonblocking_for<T>(fd: c_int, call: impl FnOnce() -> T) -> T {
    let flags = real::status_flags(fd);
    if flags == -1 || flags & libc::O_NONBLOCK != 0 {
        return call();
    }
    real::set_status_flags(fd, flags | libc::O_NONBLOCK);
    let done = call();
    let code = real::errno();
    real::set_status_flags(fd, flags);
    real::set_errno(code);
    done
}

/// Ends a call with `value`, the caller's `errno` put back.
fn finish(value: c_int, saved: c_int) -> c_int {
    real::set_errno(saved);
    value
}
