//! One write, one record ([`Written`]), applied by one observer ([`observe`]) to everything
//! that reports it: the stores (read-your-writes), `/metrics`, the status (the object's last
//! failure, the event log), the Kubernetes Events recorder, the request in progress (the
//! task's tally) and the log lines of failures, without flooding. The writer only emits it.

use super::keys::Obj;
use super::outage::WriteFailures;
use super::shared::Shared;
use super::state::{EventResult, EventVerb};
use super::world::{Unwritten, WriteError};
use crate::cluster::apply::Applied;
use crate::core::{PlannedWrite, Verb};

/// What one write sent and what came of it.
pub struct Written<'a> {
    pub write: &'a PlannedWrite,
    /// A digest of the body sent (to know a refused body again).
    pub body: u64,
    pub result: Result<Applied, WriteError>,
}

fn event_verb(v: Verb) -> EventVerb {
    match v {
        Verb::Create => EventVerb::Create,
        Verb::Update => EventVerb::Update,
        Verb::Delete => EventVerb::Delete,
    }
}

/// Applies `record` everywhere it is reported; `failures` is the writer's log of failed
/// writes that will be retried.
pub fn observe(shared: &Shared, failures: &WriteFailures, record: Written<'_>) {
    let w = record.write;
    let object = w.object.to_string();
    let result = match record.result {
        Ok(applied) => {
            shared.stores.remember(w, &applied);
            failures.succeeded();
            shared.outage.reachable();
            if let Some(WriteError::Forbidden(_)) = shared.status.clear_failure(&object) {
                tracing::info!(object, "{object}: allowed now (it was forbidden)");
            }
            // A delete that found nothing changed nothing: not a write.
            if matches!(applied, Applied::AlreadyGone) {
                shared.metrics.error(Unwritten::AlreadyGone);
            } else {
                shared.metrics.write(w.verb, Obj::of(&w.object.kind));
                super::tally::count_write(false);
                shared.recorder.written(w, None);
            }
            tracing::info!(verb = w.verb.as_str(), object = %w.object, "{} {}: {}", w.verb.as_str(), w.object, w.reason);
            EventResult::Ok
        }
        Err(e) => {
            failed(shared, failures, &record.write.object, record.body, &e);
            if !e.retried_away() {
                super::tally::count_write(true);
                shared.recorder.written(w, Some(&e));
            }
            EventResult::WriteFailed(e)
        }
    };
    shared.status.log(
        event_verb(w.verb),
        w.object.clone(),
        result,
        w.reason.clone(),
    );
}

/// A failed write: counted, kept as the object's last failure, logged as its class asks.
fn failed(
    shared: &Shared,
    failures: &WriteFailures,
    object: &crate::model::ObjectRef,
    body: u64,
    e: &WriteError,
) {
    shared.metrics.error(Unwritten::from(e));
    if !matches!(e, WriteError::Unreachable(_)) {
        shared.outage.reachable();
    }
    let object = object.to_string();
    let first = !e.retried_away() && shared.status.write_failed(&object, body, e);
    let msg = e.to_string();
    match e {
        WriteError::Conflict(cause) => tracing::debug!("{cause}"),
        // The server refuses this body whatever happens around it: one report, and the
        // same body is not sent again (a resync or a lease change included) until its
        // source changes or REFUSED_FOR passes.
        WriteError::Invalid(_) => tracing::warn!(object, "{msg} (not retried)"),
        // RBAC may allow it later, and no event says when: retried slowly (backoff up to
        // 5 min), logged once per object until it passes.
        WriteError::Forbidden(_) if first => tracing::warn!(
            object,
            "{msg}; retried with a backoff up to {}s until the RBAC allows it (not logged again; counted in kubectl_vap_write_errors_total{{reason=\"forbidden\"}})",
            super::reconcilers::FORBIDDEN_BACKOFF_MAX.as_secs()
        ),
        WriteError::Forbidden(_) => tracing::debug!(object, "{msg}"),
        // No answer: the copy's one outage log, not a line per write.
        WriteError::Unreachable(_) => shared.outage.failed(&object, &msg),
        // May pass later (the server back): retried with backoff, logged at most once per
        // interval with a count.
        WriteError::Failed(_) => failures.failed(e.metric_label(), &object, &msg),
    }
}
