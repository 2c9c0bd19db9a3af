//! Timers: a deadline is an entry in this thread's timer queue, never a thread.
//!
//! A binary min-heap of `(deadline, sequence)` over a slab of values. Insert is
//! O(log n). Cancel empties the entry's slot and leaves its heap entry stale, to
//! be dropped when it reaches the top of the heap, or by a purge once stale
//! entries make up more than half the heap; so cancel is amortised O(log n) and
//! memory stays proportional to the live entries. The sequence number breaks
//! ties between equal deadlines (they fire in insertion order) and tells a live
//! slot from a reused one (a key never names a later entry).
//!
//! Invariant: after every call, the top of the heap is live (or the heap is
//! empty), so [`TimerQueue::next_deadline`] is a plain peek.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

/// Names one entry of a [`TimerQueue`], for [`TimerQueue::cancel`].
///
/// Once its entry fired or was cancelled, a key matches nothing, even after
/// its slot holds a newer entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct TimerKey {
    /// Where the value lives in the slab.
    slot: usize,
    /// The entry's sequence number, unique over the queue's life.
    seq: u64,
}

/// One thread's pending deadlines, each carrying a value (what to wake).
#[derive(Debug)]
pub(crate) struct TimerQueue<T> {
    /// `(deadline, seq, slot)`, earliest first; an entry whose slot no longer
    /// holds its `seq` is stale (cancelled).
    heap: BinaryHeap<Reverse<(Instant, u64, usize)>>,
    /// The slab: each live entry's sequence number and value.
    slots: Vec<Option<(u64, T)>>,
    /// Empty slots, reused before the slab grows.
    free: Vec<usize>,
    /// The sequence number of the next insert.
    next_seq: u64,
    /// How many entries are live (occupied slots).
    live: usize,
}

impl<T> Default for TimerQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> TimerQueue<T> {
    /// An empty queue; allocates nothing until the first insert.
    pub(crate) fn new() -> Self {
        TimerQueue { heap: BinaryHeap::new(), slots: Vec::new(), free: Vec::new(), next_seq: 0, live: 0 }
    }

    /// Adds an entry firing at `deadline`; O(log n).
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
    /// already fired or was cancelled. Amortised O(log n).
    pub(crate) fn cancel(&mut self, key: TimerKey) -> Option<T> {
        let value = self.take(key.slot, key.seq)?;
        if self.heap.len() - self.live > self.heap.len() / 2 {
            self.purge();
        } else {
            self.clean_head();
        }
        Some(value)
    }

    /// The earliest live deadline; O(1).
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.heap.peek().map(|&Reverse((deadline, ..))| deadline)
    }

    /// Removes and moves into `out` every entry whose deadline is `<= now`, in
    /// deadline order, equal deadlines in insertion order. Keeps what `out`
    /// already held.
    pub(crate) fn expire(&mut self, now: Instant, out: &mut Vec<T>) {
        while let Some(&Reverse((deadline, seq, slot))) = self.heap.peek() {
            if deadline > now {
                break;
            }
            self.heap.pop();
            out.extend(self.take(slot, seq));
        }
        self.clean_head();
    }

    /// Live entries: inserted, not yet fired nor cancelled.
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    /// Whether no entry is live.
    pub(crate) fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Empties `slot` if it still holds entry `seq`, and returns the value.
    fn take(&mut self, slot: usize, seq: u64) -> Option<T> {
        let entry = self.slots.get_mut(slot)?;
        if entry.as_ref()?.0 != seq {
            return None;
        }
        let (_, value) = entry.take()?;
        self.free.push(slot);
        self.live -= 1;
        Some(value)
    }

    /// Whether `slot` still holds entry `seq`.
    fn is_live(&self, slot: usize, seq: u64) -> bool {
        matches!(self.slots.get(slot), Some(Some((s, _))) if *s == seq)
    }

    /// Pops stale entries off the top of the heap, restoring the invariant.
    fn clean_head(&mut self) {
        while let Some(&Reverse((_, seq, slot))) = self.heap.peek() {
            if self.is_live(slot, seq) {
                break;
            }
            self.heap.pop();
        }
    }

    /// Drops every stale entry and rebuilds the heap in place; O(n).
    fn purge(&mut self) {
        let mut entries = std::mem::take(&mut self.heap).into_vec();
        entries.retain(|&Reverse((_, seq, slot))| self.is_live(slot, seq));
        self.heap = BinaryHeap::from(entries);
    }

    /// How many entries were ever inserted.
    #[cfg(test)]
    pub(crate) fn inserted(&self) -> u64 {
        self.next_seq
    }

    /// Room reserved by the heap, slab and free list, in entries.
    #[cfg(test)]
    fn storage_len(&self) -> usize {
        self.heap.capacity() + self.slots.capacity() + self.free.capacity()
    }
}

#[cfg(test)]
mod tests;
