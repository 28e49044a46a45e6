//! One step of a worker — pop a key, reconcile it, schedule what its outcome asks for (a
//! delay, a backoff that grows with the attempts), mark it done — shared by the live workers
//! and the tier-2 tests, so the tests run exactly what runs live.

use super::cache::OpinionCache;
use super::keys::Key;
use super::queue::SharedQueue;
use super::reconcilers::{Ctx, Outcome, reconcile, schedule};
use super::world::{TemplateStore, Writer};
use crate::core::Options;
use chrono::{DateTime, Utc};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::Instant;

/// How many times in a row each key's reconcile asked to be retried (the backoff's exponent).
#[derive(Debug, Default)]
pub struct Attempts(Mutex<HashMap<Key, u32>>);

impl Attempts {
    /// Counts `outcome` for `key`: the number of retries in a row so far (0 when none).
    fn record(&self, key: &Key, outcome: &Outcome) -> u32 {
        let mut a = self.0.lock();
        match outcome {
            Outcome::Retry(_) | Outcome::Forbidden(_) => {
                let n = a.entry(key.clone()).or_default();
                *n += 1;
                *n
            }
            _ => {
                a.remove(key);
                0
            }
        }
    }
}

/// What a worker needs besides the world and the queue.
pub struct Work<'a> {
    pub cache: &'a OpinionCache,
    pub opts: &'a Options,
    pub attempts: &'a Attempts,
}

/// One reconcile, as it went.
#[derive(Debug)]
pub struct Processed {
    pub key: Key,
    pub outcome: Outcome,
    /// When the reconcile began (a request counts only reconciles that began after it).
    pub started: Instant,
    /// Writes it sent that were accepted, and that failed.
    pub writes: u64,
    pub failures: u64,
}

/// What [`process_one`] did.
#[derive(Debug)]
pub enum Step {
    Processed(Processed),
    /// Nothing was ready; the next delayed key is due then.
    Idle(Option<DateTime<Utc>>),
}

/// Pops the next ready key (at the world's clock) and processes it.
pub async fn process_one<W>(queue: &SharedQueue, world: &W, work: &Work<'_>) -> Step
where
    W: TemplateStore + Writer + Sync,
{
    match queue.pop(world.now()) {
        (Some(key), _) => Step::Processed(process(queue, key, world, work).await),
        (None, due) => Step::Idle(due),
    }
}

/// Processes `key`, which the caller has taken from `queue`: reconcile, park it if a store
/// was unknown (it comes back when one lists), schedule its delay or backoff, mark it done.
pub async fn process<W>(queue: &SharedQueue, key: Key, world: &W, work: &Work<'_>) -> Processed
where
    W: TemplateStore + Writer + Sync,
{
    let ctx = Ctx {
        cache: work.cache,
        queue,
        opts: work.opts,
    };
    let started = Instant::now();
    let (outcome, writes, failures) =
        super::tally::counting(&key, reconcile(&key, world, &ctx)).await;
    let attempt = work.attempts.record(&key, &outcome);
    match &outcome {
        Outcome::Retry(why) | Outcome::Forbidden(why) => {
            tracing::debug!(%key, attempt, "retrying: {why}")
        }
        // The store's own watch reports why it is unknown (once, not per key).
        Outcome::Unknown(what) => {
            tracing::debug!(%key, "nothing decided: {what} is not listed and watched");
            queue.park(key.clone());
        }
        _ => {}
    }
    schedule(
        queue,
        &key,
        &outcome,
        world.now(),
        attempt.saturating_sub(1),
    );
    queue.done(&key);
    Processed {
        key,
        outcome,
        started,
        writes,
        failures,
    }
}
