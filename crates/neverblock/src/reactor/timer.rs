//! Timers: a deadline is an entry in this thread's timer queue, never a thread.
//!
//! A binary min-heap of `(deadline, sequence)` over a slab of values: insert is
//! O(log n), cancel is O(1) (the heap entry goes stale and is skipped when it
//! surfaces, and stale entries are purged once they outnumber the live ones), and
//! entries with equal deadlines fire in insertion order.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

/// Names one entry, for [`TimerQueue::cancel`]; never confused with a later entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct TimerKey {
    slot: usize,
    seq: u64,
}

/// One thread's pending deadlines, each carrying what to wake.
#[derive(Debug)]
pub(crate) struct TimerQueue<T> {
    heap: BinaryHeap<Reverse<(Instant, u64, usize)>>,
    /// Live entries by slot, with the sequence number that keys them.
    slots: Vec<Option<(u64, T)>>,
    free: Vec<usize>,
    next_seq: u64,
    live: usize,
}

impl<T> TimerQueue<T> {
    pub(crate) fn new() -> Self {
        TimerQueue { heap: BinaryHeap::new(), slots: Vec::new(), free: Vec::new(), next_seq: 0, live: 0 }
    }

    /// Adds an entry that fires at `deadline`.
    pub(crate) fn insert(&mut self, deadline: Instant, value: T) -> TimerKey {
        let seq = self.next_seq;
        self.next_seq += 1;
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot] = Some((seq, value));
                slot
            }
            None => {
                self.slots.push(Some((seq, value)));
                self.slots.len() - 1
            }
        };
        self.heap.push(Reverse((deadline, seq, slot)));
        self.live += 1;
        TimerKey { slot, seq }
    }

    /// Removes an entry before it fires and returns its value; `None` if it
    /// already fired or was cancelled.
    pub(crate) fn cancel(&mut self, key: TimerKey) -> Option<T> {
        let entry = self.slots.get_mut(key.slot)?;
        if entry.as_ref().map(|(seq, _)| *seq) != Some(key.seq) {
            return None;
        }
        let (_, value) = entry.take()?;
        self.free.push(key.slot);
        self.live -= 1;
        if self.heap.len() > 2 * self.live + 64 {
            self.purge();
        }
        Some(value)
    }

    /// The earliest deadline of a live entry. Drops cancelled entries from the top
    /// of the heap on the way, so this is O(1) amortised.
    pub(crate) fn next_deadline(&mut self) -> Option<Instant> {
        while let Some(&Reverse((deadline, seq, slot))) = self.heap.peek() {
            if self.is_live(slot, seq) {
                return Some(deadline);
            }
            self.heap.pop();
        }
        None
    }

    /// Moves every entry due at `now` into `out`, in deadline order (insertion
    /// order among equal deadlines).
    pub(crate) fn expire(&mut self, now: Instant, out: &mut Vec<T>) {
        while let Some(&Reverse((deadline, seq, slot))) = self.heap.peek() {
            if self.is_live(slot, seq) && deadline > now {
                break;
            }
            self.heap.pop();
            if self.is_live(slot, seq) {
                let (_, value) = self.slots[slot].take().expect("live slot");
                self.free.push(slot);
                self.live -= 1;
                out.push(value);
            }
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.live
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.live == 0
    }

    fn is_live(&self, slot: usize, seq: u64) -> bool {
        matches!(self.slots.get(slot), Some(Some((s, _))) if *s == seq)
    }

    /// Drops heap entries whose timers were cancelled.
    fn purge(&mut self) {
        let heap = std::mem::take(&mut self.heap);
        self.heap = heap.into_iter().filter(|Reverse((_, seq, slot))| self.is_live(*slot, *seq)).collect();
    }

    #[cfg(test)]
    fn heap_len(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests;
