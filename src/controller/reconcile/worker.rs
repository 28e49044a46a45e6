//! One step of a worker — pop a key, reconcile it, schedule what its outcome asks for (a
//! delay, a backoff that grows with the attempts), mark it done — shared by the live workers
//! and the tier-2 tests, so the tests run exactly what runs live.

use super::keys::Key;
use super::queue::SharedQueue;
use super::reconcilers::{Ctx, Outcome, reconcile, schedule};
use super::world::{TemplateStore, WriteError, Writer};
use std::time::Instant;

#[derive(Debug)]
pub struct Processed {
    pub key: Key,
    pub outcome: Outcome,
    /// When the reconcile began (a request counts only reconciles that began after it).
    pub started: Instant,
}

/// Processes `key`, which the caller has taken from `ctx.queue`: reconcile, park it if a store
/// was unknown (it comes back when one lists), schedule its delay or backoff, mark it done.
pub async fn process<S, W>(key: Key, store: &S, ctx: &Ctx<'_, SharedQueue, W>) -> Processed
where
    S: TemplateStore + Sync,
    W: Writer + Sync,
{
    let queue = ctx.queue;
    let started = Instant::now();
    let outcome = reconcile(&key, store, ctx).await;
    let retry = matches!(outcome, Outcome::Retry(_) | Outcome::Forbidden(_));
    let attempt = queue.attempt(&key, retry);
    match &outcome {
        Outcome::Retry(why) | Outcome::Forbidden(why) => {
            tracing::debug!(%key, attempt, "retrying: {}", crate::text::error_text(why))
        }
        // The store's own watch reports why it is unknown (once, not per key).
        Outcome::Unknown(what) => {
            tracing::debug!(%key, "nothing decided: {what} is not listed and watched");
            queue.park(key.clone());
        }
        _ => {}
    }
    let unanswered = matches!(&outcome, Outcome::Retry(WriteError::Unreachable(_)));
    queue.unanswered(&key, unanswered);
    schedule(queue, &key, &outcome, attempt.saturating_sub(1));
    queue.done(&key);
    Processed {
        key,
        outcome,
        started,
    }
}
