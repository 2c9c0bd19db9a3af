//! The registered file descriptors of one loop: what the kernel last said of
//! each direction, who waits on it, and its lazily re-armed deadline timer.
//!
//! A source lives in a slab; its epoll token is `generation << 32 | key`, so an
//! event or timer meant for a source that has since left (its fd closed, its
//! key reused) names a generation no live source has, and is dropped.

use std::time::Instant;

use slab::Slab;

use super::timer::TimerKey;
use super::{Direction, Turn};
use crate::sys::epoll::Event;

/// Names a registered source: its key in the slab and the generation it was
/// registered under (the epoll token carries both).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Token(u64);

impl Token {
    fn new(generation: u32, key: usize) -> Token {
        Token(u64::from(generation) << 32 | key as u64)
    }

    /// The token as epoll stores it.
    pub(crate) fn to_raw(self) -> u64 {
        self.0
    }

    /// A token read back from epoll.
    pub(crate) fn from_raw(raw: u64) -> Token {
        Token(raw)
    }

    /// The slab key (the low 32 bits).
    pub(crate) fn key(self) -> usize {
        self.0 as u32 as usize
    }

    fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }
}

/// A fiber parked on one direction of a source, until readiness or its deadline.
#[derive(Clone, Copy, Debug)]
struct Parked {
    turn: Turn,
    deadline: Option<Instant>,
}

/// One direction of a source.
#[derive(Debug, Default)]
struct Side {
    /// The kernel reported this direction ready and no operation has since
    /// returned `WouldBlock` (or come back short, for a stream): an operation is
    /// worth trying. False from registration until the kernel's first report.
    ready: bool,
    /// The kernel reported this direction closed (end-of-file, hang-up, an
    /// error): every operation returns at once from now on, so it stays ready
    /// whatever comes back short. Edge-triggered, the report comes only once.
    closed: bool,
    parked: Vec<Parked>,
    /// The timer that wakes the parked fibers whose deadline has passed, and when
    /// it fires: at or before the earliest of their deadlines. Left armed when a
    /// wait ends early, and re-armed (if anyone still waits) when it fires, so a
    /// socket whose long timeout rarely expires costs one timer entry per timeout
    /// period, not an insert and a cancel per wait.
    timer: Option<(TimerKey, Instant)>,
}

/// One registered fd.
#[derive(Debug)]
struct Source {
    generation: u32,
    read: Side,
    write: Side,
}

impl Source {
    fn side(&mut self, direction: Direction) -> &mut Side {
        match direction {
            Direction::Read => &mut self.read,
            Direction::Write => &mut self.write,
        }
    }
}

/// What a wait found: ready already, or parked with a timer to arm at the given
/// instant (when none is armed early enough).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Waited {
    Ready,
    Parked { arm: Option<Instant> },
}

/// The registered sources of one loop.
#[derive(Debug, Default)]
pub(crate) struct Sources {
    slab: Slab<Source>,
    next_generation: u32,
    /// Fibers parked on any source, so the loop can ask without scanning.
    parked: usize,
}

impl Sources {
    /// Adds a source, both directions not ready, and returns its token.
    pub(crate) fn insert(&mut self) -> Token {
        let generation = self.next_generation;
        self.next_generation = generation.wrapping_add(1);
        let key = self.slab.insert(Source { generation, read: Side::default(), write: Side::default() });
        Token::new(generation, key)
    }

    /// Removes the source `token`; returns its armed timers (to cancel) and the
    /// fibers still parked on it (to wake: their wait must be tried again).
    pub(crate) fn remove(&mut self, token: Token) -> (Vec<TimerKey>, Vec<Turn>) {
        if self.get(token).is_none() {
            return (Vec::new(), Vec::new());
        }
        let mut source = self.slab.remove(token.key());
        let mut timers = Vec::new();
        let mut woken = Vec::new();
        for side in [&mut source.read, &mut source.write] {
            timers.extend(side.timer.take().map(|(key, _)| key));
            woken.extend(side.parked.drain(..).map(|p| p.turn));
        }
        self.parked -= woken.len();
        (timers, woken)
    }

    fn get(&mut self, token: Token) -> Option<&mut Source> {
        self.slab.get_mut(token.key()).filter(|s| s.generation == token.generation())
    }

    /// Whether an operation in `direction` is worth trying (see `Side::ready`).
    pub(crate) fn is_ready(&mut self, token: Token, direction: Direction) -> bool {
        self.get(token).is_some_and(|s| {
            let side = s.side(direction);
            side.ready || side.closed
        })
    }

    /// Notes that an operation in `direction` would block: the next one waits for
    /// the kernel's next report first.
    pub(crate) fn clear_ready(&mut self, token: Token, direction: Direction) {
        if let Some(source) = self.get(token) {
            source.side(direction).ready = false;
        }
    }

    /// Parks `turn` on `direction` of `token` until readiness or `deadline`, unless
    /// the direction is ready already.
    pub(crate) fn wait(&mut self, token: Token, direction: Direction, turn: Turn, deadline: Option<Instant>) -> Waited {
        let Some(source) = self.get(token) else { return Waited::Ready };
        let side = source.side(direction);
        if side.ready || side.closed {
            return Waited::Ready;
        }
        side.parked.push(Parked { turn, deadline });
        let arm = deadline.filter(|&d| side.timer.is_none_or(|(_, at)| at > d));
        self.parked += 1;
        Waited::Parked { arm }
    }

    /// Records the timer armed for `direction` of `token` at `at`; returns the one
    /// it replaces, to cancel.
    pub(crate) fn set_timer(
        &mut self,
        token: Token,
        direction: Direction,
        timer: TimerKey,
        at: Instant,
    ) -> Option<TimerKey> {
        let source = self.get(token)?;
        source.side(direction).timer.replace((timer, at)).map(|(key, _)| key)
    }

    /// Takes back the waits `task` left on `direction` of `token` (its park ended
    /// another way: a timeout scope, a cancellation), so none outlives its park.
    pub(crate) fn unwait(&mut self, token: Token, direction: Direction, task: u64) {
        let Some(source) = self.get(token) else { return };
        let parked = &mut source.side(direction).parked;
        let before = parked.len();
        parked.retain(|p| p.turn.task != task);
        self.parked -= before - parked.len();
    }

    /// The kernel reported `event` on its source: marks the directions ready (or
    /// closed) and moves their parked fibers into `woken`.
    pub(crate) fn ready(&mut self, event: &Event, woken: &mut Vec<Turn>) {
        let Some(source) = self.get(Token::from_raw(event.token)) else { return };
        let before = woken.len();
        let sides = [
            (&mut source.read, event.readable, event.read_closed),
            (&mut source.write, event.writable, event.write_closed),
        ];
        for (side, ready, closed) in sides {
            side.closed |= closed;
            if ready || closed {
                side.ready = true;
                woken.extend(side.parked.drain(..).map(|p| p.turn));
            }
        }
        self.parked -= woken.len() - before;
    }

    /// The deadline timer of `direction` of `token` fired at `now`: moves the fibers
    /// whose deadline has passed into `woken`, and returns when to arm it again
    /// for those still waiting, if any.
    pub(crate) fn deadline(
        &mut self,
        token: Token,
        direction: Direction,
        now: Instant,
        woken: &mut Vec<Turn>,
    ) -> Option<Instant> {
        let source = self.get(token)?;
        let side = source.side(direction);
        side.timer = None;
        let before = woken.len();
        side.parked.retain(|p| {
            let due = p.deadline.is_some_and(|d| d <= now);
            if due {
                woken.push(p.turn);
            }
            !due
        });
        let next = side.parked.iter().filter_map(|p| p.deadline).min();
        self.parked -= woken.len() - before;
        next
    }

    /// Whether any fiber is parked on a source.
    pub(crate) fn has_parked(&self) -> bool {
        self.parked > 0
    }

    /// How many sources are registered.
    pub(crate) fn len(&self) -> usize {
        self.slab.len()
    }
}
