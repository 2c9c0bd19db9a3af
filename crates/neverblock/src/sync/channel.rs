//! Multi-producer, single-consumer channels, bounded or not, whose blocked ends
//! park their fibers.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{lock, wait_in, StateGuard, StateLock};
use crate::fifo::Fifo;
use crate::runtime::scheduler::{Primitive, Wait, Woken};
use crate::runtime::waiter::{self, WaitList, Waiter};

/// Makes a channel that holds at most `capacity` values; `send` parks while it is
/// full. A capacity of 0 is a rendezvous channel like Go's unbuffered `chan`: each
/// `send` parks until a receiver has taken its value.
///
/// # Examples
///
/// ```
/// neverblock::run(|| {
///     let (tx, rx) = neverblock::sync::bounded(1);
///     let producer = neverblock::spawn(move || (0..5).for_each(|i| tx.send(i).unwrap()));
///     let got: Vec<i32> = std::iter::from_fn(|| rx.recv().ok()).collect();
///     assert_eq!(got, [0, 1, 2, 3, 4]);
///     producer.join().unwrap();
/// });
/// ```
pub fn bounded<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    channel(Some(capacity))
}

/// Makes a channel without a bound: `send` never parks.
///
/// # Examples
///
/// ```
/// let (tx, rx) = neverblock::sync::unbounded();
/// tx.send("hi").unwrap();
/// drop(tx);
/// assert_eq!(rx.recv(), Ok("hi"));
/// assert_eq!(rx.recv(), Err(neverblock::sync::RecvError::Disconnected));
/// ```
pub fn unbounded<T>() -> (Sender<T>, Receiver<T>) {
    channel(None)
}

fn channel<T>(capacity: Option<usize>) -> (Sender<T>, Receiver<T>) {
    let channel = Arc::new(Channel {
        state: StateLock::new(State {
            queue: Fifo::default(),
            room: capacity.map_or(usize::MAX, |c| c.max(1)),
            rendezvous: capacity == Some(0),
            senders: 1,
            receiver: true,
            receivers_waiting: WaitList::default(),
            senders_waiting: WaitList::default(),
            delivering: None,
        }),
        taken: AtomicU64::new(0),
    });
    (Sender { channel: channel.clone() }, Receiver { channel })
}

/// The channel itself, shared by its ends.
struct Channel<T> {
    state: StateLock<State<T>>,
    /// Values received so far (a rendezvous sender waits for this to pass its own).
    /// Written under the lock; a woken sender reads it without.
    taken: AtomicU64,
}

struct State<T> {
    queue: Fifo<T>,
    /// How many values the queue holds before a send parks: the capacity, one for a
    /// rendezvous channel (its value waits there to be taken), `usize::MAX` unbounded.
    room: usize,
    /// Capacity 0: a send waits until its value is taken.
    rendezvous: bool,
    senders: usize,
    receiver: bool,
    receivers_waiting: WaitList,
    /// Senders waiting for room in a full channel.
    senders_waiting: WaitList,
    /// The rendezvous sender whose value is queued, waiting for it to be taken (or
    /// a stale one that gave up). A rendezvous channel holds one value at most
    /// (`full` at one), so one sender.
    delivering: Option<Waiter>,
}

impl<T> State<T> {
    fn full(&self) -> bool {
        self.queue.len() >= self.room
    }
}

/// Sends values; clone it for more producers. `Send` when `T` is.
pub struct Sender<T> {
    channel: Arc<Channel<T>>,
}

/// Receives values in the order they were sent.
pub struct Receiver<T> {
    channel: Arc<Channel<T>>,
}

/// Why a value was not sent; the value comes back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendError<T> {
    /// The receiver is gone.
    Disconnected(T),
    /// A [`timeout`](crate::timeout) around the send expired while the channel was full.
    TimedOut(T),
}

/// Why nothing was received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvError {
    /// Every sender is gone and the channel is empty.
    Disconnected,
    /// A [`timeout`](crate::timeout) around the receive expired.
    TimedOut,
}

/// Why `try_recv` found nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TryRecvError {
    /// Nothing is queued now.
    Empty,
    /// Every sender is gone and the channel is empty.
    Disconnected,
}

impl<T> Sender<T> {
    /// Queues `value`, parking while a bounded channel is full (and, for capacity 0,
    /// until the value is received).
    ///
    /// # Errors
    ///
    /// [`SendError::Disconnected`] when the receiver is gone; [`SendError::TimedOut`]
    /// inside an expired [`timeout`](crate::timeout). Either way the value comes back.
    pub fn send(&self, value: T) -> Result<(), SendError<T>> {
        let mut state = lock(&self.channel.state);
        if state.full() && state.receiver {
            match self.wait_for_room(state) {
                Some(roomy) => state = roomy,
                None => return Err(SendError::TimedOut(value)),
            }
        }
        if !state.receiver {
            return Err(SendError::Disconnected(value));
        }
        state.queue.push_back(value);
        if state.receivers_waiting.wake_one() || !state.rendezvous {
            // Buffered, or a rendezvous value handed to the receiver waiting (as in
            // Go): the single receiver takes the queue's head next, so the send is done.
            return Ok(());
        }
        // Rendezvous with no receiver waiting: wait until one has taken this value.
        let taken = &self.channel.taken;
        let mine = taken.load(Ordering::Relaxed) + state.queue.len() as u64;
        loop {
            if Self::wait_delivered(state) == Woken::TimedOut {
                return Ok(()); // the value is queued; it will still be received
            }
            if taken.load(Ordering::Acquire) >= mine {
                return Ok(());
            }
            state = lock(&self.channel.state);
            if taken.load(Ordering::Relaxed) >= mine || !state.receiver {
                return Ok(());
            }
        }
    }

    /// Waits in the `delivering` slot until woken. A sender that gives up (a
    /// timeout, a cancel) leaves its waiter there: waking it later finds the task on
    /// a later turn and does nothing, and the next rendezvous sender's replaces it.
    /// Out of line: both ends of a ping-pong then park through the same call, which
    /// the switch's return prediction rewards (`neverblock bench channel-ping-pong`).
    #[inline(never)]
    fn wait_delivered(state: StateGuard<'_, State<T>>) -> Woken {
        waiter::wait(Wait::Sync(Primitive::RendezvousReceiver), |w| {
            let mut state = state;
            state.delivering = Some(w);
        })
    }

    /// Waits while the channel is full and its receiver is there; `None` when a
    /// `timeout` expires first. Out of line, so that a send with room costs none
    /// of the wait's setup.
    #[inline(never)]
    fn wait_for_room<'a>(&'a self, mut state: StateGuard<'a, State<T>>) -> Option<StateGuard<'a, State<T>>> {
        while state.full() && state.receiver {
            if wait_in(Primitive::ChannelRoom, &self.channel.state, state, |s| &mut s.senders_waiting)
                == Woken::TimedOut
            {
                return None;
            }
            state = lock(&self.channel.state);
        }
        Some(state)
    }
}

impl<T> Receiver<T> {
    /// Takes the next value, parking while the channel is empty.
    ///
    /// # Errors
    ///
    /// [`RecvError::Disconnected`] once every sender is gone and the channel is
    /// empty; [`RecvError::TimedOut`] inside an expired [`timeout`](crate::timeout).
    pub fn recv(&self) -> Result<T, RecvError> {
        let state = lock(&self.channel.state);
        if !state.queue.is_empty() {
            return Ok(self.take(state));
        }
        self.recv_waiting(state)
    }

    /// The rest of [`recv`](Self::recv) once the channel was found empty: out of
    /// line, so that a value found at once costs none of the wait's setup.
    #[inline(never)]
    fn recv_waiting<'a>(&'a self, mut state: StateGuard<'a, State<T>>) -> Result<T, RecvError> {
        loop {
            if state.senders == 0 {
                return Err(RecvError::Disconnected);
            }
            if wait_in(Primitive::ChannelMessage, &self.channel.state, state, |s| &mut s.receivers_waiting)
                == Woken::TimedOut
            {
                return Err(RecvError::TimedOut);
            }
            state = lock(&self.channel.state);
            if !state.queue.is_empty() {
                return Ok(self.take(state));
            }
        }
    }

    /// Takes the next value if one is queued now.
    ///
    /// # Errors
    ///
    /// [`TryRecvError::Empty`] or [`TryRecvError::Disconnected`].
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        let state = lock(&self.channel.state);
        if !state.queue.is_empty() {
            Ok(self.take(state))
        } else if state.senders == 0 {
            Err(TryRecvError::Disconnected)
        } else {
            Err(TryRecvError::Empty)
        }
    }

    fn take(&self, mut state: StateGuard<'_, State<T>>) -> T {
        let value = state.queue.pop_front().expect("checked non-empty");
        let taken = &self.channel.taken;
        taken.store(taken.load(Ordering::Relaxed) + 1, Ordering::Release);
        // A rendezvous sender learns its value was taken; one sender waiting for
        // room may now go on.
        if let Some(sender) = state.delivering.take() {
            sender.wake();
        }
        state.senders_waiting.wake_one();
        value
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        lock(&self.channel.state).senders += 1;
        Sender { channel: self.channel.clone() }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let mut state = lock(&self.channel.state);
        state.senders -= 1;
        if state.senders == 0 {
            state.receivers_waiting.wake_all();
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let mut state = lock(&self.channel.state);
        state.receiver = false;
        state.senders_waiting.wake_all();
        if let Some(sender) = state.delivering.take() {
            sender.wake();
        }
        let dropped = std::mem::take(&mut state.queue);
        drop(state);
        drop(dropped);
    }
}

impl<T> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Sender")
    }
}

impl<T> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Receiver").field("queued", &lock(&self.channel.state).queue.len()).finish()
    }
}

impl<T> fmt::Display for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::Disconnected(_) => f.write_str("sending on a channel whose receiver is gone"),
            SendError::TimedOut(_) => f.write_str("timed out sending on a full channel"),
        }
    }
}

impl<T: fmt::Debug> std::error::Error for SendError<T> {}

impl fmt::Display for RecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecvError::Disconnected => f.write_str("receiving on an empty channel whose senders are gone"),
            RecvError::TimedOut => f.write_str("timed out receiving"),
        }
    }
}

impl std::error::Error for RecvError {}
