//! The two reconcilers. Each reads the local stores, compares desired with observed
//! (`compare_policy` / `compare_binding`: normalized, so steady state sends nothing), and sends
//! at most the one write each object needs.
//!
//! Ordering (design I1/I2):
//! - turning on: write the VAP, then publish the opinion with `policy_ready`, then fan out;
//! - turning off: publish first (fan-out deletes the bindings), then delete the VAP once no
//!   binding of the kind is left (requeued until then).

use super::cache::OpinionCache;
use super::queue::Key;
use super::world::{
    ConstraintStore, Enqueue, Read, TemplateStore, Unreadable, WriteOutcome, Writer,
};
use crate::core::analysis::{Comparison, compare_binding, compare_crd, compare_policy};
use crate::core::crd;
use crate::core::decide::{TemplateVerdict, decide_template};
use crate::core::desired::{BindingDecision, Opinion, binding_decision};
use crate::core::findings::Code;
use crate::core::ownership::{Control, OwnerId, control};
use crate::core::plan::Diff;
use crate::core::{Options, PlannedWrite, generate, names};
use std::time::Duration;

/// How long the template side waits before looking again for bindings to be gone (I2).
pub const BINDINGS_GONE_RECHECK: Duration = Duration::from_secs(1);

/// How long a template that stopped generating is given to flip back before its bindings and
/// VAP are deleted: on → off → on within this costs no write (it cost a delete and a create
/// of every binding and of the VAP). Enforcement stays meanwhile: the safe direction.
pub const TURN_OFF_SETTLE: Duration = Duration::from_secs(2);

/// What a reconcile concluded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Converged (or nothing this copy may do).
    Done,
    /// Come back after this long (binding wait, bindings not yet gone).
    RequeueAfter(Duration),
    /// A write must be retried (conflict or failure), with backoff.
    Retry(String),
    /// A decision rests on a store that is not known now (never listed, forbidden, failed,
    /// relisting): nothing was written. The key is parked until that store lists again.
    Unknown(Unreadable),
    /// A write the server will refuse however often it is sent (422 invalid): reported once,
    /// not retried; the next change of the object (or a resync) tries again.
    Refused(String),
    /// A write the RBAC does not allow now. A grant can come at any time and no watched event
    /// says so, so it is retried, but slowly: [`forbidden_backoff`], up to 5 minutes.
    Forbidden(String),
}

/// The value of a [`Read`], or return [`Outcome::Unknown`]: nothing is decided, so nothing is
/// written, on what could not be read.
macro_rules! known {
    ($read:expr) => {
        match $read {
            Read::Known(v) => v,
            Read::Unknown(u) => return Outcome::Unknown(u),
        }
    };
}

impl Outcome {
    fn merge(self, other: Outcome) -> Outcome {
        match (self, other) {
            (Outcome::Retry(a), _) => Outcome::Retry(a),
            (_, Outcome::Retry(b)) => Outcome::Retry(b),
            (Outcome::Unknown(a), _) => Outcome::Unknown(a),
            (_, Outcome::Unknown(b)) => Outcome::Unknown(b),
            (Outcome::Forbidden(a), _) => Outcome::Forbidden(a),
            (_, Outcome::Forbidden(b)) => Outcome::Forbidden(b),
            (Outcome::Refused(a), _) => Outcome::Refused(a),
            (_, Outcome::Refused(b)) => Outcome::Refused(b),
            (Outcome::RequeueAfter(a), Outcome::RequeueAfter(b)) => Outcome::RequeueAfter(a.min(b)),
            (Outcome::RequeueAfter(a), _) | (_, Outcome::RequeueAfter(a)) => {
                Outcome::RequeueAfter(a)
            }
            _ => Outcome::Done,
        }
    }
}

/// Everything a reconcile needs besides the world.
pub struct Ctx<'a, Q: Enqueue> {
    pub cache: &'a OpinionCache,
    pub queue: &'a Q,
    pub opts: &'a Options,
}

fn from_write(o: WriteOutcome) -> (bool, Outcome) {
    match o {
        WriteOutcome::Done => (true, Outcome::Done),
        WriteOutcome::Skipped(_) => (false, Outcome::Done),
        WriteOutcome::Retry(r) | WriteOutcome::Failed(r) => (false, Outcome::Retry(r)),
        WriteOutcome::Refused(r) => (false, Outcome::Refused(r)),
        WriteOutcome::Forbidden(r) => (false, Outcome::Forbidden(r)),
    }
}

/// Reconciles one key.
pub async fn reconcile<W, Q>(key: &Key, world: &W, ctx: &Ctx<'_, Q>) -> Outcome
where
    W: TemplateStore + Writer + Sync,
    Q: Enqueue + Sync,
{
    match key {
        Key::Template(name) => {
            let outcome = reconcile_template(name, world, ctx).await;
            // A template whose reconcile could not read what it needs has published nothing:
            // it must not count towards priming (a primed cache takes a missing opinion for
            // "no template", and the constraint side would delete the kind's bindings).
            if !matches!(outcome, Outcome::Unknown(_)) {
                ctx.cache.template_reconciled(name);
            }
            if !ctx.cache.is_primed() {
                ctx.cache.prime_if_ready(
                    world.templates_listed(),
                    &world.template_names(),
                    ctx.queue,
                );
            }
            outcome
        }
        Key::Constraint { kind, name } => reconcile_constraint(kind, name, world, ctx).await,
    }
}

/// The template side: the VAP of template `name` and the opinion of its kind.
pub async fn reconcile_template<W, Q>(name: &str, world: &W, ctx: &Ctx<'_, Q>) -> Outcome
where
    W: TemplateStore + Writer + Sync,
    Q: Enqueue + Sync,
{
    let template = known!(world.template(name));
    let kind = template.as_ref().and_then(|t| t.kind.clone());
    let pname = names::policy_name(name);
    let observed = known!(world.policy(&pname));
    // Kinds this template published before but no longer holds (deleted, or kind changed).
    for old in ctx.cache.kinds_of_template(name) {
        if Some(&old) != kind.as_ref() {
            ctx.cache.should_generate_vap(&old, None, world, ctx.queue);
        }
    }
    let Some(t) = template else {
        // Template gone: its VAP (if we would own it) goes, after its kind's bindings; then
        // its CRD, if this copy saw the template go.
        if let Some(o) = observed
            && !matches!(
                control(&o.meta, &OwnerId::template(name, "")),
                Control::Other(_)
            )
        {
            let kind = o
                .object
                .spec
                .as_ref()
                .and_then(|s| s.param_kind.as_ref())
                .and_then(|p| p.kind.clone());
            let outcome = delete_policy_after_bindings(
                world,
                ctx.cache,
                &o,
                kind.as_deref(),
                "its template is gone",
            )
            .await;
            if outcome != Outcome::Done {
                return outcome;
            }
        }
        return delete_crd_of_gone_template(name, world, ctx.cache).await;
    };
    let verdict = decide_template(&t, ctx.opts);
    let Some(kind) = kind else {
        // Invalid (no kind): no opinion to publish, nothing to write.
        return Outcome::Done;
    };
    // The CRD store decides a CRD create; unknown, nothing about the kind is concluded.
    let crd_observed = known!(world.crd(&crd::crd_name(&kind)));
    let owner = OwnerId::template(t.name(), &t.meta.uid);
    if !matches!(verdict, TemplateVerdict::Invalid { .. }) {
        ctx.cache.saw_template(name, &t.meta.uid, &kind);
    }
    if !matches!(verdict, TemplateVerdict::Skip { .. }) {
        ctx.cache.settled(name);
    }
    match verdict {
        TemplateVerdict::Invalid { reason } => {
            // Frozen: keep what exists, write nothing new for the kind.
            let opinion = Opinion {
                template: name.to_string(),
                generate: false,
                policy_ready: false,
                frozen: true,
                reason,
            };
            ctx.cache
                .should_generate_vap(&kind, Some(opinion), world, ctx.queue);
            Outcome::Done
        }
        TemplateVerdict::Generate {
            source,
            failure_policy,
            reason,
        } => {
            // CRD → Established → VAP: the VAP's paramKind must be served before it exists
            // (a policy whose paramKind is unknown denies everything under failurePolicy Fail).
            let (served, crd_outcome) = ensure_crd(&t, &kind, crd_observed, world).await;
            if !served {
                let opinion = Opinion {
                    template: name.to_string(),
                    generate: true,
                    policy_ready: false,
                    frozen: false,
                    reason,
                };
                ctx.cache
                    .should_generate_vap(&kind, Some(opinion), world, ctx.queue);
                // The CRD's watch brings the template back once it is Established.
                return crd_outcome;
            }
            let desired = generate::policy(&t, &kind, &source, failure_policy);
            let (ready, outcome) = match &observed {
                None => {
                    // The VAP vanished under a ready opinion (deleted by someone): withdraw
                    // readiness before re-creating it, so no new binding is written meanwhile.
                    if let Some(mut o) = ctx.cache.get(&kind).filter(|o| o.policy_ready) {
                        o.policy_ready = false;
                        ctx.cache
                            .should_generate_vap(&kind, Some(o), world, ctx.queue);
                    }
                    let w = PlannedWrite::create_policy(
                        &desired,
                        Code::PolicyMissing,
                        "the template generates a VAP",
                        Diff::Skip,
                    );
                    from_write(world.write(&w).await)
                }
                Some(o) => match compare_policy(&desired, o, &owner) {
                    Comparison::InSync => (true, Outcome::Done),
                    Comparison::OutOfSync(fields) => {
                        let w = PlannedWrite::update_policy(
                            &desired,
                            o,
                            Code::PolicyOutOfSync,
                            &format!("differs in {}", fields.join(", ")),
                            Diff::Skip,
                        );
                        // An existing VAP of ours is usable by bindings while it is being fixed.
                        let (_, outcome) = from_write(world.write(&w).await);
                        (true, outcome)
                    }
                    Comparison::Foreign(why) => {
                        tracing::warn!(
                            policy = %pname,
                            "not writing {pname}: {why}; bindings of kind {kind} wait until it is renamed or deleted"
                        );
                        (false, Outcome::Done)
                    }
                },
            };
            // I1: the opinion says ready only once the VAP is written; then fan out.
            let opinion = Opinion {
                template: name.to_string(),
                generate: true,
                policy_ready: ready,
                frozen: false,
                reason,
            };
            ctx.cache
                .should_generate_vap(&kind, Some(opinion), world, ctx.queue);
            crd_outcome.merge(outcome)
        }
        TemplateVerdict::Skip { reason } => {
            // Rego-only templates too: nothing else creates their constraint CRD.
            let (_, crd_outcome) = ensure_crd(&t, &kind, crd_observed, world).await;
            // It generated until now: give a quick flip back a moment to arrive.
            if ctx
                .cache
                .get(&kind)
                .is_some_and(|o| o.generate && o.template == name)
            {
                let now = world.now();
                let settle = chrono::Duration::from_std(TURN_OFF_SETTLE).unwrap_or_default();
                let until = ctx.cache.turning_off_since(name, now) + settle;
                if now < until {
                    let left = (until - now).to_std().unwrap_or_default();
                    return crd_outcome
                        .merge(Outcome::RequeueAfter(left.max(Duration::from_millis(10))));
                }
            }
            ctx.cache.settled(name);
            // I2: publish first (the fan-out deletes the bindings) ...
            let opinion = Opinion {
                template: name.to_string(),
                generate: false,
                policy_ready: false,
                frozen: false,
                reason: reason.clone(),
            };
            ctx.cache
                .should_generate_vap(&kind, Some(opinion), world, ctx.queue);
            // ... then delete the VAP once the kind's bindings are gone.
            let outcome = match observed {
                Some(o) if !matches!(control(&o.meta, &owner), Control::Other(_)) => {
                    delete_policy_after_bindings(
                        world,
                        ctx.cache,
                        &o,
                        Some(&kind),
                        &format!("template does not generate ({reason})"),
                    )
                    .await
                }
                _ => Outcome::Done,
            };
            crd_outcome.merge(outcome)
        }
    }
}

/// The template's constraint CRD: created, or updated to what the template defines (a CRD
/// another controller holds is used as it is). Returns whether the kind is served now (the
/// CRD exists and is Established) and the outcome of the write, if one was needed.
async fn ensure_crd<W: TemplateStore + Writer + Sync>(
    t: &crate::model::ConstraintTemplate,
    kind: &str,
    observed: Option<crate::model::CrdInfo>,
    world: &W,
) -> (bool, Outcome) {
    // decide_template validated what the CRD is built from.
    let Ok(desired) = crd::desired_crd(t, kind) else {
        return (false, Outcome::Done);
    };
    let name = crd::crd_name(kind);
    let Some(o) = observed else {
        let w = PlannedWrite::create_crd(
            &desired,
            Code::CrdMissing,
            "the template defines the kind",
            Diff::Skip,
        );
        return (false, from_write(world.write(&w).await).1);
    };
    let owner = OwnerId::template(t.name(), &t.meta.uid);
    let outcome = match compare_crd(&desired, &o, &owner) {
        Comparison::InSync => Outcome::Done,
        Comparison::OutOfSync(fields) => {
            let w = PlannedWrite::update_crd(
                &desired,
                &o,
                Code::CrdOutOfSync,
                &format!("differs in {}", fields.join(", ")),
                Diff::Skip,
            );
            from_write(world.write(&w).await).1
        }
        Comparison::Foreign(why) => {
            tracing::warn!(crd = %name, "not writing {name}: {why}; it is used as it is");
            Outcome::Done
        }
    };
    // An update keeps a CRD Established: the kind stays served.
    (o.established, outcome)
}

/// Deletes the constraint CRD of template `name`, which is gone, once its VAP is gone (I2:
/// bindings, VAP, then CRD). Only when this copy saw the template (a CRD found without its
/// template is reported, never deleted) and the CRD's controller is that template, same uid:
/// deleting a CRD deletes every constraint of its kind.
async fn delete_crd_of_gone_template<W: TemplateStore + Writer + Sync>(
    name: &str,
    world: &W,
    cache: &OpinionCache,
) -> Outcome {
    let Some((uid, kind)) = cache.seen_template(name) else {
        return Outcome::Done;
    };
    let Some(o) = known!(world.crd(&crd::crd_name(&kind))) else {
        cache.forget_template(name);
        return Outcome::Done;
    };
    let controlled = !uid.is_empty()
        && o.meta.controller().is_some_and(|c| c.uid == uid)
        && control(&o.meta, &OwnerId::template(name, &uid)) == Control::Owner;
    if !controlled {
        cache.forget_template(name);
        return Outcome::Done;
    }
    let w = PlannedWrite::delete_crd(
        &o,
        Code::CrdOrphan,
        &format!("its template {name} was deleted"),
        Diff::Skip,
    );
    let (done, outcome) = from_write(world.write(&w).await);
    if done {
        cache.forget_template(name);
    }
    outcome
}

async fn delete_policy_after_bindings<W: TemplateStore + Writer + Sync>(
    world: &W,
    cache: &OpinionCache,
    o: &crate::model::Policy,
    kind: Option<&str>,
    reason: &str,
) -> Outcome {
    // Wait for constraint reconciles of the kind that are deciding or writing right now.
    let lock = kind.map(|k| cache.kind_lock(k));
    let _exclusive = match &lock {
        Some(l) => Some(l.write().await),
        None => None,
    };
    if let Some(kind) = kind {
        let left = known!(world.bindings_of_kind(kind));
        if !left.is_empty() {
            tracing::debug!(
                policy = o.name(),
                "waiting for {} binding(s) of kind {kind} to be deleted first",
                left.len()
            );
            return Outcome::RequeueAfter(BINDINGS_GONE_RECHECK);
        }
    }
    let w = PlannedWrite::delete_policy(o, Code::PolicyDangling, reason, Diff::Skip);
    from_write(world.write(&w).await).1
}

/// The constraint side: the binding of constraint `kind/name`, decided from the opinion cache,
/// the constraint, its CRD's readiness and the observed binding. Never the template.
pub async fn reconcile_constraint<W, Q>(
    kind: &str,
    name: &str,
    world: &W,
    ctx: &Ctx<'_, Q>,
) -> Outcome
where
    W: ConstraintStore + Writer + Sync,
    Q: Enqueue + Sync,
{
    // Shared with other constraints of the kind; excludes the template side's VAP delete.
    let lock = ctx.cache.kind_lock(kind);
    let _shared = lock.read().await;
    let bname = names::binding_name(kind, name);
    let legacy = names::legacy_binding_name(name);
    let any_uid = OwnerId::constraint(kind, name, "");
    let mut outcome = Outcome::Done;
    // Everything a decision below rests on, read first: if any of it is unknown, nothing is
    // written for this constraint.
    let legacy_observed = if legacy != bname {
        known!(world.binding(&legacy))
    } else {
        None
    };
    let observed = known!(world.binding(&bname));
    let constraint = known!(world.constraint(kind, name));
    known!(world.opinions_known());
    let crd_state = known!(world.crd_state(kind));

    // The legacy name is cleaned up whenever this constraint controls it.
    if let Some(o) = legacy_observed
        && !matches!(control(&o.meta, &any_uid), Control::Other(_))
    {
        let w = PlannedWrite::delete_binding(
            &o,
            Code::BindingDangling,
            "legacy name from Gatekeeper v3.16–v3.22",
            Diff::Skip,
        );
        outcome = outcome.merge(from_write(world.write(&w).await).1);
    }

    let Some(c) = constraint else {
        // Constraint gone: delete its binding if it controls it (no reliance on GC).
        if let Some(o) = observed
            && !matches!(control(&o.meta, &any_uid), Control::Other(_))
        {
            let w = PlannedWrite::delete_binding(
                &o,
                Code::BindingDangling,
                &format!("constraint {kind} {name} is gone"),
                Diff::Skip,
            );
            outcome = outcome.merge(from_write(world.write(&w).await).1);
        }
        return outcome;
    };
    let owner = OwnerId::constraint(kind, name, &c.meta.uid);
    if let Some(o) = &observed
        && let Control::Other(why) = control(&o.meta, &owner)
    {
        tracing::warn!(binding = %bname, "not touching {bname}: {why}");
        return outcome;
    }
    let opinion = ctx.cache.get(kind);
    if opinion.is_none() && ctx.cache.defer_if_cold(&Key::constraint(kind, name)) {
        // The template side may not have reached this kind's template yet: not an orphan.
        return outcome;
    }
    let now = world.now();
    let decision = binding_decision(&c, opinion.as_ref(), crd_state, ctx.opts, now);
    let step = match decision {
        BindingDecision::Want(desired) => match &observed {
            None => {
                let w = PlannedWrite::create_binding(
                    &desired,
                    Code::BindingMissing,
                    "the constraint targets vap.k8s.io",
                    Diff::Skip,
                );
                from_write(world.write(&w).await).1
            }
            Some(o) => match compare_binding(&desired, o, &owner) {
                Comparison::InSync | Comparison::Foreign(_) => Outcome::Done,
                Comparison::OutOfSync(fields) => {
                    let w = PlannedWrite::update_binding(
                        &desired,
                        o,
                        Code::BindingOutOfSync,
                        &format!("differs in {}", fields.join(", ")),
                        Diff::Skip,
                    );
                    from_write(world.write(&w).await).1
                }
            },
        },
        BindingDecision::Waiting { until, .. } => match until {
            Some(until) => {
                let left = (until - now).to_std().unwrap_or_default();
                // Never a zero delay: come back just after the deadline.
                Outcome::RequeueAfter(left.max(Duration::from_millis(10)))
            }
            // Waiting for the CRD or the policy: their events (CRD watch, fan-out) bring us back.
            None => Outcome::Done,
        },
        BindingDecision::NotWanted { reason } => match &observed {
            Some(o) => {
                let w = PlannedWrite::delete_binding(o, Code::BindingDangling, &reason, Diff::Skip);
                from_write(world.write(&w).await).1
            }
            None => Outcome::Done,
        },
        BindingDecision::Orphan => match &observed {
            Some(o) => {
                let w = PlannedWrite::delete_binding(
                    o,
                    Code::BindingDangling,
                    "its kind has no template",
                    Diff::Skip,
                );
                from_write(world.write(&w).await).1
            }
            None => Outcome::Done,
        },
        BindingDecision::Frozen { .. } => Outcome::Done,
    };
    outcome.merge(step)
}

/// Turns an outcome into queue operations: requeue after a delay, or retry with backoff.
pub fn schedule<Q: Enqueue>(
    queue: &Q,
    key: &Key,
    outcome: &Outcome,
    now: chrono::DateTime<chrono::Utc>,
    attempt: u32,
) {
    match outcome {
        // Unknown: parked until the store lists again; refused: the next change tries again.
        Outcome::Done | Outcome::Unknown(_) | Outcome::Refused(_) => {}
        Outcome::RequeueAfter(d) => queue.enqueue_at(
            key.clone(),
            now + chrono::Duration::from_std(*d).unwrap_or_default(),
        ),
        Outcome::Retry(_) => queue.enqueue_at(
            key.clone(),
            now + chrono::Duration::from_std(backoff(attempt)).unwrap_or_default(),
        ),
        Outcome::Forbidden(_) => queue.enqueue_at(
            key.clone(),
            now + chrono::Duration::from_std(forbidden_backoff(attempt)).unwrap_or_default(),
        ),
    }
}

/// The longest wait between two attempts of a forbidden write.
pub const FORBIDDEN_BACKOFF_MAX: Duration = Duration::from_secs(300);

/// Backoff for forbidden writes: 1 s, 2 s, 4 s, … capped at [`FORBIDDEN_BACKOFF_MAX`]. A grant
/// made right after the refusal is picked up within seconds; one that never comes costs one
/// request per object every 5 minutes.
pub fn forbidden_backoff(attempt: u32) -> Duration {
    let secs = 1u64.saturating_mul(1u64 << attempt.min(9));
    Duration::from_secs(secs).min(FORBIDDEN_BACKOFF_MAX)
}

/// Exponential backoff for retries: 100ms, 200ms, … capped at 30s.
pub fn backoff(attempt: u32) -> Duration {
    let ms = 100u64.saturating_mul(1u64 << attempt.min(9));
    Duration::from_millis(ms.min(30_000))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Recorded(Mutex<Vec<(Key, Option<chrono::DateTime<chrono::Utc>>)>>);
    impl Enqueue for Recorded {
        fn enqueue(&self, key: Key) {
            self.0.lock().unwrap().push((key, None));
        }
        fn enqueue_at(&self, key: Key, at: chrono::DateTime<chrono::Utc>) {
            self.0.lock().unwrap().push((key, Some(at)));
        }
    }

    /// When `outcome` at `attempt` brings the key back (None: not at all).
    fn next(outcome: Outcome, attempt: u32) -> Option<Duration> {
        let q = Recorded::default();
        let now = chrono::Utc::now();
        let key = Key::Template("t".into());
        schedule(&q, &key, &outcome, now, attempt);
        let got = q.0.lock().unwrap().clone();
        assert!(got.len() <= 1, "{got:?}");
        got.first().map(|(_, at)| {
            (at.expect("delayed") - now)
                .to_std()
                .expect("in the future")
        })
    }

    #[test]
    fn an_invalid_write_is_not_retried_and_a_forbidden_one_slowly() {
        // 422: the server refuses this body whatever happens: only a change brings it back.
        assert_eq!(next(Outcome::Refused("422".into()), 0), None);
        // 403: a grant may come, unannounced: retried from 1 s, doubling, at most every 5 min.
        let forbidden = |n| next(Outcome::Forbidden("403".into()), n);
        assert_eq!(forbidden(0), Some(Duration::from_secs(1)));
        assert_eq!(forbidden(3), Some(Duration::from_secs(8)));
        assert_eq!(forbidden(30), Some(FORBIDDEN_BACKOFF_MAX));
        assert_eq!(FORBIDDEN_BACKOFF_MAX, Duration::from_secs(300));
        // What may pass soon (conflict, server away) keeps the fast backoff, capped at 30 s.
        assert_eq!(
            next(Outcome::Retry("503".into()), 30),
            Some(Duration::from_secs(30))
        );
        // A forbidden step of a reconcile is not lost behind one that is done.
        assert_eq!(
            Outcome::Done.merge(Outcome::Forbidden("403".into())),
            Outcome::Forbidden("403".into())
        );
    }
}
