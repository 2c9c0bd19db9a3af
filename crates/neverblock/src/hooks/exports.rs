//! UNSAFE: the libc functions this crate defines with the `hooks` feature. Each
//! is a thin shim: on a fiber of a loop, for a blocking socket (or any poll or
//! sleep), it hands the call to [`park`](super::park) as a closure over the real
//! function; anywhere else it is the real function, called at once.
//!
//! Every pointer argument is the caller's, with libc's contract for it, and goes
//! to the real function unchanged: only a `poll` set, `select`'s sets and a
//! `timespec` or `timeval` are read here, where the contract says they are valid.
//! Nothing in this crate may call one of these names through `libc::`: that would
//! be the hook itself.

use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void, CStr, CString};
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::time::{Duration, Instant};

use libc::{
    addrinfo, fd_set, iovec, msghdr, nfds_t, pollfd, sigset_t, size_t, sockaddr, socklen_t, ssize_t, timespec, timeval,
};

use super::fds;
use super::park::{self, Deadline, Parkable};
use super::real;
use super::signals;
use crate::runtime::fd_waits;
use crate::runtime::registration::Direction;

/// Every real function is found before `main`, so no hook needs `dlsym` in a signal handler.
#[used]
#[link_section = ".init_array"]
static START: extern "C" fn() = real::start;

extern "C" {
    /// glibc's end for a fortified call whose length overruns its buffer: a message, then abort.
    fn __chk_fail() -> !;
}

/// The hooks by name, with their addresses, for [`check`](super::check).
pub(super) fn hooks() -> Vec<(&'static CStr, usize)> {
    macro_rules! named {
        ($($name:ident),*) => {
            vec![$((
                match CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                    Ok(name) => name,
                    Err(_) => unreachable!(),
                },
                $name as *const () as usize,
            )),*]
        };
    }
    named!(
        connect,
        accept,
        accept4,
        read,
        readv,
        recv,
        recvfrom,
        recvmsg,
        write,
        writev,
        send,
        sendto,
        sendmsg,
        poll,
        ppoll,
        select,
        nanosleep,
        clock_nanosleep,
        usleep,
        sleep,
        getaddrinfo,
        __read_chk,
        __recv_chk,
        __recvfrom_chk,
        __poll_chk,
        __ppoll_chk,
        socket,
        fcntl,
        fcntl64,
        ioctl,
        setsockopt,
        dup,
        dup2,
        dup3,
        close,
        sigaction,
        signal
    )
}

/// Whether a call may park: on a fiber of a loop, outside a signal handler, unless
/// `NEVERBLOCK_HOOKS=off`.
#[inline(always)]
fn on_fiber() -> bool {
    real::enabled() && fd_waits::may_park() && !signals::in_handler()
}

/// The fd of a call that may park: a blocking socket, on a fiber of a loop; `None`
/// sends the call straight to libc.
#[inline(always)]
fn parkable<'a>(fd: c_int) -> Option<Parkable<'a>> {
    if fd < 0 || !on_fiber() {
        return None;
    }
    let state = fds::state(fd);
    if !state.parks() {
        return None;
    }
    // SAFETY: `fd` is not -1 (`BorrowedFd`'s niche), and the caller handed it to a libc call,
    // which uses it for the call's length: the borrow lasts no longer. A close meanwhile (by
    // another fiber or thread) passes `fd_waits::close` first, which ends any wait on it.
    Some(Parkable { fd: unsafe { BorrowedFd::borrow_raw(fd) }, state })
}

/// A deadline `timeout` from now; `None` (for ever) when it does not fit.
fn after(timeout: Duration) -> Option<Instant> {
    Instant::now().checked_add(timeout)
}

/// A `timespec` as a duration; `None` when it is not one (negative, or nanoseconds past a second).
fn duration_of(t: &timespec) -> Option<Duration> {
    let nanos = u32::try_from(t.tv_nsec).ok().filter(|&n| n < 1_000_000_000)?;
    Some(Duration::new(u64::try_from(t.tv_sec).ok()?, nanos))
}

// ---- connections ----

/// `connect(2)`: a blocking socket's connect parks until it completes.
///
/// # Safety
///
/// libc's contract for `connect`.
#[no_mangle]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    match parkable(fd) {
        // SAFETY: the caller's arguments, under libc's contract.
        None => unsafe { real::connect(fd, addr, len) },
        // SAFETY: as above.
        Some(call) => park::connect(&call, || park::nonblocking_for(fd, || unsafe { real::connect(fd, addr, len) })),
    }
}

/// `accept(2)`: as `accept4` without flags.
///
/// # Safety
///
/// libc's contract for `accept`.
#[no_mangle]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    // SAFETY: the caller's arguments, under libc's contract; accept is accept4 without flags.
    unsafe { accept4(fd, addr, len, 0) }
}

/// `accept4(2)`: a blocking listener's accept parks until a connection comes.
///
/// # Safety
///
/// libc's contract for `accept4`.
#[no_mangle]
pub unsafe extern "C" fn accept4(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t, flags: c_int) -> c_int {
    let accepted = match parkable(fd) {
        // SAFETY: the caller's arguments, under libc's contract.
        None => unsafe { real::accept4(fd, addr, len, flags) },
        Some(call) => park::io(&call, Direction::Read, &mut Deadline::default(), || {
            // SAFETY: as above.
            park::nonblocking_for(fd, || unsafe { real::accept4(fd, addr, len, flags) }) as isize
        }) as c_int,
    };
    if accepted >= 0 {
        fds::forget(accepted);
    }
    accepted
}

// ---- reads ----

/// `read(2)`: on a blocking socket, `recv` without waiting, parking while it would block.
///
/// # Safety
///
/// libc's contract for `read`.
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    match parkable(fd) {
        // SAFETY: the caller's arguments, under libc's contract.
        None => unsafe { real::read(fd, buf, count) },
        Some(call) => park::io(&call, Direction::Read, &mut Deadline::default(), || {
            // SAFETY: `buf` has room for `count` bytes (read's contract); on a socket, read is recv.
            unsafe { real::recv(fd, buf, count, libc::MSG_DONTWAIT) }
        }),
    }
}

/// `readv(2)`: on a blocking socket, `recvmsg` without waiting.
///
/// # Safety
///
/// libc's contract for `readv`.
#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
    match parkable(fd) {
        // SAFETY: the caller's arguments, under libc's contract.
        None => unsafe { real::readv(fd, iov, iovcnt) },
        Some(call) => {
            let mut msg = message(iov.cast_mut(), usize::try_from(iovcnt).unwrap_or(0));
            park::io(&call, Direction::Read, &mut Deadline::default(), || {
                // SAFETY: `msg` holds the caller's iovecs (readv's contract); on a socket, readv is recvmsg.
                unsafe { real::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT) }
            })
        }
    }
}

/// A `msghdr` with only these iovecs.
fn message(iov: *mut iovec, iovcnt: usize) -> msghdr {
    // SAFETY: all-zero bytes are a valid msghdr (null pointers, zero lengths); its private
    // padding fields cannot be named, hence zeroed().
    let mut msg: msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov;
    msg.msg_iovlen = iovcnt as _;
    msg
}

/// `recv(2)`: without waiting, parking while it would block; `MSG_WAITALL` on a
/// stream waits for the whole length, as the kernel would.
///
/// # Safety
///
/// libc's contract for `recv`.
#[no_mangle]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t {
    // SAFETY: the caller's arguments, under libc's contract; recv is recvfrom without an address.
    unsafe { recvfrom(fd, buf, len, flags, std::ptr::null_mut(), std::ptr::null_mut()) }
}

/// `recvfrom(2)`: as `recv`, with the sender's address.
///
/// # Safety
///
/// libc's contract for `recvfrom`.
#[no_mangle]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> ssize_t {
    let call = match parkable(fd) {
        Some(call) if flags & libc::MSG_DONTWAIT == 0 => call,
        // SAFETY: the caller's arguments, under libc's contract.
        _ => return unsafe { real::recvfrom(fd, buf, len, flags, addr, addrlen) },
    };
    let mut deadline = Deadline::default();
    let whole = flags & libc::MSG_WAITALL != 0 && real::is_stream(fd);
    let flags = flags & !libc::MSG_WAITALL | libc::MSG_DONTWAIT;
    let mut got = 0;
    loop {
        let n = park::io(&call, Direction::Read, &mut deadline, || {
            // SAFETY: `buf` has room for `len` bytes (recvfrom's contract), of which `got` are filled.
            unsafe { real::recvfrom(fd, buf.cast::<u8>().add(got).cast(), len - got, flags, addr, addrlen) }
        });
        match n {
            ..=0 if got > 0 => return got as ssize_t,
            ..=0 => return n,
            n => got += n as usize,
        }
        if !whole || got == len {
            return got as ssize_t;
        }
    }
}

/// `recvmsg(2)`: without waiting, parking while it would block. (`MSG_WAITALL`
/// goes to the real call, which blocks: scattering a partial message across the
/// iovecs again is not done here.)
///
/// # Safety
///
/// libc's contract for `recvmsg`.
#[no_mangle]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    match parkable(fd) {
        Some(call) if flags & (libc::MSG_DONTWAIT | libc::MSG_WAITALL) == 0 => {
            park::io(&call, Direction::Read, &mut Deadline::default(), || {
                // SAFETY: the caller's `msg`, under recvmsg's contract.
                unsafe { real::recvmsg(fd, msg, flags | libc::MSG_DONTWAIT) }
            })
        }
        // SAFETY: the caller's arguments, under libc's contract.
        _ => unsafe { real::recvmsg(fd, msg, flags) },
    }
}

// ---- writes ----

/// `write(2)`: on a blocking socket, `send` without waiting until all is sent
/// (a blocking socket's write returns once it has queued all), parking while it would block.
///
/// # Safety
///
/// libc's contract for `write`.
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, count: size_t) -> ssize_t {
    match parkable(fd) {
        // SAFETY: the caller's arguments, under libc's contract; on a socket, write is send.
        Some(call) => unsafe { send_all(&call, buf, count, 0, std::ptr::null(), 0) },
        // SAFETY: the caller's arguments, under libc's contract.
        None => unsafe { real::write(fd, buf, count) },
    }
}

/// `send(2)`: as `write`, with flags.
///
/// # Safety
///
/// libc's contract for `send`.
#[no_mangle]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, len: size_t, flags: c_int) -> ssize_t {
    // SAFETY: the caller's arguments, under libc's contract; send is sendto without an address.
    unsafe { sendto(fd, buf, len, flags, std::ptr::null(), 0) }
}

/// `sendto(2)`: as `send`, to an address.
///
/// # Safety
///
/// libc's contract for `sendto`.
#[no_mangle]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
    addr: *const sockaddr,
    addrlen: socklen_t,
) -> ssize_t {
    match parkable(fd) {
        // SAFETY: the caller's arguments, under libc's contract.
        Some(call) if flags & libc::MSG_DONTWAIT == 0 => unsafe { send_all(&call, buf, len, flags, addr, addrlen) },
        // SAFETY: the caller's arguments, under libc's contract.
        _ => unsafe { real::sendto(fd, buf, len, flags, addr, addrlen) },
    }
}

/// Sends all `len` bytes of `buf` without waiting, parking while the socket is
/// full; what was sent when an error or the timeout ends it is the result, as the
/// kernel's blocking send returns it.
///
/// # Safety
///
/// `buf` holds `len` bytes; `addr` is null or an address of `addrlen` bytes.
unsafe fn send_all(
    call: &Parkable<'_>,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
    addr: *const sockaddr,
    addrlen: socklen_t,
) -> ssize_t {
    let fd = call.fd.as_raw_fd();
    send_until_all(call, len, |sent| {
        // SAFETY: `buf` holds `len` bytes (the caller's contract), of which `sent` are sent.
        unsafe {
            real::sendto(fd, buf.cast::<u8>().add(sent).cast(), len - sent, flags | libc::MSG_DONTWAIT, addr, addrlen)
        }
    })
}

/// `writev(2)`: on a blocking socket, `sendmsg` of the iovecs until all is sent.
///
/// # Safety
///
/// libc's contract for `writev`.
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
    match parkable(fd) {
        Some(call) => {
            let msg = message(iov.cast_mut(), usize::try_from(iovcnt).unwrap_or(0));
            // SAFETY: `msg` holds the caller's iovecs (writev's contract); on a socket, writev is sendmsg.
            unsafe { sendmsg_all(&call, &msg, 0) }
        }
        // SAFETY: the caller's arguments, under libc's contract.
        None => unsafe { real::writev(fd, iov, iovcnt) },
    }
}

/// `sendmsg(2)`: without waiting until all is sent, parking while the socket is full.
///
/// # Safety
///
/// libc's contract for `sendmsg`.
#[no_mangle]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    match parkable(fd) {
        // SAFETY: the caller's `msg`, under sendmsg's contract.
        Some(call) if flags & libc::MSG_DONTWAIT == 0 && !msg.is_null() => unsafe { sendmsg_all(&call, &*msg, flags) },
        // SAFETY: the caller's arguments, under libc's contract.
        _ => unsafe { real::sendmsg(fd, msg, flags) },
    }
}

/// Sends all of `msg`'s iovecs without waiting, parking while the socket is full;
/// after a partial send the rest goes without the control data (sent once, with the first byte).
///
/// # Safety
///
/// `msg` is a valid `msghdr` (sendmsg's contract).
unsafe fn sendmsg_all(call: &Parkable<'_>, msg: &msghdr, flags: c_int) -> ssize_t {
    let fd = call.fd.as_raw_fd();
    let mut iovs: Vec<iovec> = match msg.msg_iovlen {
        0 => Vec::new(),
        // SAFETY: `msg_iov` holds `msg_iovlen` iovecs (sendmsg's contract).
        count => unsafe { std::slice::from_raw_parts(msg.msg_iov, count) }.to_vec(),
    };
    let total: usize = iovs.iter().map(|iov| iov.iov_len).sum();
    let mut rest = *msg;
    let mut advanced = 0;
    send_until_all(call, total, |sent| {
        if sent > advanced {
            advance(&mut iovs, sent - advanced);
            advanced = sent;
            rest.msg_control = std::ptr::null_mut();
            rest.msg_controllen = 0;
        }
        rest.msg_iov = iovs.as_mut_ptr();
        rest.msg_iovlen = iovs.len() as _;
        // SAFETY: `rest` is the caller's message, its iovecs advanced past what was sent.
        unsafe { real::sendmsg(fd, &rest, flags | libc::MSG_DONTWAIT) }
    })
}

/// Sends until `total` bytes are out, each attempt `send(sent)` made without waiting and
/// parked on while the socket is full; what was sent when an error or the timeout ends it is
/// the result, as the kernel's blocking send returns it.
fn send_until_all(call: &Parkable<'_>, total: usize, mut send: impl FnMut(usize) -> isize) -> ssize_t {
    let mut deadline = Deadline::default();
    let mut sent = 0;
    loop {
        match park::io(call, Direction::Write, &mut deadline, || send(sent)) {
            ..0 if sent > 0 => return sent as ssize_t,
            n @ ..0 => return n,
            n => sent += n as usize,
        }
        if sent >= total {
            return sent as ssize_t;
        }
    }
}

/// Drops the first `n` bytes from `iovs`.
fn advance(iovs: &mut Vec<iovec>, mut n: usize) {
    let mut whole = 0;
    while whole < iovs.len() && iovs[whole].iov_len <= n {
        n -= iovs[whole].iov_len;
        whole += 1;
    }
    iovs.drain(..whole);
    if let Some(first) = iovs.first_mut() {
        first.iov_base = first.iov_base.wrapping_byte_add(n);
        first.iov_len -= n;
    }
}

// ---- readiness ----

/// `poll(2)`: on a fiber, parks until one of the fds is ready or the timeout passes.
///
/// # Safety
///
/// libc's contract for `poll`.
#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> c_int {
    if timeout == 0 || !on_fiber() {
        // SAFETY: the caller's arguments, under libc's contract.
        return unsafe { real::poll(fds, nfds, timeout) };
    }
    let deadline = u64::try_from(timeout).ok().and_then(|ms| after(Duration::from_millis(ms)));
    // SAFETY: `fds` holds `nfds` pollfds (poll's contract).
    let mut watch = unsafe { watch_list(fds, nfds) };
    // SAFETY: as above.
    park::poll(&mut watch, deadline, || unsafe { real::poll(fds, nfds, 0) })
}

/// The (fd, events) pairs of a poll set.
///
/// # Safety
///
/// `fds` holds `nfds` pollfds, or `nfds` is 0.
unsafe fn watch_list(fds: *const pollfd, nfds: nfds_t) -> Vec<(RawFd, u32)> {
    if nfds == 0 {
        return Vec::new();
    }
    // SAFETY: the function's contract.
    let set = unsafe { std::slice::from_raw_parts(fds, nfds as usize) };
    set.iter().map(|p| (p.fd, u32::from(p.events as u16))).collect()
}

/// `ppoll(2)`: as `poll`; with a signal mask it is the real call (the mask would be
/// every fiber's while this one waits).
///
/// # Safety
///
/// libc's contract for `ppoll`.
#[no_mangle]
pub unsafe extern "C" fn ppoll(
    fds: *mut pollfd,
    nfds: nfds_t,
    timeout: *const timespec,
    sigmask: *const sigset_t,
) -> c_int {
    // SAFETY: a non-null timeout is a timespec (ppoll's contract).
    let wait = unsafe { timeout.as_ref() }.map(duration_of);
    if !sigmask.is_null() || matches!(wait, Some(None | Some(Duration::ZERO))) || !on_fiber() {
        // SAFETY: the caller's arguments, under libc's contract.
        return unsafe { real::ppoll(fds, nfds, timeout, sigmask) };
    }
    let deadline = wait.flatten().and_then(after);
    // SAFETY: `fds` holds `nfds` pollfds (ppoll's contract).
    let mut watch = unsafe { watch_list(fds, nfds) };
    // SAFETY: as above.
    park::poll(&mut watch, deadline, || unsafe { real::poll(fds, nfds, 0) })
}

/// `select(2)`: as `poll` over the three sets; the timeout is left holding what
/// remains of it, as Linux leaves it.
///
/// # Safety
///
/// libc's contract for `select`.
#[no_mangle]
pub unsafe extern "C" fn select(
    nfds: c_int,
    readfds: *mut fd_set,
    writefds: *mut fd_set,
    exceptfds: *mut fd_set,
    timeout: *mut timeval,
) -> c_int {
    // SAFETY: a non-null timeout is a timeval (select's contract).
    let wait = unsafe { timeout.as_ref() }.map(|t| {
        let micros = u32::try_from(t.tv_usec).ok().filter(|&us| us < 1_000_000)?;
        Some(Duration::new(u64::try_from(t.tv_sec).ok()?, micros * 1000))
    });
    let in_range = (0..=libc::FD_SETSIZE as c_int).contains(&nfds);
    if !in_range || matches!(wait, Some(None | Some(Duration::ZERO))) || !on_fiber() {
        // SAFETY: the caller's arguments, under libc's contract.
        return unsafe { real::select(nfds, readfds, writefds, exceptfds, timeout) };
    }
    let deadline = wait.flatten().and_then(after);
    let sets = [(readfds, libc::POLLIN), (writefds, libc::POLLOUT), (exceptfds, libc::POLLPRI)];
    // SAFETY: each non-null set is an fd_set (select's contract), copied to be given again.
    let asked = sets.map(|(set, _)| unsafe { set.as_ref() }.copied());
    let mut watch = Vec::new();
    for ((_, events), set) in sets.iter().zip(&asked) {
        if let Some(set) = set {
            // SAFETY: `set` is an fd_set and `fd` below FD_SETSIZE.
            watch.extend((0..nfds).filter(|&fd| unsafe { libc::FD_ISSET(fd, set) }).map(|fd| (fd, *events as u32)));
        }
    }
    let found = park::poll(&mut watch, deadline, || {
        for ((set, _), asked) in sets.iter().zip(&asked) {
            if let Some(asked) = asked {
                // SAFETY: the caller's fd_set, given back what it asked before each look.
                unsafe { set.write(*asked) };
            }
        }
        let mut zero = timeval { tv_sec: 0, tv_usec: 0 };
        // SAFETY: the caller's sets; a timeval of ours.
        unsafe { real::select(nfds, readfds, writefds, exceptfds, &mut zero) }
    });
    if let Some(deadline) = deadline {
        let left = deadline.saturating_duration_since(Instant::now());
        let left = timeval { tv_sec: left.as_secs() as libc::time_t, tv_usec: left.subsec_micros().into() };
        // SAFETY: `timeout` is the caller's timeval (non-null, since there is a deadline).
        unsafe { timeout.write(left) };
    }
    found
}

// ---- sleeps ----

/// `nanosleep(2)`: on a fiber, parks it for the time asked.
///
/// # Safety
///
/// libc's contract for `nanosleep`.
#[no_mangle]
pub unsafe extern "C" fn nanosleep(req: *const timespec, rem: *mut timespec) -> c_int {
    // SAFETY: a non-null `req` is a timespec (nanosleep's contract).
    let asked = unsafe { req.as_ref() }.and_then(duration_of);
    match asked {
        Some(asked) if on_fiber() => match park::sleep_until(after(asked)) {
            Ok(()) => 0,
            Err(code) => {
                real::set_errno(code);
                -1
            }
        },
        // SAFETY: the caller's arguments, under libc's contract (an invalid request fails there).
        _ => unsafe { real::nanosleep(req, rem) },
    }
}

/// `clock_nanosleep(2)`: on a fiber, parks it for the time asked, or until the
/// time asked on a clock that is a time of day or since boot (a CPU clock goes
/// to the real call). Returns the error, as libc does, not -1.
///
/// # Safety
///
/// libc's contract for `clock_nanosleep`.
#[no_mangle]
pub unsafe extern "C" fn clock_nanosleep(
    clock: libc::clockid_t,
    flags: c_int,
    req: *const timespec,
    rem: *mut timespec,
) -> c_int {
    let wall = [libc::CLOCK_REALTIME, libc::CLOCK_MONOTONIC, libc::CLOCK_BOOTTIME, libc::CLOCK_TAI].contains(&clock);
    // SAFETY: a non-null `req` is a timespec (clock_nanosleep's contract).
    let asked = unsafe { req.as_ref() }.and_then(duration_of);
    let (Some(asked), true, true) = (asked, wall, on_fiber()) else {
        // SAFETY: the caller's arguments, under libc's contract.
        return unsafe { real::clock_nanosleep(clock, flags, req, rem) };
    };
    let wait = if flags & libc::TIMER_ABSTIME != 0 {
        let mut now = timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: a timespec of ours; clock_gettime is not hooked.
        unsafe { libc::clock_gettime(clock, &mut now) };
        asked.saturating_sub(duration_of(&now).unwrap_or_default())
    } else {
        asked
    };
    park::sleep_until(after(wait)).err().unwrap_or(0)
}

/// `usleep(3)`: on a fiber, parks it.
///
/// # Safety
///
/// libc's contract for `usleep`.
#[no_mangle]
pub unsafe extern "C" fn usleep(usec: libc::useconds_t) -> c_int {
    if !on_fiber() {
        // SAFETY: a plain value.
        return unsafe { real::usleep(usec) };
    }
    match park::sleep_until(after(Duration::from_micros(usec.into()))) {
        Ok(()) => 0,
        Err(code) => {
            real::set_errno(code);
            -1
        }
    }
}

/// `sleep(3)`: on a fiber, parks it; returns the seconds left (0, or all of them
/// when the task was cancelled).
///
/// # Safety
///
/// libc's contract for `sleep`.
#[no_mangle]
pub unsafe extern "C" fn sleep(secs: c_uint) -> c_uint {
    if !on_fiber() {
        // SAFETY: a plain value.
        return unsafe { real::sleep(secs) };
    }
    match park::sleep_until(after(Duration::from_secs(secs.into()))) {
        Ok(()) => 0,
        Err(_) => secs,
    }
}

// ---- names ----

/// `getaddrinfo(3)`: on a fiber, the real call runs on the blocking pool while the
/// fiber parks (on copies of its arguments, so a cancelled fiber leaves the job
/// nothing of its own to write to).
///
/// # Safety
///
/// libc's contract for `getaddrinfo`.
#[no_mangle]
pub unsafe extern "C" fn getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const addrinfo,
    res: *mut *mut addrinfo,
) -> c_int {
    if !on_fiber() || res.is_null() {
        // SAFETY: the caller's arguments, under libc's contract.
        return unsafe { real::getaddrinfo(node, service, hints, res) };
    }
    // SAFETY: non-null strings are NUL-terminated and a non-null `hints` an addrinfo (the contract).
    let lookup = unsafe {
        Lookup {
            node: node.as_ref().map(|_| CStr::from_ptr(node).to_owned()),
            service: service.as_ref().map(|_| CStr::from_ptr(service).to_owned()),
            hints: hints.as_ref().map(|h| (h.ai_flags, h.ai_family, h.ai_socktype, h.ai_protocol)),
        }
    };
    match park::catching(|| crate::spawn_blocking(move || lookup.run())) {
        Ok((code, list, errno)) => {
            if code == 0 {
                // SAFETY: `res` is the caller's, non-null: where the list goes (the contract).
                unsafe { res.write(list.into_raw()) };
            }
            real::set_errno(errno);
            code
        }
        Err(_) => {
            real::set_errno(libc::ECANCELED);
            libc::EAI_SYSTEM
        }
    }
}

/// A name lookup's arguments, owned (the job may outlive a cancelled caller).
struct Lookup {
    node: Option<CString>,
    service: Option<CString>,
    /// flags, family, socket type, protocol: all of `hints` that getaddrinfo reads.
    hints: Option<(c_int, c_int, c_int, c_int)>,
}

impl Lookup {
    /// The real lookup: its result, the list and `errno`.
    fn run(self) -> (c_int, AddrInfoList, c_int) {
        let hints = self.hints.map(|(flags, family, socktype, protocol)| {
            // SAFETY: all-zero bytes are a valid addrinfo (null pointers, zero numbers).
            let mut hints: addrinfo = unsafe { std::mem::zeroed() };
            (hints.ai_flags, hints.ai_family, hints.ai_socktype, hints.ai_protocol) =
                (flags, family, socktype, protocol);
            hints
        });
        let mut list = std::ptr::null_mut();
        let name = |s: &Option<CString>| s.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
        // SAFETY: owned strings and hints, and a pointer of ours for the list.
        let code = unsafe {
            real::getaddrinfo(
                name(&self.node),
                name(&self.service),
                hints.as_ref().map_or(std::ptr::null(), |h| h),
                &mut list,
            )
        };
        (code, AddrInfoList(list), real::errno())
    }
}

/// A list from getaddrinfo, freed unless it reaches the caller.
struct AddrInfoList(*mut addrinfo);

// SAFETY: the list is plain memory from libc's allocator, owned by this value alone until
// handed to the caller; freeaddrinfo may run on any thread.
unsafe impl Send for AddrInfoList {}

impl AddrInfoList {
    fn into_raw(self) -> *mut addrinfo {
        std::mem::ManuallyDrop::new(self).0
    }
}

impl Drop for AddrInfoList {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: a list getaddrinfo returned, which nobody else holds.
            unsafe { real::freeaddrinfo(self.0) }
        }
    }
}

// ---- _FORTIFY_SOURCE ----

/// `__read_chk`: `read`, its length checked against the buffer's.
///
/// # Safety
///
/// libc's contract for `read`; `buflen` is the buffer's size.
#[no_mangle]
pub unsafe extern "C" fn __read_chk(fd: c_int, buf: *mut c_void, nbytes: size_t, buflen: size_t) -> ssize_t {
    if nbytes > buflen {
        // SAFETY: glibc's fortify failure: it never returns.
        unsafe { __chk_fail() }
    }
    // SAFETY: the caller's arguments, checked.
    unsafe { read(fd, buf, nbytes) }
}

/// `__recv_chk`: `recv`, its length checked against the buffer's.
///
/// # Safety
///
/// libc's contract for `recv`; `buflen` is the buffer's size.
#[no_mangle]
pub unsafe extern "C" fn __recv_chk(fd: c_int, buf: *mut c_void, len: size_t, buflen: size_t, flags: c_int) -> ssize_t {
    if len > buflen {
        // SAFETY: glibc's fortify failure: it never returns.
        unsafe { __chk_fail() }
    }
    // SAFETY: the caller's arguments, checked.
    unsafe { recv(fd, buf, len, flags) }
}

/// `__recvfrom_chk`: `recvfrom`, its length checked against the buffer's.
///
/// # Safety
///
/// libc's contract for `recvfrom`; `buflen` is the buffer's size.
#[no_mangle]
pub unsafe extern "C" fn __recvfrom_chk(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    buflen: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> ssize_t {
    if len > buflen {
        // SAFETY: glibc's fortify failure: it never returns.
        unsafe { __chk_fail() }
    }
    // SAFETY: the caller's arguments, checked.
    unsafe { recvfrom(fd, buf, len, flags, addr, addrlen) }
}

/// `__poll_chk`: `poll`, its count checked against the array's size.
///
/// # Safety
///
/// libc's contract for `poll`; `fdslen` is the array's size in bytes.
#[no_mangle]
pub unsafe extern "C" fn __poll_chk(fds: *mut pollfd, nfds: nfds_t, timeout: c_int, fdslen: size_t) -> c_int {
    if (fdslen / std::mem::size_of::<pollfd>()) < nfds as usize {
        // SAFETY: glibc's fortify failure: it never returns.
        unsafe { __chk_fail() }
    }
    // SAFETY: the caller's arguments, checked.
    unsafe { poll(fds, nfds, timeout) }
}

/// `__ppoll_chk`: `ppoll`, its count checked against the array's size.
///
/// # Safety
///
/// libc's contract for `ppoll`; `fdslen` is the array's size in bytes.
#[no_mangle]
pub unsafe extern "C" fn __ppoll_chk(
    fds: *mut pollfd,
    nfds: nfds_t,
    timeout: *const timespec,
    sigmask: *const sigset_t,
    fdslen: size_t,
) -> c_int {
    if (fdslen / std::mem::size_of::<pollfd>()) < nfds as usize {
        // SAFETY: glibc's fortify failure: it never returns.
        unsafe { __chk_fail() }
    }
    // SAFETY: the caller's arguments, checked.
    unsafe { ppoll(fds, nfds, timeout, sigmask) }
}

// ---- state ----

/// `socket(2)`: the real call; the new socket's mode is noted.
///
/// # Safety
///
/// None beyond libc's: plain values.
#[no_mangle]
pub unsafe extern "C" fn socket(domain: c_int, kind: c_int, protocol: c_int) -> c_int {
    // SAFETY: plain values.
    let fd = unsafe { real::socket(domain, kind, protocol) };
    if fd >= 0 {
        fds::new_socket(fd, kind & libc::SOCK_NONBLOCK != 0);
    }
    fd
}

/// `fcntl(2)`: the real call; a change of status flags (`O_NONBLOCK`) or a new fd
/// is noted. The variadic argument is read as an integer, as every command passes
/// one (an int, a long or a pointer, in the same register on x86_64 and aarch64).
///
/// # Safety
///
/// libc's contract for `fcntl`.
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    // SAFETY: the caller's arguments, under libc's contract.
    let done = unsafe { real::fcntl(fd, cmd, arg) };
    noted_fcntl(fd, cmd, done)
}

/// `fcntl64`: glibc's name for `fcntl` under 64-bit offsets; as `fcntl`.
///
/// # Safety
///
/// libc's contract for `fcntl`.
#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    // SAFETY: the caller's arguments, under libc's contract.
    let done = unsafe { real::fcntl64(fd, cmd, arg) };
    noted_fcntl(fd, cmd, done)
}

fn noted_fcntl(fd: c_int, cmd: c_int, done: c_int) -> c_int {
    match cmd {
        libc::F_SETFL => fds::forget(fd),
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC if done >= 0 => fds::forget(done),
        _ => {}
    }
    done
}

/// `ioctl(2)`: the real call; `FIONBIO` (std's `set_nonblocking`) is noted.
///
/// # Safety
///
/// libc's contract for `ioctl`.
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: usize) -> c_int {
    // SAFETY: the caller's arguments, under libc's contract.
    let done = unsafe { real::ioctl(fd, request, arg) };
    if request == libc::FIONBIO {
        fds::forget(fd);
    }
    done
}

/// `setsockopt(2)`: the real call; a socket-level option (`SO_RCVTIMEO`,
/// `SO_SNDTIMEO`) is noted, to be honoured as a deadline.
///
/// # Safety
///
/// libc's contract for `setsockopt`.
#[no_mangle]
pub unsafe extern "C" fn setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    value: *const c_void,
    len: socklen_t,
) -> c_int {
    // SAFETY: the caller's arguments, under libc's contract.
    let done = unsafe { real::setsockopt(fd, level, name, value, len) };
    if level == libc::SOL_SOCKET {
        fds::forget(fd);
    }
    done
}

/// `dup(2)`: the real call; the new fd is learnt afresh.
///
/// # Safety
///
/// None beyond libc's: plain values.
#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    // SAFETY: plain values.
    let new = unsafe { real::dup(fd) };
    fds::forget(new);
    new
}

/// `dup2(2)`: `new` is closed first (its waits ended), then the real call.
///
/// # Safety
///
/// libc's contract for `dup2`: `new` may be closed.
#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if old != new {
        // SAFETY: the caller gives `new` up to be replaced (dup2's contract).
        unsafe { closing(new) };
    }
    // SAFETY: plain values.
    unsafe { real::dup2(old, new) }
}

/// `dup3(2)`: as `dup2`.
///
/// # Safety
///
/// libc's contract for `dup3`: `new` may be closed.
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    if old != new {
        // SAFETY: the caller gives `new` up to be replaced (dup3's contract).
        unsafe { closing(new) };
    }
    // SAFETY: plain values.
    unsafe { real::dup3(old, new, flags) }
}

/// `close(2)`: every fiber parked on `fd` is woken (told `EBADF`) and its wait
/// deregistered, then the real call.
///
/// # Safety
///
/// libc's contract for `close`: the caller gives `fd` up.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    // SAFETY: the caller gives `fd` up (close's contract).
    unsafe { closing(fd) };
    // SAFETY: a plain value.
    unsafe { real::close(fd) }
}

/// Forgets `fd`, about to be closed, and ends the waits on it.
///
/// # Safety
///
/// `fd` is open until the caller closes it, right after.
unsafe fn closing(fd: RawFd) {
    fds::forget(fd);
    // A handler that closes an fd (async-signal-safe) takes no lock: the fibers waiting on it
    // stay parked, as a thread blocked on it would. Nor does a forked child, whose hooks are off
    // until it execs (std closes descriptors in between): another thread of the parent may have
    // held the waits' lock at the fork, and the child has only the forking thread to release it.
    if fd >= 0 && real::enabled() && !signals::in_handler() {
        // SAFETY: not -1, and open until the caller closes it (the function's contract).
        fd_waits::close(unsafe { BorrowedFd::borrow_raw(fd) });
    }
}

// ---- signal handlers ----

/// `sigaction(2)`: a handler is installed behind a trampoline that tells the hooks a
/// handler runs (see `signals`); the caller sees its own handler.
///
/// # Safety
///
/// libc's contract for `sigaction`.
#[no_mangle]
pub unsafe extern "C" fn sigaction(signal: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int {
    // SAFETY: the caller's arguments, under libc's contract.
    unsafe { signals::sigaction_counted(signal, act, old) }
}

/// `signal(2)`: glibc's (BSD) semantics, `SA_RESTART` and the signal masked while
/// it is handled, through `sigaction`.
///
/// # Safety
///
/// libc's contract for `signal`.
#[no_mangle]
pub unsafe extern "C" fn signal(signal: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    // SAFETY: all-zero bytes are a valid sigaction (SIG_DFL, no flags, an empty mask).
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = handler;
    act.sa_flags = libc::SA_RESTART;
    // SAFETY: a sigset of ours; an invalid signal number fails in sigaction below.
    unsafe { libc::sigaddset(&mut act.sa_mask, signal) };
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: two sigactions of ours.
    match unsafe { signals::sigaction_counted(signal, &act, &mut old) } {
        0 => old.sa_sigaction,
        _ => libc::SIG_ERR,
    }
}
