//! The paths each loop found this turn, shared by the turn's requests (h2o's way): the first
//! request of a turn that needs a path opens it, the others take the same open file and what was
//! learnt of it, and the loop forgets them all before it next asks the kernel for events
//! (`neverblock::runtime::at_turn_end`). A rename, an edit, a deletion or a permission change
//! made meanwhile is seen by the first request after the turn in which it happened: a request
//! that arrives later was delivered by that look at the kernel. A response still being sent keeps
//! its own count of the file, so forgetting never cuts one short.
//!
//! Refusals are shared too (no such file, not readable, outside the root): a `.gz` sibling that
//! does not exist costs one failed open a turn. At most [`MAX_ENTRIES`] paths a loop, so a crawl of
//! many files holds no more descriptors than that; past it a request opens its own file, closed
//! with its response. At the descriptor limit the loop lets go of its table and opens per request
//! until its turn ends, with a warning.

use std::cell::RefCell;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use foldhash::HashMap;
use rustix::io::Errno;

use super::found::Found;
use super::open::Root;
use crate::server::is_out_of_descriptors;

/// The most paths a loop keeps in a turn.
pub(super) const MAX_ENTRIES: usize = 1024;
/// The least time between two warnings of a loop that its table met the descriptor limit.
const WARN_EVERY: Duration = Duration::from_secs(10);

thread_local! {
    static TABLE: RefCell<Table> = RefCell::default();
}

/// One loop's paths of this turn.
#[derive(Default)]
struct Table {
    /// Per root (by number), its paths.
    roots: Vec<(u64, Paths)>,
    entries: usize,
    /// Turns ended: a lookup that parked adds what it found only to the turn it began in.
    turn: u64,
    /// Whether the end of this turn is registered with the loop.
    registered: bool,
    /// Nothing more is added this turn: the descriptor limit was met.
    paused: bool,
    /// When the descriptor limit was last warned of.
    warned: Option<Instant>,
}

/// A root's paths (their bytes) and what opening each gave, hashed by foldhash: several times
/// quicker than SipHash on short keys, and seeded per process, so a client cannot pick paths that
/// collide.
type Paths = HashMap<Box<[u8]>, Outcome>;

/// What opening a path gave: the file, or the refusal (as its error number).
#[derive(Clone)]
enum Outcome {
    Found(Rc<Found>),
    Refused(Errno),
}

impl Outcome {
    fn into_result(self) -> io::Result<Rc<Found>> {
        match self {
            Outcome::Found(found) => Ok(found),
            Outcome::Refused(errno) => Err(errno.into()),
        }
    }
}

/// Refusals the same path gets again while nothing changes: kept for the turn.
const LASTING: [Errno; 7] =
    [Errno::NOENT, Errno::NOTDIR, Errno::ACCESS, Errno::PERM, Errno::XDEV, Errno::LOOP, Errno::NAMETOOLONG];

/// What `relative` beneath `root` is this turn: what an earlier request of the turn found, or
/// opened now (see [`Found::open`]) and kept for the turn's other requests.
///
/// # Errors
///
/// The open's, as [`Found::open`] says.
pub(super) fn find(root: &Arc<Root>, relative: &Path) -> io::Result<Rc<Found>> {
    let name = relative.as_os_str().as_bytes();
    let begun = TABLE.with_borrow_mut(|table| match table.get(root.id(), name) {
        Some(outcome) => Err(outcome),
        None => Ok(table.begin()),
    });
    let turn = match begun {
        Err(outcome) => return outcome.into_result(),
        Ok(turn) => turn,
    };
    let opened = match Found::open(root, relative) {
        Err(e) if is_out_of_descriptors(&e) && TABLE.with_borrow_mut(Table::let_go) => Found::open(root, relative),
        other => other,
    };
    let outcome = match opened {
        Ok(found) => Outcome::Found(Rc::new(found)),
        Err(e) => match e.raw_os_error().map(Errno::from_raw_os_error) {
            Some(errno) if LASTING.contains(&errno) => Outcome::Refused(errno),
            _ => return Err(e),
        },
    };
    if let Some(turn) = turn {
        TABLE.with_borrow_mut(|table| table.add(turn, root.id(), name, outcome.clone()));
    }
    outcome.into_result()
}

/// Forgets this loop's paths: its turn has ended. The maps keep their allocations.
fn end_of_turn() {
    TABLE.with_borrow_mut(|table| {
        table.turn += 1;
        table.registered = false;
        table.paused = false;
        table.entries = 0;
        table.roots.iter_mut().for_each(|(_, paths)| paths.clear());
    });
}

impl Table {
    fn get(&self, root: u64, name: &[u8]) -> Option<Outcome> {
        let (_, paths) = self.roots.iter().find(|(id, _)| *id == root)?;
        paths.get(name).cloned()
    }

    /// A lookup begins: the turn it may add to, `None` when it may not (the table is full or
    /// paused, or no loop runs here to end the turn).
    fn begin(&mut self) -> Option<u64> {
        if self.paused || self.entries >= MAX_ENTRIES {
            return None;
        }
        // Registered before the open, which may park past the turn's end: the count of turns moves
        // on then, and what the open found is not added to a later turn.
        if !self.registered {
            self.registered = neverblock::runtime::at_turn_end(end_of_turn);
        }
        self.registered.then_some(self.turn)
    }

    fn add(&mut self, turn: u64, root: u64, name: &[u8], outcome: Outcome) {
        if turn != self.turn || self.paused || self.entries >= MAX_ENTRIES {
            return;
        }
        let paths = match self.roots.iter().position(|(id, _)| *id == root) {
            Some(at) => &mut self.roots[at].1,
            None => {
                self.roots.push((root, Paths::default()));
                &mut self.roots.last_mut().expect("just pushed").1
            }
        };
        if paths.insert(Box::from(name), outcome).is_none() {
            self.entries += 1;
        }
    }

    /// At the descriptor limit: lets go of every path (a response still sending one keeps its
    /// file) and adds none until the turn ends. Whether there was any to let go of.
    fn let_go(&mut self) -> bool {
        self.paused = true;
        if self.entries == 0 {
            return false;
        }
        if self.warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
            self.warned = Some(Instant::now());
            log::warn!(
                "out of file descriptors with {} files kept open for this turn's requests; \
                 they are let go, and each request opens its own until the turn ends",
                self.entries
            );
        }
        self.entries = 0;
        self.roots.iter_mut().for_each(|(_, paths)| paths.clear());
        true
    }
}
