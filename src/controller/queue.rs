//! A de-duplicating work queue with delayed items, in the manner of client-go's workqueue:
//! a key is queued at most once; a key being processed is not handed out again, and if it is
//! pushed meanwhile it is queued once more when its processing is done. Due times are on
//! tokio's monotonic clock ([`Instant`]); [`WorkQueue`] is given the time, so its unit tests
//! choose it. [`SharedQueue`] is the one the workers share (live and in the tests), read at
//! tokio's clock (tests pause and advance it); [`SharedQueue::next`] wakes a worker when a key
//! is pushed or the next delayed one comes due, never on a poll.

pub use super::keys::{Key, Scope};
use super::world::Enqueue;
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::time::Duration;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

#[derive(Debug, Default, Clone)]
pub struct WorkQueue {
    ready: VecDeque<Key>,
    queued: HashSet<Key>,
    processing: HashSet<Key>,
    dirty: HashSet<Key>,
    delayed: BTreeMap<(Instant, u64), Key>,
    delayed_at: HashMap<Key, (Instant, u64)>,
    seq: u64,
}

impl WorkQueue {
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues `key` now (a no-op if it is already queued).
    pub fn push(&mut self, key: Key) {
        if self.processing.contains(&key) {
            self.dirty.insert(key);
            return;
        }
        if let Some(at) = self.delayed_at.remove(&key) {
            self.delayed.remove(&at);
        }
        if self.queued.insert(key.clone()) {
            self.ready.push_back(key);
        }
    }

    /// Queues `key` at `at` (kept at the earlier time if it is already delayed; a no-op if it
    /// is already ready).
    pub fn push_at(&mut self, key: Key, at: Instant) {
        if self.queued.contains(&key) {
            return;
        }
        if let Some(&(existing, _)) = self.delayed_at.get(&key)
            && existing <= at
        {
            return;
        }
        if let Some(old) = self.delayed_at.remove(&key) {
            self.delayed.remove(&old);
        }
        self.seq += 1;
        let slot = (at, self.seq);
        self.delayed.insert(slot, key.clone());
        self.delayed_at.insert(key, slot);
    }

    /// Moves delayed keys that are due to the ready list.
    fn promote(&mut self, now: Instant) {
        while let Some((&slot, _)) = self.delayed.iter().next() {
            if slot.0 > now {
                break;
            }
            if let Some(key) = self.delayed.remove(&slot) {
                self.delayed_at.remove(&key);
                if self.processing.contains(&key) {
                    self.dirty.insert(key);
                } else if self.queued.insert(key.clone()) {
                    self.ready.push_back(key);
                }
            }
        }
    }

    /// The next ready key, marked as processing. Call [`WorkQueue::done`] when finished.
    pub fn pop(&mut self, now: Instant) -> Option<Key> {
        self.promote(now);
        let key = self.ready.pop_front()?;
        self.queued.remove(&key);
        self.processing.insert(key.clone());
        Some(key)
    }

    /// Removes a specific ready key (tests use it to choose the schedule).
    pub fn take(&mut self, key: &Key) -> bool {
        if !self.queued.remove(key) {
            return false;
        }
        self.ready.retain(|k| k != key);
        self.processing.insert(key.clone());
        true
    }

    /// Ends the processing of `key`; re-queues it if it was pushed meanwhile.
    pub fn done(&mut self, key: &Key) {
        self.processing.remove(key);
        if self.dirty.remove(key) {
            self.push(key.clone());
        }
    }

    /// When the earliest delayed key is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.delayed.keys().next().map(|(at, _)| *at)
    }

    /// Nothing ready and nothing being processed (delayed keys may remain).
    #[cfg(test)]
    pub fn is_idle(&self) -> bool {
        self.ready.is_empty() && self.processing.is_empty()
    }

    /// Ready + processing + delayed.
    pub fn len(&self) -> usize {
        self.ready.len() + self.processing.len() + self.delayed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every ready and delayed key, and forgets that keys in progress were pushed again
    /// meanwhile (they are not requeued when done).
    pub fn discard(&mut self) {
        self.ready.clear();
        self.queued.clear();
        self.dirty.clear();
        self.delayed.clear();
        self.delayed_at.clear();
    }

    /// The ready keys, in order.
    pub fn ready_keys(&self) -> Vec<Key> {
        self.ready.iter().cloned().collect()
    }
}

/// The queue the workers share.
#[derive(Debug, Default)]
pub struct SharedQueue {
    inner: Mutex<WorkQueue>,
    /// Keys whose reconcile found a store unknown: enqueued again when a store lists.
    parked: Mutex<BTreeSet<Key>>,
    scope: Scope,
    wake: Notify,
    depth: watch::Sender<usize>,
    /// Retries in a row per key, the backoff's exponent (client-go's `NumRequeues`); kept
    /// across `discard`, not copied by `fork`.
    attempts: Mutex<HashMap<Key, u32>>,
}

impl SharedQueue {
    pub fn new(scope: Scope) -> Self {
        SharedQueue {
            scope,
            ..SharedQueue::default()
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut WorkQueue) -> T) -> T {
        let mut q = self.inner.lock();
        let out = f(&mut q);
        let len = q.len();
        drop(q);
        self.depth.send_if_modified(|d| {
            let changed = *d != len;
            *d = len;
            changed
        });
        out
    }

    /// The next ready key now, marked as processing, and when the next delayed key is due.
    pub fn pop(&self) -> (Option<Key>, Option<Instant>) {
        let now = Instant::now();
        self.with(|q| (q.pop(now), q.next_due()))
    }

    /// The next ready key, marked as processing: waits until a key is pushed, or until the
    /// next delayed key is due.
    pub async fn next(&self) -> Key {
        loop {
            // Registered before looking: a push between the look and the wait still wakes us.
            let woken = self.wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            match self.pop() {
                (Some(key), _) => return key,
                (None, Some(due)) => {
                    tokio::select! {
                        () = woken => {}
                        () = tokio::time::sleep_until(due) => {}
                    }
                }
                (None, None) => woken.await,
            }
        }
    }

    /// Removes a specific ready key (tests use it to choose the schedule).
    pub fn take(&self, key: &Key) -> bool {
        self.with(|q| q.take(key))
    }

    /// A worker finished `key` (it may now be taken again).
    pub fn done(&self, key: &Key) {
        let requeued = self.with(|q| {
            q.done(key);
            q.queued.contains(key)
        });
        if requeued {
            self.wake.notify_one();
        }
    }

    /// Counts a reconcile of `key`: the retries in a row so far if it asks for one (`retry`),
    /// else 0, forgetting them (client-go's `Forget`).
    pub fn attempt(&self, key: &Key, retry: bool) -> u32 {
        let mut attempts = self.attempts.lock();
        if !retry {
            attempts.remove(key);
            return 0;
        }
        let n = attempts.entry(key.clone()).or_default();
        *n += 1;
        *n
    }

    /// Keys parked until a store lists again.
    pub fn park(&self, key: Key) {
        self.parked.lock().insert(key);
    }

    /// Enqueues every parked key.
    pub fn unpark(&self) {
        let keys = std::mem::take(&mut *self.parked.lock());
        for k in keys {
            self.enqueue(k);
        }
    }

    /// Drops every queued, delayed and parked key (keys being processed finish, then are not
    /// requeued unless pushed again): what was queued rests on knowledge this copy no longer
    /// trusts.
    pub fn discard(&self) {
        self.with(WorkQueue::discard);
        self.parked.lock().clear();
    }

    /// Ready + processing + delayed.
    pub fn len(&self) -> usize {
        *self.depth.borrow()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn ready_keys(&self) -> Vec<Key> {
        self.with(|q| q.ready_keys())
    }

    /// The depth, on a watch channel.
    pub fn depth(&self) -> watch::Receiver<usize> {
        self.depth.subscribe()
    }

    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// A new queue holding the same keys (not the parked ones), for a copy of a test world.
    pub fn fork(&self) -> SharedQueue {
        let q = SharedQueue::new(self.scope.clone());
        let inner = self.with(|w| w.clone());
        q.with(|w| *w = inner);
        q
    }

    /// The queue's state, for a person debugging a wait that did not end.
    pub fn describe(&self) -> String {
        self.with(|q| format!("{q:?}"))
    }
}

impl Enqueue for SharedQueue {
    fn enqueue(&self, key: Key) {
        if !self.scope.contains(&key) {
            return;
        }
        self.with(|q| q.push(key));
        self.wake.notify_one();
    }
    fn enqueue_after(&self, key: Key, delay: Duration) {
        if !self.scope.contains(&key) {
            return;
        }
        let at = Instant::now() + delay;
        self.with(|q| q.push_at(key, at));
        // A sleeping worker must look at the new due time.
        self.wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_scope_keeps_the_template_and_its_kind_only() {
        let q = SharedQueue::new(Scope::Template("k8sx".into()));
        q.enqueue(Key::Template("k8sx".into()));
        q.enqueue(Key::Template("k8sy".into()));
        q.enqueue(Key::constraint("K8sX", "a"));
        q.enqueue(Key::constraint("K8sY", "b"));
        q.enqueue_after(Key::constraint("K8sY", "c"), Duration::from_secs(1));
        assert_eq!(
            q.ready_keys(),
            vec![Key::Template("k8sx".into()), Key::constraint("K8sX", "a")]
        );
        assert_eq!(q.len(), 2);
        let depth = q.depth();
        let (k, _) = q.pop();
        q.done(&k.expect("ready"));
        assert_eq!(*depth.borrow(), 1, "the depth follows every change");
    }

    #[test]
    fn parked_keys_come_back_and_a_discard_drops_them() {
        let q = SharedQueue::new(Scope::All);
        q.park(Key::Template("a".into()));
        assert!(q.is_empty());
        q.unpark();
        assert_eq!(q.ready_keys(), vec![Key::Template("a".into())]);
        q.park(Key::Template("b".into()));
        q.discard();
        q.unpark();
        assert!(q.is_empty());
    }

    #[test]
    fn dedups_and_requeues_dirty_keys() {
        let t0 = Instant::now();
        let mut q = WorkQueue::new();
        let k = Key::Template("a".into());
        q.push(k.clone());
        q.push(k.clone());
        assert_eq!(q.len(), 1);
        assert_eq!(q.pop(t0), Some(k.clone()));
        assert_eq!(q.pop(t0), None);
        q.push(k.clone()); // while processing
        assert_eq!(q.pop(t0), None, "not handed out twice");
        q.done(&k);
        assert_eq!(q.pop(t0), Some(k.clone()));
        q.done(&k);
        assert!(q.is_empty());
    }

    #[test]
    fn delayed_keys_come_due() {
        let t0 = Instant::now();
        let secs = Duration::from_secs;
        let mut q = WorkQueue::new();
        let k = Key::constraint("K", "c");
        q.push_at(k.clone(), t0 + secs(10));
        q.push_at(k.clone(), t0 + secs(5));
        assert_eq!(q.pop(t0), None);
        assert!(q.is_idle());
        assert_eq!(q.next_due(), Some(t0 + secs(5)));
        assert_eq!(q.pop(t0 + secs(5)), Some(k.clone()));
        q.done(&k);
        assert!(q.is_empty());
        // A push now overrides a delay.
        q.push_at(k.clone(), t0 + secs(5));
        q.push(k.clone());
        assert_eq!(q.len(), 1);
        assert_eq!(q.pop(t0), Some(k));
    }

    /// On tokio's clock, paused (it jumps to the next timer when every task waits): a worker
    /// waiting on [`SharedQueue::next`] gets each delayed key exactly when it is due.
    #[tokio::test(start_paused = true)]
    async fn a_waiting_worker_wakes_when_a_delayed_key_is_due() {
        let q = std::sync::Arc::new(SharedQueue::new(Scope::All));
        let t0 = Instant::now();
        q.enqueue_after(Key::Template("late".into()), Duration::from_secs(30));
        q.enqueue_after(Key::Template("soon".into()), Duration::from_secs(5));
        let worker = {
            let q = q.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                for _ in 0..2 {
                    let k = q.next().await;
                    got.push((k.clone(), Instant::now() - t0));
                    q.done(&k);
                }
                got
            })
        };
        let got = worker.await.expect("the worker");
        assert_eq!(
            got,
            [
                (Key::Template("soon".into()), Duration::from_secs(5)),
                (Key::Template("late".into()), Duration::from_secs(30)),
            ]
        );
    }

    /// A key pushed while a worker waits for a later due time is handed out at once; one
    /// delayed earlier than that due time wakes the worker at its own.
    #[tokio::test(start_paused = true)]
    async fn a_push_wakes_a_waiting_worker_at_once() {
        let q = std::sync::Arc::new(SharedQueue::new(Scope::All));
        let t0 = Instant::now();
        q.enqueue_after(Key::Template("late".into()), Duration::from_secs(60));
        let waiting = {
            let q = q.clone();
            tokio::spawn(async move { (q.next().await, Instant::now() - t0) })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        q.enqueue(Key::Template("now".into()));
        let (k, at) = waiting.await.expect("the worker");
        assert_eq!(
            (k, at),
            (Key::Template("now".into()), Duration::from_secs(1))
        );
        let waiting = {
            let q = q.clone();
            tokio::spawn(async move { (q.next().await, Instant::now() - t0) })
        };
        tokio::task::yield_now().await;
        q.enqueue_after(Key::Template("sooner".into()), Duration::from_secs(9));
        let (k, at) = waiting.await.expect("the worker");
        assert_eq!(
            (k, at),
            (Key::Template("sooner".into()), Duration::from_secs(10))
        );
    }
}
