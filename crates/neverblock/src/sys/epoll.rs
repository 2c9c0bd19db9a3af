//! epoll: wait for readiness of many file descriptors; eventfd: wake the wait
//! from any thread; poll(2): wait for one descriptor in blocking mode. All
//! through rustix's safe calls.
//!
//! Every registration is edge-triggered (`EPOLLET`) and watches both directions:
//! an event is reported when a file descriptor *becomes* readable or writable,
//! not while it stays so. A caller must therefore read or write until `EAGAIN`
//! (or a short read or write of a stream) before it can rely on a new event.
//!
//! Timeouts are whole milliseconds, rounded *up*, so a timer never wakes early
//! and a sub-millisecond timeout never turns into a busy poll; they are capped
//! at `i32::MAX` ms, so `epoll_pwait2` (Linux 5.11) is never needed.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::event::epoll::{self, EventData, EventFlags};
use rustix::event::{EventfdFlags, PollFd, PollFlags, Timespec};

#[cfg(test)]
mod tests;

/// How many ready events one [`Poller::wait`] can return; the rest wait for the next call.
const MAX_EVENTS: usize = 256;

/// Which way an operation moves data, and so which readiness it waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    /// Reading or accepting: waits until the descriptor is readable (`EPOLLIN`).
    Read,
    /// Writing or connecting: waits until the descriptor is writable (`EPOLLOUT`).
    Write,
}

/// One readiness report from [`Poller::wait`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Event {
    /// The token the file descriptor was registered with.
    pub(crate) token: u64,
    /// The file descriptor became readable (`EPOLLIN`).
    pub(crate) readable: bool,
    /// The file descriptor became writable (`EPOLLOUT`).
    pub(crate) writable: bool,
    /// No more data will come: the peer shut down its writing half, hung up, or
    /// the fd has an error (`EPOLLRDHUP`, `EPOLLHUP`, `EPOLLERR`). Every read from
    /// now on returns at once (end-of-file or the error).
    pub(crate) read_closed: bool,
    /// Writes can never succeed again: hung up or an error (`EPOLLHUP`, `EPOLLERR`).
    pub(crate) write_closed: bool,
}

impl Event {
    /// Translates one kernel event.
    fn from_raw(raw: &epoll::Event) -> Event {
        // Copied out by value: on x86_64 the struct is packed, so its fields must not be borrowed.
        let (flags, data) = (raw.flags, raw.data);
        Event {
            token: data.u64(),
            readable: flags.contains(EventFlags::IN),
            writable: flags.contains(EventFlags::OUT),
            read_closed: flags.intersects(EventFlags::HUP | EventFlags::RDHUP | EventFlags::ERR),
            write_closed: flags.intersects(EventFlags::HUP | EventFlags::ERR),
        }
    }
}

/// An epoll instance: a set of registered file descriptors and a way to wait for them.
pub(crate) struct Poller {
    /// The epoll file descriptor, closed on drop.
    epfd: OwnedFd,
    /// Where `epoll_wait` writes, kept between waits so a wait allocates nothing.
    buffer: std::cell::RefCell<Vec<epoll::Event>>,
}

impl std::fmt::Debug for Poller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Poller").field("epfd", &self.epfd).finish_non_exhaustive()
    }
}

impl Poller {
    /// Creates an empty epoll instance (close-on-exec).
    pub(crate) fn new() -> io::Result<Poller> {
        let epfd = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        Ok(Poller { epfd, buffer: std::cell::RefCell::new(Vec::with_capacity(MAX_EVENTS)) })
    }

    /// Registers `fd`, edge-triggered, for both directions and hang-ups, under `token`.
    pub(crate) fn add(&self, fd: BorrowedFd<'_>, token: u64) -> io::Result<()> {
        let flags = EventFlags::IN | EventFlags::OUT | EventFlags::RDHUP | EventFlags::ET;
        Ok(epoll::add(&self.epfd, fd, EventData::new_u64(token), flags)?)
    }

    /// Stops watching `fd`, which stays open. An fd that is not registered is not
    /// an error: there is nothing left to remove.
    pub(crate) fn delete(&self, fd: BorrowedFd<'_>) {
        // The result is ignored on purpose: ENOENT means there is nothing to remove.
        let _ = epoll::delete(&self.epfd, fd);
    }

    /// Waits up to `timeout` (`None` = forever; `Some(ZERO)` = poll) and appends ready events to
    /// `events` (cleared first); returns how many.
    ///
    /// An interrupted wait (`EINTR`) is resumed for the time left.
    pub(crate) fn wait(&self, events: &mut Vec<Event>, timeout: Option<Duration>) -> io::Result<usize> {
        events.clear();
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut timespec = timeout.map(whole_millis);
        let mut buffer = self.buffer.borrow_mut();
        loop {
            buffer.clear();
            match epoll::wait(&self.epfd, rustix::buffer::spare_capacity(&mut buffer), timespec.as_ref()) {
                Ok(_) => break,
                Err(rustix::io::Errno::INTR) => {
                    // Zero only once the deadline has passed: then one last poll, not a spin.
                    timespec = deadline.map(|d| whole_millis(d.saturating_duration_since(Instant::now())));
                }
                Err(e) => return Err(e.into()),
            }
        }
        events.extend(buffer.iter().map(Event::from_raw));
        Ok(events.len())
    }
}

/// A `Timespec` of `timeout` rounded up to whole milliseconds (only zero stays
/// zero) and capped at `i32::MAX` ms (about 24 days).
fn whole_millis(timeout: Duration) -> Timespec {
    let ms = timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i64;
    Timespec { tv_sec: ms / 1000, tv_nsec: (ms % 1000) * 1_000_000 }
}

/// An eventfd registered in a poller: wakes a [`Poller::wait`] from any thread.
#[derive(Debug)]
pub(crate) struct EventFd {
    /// The eventfd, non-blocking and close-on-exec, closed on drop.
    fd: OwnedFd,
}

impl EventFd {
    /// Creates an eventfd and registers it in `poller`, readable and edge-triggered, under `token`.
    pub(crate) fn new(poller: &Poller, token: u64) -> io::Result<EventFd> {
        let fd = rustix::event::eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        let flags = EventFlags::IN | EventFlags::ET;
        epoll::add(&poller.epfd, &fd, EventData::new_u64(token), flags)?;
        Ok(EventFd { fd })
    }

    /// Makes the poller's wait return this eventfd's token. Wakes are not counted:
    /// a saturated counter (`EAGAIN`) means a wake is already pending, which is success.
    pub(crate) fn wake(&self) -> io::Result<()> {
        loop {
            match rustix::io::write(&self.fd, &1u64.to_ne_bytes()) {
                Ok(_) | Err(rustix::io::Errno::AGAIN) => return Ok(()),
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Drains pending wakes: reads until `EAGAIN`, so the next [`EventFd::wake`] is a new edge.
    pub(crate) fn reset(&self) -> io::Result<()> {
        let mut counter = [0u8; 8];
        loop {
            match rustix::io::read(&self.fd, &mut counter) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::AGAIN) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// Blocks the thread until `fd` is ready for `direction` or `deadline` passes
/// (blocking mode, outside a runtime). Returns false when the deadline passed first.
pub(crate) fn poll_blocking(fd: BorrowedFd<'_>, direction: Direction, deadline: Option<Instant>) -> io::Result<bool> {
    let flags = match direction {
        Direction::Read => PollFlags::IN,
        Direction::Write => PollFlags::OUT,
    };
    let mut fds = [PollFd::from_borrowed_fd(fd.as_fd(), flags)];
    loop {
        let timeout = deadline.map(|d| whole_millis(d.saturating_duration_since(Instant::now())));
        match rustix::event::poll(&mut fds, timeout.as_ref()) {
            Ok(0) => return Ok(false),
            Ok(_) => return Ok(true),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}
