//! Which `block_on`s are polling on this thread, and the fds each one's future
//! found would block: an [`AsyncIo`](crate::bridge::AsyncIo) names its fd here
//! and returns `Pending`, and the `block_on` parks on that fd beside its waker.

use std::cell::RefCell;
use std::io;
use std::os::fd::BorrowedFd;
use std::task::{Context, Waker};

use crate::runtime::registration::{Direction, Interest, Registration};

/// The fds a pending future waits on, as interests of the polling fiber's loop.
pub(crate) type Interests = Vec<Interest>;

/// A `block_on` polling its future: its waker (by the address of its data, which
/// no other waker shares while it lives) and what the poll found would block.
struct Polling {
    waker: *const (),
    interests: Interests,
}

thread_local! {
    /// The polls in progress on this thread. Several when a future parks its
    /// fiber inside `poll` and another fiber's `block_on` polls meanwhile; each
    /// leaves by its waker, not by position.
    static POLLING: RefCell<Vec<Polling>> = const { RefCell::new(Vec::new()) };
}

/// Runs `poll` as the poll of the `block_on` whose waker is `waker`; `interests`
/// is emptied first and holds, after, the fds the poll found would block.
pub(crate) fn poll<T>(waker: &Waker, interests: &mut Interests, poll: impl FnOnce() -> T) -> T {
    /// Leaves the list however the poll ends, handing back what it found.
    struct Leave<'a>(*const (), &'a mut Interests);
    impl Drop for Leave<'_> {
        fn drop(&mut self) {
            POLLING.with_borrow_mut(|polling| {
                if let Some(i) = polling.iter().rposition(|p| p.waker == self.0) {
                    *self.1 = polling.swap_remove(i).interests;
                }
            });
        }
    }
    interests.clear();
    let mine = std::mem::take(interests);
    POLLING.with_borrow_mut(|polling| polling.push(Polling { waker: waker.data(), interests: mine }));
    let _leave = Leave(waker.data(), interests);
    poll()
}

/// For a read or write that would block: notes `direction` of `fd` for the
/// `block_on` polling with `cx`, and returns true (the caller returns `Pending`);
/// or, when `cx` is not a `block_on`'s (another executor, a wrapping waker) or the
/// fd cannot be waited on from this loop, waits in place and returns false (the
/// caller tries again).
///
/// # Errors
///
/// The registration's: the fd cannot be registered, or a `timeout` expired while
/// waiting in place (`TimedOut`).
pub(crate) fn wait_for(
    cx: &Context<'_>,
    registration: &Registration,
    fd: BorrowedFd<'_>,
    direction: Direction,
) -> io::Result<bool> {
    let data = cx.waker().data();
    let polled_by_block_on = POLLING.with_borrow(|polling| polling.iter().any(|p| p.waker == data));
    if polled_by_block_on {
        if let Some(interest) = registration.interest(fd, direction)? {
            POLLING.with_borrow_mut(|polling| {
                let mine = polling.iter_mut().rfind(|p| p.waker == data);
                mine.expect("found above; polls leave only when they end").interests.push(interest);
            });
            return Ok(true);
        }
    }
    registration.wait(fd, direction, None)?;
    Ok(false)
}
