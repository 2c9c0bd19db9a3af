//! Who a loop's tasks are, readable from the sentinel's thread: each task's number,
//! spawn site and label, written once when it is spawned (and again when it takes a
//! label of its own) into a slot kept for its slab key. A task switch then
//! publishes only the running task's number, and the sentinel finds the rest here.
//!
//! Slots come in chunks made as a loop's slab grows and kept until the loop's beacon
//! drops, so the sentinel never reads freed memory; a slot is reused by the next
//! task with the same key, and a reader checks the number around its reads (a
//! sequence lock: the number is 0 while a slot is being written).

use std::panic::Location;
use std::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

use crossbeam_utils::atomic::AtomicCell;

/// Slots a chunk holds.
const CHUNK: usize = 1024;
/// Chunks a loop may have (48 KiB of empty chunk cells per loop): slab keys past `CHUNK * CHUNKS`
/// (two million live tasks on one loop) are not recorded, and a stall in such a task names its
/// number alone.
const CHUNKS: usize = 2048;

/// One task's identity.
#[derive(Default)]
struct Slot {
    /// The task's number; 0 while the slot is written (or before it ever was).
    task: AtomicU64,
    site: AtomicCell<Option<&'static Location<'static>>>,
    /// Its label's key (`Label::key`), 0 for none.
    label: AtomicUsize,
}

impl Slot {
    /// Changes the slot for `task` with `change`, its number 0 meanwhile, so a reader on another
    /// thread never takes half of one task's identity for another's.
    #[inline(always)]
    fn write(&self, task: u64, change: impl FnOnce()) {
        self.task.store(0, Ordering::Relaxed);
        fence(Ordering::Release);
        change();
        self.task.store(task, Ordering::Release);
    }
}

/// A loop's task identities by slab key (the low 32 bits of a task's number).
pub(crate) struct Identities {
    chunks: Box<[OnceLock<Box<[Slot; CHUNK]>>; CHUNKS]>,
}

/// What the sentinel reads of a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Identity {
    pub(crate) site: &'static Location<'static>,
    pub(crate) label: usize,
}

impl Identities {
    pub(crate) fn new() -> Identities {
        let chunks: Box<[_]> = (0..CHUNKS).map(|_| OnceLock::new()).collect();
        Identities { chunks: chunks.try_into().unwrap_or_else(|_| unreachable!("CHUNKS cells")) }
    }

    /// The slot of task `task`, made with its chunk if `make`.
    #[inline(always)]
    fn slot(&self, task: u64, make: bool) -> Option<&Slot> {
        let key = (task & u64::from(u32::MAX)) as usize;
        let chunk = self.chunks.get(key / CHUNK)?;
        let slots = match chunk.get() {
            Some(slots) => slots,
            None if make => chunk.get_or_init(new_chunk),
            None => return None,
        };
        Some(&slots[key % CHUNK])
    }

    /// Records task `task` (never 0), spawned at `site` with the label of key `label`. On the
    /// loop's thread only.
    #[inline]
    pub(crate) fn spawned(&self, task: u64, site: &'static Location<'static>, label: usize) {
        if let Some(slot) = self.slot(task, true) {
            slot.write(task, || {
                slot.site.store(Some(site));
                slot.label.store(label, Ordering::Relaxed);
            });
        }
    }

    /// Task `task` has taken the label of key `label`. On the loop's thread only.
    pub(crate) fn labelled(&self, task: u64, label: usize) {
        if let Some(slot) = self.slot(task, false).filter(|slot| slot.task.load(Ordering::Relaxed) == task) {
            slot.write(task, || slot.label.store(label, Ordering::Relaxed));
        }
    }

    /// Task `task`'s identity, if its slot holds it (from any thread).
    pub(crate) fn find(&self, task: u64) -> Option<Identity> {
        let slot = self.slot(task, false)?;
        if slot.task.load(Ordering::Acquire) != task {
            return None;
        }
        let site = slot.site.load();
        let label = slot.label.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        (slot.task.load(Ordering::Relaxed) == task).then_some(Identity { site: site?, label })
    }
}

/// A chunk of empty slots, made on the heap (a chunk is 24 KiB: never on a fiber's stack).
#[cold]
fn new_chunk() -> Box<[Slot; CHUNK]> {
    let slots: Box<[Slot]> = (0..CHUNK).map(|_| Slot::default()).collect();
    slots.try_into().unwrap_or_else(|_| unreachable!("CHUNK slots"))
}

impl std::fmt::Debug for Identities {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let chunks = self.chunks.iter().filter(|chunk| chunk.get().is_some()).count();
        f.debug_struct("Identities").field("chunks", &chunks).finish()
    }
}

#[cfg(test)]
mod tests {
    use std::panic::Location;

    use super::{Identities, Identity, CHUNK};

    #[test]
    fn a_task_is_found_by_its_number_and_a_reused_slot_forgets_the_last() {
        let identities = Identities::new();
        let here = Location::caller();
        let first = 1u64 << 32 | 5;
        identities.spawned(first, here, 0);
        assert_eq!(identities.find(first), Some(Identity { site: here, label: 0 }));
        identities.labelled(first, 4096);
        assert_eq!(identities.find(first).map(|found| found.label), Some(4096));
        let next = 2u64 << 32 | 5;
        identities.spawned(next, here, 0);
        assert_eq!(identities.find(first), None, "the slot now holds the next task of key 5");
        assert_eq!(identities.find(next).map(|found| found.label), Some(0));
        assert_eq!(identities.find(3u64 << 32 | (CHUNK as u64 * 7)), None, "a chunk never made");
    }
}
