//! The workers' writes to the API server ([`Live`]), only while this copy may write. What came
//! of each goes to one observer ([`observe`]): the stores (read-your-writes), `/metrics`, the
//! status, the Events recorder, the request in progress and the log, without flooding.

use crate::cluster::apply::{Applied, ApplyError, apply_write};
use crate::controller::reconcile::keys::{Key, Obj};
use crate::controller::reconcile::world::{
    Concluded, NotSent, Unwritten, WriteError, WriteOutcome, Writer,
};
use crate::controller::store::stores::Stores;
use crate::controller::tell::events::Recorder;
use crate::controller::tell::metrics::Metrics;
use crate::controller::tell::outage::{Outage, WriteFailures};
use crate::controller::tell::write_log::WriteLog;
use crate::controller::view::fence::Leadership;
use crate::controller::view::state::{EventResult, EventVerb};
use crate::controller::view::status::{Status, contest_text};
use crate::core::contest::Undo;
use crate::core::{PlannedWrite, Verb};
use crate::model::ObjectId;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// What a failed apply means: the class decides retrying, logging and the metric label. Read
/// from the server's Status (code and causes), never from its text.
pub fn classify(e: ApplyError) -> WriteError {
    let class: fn(Arc<ApplyError>) -> WriteError = match &e {
        ApplyError::Conflict(_) => WriteError::Conflict,
        // A body we could not build will not build by sending again.
        ApplyError::Body { .. } | ApplyError::Request { .. } | ApplyError::NoBody(_) => {
            WriteError::Invalid
        }
        // The fence closed first: nothing answered, as far as this copy knows.
        ApplyError::Abandoned { .. } => WriteError::Unreachable,
        ApplyError::Failed { source, .. } => match &**source {
            kube::Error::Api(status) => match status.code {
                401 | 403 => WriteError::Forbidden,
                // A VAP with a paramKind (a binding with a paramRef) needs `get` on that kind:
                // the server answers 422 Invalid with a FieldValueForbidden cause.
                422 if forbidden_field(status) => WriteError::Forbidden,
                422 => WriteError::Invalid,
                // A body over the API server's limit stays over it. (etcd's own limit answers
                // 500; `generate::fits_in_one_object` keeps our objects under it before a write.)
                413 => WriteError::Invalid,
                _ => WriteError::Failed,
            },
            e if crate::cluster::unanswered(e) => WriteError::Unreachable,
            // Answered, but the answer could not be read (or the request not built): not an
            // outage, and a retry may pass.
            _ => WriteError::Failed,
        },
    };
    class(Arc::new(e))
}

/// Whether an Invalid answer names a field the user may not set (`field.Forbidden`).
fn forbidden_field(status: &kube::core::Status) -> bool {
    status
        .details
        .iter()
        .flat_map(|d| &d.causes)
        .any(|c| c.reason == "FieldValueForbidden")
}

/// A digest of what a write would send (its verb and body), to know a refused body again.
fn digest(w: &PlannedWrite) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    w.verb.as_str().hash(&mut h);
    w.body.as_ref().map(ToString::to_string).hash(&mut h);
    h.finish()
}

/// May touch what a write and its one observer use: the client, the stores (read-your-writes,
/// whose change a write undoes), the status (writes enabled, refusals, contests, failures, the
/// event log), the leadership (the fence every write is checked against), the metrics, the
/// outage log and the writer's `WriteFailures`, the Events recorder and the write log.
///
/// Wider than any task's: every fact of a write is applied in one place ([`observe`]), so the
/// parts it reports to meet here rather than in a fan-out across the workers.
pub struct WriterContext {
    pub client: kube::Client,
    pub stores: Arc<Stores>,
    pub status: Arc<Status>,
    pub leadership: Arc<Leadership>,
    pub metrics: Arc<Metrics>,
    pub outage: Arc<Outage>,
    pub failures: Arc<WriteFailures>,
    pub recorder: Recorder,
    pub write_log: Arc<WriteLog>,
}

/// The live workers' writer: writes to the API server (they read the copy's stores).
pub struct Live<'a> {
    pub ctx: &'a WriterContext,
    /// The key being reconciled (its Events regard the key's template).
    pub key: Key,
    /// Its writes that were accepted, and that failed (atomics: a writer is shared across
    /// awaits, so it must be `Sync`).
    pub writes: AtomicU64,
    pub failures: AtomicU64,
    /// What the reconcile concluded (`Writer::concluded`), for the pod statuses.
    pub concluded: std::sync::Mutex<Vec<Concluded>>,
}

impl Live<'_> {
    fn count(&self, failed: bool) {
        let n = if failed { &self.failures } else { &self.writes };
        n.fetch_add(1, Ordering::Relaxed);
    }
}

impl Writer for Live<'_> {
    async fn write(&self, w: &PlannedWrite) -> WriteOutcome {
        if !self.ctx.status.writes_enabled() {
            return WriteOutcome::Skipped(NotSent::WritesDisabled);
        }
        // Checked before each send (the client retries nothing itself), against a monotonic
        // deadline from the last renewal: a copy that was paused or cannot renew sends nothing,
        // whatever it believes about the Lease, and awaits an answer until that deadline only.
        let Some(left) = self.ctx.leadership.fence.remaining() else {
            return WriteOutcome::Skipped(NotSent::NotConfirmed);
        };
        let object = w.object.id();
        if let Some(hold) = self.ctx.status.contest_held(&object) {
            tracing::debug!(%object, "not written for {}s more: another writer contests it", hold.as_secs());
            return WriteOutcome::Skipped(NotSent::Contested(hold));
        }
        // Whose change this write undoes, if another writer's: read before the write, from
        // the state the write replaces. (A create replaces nothing anyone can be named for.)
        let undoes = match w.verb {
            Verb::Create => None,
            Verb::Update | Verb::Delete => self
                .ctx
                .stores
                .changed_by_another(Obj::of(&w.object.kind), &w.object.name),
        };
        let body = digest(w);
        if let Some(refused) = self.ctx.status.refusal(&object, body) {
            // Not sent again, but a failure of the request that met it (reply, exit code); its
            // log line, metric and Event came once, when the server refused it.
            tracing::debug!(object = %w.object, "not sent again: {refused}");
            self.count(true);
            return WriteOutcome::Failed(refused);
        }
        let sent = apply_write(&self.ctx.client, self.ctx.stores.admission(), w);
        let result = tokio::time::timeout(left, sent)
            .await
            .unwrap_or_else(|_| {
                Err(ApplyError::Abandoned {
                    what: format!("{} {}", w.verb.as_str(), w.object),
                    after: left,
                })
            })
            .map_err(classify);
        let outcome = match &result {
            Ok(_) => WriteOutcome::Done,
            Err(e) => WriteOutcome::Failed(e.clone()),
        };
        let written = result.is_ok();
        observe(self, w, body, result);
        if let (true, Some(other)) = (written, undoes) {
            undid(self, &object, &other);
        }
        outcome
    }

    fn not_needed(&self, object: &ObjectId) {
        self.ctx.status.clear_failure(object);
    }

    async fn compile(&self, template: &str, w: &PlannedWrite) -> Option<String> {
        let body = digest(w);
        if let Some(said) = self.ctx.status.probed(template, body) {
            return said;
        }
        // A dry-run writes nothing, so no fence: any copy that reconciles may ask.
        let sent =
            crate::cluster::apply::dry_run_write(&self.ctx.client, self.ctx.stores.admission(), w);
        match sent.await {
            Ok(_) => {
                self.ctx.status.probe_said(template, Some((body, None)));
                None
            }
            Err(e) => match crate::cluster::apply::refusal(&e) {
                Some(why) => {
                    tracing::warn!(
                        template,
                        "the API server refuses the VAP template {template} generates (a server-side dry-run; no constraint needs it yet): {why}"
                    );
                    let said = Some((body, Some(why.clone())));
                    self.ctx.status.probe_said(template, said);
                    Some(why)
                }
                // Unanswered or forbidden: nothing learned, asked again next time.
                None => {
                    tracing::debug!(template, "the dry-run of template {template}'s VAP: {e}");
                    None
                }
            },
        }
    }

    fn concluded(&self, concluded: Concluded) {
        if let Concluded::Template { name, entry: None } = &concluded {
            self.ctx.status.probe_said(name, None);
        }
        // A poisoned lock loses one conclusion: the next reconcile of the key says it again.
        if let Ok(mut all) = self.concluded.lock() {
            all.push(concluded);
        }
    }
}

/// A write of `object` undid `other`'s change: counted, and once the other writer is seen to
/// undo ours again and again (`core::contest`), said loudly once — error log, Warning Event on
/// the key's template, `/metrics`, `/readyz`, the published health that `check` and every
/// view read — while the object is left alone for a while.
fn undid(live: &Live, id: &ObjectId, other: &str) {
    let ctx = live.ctx;
    // The log's `object` field as it always was: a string.
    let object = id.to_string();
    let object = object.as_str();
    match ctx.status.undid(id, other) {
        Undo::Counted => {
            tracing::debug!(
                object,
                "this write undid a change by field manager {other:?}"
            )
        }
        Undo::Started(contest) => {
            let said = contest_text(&contest);
            tracing::error!(object, other, "{said}");
            ctx.recorder.contested(&live.key, said);
            ctx.metrics.set_contested(ctx.status.contests().len());
        }
        Undo::HeldAgain(contest) => tracing::debug!(
            object,
            other,
            "the other writer is still there: not written for {}s",
            contest
                .held_until
                .saturating_sub(crate::controller::view::status::contest_now())
                .as_secs()
        ),
    }
}

/// Applies what came of `w` (whose body's digest is `body`) everywhere it is reported.
fn observe(live: &Live, w: &PlannedWrite, body: u64, result: Result<Applied, WriteError>) {
    let ctx = live.ctx;
    let object = w.object.to_string();
    let result = match result {
        Ok(applied) => {
            ctx.stores.remember(w, &applied);
            ctx.failures.succeeded();
            ctx.outage.reachable();
            if let Some(WriteError::Forbidden(_)) = ctx.status.clear_failure(&w.object.id()) {
                tracing::info!(object, "{object}: allowed now (it was forbidden)");
            }
            // A delete that found nothing changed nothing: not a write.
            if matches!(applied, Applied::AlreadyGone) {
                ctx.metrics.error(Unwritten::AlreadyGone);
            } else {
                ctx.metrics.write(w.verb, Obj::of(&w.object.kind));
                live.count(false);
                ctx.recorder.written(w, None, &live.key);
            }
            // Each fact once: the line says the verb and object, no fields repeat them.
            let line = format!("{} {}: {}", w.verb.as_str(), w.object, w.reason);
            ctx.write_log.written(&object, line);
            EventResult::Ok
        }
        Err(e) => {
            failed(ctx, &w.object, body, &e);
            if !e.retried_away() {
                live.count(true);
                ctx.recorder.written(w, Some(&e), &live.key);
            }
            EventResult::WriteFailed(e)
        }
    };
    let verb = match w.verb {
        Verb::Create => EventVerb::Create,
        Verb::Update => EventVerb::Update,
        Verb::Delete => EventVerb::Delete,
    };
    ctx.status
        .log(verb, w.object.clone(), result, w.reason.clone());
}

/// A failed write: counted, kept as the object's last failure, logged as its class asks.
#[expect(
    clippy::cognitive_complexity,
    reason = "one match over the failure classes and their log lines; to be a table"
)]
fn failed(ctx: &WriterContext, object: &crate::model::ObjectRef, body: u64, e: &WriteError) {
    ctx.metrics.error(Unwritten::from(e));
    if !matches!(e, WriteError::Unreachable(_)) {
        ctx.outage.reachable();
    }
    let first = !e.retried_away() && ctx.status.write_failed(&object.id(), body, e);
    let object = object.to_string();
    let msg = e.to_string();
    match e {
        WriteError::Conflict(cause) => tracing::debug!("{cause}"),
        // Refused whatever happens around it: one report, and the same body is not sent again
        // (a resync or a lease change included) until its source changes or REFUSED_FOR passes.
        WriteError::Invalid(_) => tracing::warn!(object, "{msg} (not retried)"),
        // Retried slowly (`Outcome::Forbidden`): logged once per object until it passes.
        WriteError::Forbidden(_) if first => tracing::warn!(
            object,
            "{msg}; retried with a backoff up to {}s until the RBAC allows it (not logged again; counted in kubectl_vap_write_errors_total{{reason=\"forbidden\"}})",
            crate::controller::reconcile::reconcilers::FORBIDDEN_BACKOFF_MAX.as_secs()
        ),
        WriteError::Forbidden(_) => tracing::debug!(object, "{msg}"),
        // No answer: the copy's one outage log, not a line per write.
        WriteError::Unreachable(_) => ctx.outage.failed(&object, &msg),
        // May pass later (the server back): retried with backoff, logged at most once per
        // interval with a count.
        WriteError::Failed(_) => ctx
            .failures
            .failed(Unwritten::from(e).label(), &object, &msg),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn failed(status: serde_json::Value) -> ApplyError {
        let status: kube::core::Status = serde_json::from_value(status).expect("status");
        ApplyError::Failed {
            what: "create ValidatingAdmissionPolicy/gatekeeper-k8sx".into(),
            source: Box::new(kube::Error::Api(Box::new(status))),
        }
    }

    #[test]
    fn a_422_is_forbidden_by_its_cause_never_by_its_text() {
        // What kube-apiserver answers for a VAP whose paramKind the writer may not read.
        let param_kind = failed(json!({
            "status": "Failure", "code": 422, "reason": "Invalid",
            "message": "ValidatingAdmissionPolicy.admissionregistration.k8s.io \"gatekeeper-k8sx\" is invalid: spec.paramKind: Forbidden: user cannot get k8sx",
            "details": { "name": "gatekeeper-k8sx", "kind": "ValidatingAdmissionPolicy",
                         "causes": [{ "reason": "FieldValueForbidden", "field": "spec.paramKind",
                                      "message": "Forbidden: user cannot get k8sx" }] }
        }));
        assert!(matches!(classify(param_kind), WriteError::Forbidden(_)));
        // An invalid body whose text says "Forbidden" (a template's own message) stays invalid:
        // sending it again will not help, and no grant will either.
        let message = failed(json!({
            "status": "Failure", "code": 422, "reason": "Invalid",
            "message": "ValidatingAdmissionPolicy.admissionregistration.k8s.io \"gatekeeper-k8sx\" is invalid: spec.validations[0].expression: Invalid value: \"'Forbidden image'\": compilation failed",
            "details": { "causes": [{ "reason": "FieldValueInvalid",
                                      "field": "spec.validations[0].expression" }] }
        }));
        assert!(matches!(classify(message), WriteError::Invalid(_)));
        let code = |code: u16| classify(failed(json!({ "code": code, "message": "m" })));
        assert!(matches!(code(403), WriteError::Forbidden(_)));
        assert!(matches!(code(401), WriteError::Forbidden(_)));
        assert!(matches!(code(503), WriteError::Failed(_)));
        assert!(
            matches!(code(413), WriteError::Invalid(_)),
            "too large stays too large"
        );
        assert!(matches!(
            classify(ApplyError::Conflict("409".into())),
            WriteError::Conflict(_)
        ));
        // The cause is kept, not its text: the server's Status is there to read.
        let e = code(503);
        assert!(matches!(
            &**e.cause(),
            ApplyError::Failed { source, .. } if matches!(&**source, kube::Error::Api(s) if s.code == 503)
        ));
        assert_eq!(e.to_string(), e.cause().to_string());
        // Equal is the same failure (a copy), not another one that reads alike.
        assert_eq!(e.clone(), e);
        assert_ne!(code(503), e);
        // Said once, each cause once: as the event log says it, even where the class says its
        // cause inside its own words.
        let forbidden = code(403);
        assert_eq!(crate::text::error_text(&forbidden), forbidden.to_string());
        assert_eq!(
            crate::text::error_text(&e),
            "create ValidatingAdmissionPolicy/gatekeeper-k8sx: m (503)"
        );
    }
}
