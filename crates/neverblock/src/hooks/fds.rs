//! What the hooks know of each fd: whether it is a socket, whether its caller put
//! it in non-blocking mode, and its `SO_RCVTIMEO` / `SO_SNDTIMEO`, learnt from the
//! kernel the first time a fiber's call needs them and kept in a table by fd number.
//!
//! The hooks never change an fd's mode or options for good (a blocking socket's
//! connect or accept is made non-blocking only for that one call), so the kernel
//! always holds the caller's view: `fcntl(F_GETFL)` and `getsockopt` answer as
//! they would without the hooks, and this table is only a cache of it. Every call
//! that may change it (`fcntl`, `ioctl`, `setsockopt`, `close`, `dup2`, a new fd)
//! forgets the entry, to be learnt again; the entry's generation keeps a learner
//! that raced with such a call from storing what it read before.

use std::ffi::c_int;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use super::real;

/// Entries per page; pages are allocated as fds in them are first seen.
const PAGE: usize = 1024;
/// Pages: fds up to a million have entries; larger ones are learnt at every call.
const PAGES: usize = 1024;

const KNOWN: u32 = 1;
const SOCKET: u32 = 2;
const NONBLOCKING: u32 = 4;
/// The generation counts in the bits above these.
const GENERATION: u32 = 8;

/// One fd's entry.
#[derive(Default)]
struct Entry {
    /// Generation and the bits above: 0 is an fd never seen.
    flags: AtomicU32,
    /// Nanoseconds, 0 for none.
    recv_timeout: AtomicU64,
    send_timeout: AtomicU64,
}

static TABLE: [OnceLock<Box<[Entry]>>; PAGES] = [const { OnceLock::new() }; PAGES];

/// What a hook needs to know of an fd.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct FdState {
    /// A socket: the only fds whose calls park (files, pipes and devices go straight through).
    pub(super) socket: bool,
    /// `O_NONBLOCK` is set: the caller asked for `EAGAIN`, and gets it.
    pub(super) nonblocking: bool,
    pub(super) recv_timeout: Option<Duration>,
    pub(super) send_timeout: Option<Duration>,
}

impl FdState {
    /// A socket whose calls park the fiber when they would block.
    pub(super) fn parks(&self) -> bool {
        self.socket && !self.nonblocking
    }
}

/// The entry of `fd`, its page allocated on first use; `None` beyond the table.
fn entry(fd: c_int) -> Option<&'static Entry> {
    let fd = usize::try_from(fd).ok()?;
    let page = TABLE.get(fd / PAGE)?.get_or_init(|| (0..PAGE).map(|_| Entry::default()).collect());
    Some(&page[fd % PAGE])
}

/// The entry of `fd` if its page exists (forgetting needs no page).
fn existing(fd: c_int) -> Option<&'static Entry> {
    let fd = usize::try_from(fd).ok()?;
    Some(&TABLE.get(fd / PAGE)?.get()?[fd % PAGE])
}

/// What is known of `fd`, learnt from the kernel if nothing is.
pub(super) fn state(fd: c_int) -> FdState {
    let Some(entry) = entry(fd) else { return learn(fd) };
    let flags = entry.flags.load(Ordering::Acquire);
    if flags & KNOWN != 0 {
        return FdState {
            socket: flags & SOCKET != 0,
            nonblocking: flags & NONBLOCKING != 0,
            recv_timeout: load(&entry.recv_timeout),
            send_timeout: load(&entry.send_timeout),
        };
    }
    let state = learn(fd);
    store(entry, flags, state);
    state
}

/// Asks the kernel.
fn learn(fd: c_int) -> FdState {
    let socket = real::is_socket(fd).unwrap_or(false);
    let status = if socket { real::status_flags(fd) } else { 0 };
    FdState {
        socket,
        nonblocking: status != -1 && status & libc::O_NONBLOCK != 0,
        recv_timeout: socket.then(|| real::socket_timeout(fd, libc::SO_RCVTIMEO)).flatten(),
        send_timeout: socket.then(|| real::socket_timeout(fd, libc::SO_SNDTIMEO)).flatten(),
    }
}

/// Stores `state` in `entry` unless it was forgotten since its flags read `seen`.
fn store(entry: &Entry, seen: u32, state: FdState) {
    entry.recv_timeout.store(nanos(state.recv_timeout), Ordering::Relaxed);
    entry.send_timeout.store(nanos(state.send_timeout), Ordering::Relaxed);
    let mut flags = seen & !(GENERATION - 1) | KNOWN;
    if state.socket {
        flags |= SOCKET;
    }
    if state.nonblocking {
        flags |= NONBLOCKING;
    }
    let _ = entry.flags.compare_exchange(seen, flags, Ordering::Release, Ordering::Relaxed);
}

/// Forgets `fd`: its number is new, closed, or its mode or options may have changed.
pub(super) fn forget(fd: c_int) {
    if let Some(entry) = existing(fd) {
        let _ = entry.flags.fetch_update(Ordering::Release, Ordering::Relaxed, |flags| {
            Some((flags & !(GENERATION - 1)).wrapping_add(GENERATION))
        });
    }
}

/// Records a socket just made by `socket(2)`: nothing to ask the kernel.
pub(super) fn new_socket(fd: c_int, nonblocking: bool) {
    forget(fd);
    if let Some(entry) = entry(fd) {
        let seen = entry.flags.load(Ordering::Acquire);
        store(entry, seen, FdState { socket: true, nonblocking, recv_timeout: None, send_timeout: None });
    }
}

fn load(timeout: &AtomicU64) -> Option<Duration> {
    match timeout.load(Ordering::Relaxed) {
        0 => None,
        nanos => Some(Duration::from_nanos(nanos)),
    }
}

fn nanos(timeout: Option<Duration>) -> u64 {
    timeout.map_or(0, |t| u64::try_from(t.as_nanos()).unwrap_or(u64::MAX).max(1))
}
