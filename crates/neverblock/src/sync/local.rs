//! Channels between the fibers of one thread: the same FIFO, bounded, unbounded
//! and rendezvous semantics as [`bounded`](super::bounded), without a lock or an
//! atomic operation. Neither end is `Send`, so every fiber that can wait on the
//! channel runs on the loop of the thread that made it, and a wake-up is a push
//! onto that loop's run queue.
//!
//! Outside a runtime there is no other fiber to end a wait, so an operation that
//! would wait returns at once, as an expired [`timeout`](crate::timeout) would.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt;
use std::rc::Rc;

use super::{RecvError, SendError, TryRecvError};
use crate::reactor::Wake;
use crate::runtime::scheduler::{self, Woken};

/// Makes a channel between fibers of this thread that holds at most `capacity`
/// values; 0 makes a rendezvous channel, whose `send` parks until its value is
/// received (Go's unbuffered `chan`).
///
/// # Examples
///
/// ```
/// neverblock::run(|| {
///     let (tx, rx) = neverblock::sync::local::bounded(0);
///     let echo = neverblock::spawn(move || rx.recv().unwrap() * 2);
///     tx.send(21).unwrap();
///     assert_eq!(echo.join().unwrap(), 42);
/// });
/// ```
pub fn bounded<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    channel(Some(capacity))
}

/// Makes a channel between fibers of this thread without a bound: `send` never parks.
///
/// # Examples
///
/// ```
/// let (tx, rx) = neverblock::sync::local::unbounded();
/// tx.send("hi").unwrap();
/// assert_eq!(rx.try_recv(), Ok("hi"));
/// ```
pub fn unbounded<T>() -> (Sender<T>, Receiver<T>) {
    channel(None)
}

fn channel<T>(capacity: Option<usize>) -> (Sender<T>, Receiver<T>) {
    let shared = Rc::new(RefCell::new(State {
        queue: VecDeque::new(),
        capacity,
        senders: 1,
        receiver: true,
        taken: 0,
        receiving: Line::default(),
        room: Line::default(),
        delivering: Line::default(),
    }));
    (Sender { shared: shared.clone() }, Receiver { shared })
}

type Shared<T> = Rc<RefCell<State<T>>>;

struct State<T> {
    queue: VecDeque<T>,
    capacity: Option<usize>,
    senders: usize,
    receiver: bool,
    /// Values received so far: a rendezvous sender waits for this to pass its own.
    taken: u64,
    /// Fibers waiting for a value.
    receiving: Line,
    /// Senders waiting for room in a full channel.
    room: Line,
    /// Rendezvous senders whose value is queued, waiting for it to be taken.
    delivering: Line,
}

impl<T> State<T> {
    fn full(&self) -> bool {
        self.capacity.is_some_and(|c| self.queue.len() >= c.max(1))
    }
}

/// Parked fibers in arrival order, each as its scheduler and the wake-up that
/// continues it (unique to that park, so it also names the place in line).
#[derive(Default)]
struct Line(VecDeque<(u64, Wake)>);

impl Line {
    /// Wakes the first in line; true if there was one.
    fn wake_one(&mut self) -> bool {
        self.0.pop_front().map(|(scheduler, wake)| scheduler::wake_here(scheduler, wake)).is_some()
    }

    fn wake_all(&mut self) {
        while self.wake_one() {}
    }
}

/// Parks the calling fiber in the line `line` picks out of `shared` until it is
/// woken. On a timeout, or when the fiber is cancelled, it leaves the line,
/// passing on a wake-up it was already handed. Outside a runtime: `TimedOut`.
fn wait<T>(shared: &Shared<T>, line: fn(&mut State<T>) -> &mut Line) -> Woken {
    struct Leave<'a, T> {
        shared: &'a Shared<T>,
        line: fn(&mut State<T>) -> &mut Line,
        place: Option<(u64, Wake)>,
    }
    impl<T> Drop for Leave<'_, T> {
        fn drop(&mut self) {
            let Some(place) = self.place else { return };
            let mut state = self.shared.borrow_mut();
            let line = (self.line)(&mut state);
            match line.0.iter().position(|p| *p == place) {
                Some(i) => drop(line.0.remove(i)),
                None => drop(line.wake_one()),
            }
        }
    }
    let Some(s) = scheduler::in_task() else { return Woken::TimedOut };
    let mut leave = Leave { shared, line, place: None };
    let woken = s.park(|wake| {
        let place = (s.id(), wake);
        line(&mut shared.borrow_mut()).0.push_back(place);
        leave.place = Some(place);
    });
    if woken == Woken::Ready {
        leave.place = None;
    }
    woken
}

/// Sends values to the fibers of this thread; clone it for more producers.
pub struct Sender<T> {
    shared: Shared<T>,
}

/// Receives values in the order they were sent.
pub struct Receiver<T> {
    shared: Shared<T>,
}

impl<T> Sender<T> {
    /// Queues `value`, parking while a bounded channel is full (and, for capacity 0,
    /// until the value is received).
    ///
    /// # Errors
    ///
    /// [`SendError::Disconnected`] when the receiver is gone; [`SendError::TimedOut`]
    /// when the channel stays full past an expired [`timeout`](crate::timeout) (or at
    /// once outside a runtime). Either way the value comes back.
    pub fn send(&self, value: T) -> Result<(), SendError<T>> {
        let mut state = self.shared.borrow_mut();
        while state.full() && state.receiver {
            drop(state);
            if wait(&self.shared, |s| &mut s.room) == Woken::TimedOut {
                return Err(SendError::TimedOut(value));
            }
            state = self.shared.borrow_mut();
        }
        if !state.receiver {
            return Err(SendError::Disconnected(value));
        }
        state.queue.push_back(value);
        let mine = state.taken + state.queue.len() as u64;
        let handed_off = state.receiving.wake_one();
        if state.capacity != Some(0) || handed_off {
            return Ok(());
        }
        // Rendezvous with no receiver waiting: wait until one has taken this value.
        // Should the wait end early the value stays queued, to be received later.
        drop(state);
        while wait(&self.shared, |s| &mut s.delivering) == Woken::Ready {
            let state = self.shared.borrow();
            if state.taken >= mine || !state.receiver {
                break;
            }
        }
        Ok(())
    }
}

impl<T> Receiver<T> {
    /// Takes the next value, parking while the channel is empty.
    ///
    /// # Errors
    ///
    /// [`RecvError::Disconnected`] once every sender is gone and the channel is
    /// empty; [`RecvError::TimedOut`] inside an expired [`timeout`](crate::timeout)
    /// (or at once outside a runtime).
    pub fn recv(&self) -> Result<T, RecvError> {
        loop {
            match self.try_recv() {
                Ok(value) => return Ok(value),
                Err(TryRecvError::Disconnected) => return Err(RecvError::Disconnected),
                Err(TryRecvError::Empty) => {}
            }
            if wait(&self.shared, |s| &mut s.receiving) == Woken::TimedOut {
                return Err(RecvError::TimedOut);
            }
        }
    }

    /// Takes the next value if one is queued now.
    ///
    /// # Errors
    ///
    /// [`TryRecvError::Empty`] or [`TryRecvError::Disconnected`].
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        let mut state = self.shared.borrow_mut();
        let Some(value) = state.queue.pop_front() else {
            return Err(if state.senders == 0 { TryRecvError::Disconnected } else { TryRecvError::Empty });
        };
        state.taken += 1;
        // The rendezvous senders re-check whether theirs was taken (one, unless
        // several sent at once); one sender waiting for room may now go on.
        state.delivering.wake_all();
        state.room.wake_one();
        Ok(value)
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.shared.borrow_mut().senders += 1;
        Sender { shared: self.shared.clone() }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let mut state = self.shared.borrow_mut();
        state.senders -= 1;
        if state.senders == 0 {
            state.receiving.wake_all();
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let mut state = self.shared.borrow_mut();
        state.receiver = false;
        state.room.wake_all();
        state.delivering.wake_all();
        let dropped = std::mem::take(&mut state.queue);
        drop(state);
        drop(dropped);
    }
}

impl<T> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("local::Sender")
    }
}

impl<T> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("local::Receiver").field("queued", &self.shared.borrow().queue.len()).finish()
    }
}
