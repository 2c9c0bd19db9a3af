//! UNSAFE: libc's own functions behind the hooks, found with
//! `dlsym(RTLD_NEXT, name)` (the next definition after this executable's: libc's,
//! or another interposer's such as AddressSanitizer's), each resolved once, and
//! `errno`.
//!
//! Why `dlsym` and not `syscall(2)`: the real function keeps all that libc adds
//! (cancellation points, the fortified checks, the vDSO, `socketcall` on the
//! architectures that multiplex through it, another interposer in between), and
//! `getaddrinfo` and `sleep` are no system calls at all. Every address is
//! looked up when the executable starts (an `.init_array` entry), before any
//! thread or signal handler could need one, and again on first use by a hook
//! that runs before that (another library's constructor).
//!
//! The wrappers at the bottom are safe: their arguments are plain values, or
//! memory they own.

use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void, CStr};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use libc::{
    addrinfo, fd_set, iovec, msghdr, nfds_t, pollfd, sigset_t, size_t, sockaddr, socklen_t, ssize_t, timespec, timeval,
};

/// Looks `name` up after this object, once; the address is kept in `slot`.
#[inline(always)]
fn resolve(slot: &AtomicUsize, name: &CStr) -> usize {
    match slot.load(Ordering::Relaxed) {
        0 => resolve_slow(slot, name),
        addr => addr,
    }
}

#[cold]
fn resolve_slow(slot: &AtomicUsize, name: &CStr) -> usize {
    match next_address(name) {
        // No libc defines it (an old glibc without `fcntl64`), yet a caller reached its
        // hook: nothing sensible can follow, and no unwinding may leave a hook.
        0 => std::process::abort(),
        addr => {
            slot.store(addr, Ordering::Relaxed);
            addr
        }
    }
}

/// The address `dlsym(RTLD_NEXT, name)` finds, 0 for none.
fn next_address(name: &CStr) -> usize {
    // SAFETY: `name` is a NUL-terminated string; `dlsym` is thread-safe and RTLD_NEXT a valid handle.
    unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) as usize }
}

/// Declares each real function: a slot for its address (in `SLOTS`, its name in
/// `NAMES`) and an `unsafe fn` of the same name and signature that calls it. A
/// `#[variadic]` one is called with its one variadic argument, as an integer
/// (an int, a long or a pointer are passed alike on x86_64 and aarch64 Linux).
macro_rules! real {
    ($( $(#[$variadic:ident])? fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty; )*) => {
        const NAMES: &[&CStr] = &[$(
            match CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                Ok(name) => name,
                Err(_) => panic!("a name with a NUL inside"),
            }
        ),*];
        static SLOTS: [AtomicUsize; NAMES.len()] = [const { AtomicUsize::new(0) }; NAMES.len()];
        real!(@fns 0usize; $( $(#[$variadic])? fn $name($($arg: $ty),*) -> $ret; )*);
    };
    (@fns $index:expr; #[variadic] fn $name:ident($fd:ident: $fd_ty:ty, $cmd:ident: $cmd_ty:ty, $value:ident: $value_ty:ty) -> $ret:ty; $($rest:tt)*) => {
        /// libc's variadic function of this name, its one variadic argument passed as an integer.
        ///
        /// # Safety
        ///
        /// libc's contract for the function.
        #[inline(always)]
        pub(super) unsafe fn $name($fd: $fd_ty, $cmd: $cmd_ty, $value: $value_ty) -> $ret {
            let addr = resolve(&SLOTS[$index], NAMES[$index]);
            // SAFETY: `addr` is what `dlsym` found for this name: libc's variadic function
            // with these two fixed arguments.
            let f: unsafe extern "C" fn($fd_ty, $cmd_ty, ...) -> $ret = unsafe { std::mem::transmute(addr) };
            // SAFETY: the caller keeps the function's contract.
            unsafe { f($fd, $cmd, $value) }
        }
        real!(@fns $index + 1usize; $($rest)*);
    };
    (@fns $index:expr; fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty; $($rest:tt)*) => {
        /// libc's function of this name.
        ///
        /// # Safety
        ///
        /// libc's contract for the function.
        #[inline(always)]
        pub(super) unsafe fn $name($($arg: $ty),*) -> $ret {
            let addr = resolve(&SLOTS[$index], NAMES[$index]);
            // SAFETY: `addr` is what `dlsym` found for this name: libc's function, of
            // glibc's prototype, which this is.
            let f: unsafe extern "C" fn($($ty),*) -> $ret = unsafe { std::mem::transmute(addr) };
            // SAFETY: the caller keeps the function's contract.
            unsafe { f($($arg),*) }
        }
        real!(@fns $index + 1usize; $($rest)*);
    };
    (@fns $index:expr;) => {};
}

real! {
    fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int;
    fn accept4(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t, flags: c_int) -> c_int;
    fn read(fd: c_int, buf: *mut c_void, count: size_t) -> ssize_t;
    fn readv(fd: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t;
    fn recv(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t;
    fn recvfrom(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int, addr: *mut sockaddr, addrlen: *mut socklen_t)
        -> ssize_t;
    fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t;
    fn write(fd: c_int, buf: *const c_void, count: size_t) -> ssize_t;
    fn writev(fd: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t;
    fn sendto(fd: c_int, buf: *const c_void, len: size_t, flags: c_int, addr: *const sockaddr, addrlen: socklen_t)
        -> ssize_t;
    fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t;
    fn poll(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> c_int;
    fn ppoll(fds: *mut pollfd, nfds: nfds_t, timeout: *const timespec, sigmask: *const sigset_t) -> c_int;
    fn select(nfds: c_int, r: *mut fd_set, w: *mut fd_set, e: *mut fd_set, timeout: *mut timeval) -> c_int;
    fn nanosleep(req: *const timespec, rem: *mut timespec) -> c_int;
    fn clock_nanosleep(clock: libc::clockid_t, flags: c_int, req: *const timespec, rem: *mut timespec) -> c_int;
    fn usleep(usec: libc::useconds_t) -> c_int;
    fn sleep(secs: c_uint) -> c_uint;
    fn getaddrinfo(node: *const c_char, service: *const c_char, hints: *const addrinfo, res: *mut *mut addrinfo)
        -> c_int;
    fn freeaddrinfo(res: *mut addrinfo) -> ();
    fn socket(domain: c_int, kind: c_int, protocol: c_int) -> c_int;
    #[variadic]
    fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int;
    #[variadic]
    fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int;
    #[variadic]
    fn ioctl(fd: c_int, request: c_ulong, arg: usize) -> c_int;
    fn setsockopt(fd: c_int, level: c_int, name: c_int, value: *const c_void, len: socklen_t) -> c_int;
    fn getsockopt(fd: c_int, level: c_int, name: c_int, value: *mut c_void, len: *mut socklen_t) -> c_int;
    fn dup(fd: c_int) -> c_int;
    fn dup2(old: c_int, new: c_int) -> c_int;
    fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int;
    fn close(fd: c_int) -> c_int;
    fn sigaction(signal: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int;
}

/// Whether the hooks may park (`NEVERBLOCK_HOOKS` is not `off`).
static ENABLED: AtomicBool = AtomicBool::new(true);

/// Whether `NEVERBLOCK_HOOKS=off` was not in the environment at start: with it,
/// every hook is the real call.
#[inline(always)]
pub(super) fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// In a child made by `fork`, until it `exec`s: the parent's fibers and loops are
/// copies that nothing runs, so every hook is the real call there.
extern "C" fn forked() {
    ENABLED.store(false, Ordering::Relaxed);
}

/// Resolves every real function, so that no hook needs `dlsym` later (it is not
/// async-signal-safe), reads `NEVERBLOCK_HOOKS`, and turns the hooks off in `fork`'s children. Runs from `.init_array`,
/// before `main` and before any thread.
pub(super) extern "C" fn start() {
    for (slot, name) in SLOTS.iter().zip(NAMES) {
        slot.store(next_address(name), Ordering::Relaxed);
    }
    // SAFETY: `forked` is a function that only stores an atomic, as a fork's child may.
    unsafe { libc::pthread_atfork(None, None, Some(forked)) };
    // SAFETY: a NUL-terminated name; before `main` no other thread can change the environment.
    let switch = unsafe { libc::getenv(c"NEVERBLOCK_HOOKS".as_ptr()) };
    // SAFETY: a non-null result of getenv is a NUL-terminated string.
    if !switch.is_null() && unsafe { CStr::from_ptr(switch) } == c"off" {
        ENABLED.store(false, Ordering::Relaxed);
    }
}

/// The address `dlsym(RTLD_DEFAULT, name)` finds: the definition a shared library's
/// call of `name` reaches. 0 when there is none.
pub(super) fn default_address(name: &CStr) -> usize {
    // SAFETY: `name` is a NUL-terminated string; `dlsym` is thread-safe and RTLD_DEFAULT a valid handle.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) as usize }
}

/// This thread's `errno`.
#[inline(always)]
pub(super) fn errno() -> c_int {
    // SAFETY: `__errno_location` returns this thread's errno, valid for the thread's life.
    unsafe { *libc::__errno_location() }
}

/// Sets this thread's `errno`.
#[inline(always)]
pub(super) fn set_errno(value: c_int) {
    // SAFETY: as in `errno`; the location is this thread's alone.
    unsafe { *libc::__errno_location() = value }
}

/// Whether `fd` is a socket (`fstat`); `None` when it is no open fd.
pub(super) fn is_socket(fd: c_int) -> Option<bool> {
    let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `stat` is memory of the right size for `fstat` to fill; `fstat` is not hooked.
    let done = unsafe { libc::fstat(fd, stat.as_mut_ptr()) } == 0;
    // SAFETY: `fstat` succeeded, so it filled `stat`.
    done.then(|| unsafe { stat.assume_init() }.st_mode & libc::S_IFMT == libc::S_IFSOCK)
}

/// `fcntl(fd, F_GETFL)`: the fd's status flags, -1 on error.
pub(super) fn status_flags(fd: c_int) -> c_int {
    // SAFETY: F_GETFL takes no argument and touches no memory of ours.
    unsafe { fcntl(fd, libc::F_GETFL, 0) }
}

/// `fcntl(fd, F_SETFL, flags)`: -1 on error.
pub(super) fn set_status_flags(fd: c_int, flags: c_int) -> c_int {
    // SAFETY: F_SETFL takes an int and touches no memory of ours.
    unsafe { fcntl(fd, libc::F_SETFL, flags as usize) }
}

/// A socket option that is a `timeval` (`SO_RCVTIMEO`, `SO_SNDTIMEO`): `None` for
/// zero (no timeout) or an error.
pub(super) fn socket_timeout(fd: c_int, name: c_int) -> Option<Duration> {
    let mut value = timeval { tv_sec: 0, tv_usec: 0 };
    let mut len = std::mem::size_of::<timeval>() as socklen_t;
    // SAFETY: `value` and `len` are ours and sized for the option.
    let got = unsafe { getsockopt(fd, libc::SOL_SOCKET, name, (&raw mut value).cast(), &mut len) } == 0;
    let timeout = Duration::from_secs(value.tv_sec.max(0) as u64) + Duration::from_micros(value.tv_usec.max(0) as u64);
    (got && !timeout.is_zero()).then_some(timeout)
}

/// Whether `fd` is a stream socket (`SO_TYPE`).
pub(super) fn is_stream(fd: c_int) -> bool {
    let mut value: c_int = 0;
    let mut len = std::mem::size_of::<c_int>() as socklen_t;
    // SAFETY: `value` and `len` are ours and sized for the option.
    let got = unsafe { getsockopt(fd, libc::SOL_SOCKET, libc::SO_TYPE, (&raw mut value).cast(), &mut len) } == 0;
    got && value == libc::SOCK_STREAM
}

/// `getsockopt(fd, SOL_SOCKET, SO_ERROR)`: the pending error of a socket (0 for none),
/// or the error of the call itself.
pub(super) fn socket_error(fd: c_int) -> c_int {
    let mut value: c_int = 0;
    let mut len = std::mem::size_of::<c_int>() as socklen_t;
    // SAFETY: `value` and `len` are ours and sized for the option.
    match unsafe { getsockopt(fd, libc::SOL_SOCKET, libc::SO_ERROR, (&raw mut value).cast(), &mut len) } {
        0 => value,
        _ => errno(),
    }
}

/// `poll` on one fd for `events`, without waiting: whether any is ready (errors included).
pub(super) fn ready_now(fd: c_int, events: i16) -> bool {
    let mut one = pollfd { fd, events, revents: 0 };
    // SAFETY: one `pollfd` of ours.
    unsafe { poll(&mut one, 1, 0) > 0 }
}

/// A new epoll set (close-on-exec); `None` on error (`errno` says which).
pub(super) fn epoll_create() -> Option<OwnedFd> {
    // SAFETY: no memory is involved; `epoll_create1` is not hooked.
    let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    // SAFETY: a new fd, which nothing else owns.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds `fd` to the epoll set `set`, level-triggered, for `events` (poll's bits,
/// which are epoll's); false on error (`errno` says which).
pub(super) fn epoll_add(set: BorrowedFd<'_>, fd: c_int, events: u32) -> bool {
    let mut event = libc::epoll_event { events, u64: 0 };
    // SAFETY: `event` is ours; `epoll_ctl` reads it, only numbers reach the kernel, and it is not hooked.
    unsafe { libc::epoll_ctl(set.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut event) == 0 }
}
