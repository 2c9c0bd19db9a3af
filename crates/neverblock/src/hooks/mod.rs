//! Blocking libraries on fibers: libc's socket, poll and sleep calls, taken over
//! so that they park only the calling fiber (cargo feature `hooks`).
//!
//! With the feature on, this crate defines libc's functions below in the
//! executable. Called on a fiber of a running loop (inside [`run`](crate::run),
//! [`spawn`](crate::spawn), …), a call that would block parks that fiber and the
//! loop runs the others; called anywhere else — a plain thread, the blocking
//! pool, before the runtime starts, the loop's own root, a signal handler — it is
//! libc's call, made at once. So code written against `std::net`, `std::thread::sleep`, or a C
//! library such as libpq, runs concurrently on fibers without a change, and the
//! same code on an ordinary thread blocks as it always did. There is nothing to
//! call: linking the crate with the feature is all.
//!
//! # Examples
//!
//! Ten fibers each sleeping through `std::thread::sleep` take one sleep, not ten:
//!
//! ```
//! use std::time::{Duration, Instant};
//!
//! assert!(neverblock::hooks::check().all_reached(), "{}", neverblock::hooks::check());
//! let start = Instant::now();
//! neverblock::run(|| {
//!     let sleepers: Vec<_> = (0..10)
//!         .map(|_| neverblock::spawn(|| std::thread::sleep(Duration::from_millis(100))))
//!         .collect();
//!     sleepers.into_iter().for_each(|s| s.join().unwrap());
//! });
//! assert!(start.elapsed() < Duration::from_millis(500), "{:?}", start.elapsed());
//! ```
//!
//! # What is taken over
//!
//! | calls | on a fiber |
//! |---|---|
//! | `connect` | a blocking socket connects without waiting; the fiber parks until it is writable, then reads `SO_ERROR` |
//! | `accept`, `accept4` | a blocking listener accepts without waiting; the fiber parks while no connection is queued |
//! | `read`, `readv`, `recv`, `recvfrom`, `recvmsg` | on a blocking socket, the call with `MSG_DONTWAIT`; the fiber parks while it would block (`MSG_WAITALL` on a stream: until the whole length came) |
//! | `write`, `writev`, `send`, `sendto`, `sendmsg` | as reads, and until all is sent, as a blocking socket's write returns |
//! | `poll`, `ppoll`, `select` | answered by the real call with a zero timeout; while nothing is ready the fiber parks on an epoll set of the fds, for exactly their events (any mask, duplicates merged) |
//! | `nanosleep`, `clock_nanosleep`, `usleep`, `sleep` | the fiber parks on a timer (`std::thread::sleep` is `clock_nanosleep` or `nanosleep`) |
//! | `getaddrinfo` | the real call runs on the [blocking pool](crate::spawn_blocking) while the fiber parks |
//! | `__read_chk`, `__recv_chk`, `__recvfrom_chk`, `__poll_chk`, `__ppoll_chk` | `_FORTIFY_SOURCE`'s variants, which Debian's C libraries call: checked, then as above |
//! | `socket`, `fcntl`, `fcntl64`, `ioctl`, `setsockopt`, `dup`, `dup2`, `dup3`, `close` | the real call; the hooks note what changed (see below); `close` first wakes every fiber parked on the fd, which sees `EBADF` |
//! | `sigaction`, `signal` | the real call, the handler installed behind a trampoline that tells the hooks a handler runs: inside one, every hook is the real call (the caller sees its own handler as installed) |
//!
//! The caller's view of an fd stays the kernel's: the hooks never change an fd's
//! mode or options for longer than one connect or accept, so `fcntl(F_GETFL)`
//! and `getsockopt` answer as they would without them. A socket its caller put in
//! non-blocking mode gets `EAGAIN` as before (libpq's do, and `neverblock::net`'s);
//! `SO_RCVTIMEO` and `SO_SNDTIMEO` are honoured as deadlines of the call (ending
//! with `EAGAIN`, or `EINPROGRESS` for a connect, as the kernel ends them); files,
//! pipes and other fds that are no socket go straight to the real read or write.
//! `errno` is the caller's across a park (the thread's other fibers ran
//! meanwhile). Three results no blocking call gives: `ETIMEDOUT` when a
//! [`timeout`](crate::timeout) scope around the call expired, `EBADF` when the fd
//! was closed while the fiber waited, and `ECANCELED` when its task was cancelled
//! (an unwind cannot cross a C caller's frames; the task's next park outside a
//! hook unwinds it).
//!
//! With `NEVERBLOCK_HOOKS=off` in the environment when the program starts, every
//! hook is the real call (to compare, or to rule the hooks out of a problem); so
//! is every hook in a child made by `fork`, whose copies of the parent's loops
//! nothing runs.
//!
//! # Making shared libraries call the hooks
//!
//! Calls from Rust (std included) and from C code linked statically into the
//! executable reach the hooks at link time. A call from a shared library (libpq,
//! hiredis, libmysqlclient) reaches whatever the dynamic linker finds first for
//! the name, which is the executable's definition only if the executable exports
//! it. rustc exports every `#[no_mangle]` function of an executable, so a Rust
//! binary needs nothing more; [`check`] says whether it holds, per symbol, and is
//! worth asserting at start:
//!
//! ```
//! let check = neverblock::hooks::check();
//! assert!(check.all_reached(), "not exported from the executable: {check}");
//! ```
//!
//! If a symbol is not reached (a linker invoked with a version script of its
//! own, or the hooks linked into a C program), export it when linking the
//! executable: each one with `-Wl,--export-dynamic-symbol=poll` (GNU ld 2.35+
//! and lld; in Cargo, `cargo rustc -- -C link-arg=-Wl,--export-dynamic-symbol=poll`
//! or a `cargo:rustc-link-arg-bins=` line of a build script), or all symbols with
//! `-rdynamic` (`-Wl,--export-dynamic`). GNU ld also exports on its own a symbol
//! that a shared library on the link line references, as libpq references `poll`.
//!
//! # Limits
//!
//! - **Waits that are not these calls block the thread**, and with it every fiber
//!   of the loop: std's `Mutex`, `Condvar`, `RwLock`, channels and any futex wait.
//!   A std lock held across a hooked call deadlocks two fibers of one thread — the
//!   classic `Arc<Mutex<Connection>>`: one fiber parks inside the connection's read
//!   holding the lock, the next blocks the thread on the lock, and the read's
//!   readiness is never looked at. Use [`sync::Mutex`](crate::sync::Mutex) there.
//! - **io_uring and raw system calls** do not pass through libc: rustix's
//!   `linux_raw` backend (this runtime's own epoll, eventfd and timers, which is why
//!   they never reach the hooks), a crate calling `syscall(2)`, Go code, io_uring.
//!   An fd whose mode is changed, or which is closed, that way is not noticed.
//! - **Libraries with a runtime of their own** keep it: the sync `postgres` crate
//!   runs tokio inside, whose epoll and futex waits block the thread. Their
//!   threads are plain threads to the hooks.
//! - **A blocking listener shared with another thread**: the accept of a fiber
//!   makes it non-blocking for the instant of the call, and a blocking accept
//!   entering the kernel on another thread in that instant returns `EAGAIN`.
//! - `ppoll` with a signal mask, `recvmsg` with `MSG_WAITALL`, `sendfile`,
//!   `splice`, `recvmmsg` / `sendmmsg`, and reads and writes of pipes and ttys are
//!   the real calls (they block the loop if they block). A signal handler installed
//!   by a raw system call (ASan's, Go's) is not told apart from the fiber it
//!   interrupts; one left by `siglongjmp` leaves its thread's hooks real calls for good.
//! - Tried and working: `std::net` (`TcpStream`, `TcpListener`, `UdpSocket`,
//!   `UnixStream`, `connect_timeout`, read and write timeouts), `std::thread::sleep`,
//!   `ToSocketAddrs`, `ureq`, libpq (through `pq-sys`).

// Its functions are `pub` for the linker, which sees them whatever Rust's paths say.
#[allow(unsafe_code, unreachable_pub)]
mod exports;
mod fds;
mod park;
#[allow(unsafe_code)]
mod real;
#[allow(unsafe_code)]
mod signals;

use std::fmt;

/// Whether calls from shared libraries reach each hook: what [`check`] found.
#[derive(Clone, Debug)]
pub struct Check {
    symbols: Vec<Symbol>,
}

/// One hooked function and whether the dynamic linker finds the hook for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    /// libc's name of the function.
    pub name: &'static str,
    /// Whether `dlsym(RTLD_DEFAULT, name)` is the hook: a shared library's call reaches it.
    pub reached: bool,
}

/// Says, for every hooked function, whether a call from a shared library reaches
/// the hook: it does when `dlsym(RTLD_DEFAULT, name)`, the definition the dynamic
/// linker binds a library's call to, is the hook's own address (see the module
/// docs for how to export one that is not). Calls from the executable itself
/// reach the hooks in any case.
///
/// # Examples
///
/// ```
/// let check = neverblock::hooks::check();
/// assert!(check.symbols().iter().any(|s| s.name == "poll"));
/// assert!(check.all_reached(), "{check}");
/// ```
pub fn check() -> Check {
    let symbols = exports::hooks()
        .into_iter()
        .map(|(name, hook)| Symbol {
            name: name.to_str().expect("the names are ASCII"),
            reached: real::default_address(name) == hook,
        })
        .collect();
    Check { symbols }
}

impl Check {
    /// Every hooked function, in the order of the module docs' table.
    ///
    /// # Examples
    ///
    /// ```
    /// let check = neverblock::hooks::check();
    /// let names: Vec<_> = check.symbols().iter().map(|s| s.name).collect();
    /// assert!(names.contains(&"clock_nanosleep") && names.contains(&"getaddrinfo"));
    /// ```
    pub fn symbols(&self) -> &[Symbol] {
        &self.symbols
    }

    /// Whether shared libraries' calls reach every hook.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(neverblock::hooks::check().all_reached());
    /// ```
    pub fn all_reached(&self) -> bool {
        self.symbols.iter().all(|s| s.reached)
    }

    /// The functions whose calls from shared libraries go to libc, not the hook.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(neverblock::hooks::check().not_reached().count(), 0);
    /// ```
    pub fn not_reached(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.symbols.iter().filter(|s| !s.reached).map(|s| s.name)
    }
}

impl fmt::Display for Check {
    /// One line per symbol: its name, then `hooked` or `libc's (not exported)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for symbol in &self.symbols {
            let reached = if symbol.reached { "hooked" } else { "libc's (not exported)" };
            writeln!(f, "{:<16} {reached}", symbol.name)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    use std::os::unix::process::CommandExt;
    use std::process::Command;
    use std::sync::mpsc;
    use std::time::Duration;

    use crate::runtime::fd_waits;

    #[test]
    fn a_fork_while_another_thread_holds_the_waits_lock_makes_a_child_that_runs() {
        crate::run(|| {
            let (mut reader, mut writer) = UnixStream::pair().unwrap();
            // A hooked read parks its fiber: a wait is listed, so a close looks at the list.
            let parked = crate::spawn(move || reader.read(&mut [0u8; 1]).unwrap());
            crate::yield_now();
            let (held, holding) = mpsc::channel();
            let holder = std::thread::spawn(move || {
                let lock = fd_waits::hold_lock();
                held.send(()).unwrap();
                #[expect(clippy::disallowed_methods, reason = "a plain thread holds the lock a while")]
                std::thread::sleep(Duration::from_millis(300));
                drop(lock);
            });
            holding.recv().unwrap();
            // Another thread forks while the lock is held (`uid` makes std fork rather than
            // posix_spawn): the child closes descriptors before its exec, through the hooked close.
            let (ran, outcome) = mpsc::channel();
            std::thread::spawn(move || {
                let mut command = Command::new("true");
                command.uid(rustix::process::getuid().as_raw());
                ran.send(command.status().unwrap().success())
            });
            assert_eq!(outcome.recv_timeout(Duration::from_secs(20)), Ok(true), "the child ran `true` and exited");
            holder.join().unwrap();
            writer.write_all(b"x").unwrap();
            assert_eq!(parked.join().unwrap(), 1, "the parent's wait ends as it would have");
        });
    }
}
