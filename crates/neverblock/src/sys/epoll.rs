//! epoll: wait for readiness of many file descriptors; eventfd: wake the wait from any thread.
//!
//! Every registration is edge-triggered (`EPOLLET`): an event is reported when a
//! file descriptor *becomes* ready, not while it stays ready. A caller must
//! therefore read or write until `EAGAIN` before it can rely on a new event.
//!
//! Timeouts use `epoll_wait` with milliseconds. `epoll_pwait2` (nanoseconds) is
//! not used: the `libc` crate declares it only for glibc targets, and it needs
//! glibc 2.35 and Linux 5.11. Instead a timeout is rounded *up* to the next
//! millisecond, so a timer never wakes early and a sub-millisecond timeout never
//! turns into a busy poll.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

#[cfg(test)]
mod tests;

/// How many ready events one [`Poller::wait`] can return; the rest wait for the next call.
const MAX_EVENTS: usize = 256;

/// Which readiness a registration asks to be told about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Interest {
    /// Report when the file descriptor becomes readable (`EPOLLIN`).
    pub(crate) readable: bool,
    /// Report when the file descriptor becomes writable (`EPOLLOUT`).
    pub(crate) writable: bool,
}

impl Interest {
    /// Readable only.
    pub(crate) const READABLE: Interest = Interest { readable: true, writable: false };
    /// Writable only.
    pub(crate) const WRITABLE: Interest = Interest { readable: false, writable: true };
    /// Readable and writable.
    pub(crate) const BOTH: Interest = Interest { readable: true, writable: true };

    /// The epoll event mask for this interest: always edge-triggered and watching for peer hang-up.
    fn mask(self) -> u32 {
        let mut mask = (libc::EPOLLET | libc::EPOLLRDHUP) as u32;
        if self.readable {
            mask |= libc::EPOLLIN as u32;
        }
        if self.writable {
            mask |= libc::EPOLLOUT as u32;
        }
        mask
    }
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
    /// The peer hung up or the file descriptor has an error (`EPOLLHUP`, `EPOLLRDHUP`,
    /// `EPOLLERR`); the next read or write will report end-of-file or the error.
    pub(crate) hangup: bool,
}

impl Event {
    /// Translates one kernel event.
    fn from_raw(raw: &libc::epoll_event) -> Event {
        // Copied out by value: on x86_64 the struct is packed, so its fields must not be borrowed.
        let (bits, token) = (raw.events, raw.u64);
        let has = |flag: libc::c_int| bits & flag as u32 != 0;
        Event {
            token,
            readable: has(libc::EPOLLIN),
            writable: has(libc::EPOLLOUT),
            hangup: has(libc::EPOLLHUP) || has(libc::EPOLLRDHUP) || has(libc::EPOLLERR),
        }
    }
}

/// An epoll instance: a set of registered file descriptors and a way to wait for them.
#[derive(Debug)]
pub(crate) struct Poller {
    /// The epoll file descriptor, closed on drop.
    epfd: OwnedFd,
}

impl Poller {
    /// Creates an empty epoll instance (close-on-exec).
    pub(crate) fn new() -> io::Result<Poller> {
        // SAFETY: epoll_create1 takes no pointers and has no memory-safety preconditions.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: `fd` was just returned by epoll_create1, is open, and nothing else owns it.
        Ok(Poller { epfd: unsafe { OwnedFd::from_raw_fd(fd) } })
    }

    /// Registers `fd`, edge-triggered, to report `interest` under `token`.
    pub(crate) fn add(&self, fd: RawFd, token: u64, interest: Interest) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, token, interest.mask())
    }

    /// Stops watching `fd`. An fd that is not registered (or already closed) is not an error:
    /// the kernel drops a closed file from every epoll set by itself.
    pub(crate) fn delete(&self, fd: RawFd) {
        // The result is ignored on purpose: ENOENT/EBADF mean there is nothing left to remove.
        let _ = self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0);
    }

    /// Runs `epoll_ctl` with `op` (`ADD` or `DEL`) on `fd`, under `token` for `events`.
    fn ctl(&self, op: libc::c_int, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        let mut event = libc::epoll_event { events, u64: token };
        // SAFETY: `event` is a live, initialised epoll_event for the duration of the call
        // (the kernel only reads it); invalid descriptors are reported as errors, not UB.
        cvt(unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), op, fd, &mut event) })?;
        Ok(())
    }

    /// Waits up to `timeout` (`None` = forever; `Some(ZERO)` = poll) and appends ready events to
    /// `events` (cleared first); returns how many.
    ///
    /// A non-zero timeout is rounded up to whole milliseconds (at least 1 ms) and capped at
    /// `i32::MAX` ms (about 24 days). An interrupted wait (`EINTR`) is resumed for the time left.
    pub(crate) fn wait(&self, events: &mut Vec<Event>, timeout: Option<Duration>) -> io::Result<usize> {
        events.clear();
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut ms = timeout.map_or(-1, timeout_ms);
        // Left uninitialised: the kernel writes the entries it reports, and only those are read.
        let mut buf = [const { MaybeUninit::<libc::epoll_event>::uninit() }; MAX_EVENTS];
        let ready = loop {
            // SAFETY: `buf` is a writable array of MAX_EVENTS epoll_events that outlives the call,
            // and the kernel writes at most `maxevents` = MAX_EVENTS entries into it.
            let n = unsafe {
                libc::epoll_wait(self.epfd.as_raw_fd(), buf.as_mut_ptr().cast(), MAX_EVENTS as libc::c_int, ms)
            };
            match cvt(n) {
                Ok(n) => break n as usize,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                    if let Some(deadline) = deadline {
                        // Zero only once the deadline has passed: then one last poll, not a spin.
                        ms = timeout_ms(deadline.saturating_duration_since(Instant::now()));
                    }
                }
                Err(e) => return Err(e),
            }
        };
        // SAFETY: `epoll_wait` returned `ready`, so it wrote the first `ready` entries.
        events.extend(buf[..ready].iter().map(|raw| Event::from_raw(unsafe { raw.assume_init_ref() })));
        Ok(ready)
    }
}

/// Wakes a [`Poller::wait`] from any thread (eventfd registered in the poller under a reserved token).
#[derive(Debug)]
pub(crate) struct Waker {
    /// The eventfd, non-blocking and close-on-exec, closed on drop.
    fd: OwnedFd,
}

impl Waker {
    /// Creates an eventfd and registers it in `poller`, readable and edge-triggered, under `token`.
    pub(crate) fn new(poller: &Poller, token: u64) -> io::Result<Waker> {
        // SAFETY: eventfd takes no pointers and has no memory-safety preconditions.
        let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
        // SAFETY: `fd` was just returned by eventfd, is open, and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        poller.add(fd.as_raw_fd(), token, Interest::READABLE)?;
        Ok(Waker { fd })
    }

    /// Makes the poller's wait return this waker's token. Wakes are not counted: a saturated
    /// counter (`EAGAIN`) means a wake is already pending, which is success.
    pub(crate) fn wake(&self) -> io::Result<()> {
        let one: u64 = 1;
        loop {
            // SAFETY: `one` is a live u64 and exactly its 8 bytes are passed; the kernel only reads them.
            let n = unsafe { libc::write(self.fd.as_raw_fd(), (&raw const one).cast(), size_of::<u64>()) };
            if n >= 0 {
                return Ok(());
            }
            match io::Error::last_os_error() {
                e if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                e if e.kind() == io::ErrorKind::Interrupted => {}
                e => return Err(e),
            }
        }
    }

    /// Drains pending wakes: reads until `EAGAIN`, so the next [`Waker::wake`] is a new edge.
    pub(crate) fn reset(&self) -> io::Result<()> {
        let mut counter: u64 = 0;
        loop {
            // SAFETY: `counter` is a live, writable u64 and exactly its 8 bytes are passed.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), (&raw mut counter).cast(), size_of::<u64>()) };
            if n >= 0 {
                continue;
            }
            match io::Error::last_os_error() {
                e if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                e if e.kind() == io::ErrorKind::Interrupted => {}
                e => return Err(e),
            }
        }
    }
}

/// Turns a `-1`-means-`errno` return value into an `io::Result`.
fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Milliseconds for epoll_wait: rounded up, so only a zero duration becomes 0; capped at `c_int::MAX`.
fn timeout_ms(timeout: Duration) -> libc::c_int {
    libc::c_int::try_from(timeout.as_nanos().div_ceil(1_000_000)).unwrap_or(libc::c_int::MAX)
}

/// Blocks the thread until `fd` is ready for `interest` or `deadline` passes (blocking
/// mode, outside a runtime). Returns false when the deadline passed first.
pub(crate) fn poll_blocking(fd: RawFd, interest: Interest, deadline: Option<Instant>) -> io::Result<bool> {
    let mut events = 0;
    if interest.readable {
        events |= libc::POLLIN;
    }
    if interest.writable {
        events |= libc::POLLOUT;
    }
    let mut pollfd = libc::pollfd { fd, events, revents: 0 };
    loop {
        let ms = deadline.map_or(-1, |d| timeout_ms(d.saturating_duration_since(Instant::now())));
        // SAFETY: `pollfd` is a valid, writable array of one element for the whole call.
        let rc = unsafe { libc::poll(&mut pollfd, 1, ms) };
        match rc {
            0 => return Ok(false),
            1.. => return Ok(true),
            _ => {
                let err = io::Error::last_os_error();
                if err.kind() != io::ErrorKind::Interrupted {
                    return Err(err);
                }
            }
        }
    }
}
