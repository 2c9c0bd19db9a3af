//! The one door from a file descriptor to the event loop: an fd is registered
//! with the loop of the thread that first waits on it, once, and deregistered
//! when its owner drops it.
//!
//! Sockets ([`NonBlocking`](crate::net)) and [`io::wait_readable`](crate::io::wait_readable)
//! reach the reactor only through [`Registration`] (and name a way to wait with
//! [`Direction`], re-exported here): whether an operation is worth trying (the
//! kernel said ready and nothing has returned `WouldBlock` since), noting that
//! one would block, and parking until the kernel reports readiness or a deadline
//! passes.

use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::running;
use super::scheduler::{self, Scheduler, Wait, Woken};
use super::waiter::{self, Waiter};
use crate::reactor::poll_blocking;
use crate::reactor::source::Token;
use crate::reactor::Turn;
// Which way an fd is waited on: the reactor's word, named outside it through this door alone.
pub(crate) use crate::reactor::Direction;

/// An fd's registration with one loop's reactor.
///
/// Registered lazily, by the first wait inside a runtime, with that thread's
/// loop (its *home*); a wait from another thread's loop registers the fd there
/// for that wait alone (a socket shared between threads is rare, and this way
/// neither thread's loop keeps stealing it from the other). Once the home
/// runtime has ended, the next wait makes a new home.
#[derive(Debug, Default)]
pub(crate) struct Registration {
    /// The id of the home reactor, 0 for none.
    ///
    /// # Invariant
    /// Set (by a compare-exchange, so once per home) only by the home's own
    /// thread, which stores `token` right after, before it can switch: code on
    /// that thread that sees its reactor's id here reads the matching token.
    home: AtomicU64,
    /// The source's token in the home reactor.
    token: AtomicU64,
}

impl Registration {
    /// Not registered anywhere yet.
    pub(crate) fn new() -> Registration {
        Registration::default()
    }

    /// The token of this fd in `s`'s reactor, if that is its home.
    fn token_in(&self, s: &Scheduler) -> Option<Token> {
        (self.home.load(Ordering::Relaxed) == s.id()).then(|| self.token())
    }

    /// The token of the registration with the home loop (meaningless without a home).
    fn token(&self) -> Token {
        Token::from_raw(self.token.load(Ordering::Relaxed))
    }

    /// Whether an operation in `direction` is worth trying: always, unless this
    /// thread's loop is the fd's home and has seen it would block, with no
    /// readiness reported since.
    pub(crate) fn may_be_ready(&self, direction: Direction) -> bool {
        // No home (0) is no scheduler's number: worth trying, as on another loop.
        running::fd_may_be_ready(self.home.load(Ordering::Relaxed), self.token(), direction).unwrap_or(true)
    }

    /// Notes that an operation on `fd` in `direction` would block (it returned `WouldBlock`, or a
    /// stream's came back short): the next one parks first, until the loop's next look at the
    /// kernel reports readiness. An fd with no home yet is registered with this thread's loop
    /// first (inside a task): without a registration there is nothing to mark, every operation
    /// would be tried, and a read that finds data arrived meanwhile would be served at once, ahead
    /// of the loop's other fibers and of what its turn knows of the world (see
    /// `runtime::at_turn_end`). An fd that cannot be registered goes on being tried.
    pub(crate) fn clear_ready(&self, fd: BorrowedFd<'_>, direction: Direction) {
        if self.home.load(Ordering::Relaxed) == 0 {
            if let Some(s) = scheduler::in_task() {
                let _ = self.home_token(&s, fd);
            }
        }
        running::fd_would_block(self.home.load(Ordering::Relaxed), self.token(), direction);
    }

    /// Parks the calling fiber until `fd` is ready for `direction`, `deadline`
    /// passes, or the wake-up is spurious: the caller tries its operation again
    /// (or reports the deadline). Outside a runtime, blocks the thread in `poll(2)`.
    ///
    /// # Errors
    ///
    /// `TimedOut` when a [`timeout`](crate::timeout) scope around the call has
    /// expired; the reactor's error when the fd cannot be registered.
    pub(crate) fn wait(&self, fd: BorrowedFd<'_>, direction: Direction, deadline: Option<Instant>) -> io::Result<()> {
        let Some(s) = scheduler::in_task() else {
            let scope = waiter::thread_deadline();
            let until = match (deadline, scope) {
                (Some(own), Some(scope)) => Some(own.min(scope)),
                (own, scope) => own.or(scope),
            };
            let ready = poll_blocking(fd, direction, until)?;
            if !ready && scope.is_some_and(|scope| Instant::now() >= scope) {
                return Err(timed_out());
            }
            return Ok(());
        };
        let woken = match self.home_token(&s, fd)? {
            Some(token) => park(&s, token, direction, deadline),
            None => {
                let token = s.reactor().register(fd)?;
                let woken = park(&s, token, direction, deadline);
                s.reactor().deregister(token, Some(fd));
                woken
            }
        };
        match woken {
            Woken::Ready => Ok(()),
            Woken::TimedOut => Err(timed_out()),
        }
    }

    /// The fd's `direction` as an [`Interest`] of the running task's loop, for a
    /// `block_on` to wait on beside its waker; the fd is registered with that loop
    /// if it has no home. `None` outside a task, or when another live loop is the
    /// fd's home (the caller then waits in place).
    ///
    /// # Errors
    ///
    /// The reactor's, when the fd cannot be registered.
    pub(crate) fn interest(&self, fd: BorrowedFd<'_>, direction: Direction) -> io::Result<Option<Interest>> {
        let Some(s) = scheduler::in_task() else { return Ok(None) };
        Ok(self.home_token(&s, fd)?.map(|token| Interest { token, direction }))
    }

    /// The fd's token in `s`'s reactor, registering it there if it has no home
    /// (or its home runtime has ended); `None` when another live loop is its home.
    fn home_token(&self, s: &Scheduler, fd: BorrowedFd<'_>) -> io::Result<Option<Token>> {
        if let Some(token) = self.token_in(s) {
            return Ok(Some(token));
        }
        let home = self.home.load(Ordering::Relaxed);
        if home != 0 && super::remote::find(home).is_some() {
            return Ok(None);
        }
        let token = s.reactor().register(fd)?;
        match self.home.compare_exchange(home, s.id(), Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => {
                self.token.store(token.to_raw(), Ordering::Relaxed);
                Ok(Some(token))
            }
            Err(_) => {
                // Another thread made its loop the home meanwhile: wait here once.
                s.reactor().deregister(token, Some(fd));
                Ok(None)
            }
        }
    }

    /// Ends the registration with the home loop. `fd` is given when it stays open
    /// (to take it out of the poller); without it, closing the fd, which must
    /// follow, does that. A home on another thread is sent the deregistration.
    pub(crate) fn deregister(&mut self, fd: Option<BorrowedFd<'_>>) {
        let home = std::mem::take(self.home.get_mut());
        if home == 0 {
            return;
        }
        let token = Token::from_raw(*self.token.get_mut());
        match scheduler::current() {
            Some(s) if s.id() == home => {
                for turn in s.reactor().deregister(token, fd) {
                    s.wake(turn);
                }
            }
            _ => deregister_remote(home, token),
        }
    }
}

impl Drop for Registration {
    /// Runs just before the fd is closed (the owner drops its registration first).
    fn drop(&mut self) {
        self.deregister(None);
    }
}

/// Sends the deregistration of `token` to the loop `home` runs, if it still runs.
/// The fd is not taken out of that loop's poller: by the time the message
/// arrives its number may name another file; the kernel removes it on close.
#[cold]
fn deregister_remote(home: u64, token: Token) {
    if let Some(remote) = super::remote::find(home) {
        remote.send(Box::new(move |s| {
            for turn in s.reactor().deregister(token, None) {
                s.wake(turn);
            }
        }));
    }
}

/// One direction of an fd registered with the running task's loop, that a parked
/// `block_on` waits on beside its waker ([`wait_any`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Interest {
    token: Token,
    direction: Direction,
}

impl Interest {
    /// Parks the task `turn` names, which has not started, on this interest of `s`'s reactor until
    /// readiness or `deadline`; `None` when it is ready already (nothing was parked).
    pub(crate) fn park_unstarted(self, s: &Scheduler, turn: Turn, deadline: Option<Instant>) -> Option<StartWait> {
        (!s.reactor().wait(self.token, self.direction, turn, deadline)).then_some(StartWait(self))
    }
}

/// Where a task spawned by `TaskBuilder::when_readable` waits to start: its socket's source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StartWait(Interest);

impl StartWait {
    /// Takes back the wait `task` left, if still there (it was cancelled before it started).
    pub(crate) fn take_back(self, s: &Scheduler, task: u64) {
        s.reactor().unwait(self.0.token, self.0.direction, task);
    }
}

/// Parks the calling fiber until the [`Waiter`] handed to `register` is woken or one
/// of `interests` becomes ready; outside a runtime, blocks the thread until the
/// waiter is woken (there are no interests there). `register` hands the waiter
/// back when what it waits for has already happened: then there is no park.
/// Wakes can be spurious; the interests' waits are taken back however it ends.
///
/// # Panics
///
/// Unwinds a cancelled task.
pub(crate) fn wait_any(interests: &[Interest], register: impl FnOnce(Waiter) -> Option<Waiter>) -> Woken {
    let Some(s) = scheduler::in_task() else {
        return waiter::wait(Wait::Future, |w| register(w).map_or((), Waiter::wake));
    };
    /// Takes every interest's wait back (also on a cancellation's unwind).
    struct Unwait<'a>(&'a Scheduler, &'a [Interest], Option<u64>);
    impl Drop for Unwait<'_> {
        fn drop(&mut self) {
            if let Some(task) = self.2 {
                for i in self.1 {
                    self.0.reactor().unwait(i.token, i.direction, task);
                }
            }
        }
    }
    let _unwait = Unwait(&s, interests, s.current_task());
    let scheduler = s.id();
    let register = |turn| {
        register(Waiter::Fiber { scheduler, turn }).is_some()
            || interests.iter().any(|i| s.reactor().wait(i.token, i.direction, turn, None))
    };
    s.park_for_waiter(Wait::Future, register, true)
}

/// Parks the running task on `direction` of the source `token` until readiness,
/// `deadline` (the source's timer) or an expired `timeout` scope; a park that
/// ends any other way than by the source takes its wait back, so none is left.
pub(super) fn park(s: &Scheduler, token: Token, direction: Direction, deadline: Option<Instant>) -> Woken {
    /// Takes the wait back unless the source ended the park (also on a cancellation's unwind).
    struct Unwait<'a> {
        s: &'a Scheduler,
        token: Token,
        direction: Direction,
        task: Option<u64>,
    }
    impl Drop for Unwait<'_> {
        fn drop(&mut self) {
            if let Some(task) = self.task {
                self.s.reactor().unwait(self.token, self.direction, task);
            }
        }
    }
    let mut unwait = Unwait { s, token, direction, task: s.current_task() };
    let woken = s.park_unless(Wait::Fd(direction), |turn| s.reactor().wait(token, direction, turn, deadline));
    if woken == Woken::Ready {
        unwait.task = None;
    }
    woken
}

/// The error of a wait for an fd that a `timeout` scope ended.
fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "timed out waiting for the fd")
}

#[cfg(test)]
mod tests {
    use std::io::{ErrorKind, Read, Write};
    use std::sync::Arc;
    use std::time::Duration;

    use crate::net::UnixStream;
    use crate::runtime::{scheduler, spawn_on, Builder};

    /// Registers `socket` with the calling loop: a read that waits, and times out.
    fn register_here(socket: &UnixStream) {
        socket.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
        let err = (&*socket).read(&mut [0]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::TimedOut);
        socket.set_read_timeout(None).unwrap();
    }

    fn registered_here() -> usize {
        scheduler::current().expect("inside a runtime").reactor_for_tests().registered()
    }

    #[test]
    fn a_task_cancelled_before_its_socket_started_it_leaves_no_wait_behind() {
        crate::run(|| {
            let (socket, _peer) = UnixStream::pair().unwrap();
            let socket = std::rc::Rc::new(socket);
            let kept = socket.clone();
            let task = crate::runtime::TaskBuilder::new().when_readable(&*socket, None).spawn(move || drop(kept));
            let reactor = || scheduler::current().expect("inside a runtime");
            assert!(reactor().reactor_for_tests().has_fd_waiters(), "the task waits on its socket");
            task.cancel();
            assert!(task.join().is_err(), "cancelled before it started");
            assert!(!reactor().reactor_for_tests().has_fd_waiters(), "and its wait went with it");
        });
    }

    #[test]
    fn a_socket_dropped_on_another_loop_is_deregistered_from_its_home() {
        Builder::new().threads(2).run(|| {
            let (a, _b) = UnixStream::pair().unwrap();
            register_here(&a);
            assert_eq!(registered_here(), 1);
            spawn_on(1, move || drop(a)).join().unwrap();
            for _ in 0..1000 {
                if registered_here() == 0 {
                    break;
                }
                crate::sleep(Duration::from_millis(1));
            }
            assert_eq!(registered_here(), 0, "the other loop sent the deregistration home");
        });
    }

    #[test]
    fn a_socket_homed_on_one_loop_can_wait_on_another() {
        let got = Builder::new().threads(2).run(|| {
            let (a, mut b) = UnixStream::pair().unwrap();
            register_here(&a);
            let a = Arc::new(a);
            let reader = spawn_on(1, move || {
                let mut buf = [0; 4];
                (&*a).read_exact(&mut buf).map(|()| buf)
            });
            crate::sleep(Duration::from_millis(5));
            b.write_all(b"ping").unwrap();
            reader.join().unwrap()
        });
        assert_eq!(&got.unwrap(), b"ping");
    }
}
