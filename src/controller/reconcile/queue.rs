//! A de-duplicating work queue with delayed items, in the manner of client-go's workqueue: a
//! key is queued at most once, and one pushed while being processed is queued again when done.
//! Due times are on tokio's clock: [`WorkQueue`] is given the time (its tests choose it);
//! [`SharedQueue`], the workers', reads it (tests pause it) and wakes a worker on a push or a
//! due time, never on a poll.

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
        let sooner = self.delayed_at.get(&key).is_some_and(|&(t, _)| t <= at);
        if sooner || self.queued.contains(&key) {
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

    fn promote(&mut self, now: Instant) {
        while let Some(due) = self.delayed.first_entry()
            && due.key().0 <= now
        {
            let key = due.remove();
            self.delayed_at.remove(&key);
            self.push(key);
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

    /// Ends the processing of `key`; re-queues it if it was pushed meanwhile.
    pub fn done(&mut self, key: &Key) {
        self.processing.remove(key);
        if self.dirty.remove(key) {
            self.push(key.clone());
        }
    }

    pub fn next_due(&self) -> Option<Instant> {
        self.delayed.keys().next().map(|(at, _)| *at)
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
}

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
    /// Keys waiting out a backoff because the server did not answer: released at once when
    /// it answers again ([`SharedQueue::server_answers`]), not a backoff later.
    unanswered: Mutex<BTreeSet<Key>>,
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
        self.depth
            .send_if_modified(|d| std::mem::replace(d, len) != len);
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

    /// Removes a specific ready key, marked as processing (tests use it to choose the schedule).
    pub fn take(&self, key: &Key) -> bool {
        self.with(|q| {
            let ready = q.queued.remove(key);
            if ready {
                q.ready.retain(|k| k != key);
                q.processing.insert(key.clone());
            }
            ready
        })
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

    /// Whether `key`'s retry waits because the server did not answer (`true`), or for any
    /// other reason or none (`false`).
    pub fn unanswered(&self, key: &Key, unanswered: bool) {
        let mut keys = self.unanswered.lock();
        if unanswered {
            keys.insert(key.clone());
        } else {
            keys.remove(key);
        }
    }

    /// The server answers again: every key whose retry waited on it is due now (their
    /// backoff counted an outage, not a problem of theirs).
    pub fn server_answers(&self) -> usize {
        let keys = std::mem::take(&mut *self.unanswered.lock());
        let released = keys.len();
        for k in keys {
            self.attempts.lock().remove(&k);
            self.enqueue(k);
        }
        released
    }

    pub fn park(&self, key: Key) {
        self.parked.lock().insert(key);
    }

    pub fn unpark(&self) {
        let keys = std::mem::take(&mut *self.parked.lock());
        for k in keys {
            self.enqueue(k);
        }
    }

    /// Drops every queued, delayed and parked key (keys in progress finish, not requeued unless
    /// pushed again): they rest on knowledge this copy no longer trusts.
    pub fn discard(&self) {
        self.with(WorkQueue::discard);
        self.parked.lock().clear();
        self.unanswered.lock().clear();
    }

    pub fn len(&self) -> usize {
        *self.depth.borrow()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn ready_keys(&self) -> Vec<Key> {
        self.with(|q| q.ready.iter().cloned().collect())
    }

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
    use std::sync::Arc;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn a_template_scope_keeps_the_template_and_its_kind_only() {
        let q = SharedQueue::new(Scope::Template("k8sx".into()));
        q.enqueue(Key::Template("k8sx".into()));
        q.enqueue(Key::Template("k8sy".into()));
        q.enqueue(Key::constraint("K8sX", "a"));
        q.enqueue(Key::constraint("K8sY", "b"));
        q.enqueue_after(Key::constraint("K8sY", "c"), secs(1));
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
        let mut q = WorkQueue::default();
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
        let mut q = WorkQueue::default();
        let k = Key::constraint("K", "c");
        q.push_at(k.clone(), t0 + secs(10));
        q.push_at(k.clone(), t0 + secs(5));
        assert_eq!(q.pop(t0), None);
        assert_eq!(q.len(), 1, "delayed only");
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

    /// A worker waiting on [`SharedQueue::next`]: the key it got, and when (since `t0`).
    fn worker(q: &Arc<SharedQueue>, t0: Instant) -> tokio::task::JoinHandle<(Key, Duration)> {
        let q = q.clone();
        tokio::spawn(async move { (q.next().await, Instant::now() - t0) })
    }

    /// On tokio's clock, paused (it jumps to the next timer when every task waits): a worker
    /// gets each delayed key exactly when it is due.
    #[tokio::test(start_paused = true)]
    async fn a_waiting_worker_wakes_when_a_delayed_key_is_due() {
        let q = Arc::new(SharedQueue::new(Scope::All));
        let t0 = Instant::now();
        q.enqueue_after(Key::Template("late".into()), secs(30));
        q.enqueue_after(Key::Template("soon".into()), secs(5));
        let (soon, at) = worker(&q, t0).await.expect("the worker");
        assert_eq!((&soon, at), (&Key::Template("soon".into()), secs(5)));
        q.done(&soon);
        let late = worker(&q, t0).await.expect("the worker");
        assert_eq!(late, (Key::Template("late".into()), secs(30)));
    }

    /// A key pushed while a worker waits for a later due time is handed out at once; one
    /// delayed earlier than that due time wakes the worker at its own.
    #[tokio::test(start_paused = true)]
    async fn a_push_wakes_a_waiting_worker_at_once() {
        let q = Arc::new(SharedQueue::new(Scope::All));
        let t0 = Instant::now();
        q.enqueue_after(Key::Template("late".into()), secs(60));
        let waiting = worker(&q, t0);
        tokio::time::sleep(secs(1)).await;
        q.enqueue(Key::Template("now".into()));
        let now = waiting.await.expect("the worker");
        assert_eq!(now, (Key::Template("now".into()), secs(1)));
        let waiting = worker(&q, t0);
        tokio::task::yield_now().await;
        q.enqueue_after(Key::Template("sooner".into()), secs(9));
        let sooner = waiting.await.expect("the worker");
        assert_eq!(sooner, (Key::Template("sooner".into()), secs(10)));
    }

    /// Issue 42, item 10: keys backing off because the server did not answer are due the
    /// moment it answers (their attempts forgotten); a key waiting for another reason (a
    /// binding wait, a conflict) keeps its time.
    #[tokio::test(start_paused = true)]
    async fn keys_that_met_an_outage_are_due_when_the_server_answers() {
        let q = Arc::new(SharedQueue::new(Scope::All));
        let t0 = Instant::now();
        let (outage, waiting) = (Key::constraint("K", "a"), Key::constraint("K", "b"));
        for k in [&outage, &waiting] {
            q.attempt(k, true);
            q.enqueue_after(k.clone(), secs(30));
        }
        q.unanswered(&outage, true);
        q.unanswered(&waiting, false);
        tokio::time::sleep(secs(2)).await;
        assert_eq!(q.server_answers(), 1);
        assert_eq!(
            worker(&q, t0).await.expect("the worker"),
            (outage.clone(), secs(2))
        );
        assert_eq!(q.attempt(&outage, true), 1, "its backoff starts again");
        assert_eq!(q.server_answers(), 0, "released once");
        q.done(&outage);
        assert_eq!(
            worker(&q, t0).await.expect("the worker"),
            (waiting, secs(30))
        );
    }
}
