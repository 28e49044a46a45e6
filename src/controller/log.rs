//! A bounded log whose entries carry an increasing sequence number: the reconciler's actions,
//! the cluster's Events as a copy reads them, the TUI's lines. A reader keeps the last
//! sequence it saw and asks for what is newer ([`Log::since`]), instead of comparing entries.
//!
//! Cloning a log is cheap, so a publisher hands the log itself to every view: entries sit in
//! shared, immutable chunks of at most [`CHUNK`] entries, and a clone copies the list of chunks
//! (a few pointers), never an entry. The first push after a clone copies the pointers of the
//! last chunk only (its entries are `Arc`s).
//!
//! Sequences are this process's: they start at 1 in every log, and a log made anew (another
//! session, a restarted reconciler) has another [`Log::id`], so a reader that sees a new id
//! starts from 0. A log's clones share its id.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// How many entries a log keeps unless told otherwise (oldest dropped first).
pub const DEFAULT_CAPACITY: usize = 500;
/// Entries per shared chunk: what the first push after a publish copies, at most (pointers).
pub const CHUNK: usize = 64;

/// One entry: its sequence number and its value (shared by every clone of the log).
#[derive(Debug, PartialEq, Eq)]
pub struct Entry<T> {
    pub seq: u64,
    pub value: Arc<T>,
}

// Not derived: that would ask `T: Clone`, and cloning an entry never clones its value.
impl<T> Clone for Entry<T> {
    fn clone(&self) -> Self {
        Entry {
            seq: self.seq,
            value: Arc::clone(&self.value),
        }
    }
}

impl<T> std::ops::Deref for Entry<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

/// A bounded log with sequence numbers; see the module's documentation.
pub struct Log<T> {
    id: u64,
    chunks: VecDeque<Arc<Vec<Entry<T>>>>,
    /// The sequence of the oldest entry kept (entries below it in the first chunk are dropped).
    first: u64,
    /// The sequence the next entry gets.
    next: u64,
    capacity: usize,
}

impl<T> Clone for Log<T> {
    fn clone(&self) -> Self {
        Log {
            id: self.id,
            chunks: self.chunks.clone(),
            first: self.first,
            next: self.next,
            capacity: self.capacity,
        }
    }
}

impl<T> Default for Log<T> {
    fn default() -> Self {
        Log::new(DEFAULT_CAPACITY)
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Log<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Tells one log from another (a reader's sequence means nothing in another log).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl<T> Log<T> {
    /// An empty log that keeps the newest `capacity` entries.
    pub fn new(capacity: usize) -> Self {
        Log {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            chunks: VecDeque::new(),
            first: 1,
            next: 1,
            capacity,
        }
    }

    /// Which log this is: the same for its clones, another for a log made anew.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Appends `value`, dropping the oldest entry when full; returns its sequence.
    pub fn push(&mut self, value: T) -> u64 {
        let entry = Entry {
            seq: self.next,
            value: Arc::new(value),
        };
        self.next += 1;
        match self.chunks.back_mut() {
            // A chunk a clone holds too is copied (its pointers) before it grows.
            Some(last) if last.len() < CHUNK => Arc::make_mut(last).push(entry),
            _ => {
                let mut chunk = Vec::with_capacity(CHUNK);
                chunk.push(entry);
                self.chunks.push_back(Arc::new(chunk));
            }
        }
        while self.len() > self.capacity {
            self.first += 1;
            let spent = self
                .chunks
                .front()
                .and_then(|c| c.last())
                .is_some_and(|e| e.seq < self.first);
            if spent {
                self.chunks.pop_front();
            }
        }
        self.next - 1
    }

    /// How many entries are kept.
    pub fn len(&self) -> usize {
        usize::try_from(self.next - self.first).unwrap_or(usize::MAX)
    }

    pub fn is_empty(&self) -> bool {
        self.next == self.first
    }

    /// The sequence of the newest entry ever pushed; 0 before the first.
    pub fn last_seq(&self) -> u64 {
        self.next - 1
    }

    /// The entries kept, oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Entry<T>> + '_ {
        let first = self.first;
        self.chunks
            .iter()
            .flat_map(|c| c.iter())
            .filter(move |e| e.seq >= first)
    }

    /// The newest entry.
    pub fn back(&self) -> Option<&Entry<T>> {
        self.iter().next_back()
    }

    /// The entries newer than `seq`, oldest first, and whether some of them were dropped
    /// already (the reader fell more than the capacity behind). A `seq` this log never gave
    /// (from another log, see [`Log::id`]) is no reason to say anything was dropped.
    pub fn since(&self, seq: u64) -> (impl DoubleEndedIterator<Item = &Entry<T>> + '_, bool) {
        let dropped = seq < self.last_seq() && seq.saturating_add(1) < self.first;
        let from = seq.saturating_add(1).max(self.first);
        let entries = self
            .chunks
            .iter()
            .filter(move |c| c.last().is_some_and(|e| e.seq >= from))
            .flat_map(|c| c.iter())
            .filter(move |e| e.seq >= from);
        (entries, dropped)
    }
}

impl<'a, T> IntoIterator for &'a Log<T> {
    type Item = &'a Entry<T>;
    type IntoIter = Box<dyn DoubleEndedIterator<Item = &'a Entry<T>> + 'a>;
    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(log: &Log<u32>, seq: u64) -> (Vec<u32>, bool) {
        let (entries, dropped) = log.since(seq);
        (entries.map(|e| *e.value).collect(), dropped)
    }

    #[test]
    fn sequences_increase_from_one() {
        let mut log = Log::new(10);
        assert_eq!(log.last_seq(), 0);
        assert!(log.is_empty());
        assert_eq!(log.push(7), 1);
        assert_eq!(log.push(8), 2);
        assert_eq!(log.last_seq(), 2);
        assert_eq!(values(&log, 0), (vec![7, 8], false));
        assert_eq!(values(&log, 1), (vec![8], false));
        assert_eq!(values(&log, 2), (vec![], false));
    }

    #[test]
    fn it_keeps_the_newest_capacity_entries() {
        let mut log = Log::new(100);
        for n in 0..1_000 {
            log.push(n);
            assert!(log.len() <= 100);
        }
        assert_eq!(log.len(), 100);
        let kept: Vec<u32> = log.iter().map(|e| **e).collect();
        assert_eq!(kept, (900..1_000).collect::<Vec<_>>());
        assert_eq!(log.back().map(|e| e.seq), Some(1_000));
        assert_eq!(log.iter().next_back().map(|e| **e), Some(999));
        // Whole chunks of dropped entries go (the memory stays bounded too).
        assert!(log.chunks.len() <= 100 / CHUNK + 2);
    }

    #[test]
    fn since_says_when_entries_were_dropped_before_it_was_asked() {
        let mut log = Log::new(3);
        for n in 1..=5 {
            log.push(n);
        }
        // Kept: seq 3, 4, 5. A reader at 1 missed seq 2.
        assert_eq!(values(&log, 1), (vec![3, 4, 5], true));
        // A reader at 2 missed nothing.
        assert_eq!(values(&log, 2), (vec![3, 4, 5], false));
        assert_eq!(values(&log, 0), (vec![3, 4, 5], true));
        assert_eq!(values(&log, 4), (vec![5], false));
        // A sequence from another log, beyond this one's: nothing new, nothing dropped.
        assert_eq!(values(&log, 99), (vec![], false));
        let empty: Log<u32> = Log::new(3);
        assert_eq!(values(&empty, 0), (vec![], false));
    }

    #[test]
    fn a_capacity_of_zero_keeps_nothing_but_counts() {
        let mut log = Log::new(0);
        log.push(1);
        log.push(2);
        assert!(log.is_empty());
        assert_eq!(log.last_seq(), 2);
        assert_eq!(values(&log, 0), (vec![], true));
        assert_eq!(values(&log, 2), (vec![], false));
    }

    #[test]
    fn a_clone_is_a_snapshot_that_shares_its_entries() {
        let mut log = Log::new(1_000);
        for n in 0..200 {
            log.push(n);
        }
        let published = log.clone();
        assert_eq!(published.id(), log.id());
        assert_ne!(Log::<u32>::new(1).id(), log.id());
        log.push(200);
        // The clone does not see what came later; the entries both hold are the same values.
        assert_eq!(published.len(), 200);
        assert_eq!(published.last_seq(), 200);
        assert_eq!(values(&log, 200), (vec![200], false));
        let shared = log
            .iter()
            .zip(published.iter())
            .all(|(a, b)| Arc::ptr_eq(&a.value, &b.value));
        assert!(shared);
    }
}
