//! `Fifo`: a first-in-first-out queue whose first entry has a slot of its own.
//!
//! The scheduler's run queue and a channel's values are mostly empty or one
//! long: a task wakes another and then parks, which takes that one off (a
//! ping-pong, a rendezvous, a lock handed on); a value is sent and then
//! received. With the head in a slot in front of a ring that holds the rest, a
//! push to an empty queue and the pop that empties it again are a few moves,
//! without the ring's index arithmetic.

use std::collections::VecDeque;

/// Entries in the order they were pushed.
pub(crate) struct Fifo<T> {
    /// The first entry.
    ///
    /// # Invariant
    /// `None` only when `rest` is empty too: the slot always holds the head.
    head: Option<T>,
    /// The entries behind `head`, in order.
    rest: VecDeque<T>,
}

impl<T> Default for Fifo<T> {
    fn default() -> Self {
        Fifo { head: None, rest: VecDeque::new() }
    }
}

impl<T> Fifo<T> {
    /// Adds `entry` at the back.
    #[inline(always)]
    pub(crate) fn push_back(&mut self, entry: T) {
        if self.head.is_none() {
            self.head = Some(entry);
        } else {
            self.rest.push_back(entry);
        }
    }

    /// Takes the entry at the front. Alone, it leaves the slot empty with one store.
    #[inline(always)]
    pub(crate) fn pop_front(&mut self) -> Option<T> {
        if self.rest.is_empty() {
            return self.head.take();
        }
        std::mem::replace(&mut self.head, self.rest.pop_front())
    }

    /// The entry at the front.
    pub(crate) fn front(&self) -> Option<&T> {
        self.head.as_ref()
    }

    #[inline(always)]
    pub(crate) fn is_empty(&self) -> bool {
        self.head.is_none()
    }

    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        usize::from(self.head.is_some()) + self.rest.len()
    }

    /// Every entry, front to back.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.head.iter().chain(&self.rest)
    }
}

impl<T> Extend<T> for Fifo<T> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, entries: I) {
        entries.into_iter().for_each(|entry| self.push_back(entry));
    }
}

#[cfg(test)]
mod tests {
    use super::Fifo;

    fn drain(queue: &mut Fifo<u32>) -> Vec<u32> {
        std::iter::from_fn(|| queue.pop_front()).collect()
    }

    #[test]
    fn entries_come_out_in_the_order_they_went_in_however_pushes_and_pops_interleave() {
        let mut queue = Fifo::default();
        assert!(queue.is_empty());
        assert_eq!(queue.pop_front(), None);
        queue.push_back(1);
        assert_eq!((queue.front(), queue.len()), (Some(&1), 1));
        queue.extend([2, 3]);
        assert_eq!(queue.len(), 3);
        assert_eq!(queue.pop_front(), Some(1));
        // The head came off with more behind it: the next one moved up, and a push goes behind it.
        queue.push_back(4);
        assert_eq!(queue.front(), Some(&2));
        assert_eq!(queue.iter().copied().collect::<Vec<_>>(), [2, 3, 4]);
        assert_eq!(drain(&mut queue), [2, 3, 4]);
        assert!(queue.is_empty());
        assert_eq!(queue.len(), 0);
        // Emptied, it starts again in the head slot.
        queue.push_back(5);
        queue.push_back(6);
        assert_eq!(queue.pop_front(), Some(5));
        queue.push_back(7);
        assert_eq!(drain(&mut queue), [6, 7]);
    }
}
