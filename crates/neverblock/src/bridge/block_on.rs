//! `block_on`: a future polled on the calling fiber, which parks between polls.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use super::waker::Signal;
use crate::runtime::polling::{self, Interests};
use crate::runtime::scheduler::Woken;
use crate::Elapsed;

/// Runs `future` to completion on the calling fiber and returns its output.
///
/// Each time the future is pending, only the calling fiber parks (the loop runs
/// its other fibers) until the future's waker is woken or an fd that one of its
/// [`AsyncIo`](super::AsyncIo) reads or writes would have blocked on is ready;
/// then it is polled again. A wake that arrives while the future is being polled
/// is kept, and the future is polled again at once. The waker is `Send + Sync` and
/// may be woken from any fiber or thread, also after `block_on` has returned
/// (it then does nothing). Outside a runtime the thread parks instead.
///
/// # Errors
///
/// [`Elapsed`] when a [`timeout`](crate::timeout) around the call has expired
/// while the future was pending (the future is dropped), as the runtime's other
/// waits end there.
///
/// # Panics
///
/// A panic of the future's `poll` passes through (the future is dropped). A
/// cancelled task ([`JoinHandle::cancel`](crate::JoinHandle::cancel)) unwinds out
/// of its park here, dropping the future, as from any other park.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// neverblock::run(|| {
///     assert_eq!(neverblock::block_on(async { 6 * 7 }), Ok(42));
///
///     let (tx, rx) = std::sync::mpsc::channel();
///     let waker = std::sync::Arc::new(std::sync::Mutex::new(None::<std::task::Waker>));
///     let w = waker.clone();
///     std::thread::spawn(move || loop {
///         if let Some(waker) = w.lock().unwrap().take() {
///             tx.send(7).unwrap();
///             waker.wake();
///             break;
///         }
///         std::thread::yield_now();
///     });
///     let seven = neverblock::block_on(std::future::poll_fn(|cx| match rx.try_recv() {
///         Ok(n) => std::task::Poll::Ready(n),
///         Err(_) => {
///             *waker.lock().unwrap() = Some(cx.waker().clone());
///             std::task::Poll::Pending
///         }
///     }));
///     assert_eq!(seven, Ok(7));
///
///     neverblock::timeout(Duration::from_millis(5), || {
///         let never = neverblock::block_on(std::future::pending::<()>());
///         assert_eq!(never, Err(neverblock::Elapsed));
///     })
///     .unwrap_err();
/// });
/// ```
pub fn block_on<F: Future>(future: F) -> Result<F::Output, Elapsed> {
    let signal = Arc::new(Signal::default());
    let waker = Waker::from(signal.clone());
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    let mut interests = Interests::new();
    loop {
        signal.arm();
        let polled = polling::poll(&waker, &mut interests, || future.as_mut().poll(&mut cx));
        if let Poll::Ready(output) = polled {
            return Ok(output);
        }
        if signal.park(&interests) == Woken::TimedOut {
            return Err(Elapsed);
        }
    }
}
