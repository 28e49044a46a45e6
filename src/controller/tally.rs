//! What the reconcile in progress on this task wrote: a task-local tally the worker opens
//! around each reconcile ([`counting`]), the writer adds to ([`count_write`]) and the Events
//! recorder reads the key of ([`current_key`]). A request counts its keys' writes from it.

use super::keys::Key;
use std::cell::RefCell;

/// The key a worker is reconciling, and what its writes did.
struct Tally {
    key: Key,
    writes: u64,
    failures: u64,
}

tokio::task_local! {
    static CURRENT: RefCell<Tally>;
}

/// Runs one reconcile of `key`, counting its writes: (output, writes, failed writes).
pub async fn counting<F: std::future::Future>(key: &Key, f: F) -> (F::Output, u64, u64) {
    let tally = RefCell::new(Tally {
        key: key.clone(),
        writes: 0,
        failures: 0,
    });
    CURRENT
        .scope(tally, async {
            let out = f.await;
            let (w, fl) = CURRENT.with(|t| {
                let t = t.borrow();
                (t.writes, t.failures)
            });
            (out, w, fl)
        })
        .await
}

/// A write of the current reconcile passed (or failed).
pub fn count_write(failed: bool) {
    let _ = CURRENT.try_with(|t| {
        let mut t = t.borrow_mut();
        if failed {
            t.failures += 1;
        } else {
            t.writes += 1;
        }
    });
}

/// The key being reconciled by this task, if any.
pub fn current_key() -> Option<Key> {
    CURRENT.try_with(|t| t.borrow().key.clone()).ok()
}
