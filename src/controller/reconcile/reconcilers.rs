//! The two reconcilers: each takes the pure core's step per object (`core::step`, the steps
//! `analyze` folds, compared normalized: steady state sends nothing) and sends the one write
//! it needs, if any, in the order the invariants require (docs/reconciler.md, I1/I2).

use super::cache::OpinionCache;
use super::keys::Key;
use super::world::{
    Concluded, ConstraintStore, Enqueue, Entry, NotSent, Read, TemplateStore, Unreadable,
    WriteError, WriteOutcome, Writer,
};
use crate::core::crd::{self, CRD_KIND};
use crate::core::decide::{TemplateVerdict, decide_template};
use crate::core::desired::{self, Opinion};
use crate::core::plan::Diff;
use crate::core::pod_status::{self, Written};
use crate::core::scope::Coverage;
use crate::core::step::{self, Action, BindingInput, PolicyStep};
use crate::core::{Options, PlannedWrite, PolicyShape, names, probe, shape};
use crate::model::{Constraint, ConstraintTemplate, Policy, VAP_KIND, VAPB_KIND};
use std::sync::Arc;
use std::time::Duration;

/// How long the template side waits before looking again for bindings to be gone (I2).
pub const BINDINGS_GONE_RECHECK: Duration = Duration::from_secs(1);

/// How long a template that stopped generating is given to flip back before its bindings and
/// VAP are deleted: on → off → on within this costs no write (it cost a delete and a create
/// of every binding and of the VAP). Enforcement stays meanwhile: the safe direction.
pub const TURN_OFF_SETTLE: Duration = Duration::from_secs(2);

/// `decide` (a pure decision of the core, with `opts`) on tokio's blocking pool, not on the
/// runtime's workers: a decision that parses CEL (a template's first, its constraints' own VAPs
/// under `auto`) is CPU work of milliseconds, and the workers also carry the Lease renewal,
/// whose deadline is the fence's (docs/architecture.md, "The pure core"). The parse itself runs
/// on the process's parser thread (`load::cel`); the blocking thread only waits for it, and an
/// answer remembered costs a thread hop. Outside a runtime (a test driving a reconcile by
/// hand), right here.
async fn off_workers<T: Send + 'static>(
    opts: &Options,
    decide: impl FnOnce(&Options) -> T + Send + 'static,
) -> T {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return decide(opts);
    };
    let opts = opts.clone();
    match runtime.spawn_blocking(move || decide(&opts)).await {
        Ok(decided) => decided,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // Cancelled: the runtime is shutting down, and this reconcile with it.
        Err(_) => std::future::pending().await,
    }
}

/// Template `t`'s verdict, decided off the workers ([`off_workers`]): its first decision
/// parses its CEL.
async fn verdict_of(t: &Arc<ConstraintTemplate>, opts: &Options) -> TemplateVerdict {
    let t = t.clone();
    off_workers(opts, move |opts| decide_template(&t, opts)).await
}

/// Template `t`'s shape ([`shape::resolve`]) off the workers: under `auto` it parses what
/// each of its `constraints`' own VAP would hold. The verdict and the constraints go to the
/// blocking thread and come back with the shape.
async fn shape_of(
    t: &Arc<ConstraintTemplate>,
    verdict: TemplateVerdict,
    constraints: Vec<Constraint>,
    opts: &Options,
) -> (TemplateVerdict, Vec<Constraint>, shape::Resolved) {
    let t = t.clone();
    off_workers(opts, move |opts| {
        let of_kind: Vec<&Constraint> = constraints.iter().collect();
        let resolved = shape::resolve(opts, &t, &verdict, &of_kind);
        (verdict, constraints, resolved)
    })
    .await
}

/// What a reconcile concluded. A failed write's outcome holds the failure itself (its class
/// and the server's answer), not its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Converged (or nothing this copy may do).
    Done,
    /// Come back after this long (binding wait, bindings not yet gone).
    RequeueAfter(Duration),
    /// A write must be retried (conflict or failure), with backoff.
    Retry(WriteError),
    /// A decision rests on a store that is not known now (never listed, forbidden, failed,
    /// relisting): nothing was written. The key is parked until that store lists again.
    Unknown(Unreadable),
    /// A write the server will refuse however often it is sent (422 invalid): reported once,
    /// not retried; the next change of the object (or a resync) tries again.
    Refused(WriteError),
    /// A write the RBAC does not allow now: a grant comes unannounced, so retried slowly.
    Forbidden(WriteError),
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
    /// The graver of two (the first of equals), or the sooner of two requeues.
    fn merge(self, other: Outcome) -> Outcome {
        let grave = |o: &Outcome| match o {
            Outcome::Done => 0,
            Outcome::RequeueAfter(_) => 1,
            Outcome::Refused(_) => 2,
            Outcome::Forbidden(_) => 3,
            Outcome::Unknown(_) => 4,
            Outcome::Retry(_) => 5,
        };
        match (self, other) {
            (Outcome::RequeueAfter(a), Outcome::RequeueAfter(b)) => Outcome::RequeueAfter(a.min(b)),
            (a, b) if grave(&b) > grave(&a) => b,
            (a, _) => a,
        }
    }
}

/// Everything a reconcile needs besides the store it reads.
pub struct Ctx<'a, Q: Enqueue, W: Writer> {
    pub cache: &'a OpinionCache,
    pub queue: &'a Q,
    pub opts: &'a Options,
    pub writer: &'a W,
}

impl From<WriteError> for Outcome {
    fn from(e: WriteError) -> Outcome {
        match e {
            WriteError::Forbidden(_) => Outcome::Forbidden(e),
            WriteError::Invalid(_) => Outcome::Refused(e),
            WriteError::Conflict(_) | WriteError::Unreachable(_) | WriteError::Failed(_) => {
                Outcome::Retry(e)
            }
        }
    }
}

pub async fn reconcile<S, Q, W>(key: &Key, store: &S, ctx: &Ctx<'_, Q, W>) -> Outcome
where
    S: TemplateStore + Sync,
    Q: Enqueue + Sync,
    W: Writer + Sync,
{
    match key {
        Key::Template(name) => {
            let outcome = reconcile_template(name, store, ctx).await;
            // A template whose reconcile could not read what it needs has published nothing:
            // it must not count towards priming (a primed cache takes a missing opinion for
            // "no template", and the constraint side would delete the kind's bindings).
            if !matches!(outcome, Outcome::Unknown(_)) {
                ctx.cache.template_reconciled(name);
            }
            if !ctx.cache.is_primed() {
                ctx.cache.prime_if_ready(
                    store.templates_listed(),
                    &store.template_names(),
                    ctx.queue,
                );
            }
            outcome
        }
        Key::Constraint { kind, name } => reconcile_constraint(kind, name, store, ctx).await,
    }
}

/// An object whose action needs no write (in sync, or neither wanted nor there): a failure of
/// an earlier write of it is history.
fn settled<W: Writer, D>(writer: &W, kind: &str, name: &str, action: &Action<D>) {
    if matches!(action, Action::InSync | Action::Nothing) {
        not_needed(writer, kind, name);
    }
}

fn not_needed<W: Writer>(writer: &W, kind: &str, name: &str) {
    writer.not_needed(&crate::model::ObjectId::new(kind, name));
}

/// Sends the write a step needs, if any: whether it was done, and the outcome.
async fn send<W: Writer + Sync>(writer: &W, w: Option<&PlannedWrite>) -> (bool, Outcome) {
    let Some(w) = w else {
        return (false, Outcome::Done);
    };
    match writer.write(w).await {
        WriteOutcome::Done => (true, Outcome::Done),
        // Tried again when the hold ends (then one write goes, and tells whether the other
        // writer is still there).
        WriteOutcome::Skipped(NotSent::Contested(hold)) => (false, Outcome::RequeueAfter(hold)),
        WriteOutcome::Skipped(_) => (false, Outcome::Done),
        WriteOutcome::Failed(e) => (false, Outcome::from(e)),
    }
}

/// The template side: the VAP of template `name` and the opinion of its kind.
pub async fn reconcile_template<S, Q, W>(name: &str, store: &S, ctx: &Ctx<'_, Q, W>) -> Outcome
where
    S: TemplateStore + Sync,
    Q: Enqueue + Sync,
    W: Writer + Sync,
{
    let writer = ctx.writer;
    let template = known!(store.template(name));
    let kind = template.as_ref().and_then(|t| t.kind.clone());
    let observed = known!(store.policy(&names::policy_name(name)));
    // Kinds this template published before but no longer holds (deleted, or kind changed).
    for old in ctx.cache.kinds_of_template(name) {
        if Some(&old) != kind.as_ref() {
            ctx.cache
                .should_generate_vap(&old, None, || store.constraint_names(&old), ctx.queue);
        }
    }
    let Some(t) = template else {
        writer.concluded(Concluded::Template {
            name: name.to_string(),
            entry: None,
        });
        return template_gone(name, observed.as_ref(), store, ctx).await;
    };
    let t = Arc::new(t);
    let verdict = verdict_of(&t, ctx.opts).await;
    let Some(kind) = kind else {
        // Invalid (no kind): no opinion to publish, nothing to write.
        conclude_template(writer, &t, &verdict, None, &Written::Done);
        return Outcome::Done;
    };
    // The CRD store decides a CRD create; unknown, nothing about the kind is concluded.
    let crd_observed = known!(store.crd(&crd::crd_name(&kind)));
    if !matches!(verdict, TemplateVerdict::Invalid { .. }) {
        ctx.cache.saw_template(name, &t.meta.uid, &kind);
    }
    if !matches!(verdict, TemplateVerdict::Skip { .. }) {
        ctx.cache.settled(name);
    }
    // `--policy-shape auto`: this template's shape, by its number of constraints (read only
    // when generating: a VAP that goes needs no shape).
    let constraints = if verdict.generates() {
        known!(store.constraints_of_kind(&kind))
    } else {
        Vec::new()
    };
    let (verdict, constraints, resolved) = shape_of(&t, verdict, constraints, ctx.opts).await;
    let opts = &ctx.opts.with_shape(resolved.shape);
    let side = TemplateSide {
        name,
        template: &t,
        shape: opts.policy_shape,
        kind: &kind,
        verdict: &verdict,
        store,
        ctx,
    };
    if let TemplateVerdict::Invalid { .. } = verdict {
        // Frozen: keep what exists, write nothing new for the kind.
        side.publish(false, Coverage::default());
        conclude_template(writer, &t, &verdict, None, &Written::Done);
        return Outcome::Done;
    }
    // Rego-only templates too: nothing else creates their constraint CRD.
    let crd = step::crd_step(&t, &kind, &verdict, crd_observed.as_ref());
    if let Action::Foreign(why) = &crd.action {
        let name = crd.name();
        tracing::warn!(crd = %name, "not writing {name}: {why}; it is used as it is");
    }
    settled(writer, CRD_KIND, &crd.name(), &crd.action);
    let (_, crd_outcome) = send(writer, crd.write(Diff::Skip).as_ref()).await;
    // What the kind's constraints want the VAP to match (a VAP that goes needs none).
    let coverage = if verdict.generates() && crd.served() {
        match coverage_wanted(store, &constraints, opts) {
            Ok(coverage) => coverage,
            Err(u) => return Outcome::Unknown(u),
        }
    } else {
        Coverage::default()
    };
    let policy = step::policy_step(
        &t,
        &verdict,
        crd.served(),
        observed.as_ref(),
        &coverage,
        opts,
    );
    settled(writer, VAP_KIND, &policy.name(), &policy.action);
    let outcome = if verdict.generates() {
        side.turn_on(&policy).await
    } else {
        side.turn_off(&policy).await
    };
    let outcome = crd_outcome.merge(outcome);
    let nothing_written = policy.shape() == PolicyShape::Inline && constraints.is_empty();
    let written = match (written(&outcome), compiled(&t, nothing_written, ctx).await) {
        (Written::Done, Some(refused)) => Written::Refused(refused),
        (written, _) => written,
    };
    conclude_template(writer, &t, &verdict, Some(&policy), &written);
    outcome
}

/// What a kind's `constraints` want its VAP to match; a constraint whose spec cannot be read
/// keeps what its binding has.
fn coverage_wanted<S: TemplateStore>(
    store: &S,
    constraints: &[Constraint],
    opts: &Options,
) -> Result<Coverage, Unreadable> {
    let served = store.served().known()?;
    let mut kept = std::collections::BTreeMap::new();
    for c in constraints.iter().filter(|c| c.spec_error.is_some()) {
        let name = names::binding_name(&c.kind, c.name());
        if let Some(b) = store.binding(&name).known()? {
            kept.insert(name, b);
        }
    }
    Ok(desired::policy_coverage(
        constraints,
        |c| kept.get(&names::binding_name(&c.kind, c.name())),
        opts,
        &served,
    ))
}

/// When nothing of template `t` is on the server for its compiler to judge
/// (`nothing_written`: one VAP per constraint, and no constraint yet), its VAP as the narrowed
/// shape would write it is sent as a dry-run, so a broken expression is the template's error
/// now (`core::probe`), not its first constraint's later: the server's refusal, if any.
async fn compiled<Q: Enqueue, W: Writer>(
    t: &ConstraintTemplate,
    nothing_written: bool,
    ctx: &Ctx<'_, Q, W>,
) -> Option<String> {
    let probe = probe::probe_of(t, ctx.opts).filter(|_| nothing_written)?;
    ctx.writer.compile(t.name(), &probe).await
}

/// What became of a reconcile's writes, as the status tells it.
fn written(outcome: &Outcome) -> Written {
    match outcome {
        Outcome::Done | Outcome::RequeueAfter(_) => Written::Done,
        Outcome::Retry(e) => Written::Retrying(e.to_string()),
        Outcome::Unknown(u) => Written::Retrying(u.to_string()),
        Outcome::Refused(e) | Outcome::Forbidden(e) => Written::Refused(e.to_string()),
    }
}

/// Tells the writer what the template side concluded about `t` (`Writer::concluded`), its
/// writes having come to `written`.
fn conclude_template<W: Writer>(
    writer: &W,
    t: &ConstraintTemplate,
    verdict: &TemplateVerdict,
    policy: Option<&PolicyStep<'_>>,
    written: &Written,
) {
    let generation = pod_status::template_generation(verdict, policy, written);
    writer.concluded(Concluded::Template {
        name: t.name().to_string(),
        entry: generation.map(|generation| Entry {
            object: Box::new(t.clone()),
            generation,
        }),
    });
}

/// One template's reconcile, once its verdict is known: what it publishes and writes.
struct TemplateSide<'a, S, Q: Enqueue, W: Writer> {
    name: &'a str,
    template: &'a ConstraintTemplate,
    /// `--policy-shape auto` resolved.
    shape: PolicyShape,
    kind: &'a str,
    verdict: &'a TemplateVerdict,
    store: &'a S,
    ctx: &'a Ctx<'a, Q, W>,
}

impl<S, Q, W> TemplateSide<'_, S, Q, W>
where
    S: TemplateStore + Sync,
    Q: Enqueue + Sync,
    W: Writer + Sync,
{
    /// The kind's opinion, from the verdict; `ready`: bindings may rest on the VAP (I1), as
    /// far as it matches (`coverage`).
    fn publish(&self, ready: bool, coverage: Coverage) {
        let opinion = Opinion::of(self.template, self.verdict, ready, coverage, self.shape);
        let (cache, queue) = (self.ctx.cache, self.ctx.queue);
        let names = || self.store.constraint_names(self.kind);
        cache.should_generate_vap(self.kind, Some(opinion), names, queue);
    }

    /// Turning on (I1): the VAP is written, then the opinion says ready and fans out. In the
    /// inline shape the constraint side writes a VAP per constraint: the opinion is published
    /// at once, and the template's own VAP, if one is left, goes once no binding points at it.
    async fn turn_on(&self, policy: &PolicyStep<'_>) -> Outcome {
        let (cache, kind) = (self.ctx.cache, self.kind);
        if policy.shape() == PolicyShape::Inline {
            self.publish(policy.ready_once_written(), policy.coverage(false));
            let w = policy.write(Diff::Skip);
            return delete_policy_after_bindings(self.store, self.ctx, w, Some(kind)).await;
        }
        match &policy.action {
            // The CRD is not Established: the CRD's watch brings the template back.
            Action::Wait => {
                self.publish(false, Coverage::default());
                return Outcome::Done;
            }
            // The VAP vanished under a ready opinion (deleted by someone): withdraw readiness
            // before re-creating it, so no new binding is written meanwhile.
            Action::Create(_) => {
                if let Some(mut o) = cache.get(kind).filter(|o| o.policy_ready) {
                    o.policy_ready = false;
                    let names = || self.store.constraint_names(kind);
                    cache.should_generate_vap(kind, Some(o), names, self.ctx.queue);
                }
            }
            Action::Foreign(why) => {
                let pname = policy.name();
                tracing::warn!(
                    policy = %pname,
                    "not writing {pname}: {why}; bindings of kind {kind} wait until it is renamed or deleted"
                );
            }
            _ => {}
        }
        let (done, outcome) = send(self.ctx.writer, policy.write(Diff::Skip).as_ref()).await;
        // An existing VAP of ours is usable by bindings while it is being fixed; a new one
        // once it is written.
        let created = matches!(policy.action, Action::Create(_));
        self.publish(
            policy.ready_once_written() && (done || !created),
            policy.coverage(done),
        );
        outcome
    }

    /// Turning off (I2): after a moment for a quick flip back, publish first (the fan-out
    /// deletes the bindings), then delete the VAP once the kind's bindings are gone.
    async fn turn_off(&self, policy: &PolicyStep<'_>) -> Outcome {
        let (cache, name) = (self.ctx.cache, self.name);
        if cache
            .get(self.kind)
            .is_some_and(|o| o.generate && o.template == name)
        {
            let now = tokio::time::Instant::now();
            let until = cache.turning_off_since(name, now) + TURN_OFF_SETTLE;
            if now < until {
                return Outcome::RequeueAfter((until - now).max(Duration::from_millis(10)));
            }
        }
        cache.settled(name);
        self.publish(false, Coverage::default());
        let w = policy.write(Diff::Skip);
        delete_policy_after_bindings(self.store, self.ctx, w, Some(self.kind)).await
    }
}

/// Template gone: its VAP (if the template controls it) goes, after its kind's bindings; then
/// its CRD.
async fn template_gone<S: TemplateStore + Sync, Q: Enqueue, W: Writer + Sync>(
    name: &str,
    observed: Option<&Policy>,
    store: &S,
    ctx: &Ctx<'_, Q, W>,
) -> Outcome {
    // Gone while its turn-off settled: nothing is turning off any more.
    ctx.cache.settled(name);
    if let Some(sweep) = observed.and_then(|o| step::sweep_policy(name, o)) {
        let w = Some(sweep.write(Diff::Skip));
        let outcome = delete_policy_after_bindings(store, ctx, w, sweep.param_kind()).await;
        if outcome != Outcome::Done {
            return outcome;
        }
    }
    not_needed(ctx.writer, VAP_KIND, &names::policy_name(name));
    // The CRD after the VAP (I2), only if this copy saw the template (a CRD found without its
    // template is reported, never deleted) and the template controls it (`step::crd`).
    let cache = ctx.cache;
    let Some((uid, kind)) = cache.seen_template(name) else {
        return Outcome::Done;
    };
    let Some(o) = known!(store.crd(&crd::crd_name(&kind))) else {
        not_needed(ctx.writer, CRD_KIND, &crd::crd_name(&kind));
        cache.forget_template(name);
        return Outcome::Done;
    };
    let Some(w) = step::crd::delete_of_gone_template(name, &uid, &o, Diff::Skip) else {
        cache.forget_template(name);
        return Outcome::Done;
    };
    let (done, outcome) = send(ctx.writer, Some(&w)).await;
    if done {
        cache.forget_template(name);
    }
    outcome
}

/// Sends `w`, if any: the delete of a VAP, once no binding of `kind` points at it (I2): turning
/// off, once the kind's bindings are gone; turning inline, once they point at their own VAPs.
async fn delete_policy_after_bindings<S: TemplateStore, Q: Enqueue, W: Writer + Sync>(
    store: &S,
    ctx: &Ctx<'_, Q, W>,
    w: Option<PlannedWrite>,
    kind: Option<&str>,
) -> Outcome {
    let Some(w) = w else {
        return Outcome::Done;
    };
    // Wait for constraint reconciles of the kind that are deciding or writing right now.
    let lock = kind.map(|k| ctx.cache.kind_lock(k));
    let _exclusive = futures::future::OptionFuture::from(lock.as_ref().map(|l| l.write())).await;
    if let Some(kind) = kind {
        let mut left = known!(store.bindings_of_kind(kind));
        left.retain(|b| b.policy_name() == w.object.name);
        if !left.is_empty() {
            tracing::debug!(
                policy = w.object.name.as_str(),
                "waiting for {} binding(s) of kind {kind} to be deleted first",
                left.len()
            );
            return Outcome::RequeueAfter(BINDINGS_GONE_RECHECK);
        }
    }
    send(ctx.writer, Some(&w)).await.1
}

/// The constraint side: the binding of constraint `kind/name`, decided from the opinion cache,
/// the constraint, its CRD's readiness and the observed binding. Never the template.
pub async fn reconcile_constraint<S, Q, W>(
    kind: &str,
    name: &str,
    store: &S,
    ctx: &Ctx<'_, Q, W>,
) -> Outcome
where
    S: ConstraintStore + Sync,
    Q: Enqueue + Sync,
    W: Writer + Sync,
{
    let writer = ctx.writer;
    // Shared with other constraints of the kind; excludes the template side's VAP delete.
    let lock = ctx.cache.kind_lock(kind);
    let _shared = lock.read().await;
    let bname = names::binding_name(kind, name);
    let legacy = names::legacy_binding_name(name);
    let inline_policy = names::inline_policy_name(kind, name);
    let mut outcome = Outcome::Done;
    // Everything a decision below rests on, read first: if any of it is unknown, nothing is
    // written for this constraint.
    let legacy_observed = if legacy != bname {
        known!(store.binding(&legacy))
    } else {
        None
    };
    let observed = known!(store.binding(&bname));
    let observed_policy = known!(store.policy(&inline_policy));
    let constraint = known!(store.constraint(kind, name));
    known!(store.opinions_known());
    let served = known!(store.served());
    let crd_state = known!(store.crd_state(kind));

    // What is left under the constraint's names: the legacy name, or its binding once the
    // constraint is gone (no reliance on GC).
    for left in legacy_observed.iter().chain(&observed) {
        if let Some(sweep) = step::sweep_binding(kind, name, left, constraint.as_ref()) {
            outcome = outcome.merge(send(writer, Some(&sweep.write(Diff::Skip))).await.1);
        }
    }
    let Some(c) = constraint else {
        writer.concluded(Concluded::Constraint {
            kind: kind.to_string(),
            name: name.to_string(),
            entry: None,
        });
        // Its own VAP (the inline shape) after its binding (I2).
        if outcome == Outcome::Done
            && let Some(sweep) = observed_policy
                .as_ref()
                .and_then(|p| step::sweep_inline_policy(kind, name, p, None))
        {
            outcome = send(writer, Some(&sweep.write(Diff::Skip))).await.1;
        }
        if outcome == Outcome::Done {
            for (k, n) in [
                (VAPB_KIND, &bname),
                (VAPB_KIND, &legacy),
                (VAP_KIND, &inline_policy),
            ] {
                not_needed(writer, k, n);
            }
        }
        return outcome;
    };
    let opinion = ctx.cache.get(kind);
    let now = store.now();
    let step = step::binding_step(BindingInput {
        constraint: &c,
        opinion: opinion.as_ref(),
        crd: crd_state,
        observed: observed.as_ref(),
        observed_policy: observed_policy.as_ref(),
        opts: ctx.opts,
        served: &served,
        now,
    });
    if let Action::Foreign(why) = &step.action {
        tracing::warn!(binding = %bname, "not touching {bname}: {why}");
        conclude_constraint(writer, &c, &step, &outcome);
        return outcome;
    }
    if opinion.is_none() && ctx.cache.defer_if_cold(&Key::constraint(kind, name)) {
        // The template side may not have reached this kind's template yet: not an orphan.
        return outcome;
    }
    settled(writer, VAPB_KIND, &bname, &step.action);
    settled(writer, VAP_KIND, &inline_policy, &step.policy);
    // The constraint's own VAP (inline shape): written before its binding, deleted after it.
    let policy_write = step.policy_write(Diff::Skip);
    if step.policy_goes_first() {
        let (_, o) = send(writer, policy_write.as_ref()).await;
        if o != Outcome::Done {
            return outcome.merge(o);
        }
    }
    let mut result = match (step.write(Diff::Skip), step.wait_until()) {
        (Some(w), _) => send(writer, Some(&w)).await.1,
        // Never a zero delay: come back just after the deadline.
        (None, Some(until)) => {
            let left = (until - now).to_std().unwrap_or_default();
            Outcome::RequeueAfter(left.max(Duration::from_millis(10)))
        }
        // Waiting for the CRD or the policy: their events (CRD watch, fan-out) bring us back.
        (None, None) => Outcome::Done,
    };
    if !step.policy_goes_first() && result == Outcome::Done {
        result = send(writer, policy_write.as_ref()).await.1;
    }
    let outcome = outcome.merge(result);
    conclude_constraint(writer, &c, &step, &outcome);
    outcome
}

/// Tells the writer what the constraint side concluded about `c` (`Writer::concluded`).
fn conclude_constraint<W: Writer>(
    writer: &W,
    c: &Constraint,
    step: &step::BindingStep<'_>,
    outcome: &Outcome,
) {
    let generation = pod_status::binding_generation(step, &written(outcome));
    writer.concluded(Concluded::Constraint {
        kind: c.kind.clone(),
        name: c.name().to_string(),
        entry: generation.map(|generation| Entry {
            object: Box::new(c.clone()),
            generation,
        }),
    });
}

/// Turns an outcome into queue operations: requeue after a delay, or retry with backoff.
pub fn schedule<Q: Enqueue>(queue: &Q, key: &Key, outcome: &Outcome, attempt: u32) {
    let wait = match outcome {
        // Unknown: parked until the store lists again; refused: the next change tries again.
        Outcome::Done | Outcome::Unknown(_) | Outcome::Refused(_) => return,
        Outcome::RequeueAfter(d) => *d,
        // Never sooner than the server asked (a 429's or 503's Retry-After).
        Outcome::Retry(e) => doubling(Duration::from_millis(100), attempt, Duration::from_secs(30))
            .max(e.retry_after()),
        Outcome::Forbidden(_) => doubling(Duration::from_secs(1), attempt, FORBIDDEN_BACKOFF_MAX),
    };
    queue.enqueue_after(key.clone(), wait);
}

pub const FORBIDDEN_BACKOFF_MAX: Duration = Duration::from_secs(300);

/// `first`, doubled per attempt, capped at `max`. Forbidden writes from 1 s: a grant made right
/// after the refusal is picked up within seconds; one that never comes costs one request per
/// object every 5 minutes.
fn doubling(first: Duration, attempt: u32, max: Duration) -> Duration {
    first.saturating_mul(1 << attempt.min(9)).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::apply::ApplyError;
    use std::sync::Arc;

    /// When `outcome` at `attempt` brings the key back (None: not at all), on the live
    /// queue at tokio's clock (paused by the callers: the time a key waits is exact).
    async fn next(outcome: Outcome, attempt: u32) -> Option<Duration> {
        let q = crate::controller::reconcile::queue::SharedQueue::default();
        let key = Key::Template("t".into());
        let t0 = tokio::time::Instant::now();
        schedule(&q, &key, &outcome, attempt);
        if q.is_empty() {
            return None;
        }
        assert_eq!(q.next().await, key);
        q.done(&key);
        assert!(q.is_empty());
        Some(tokio::time::Instant::now() - t0)
    }

    /// A failure of class `class`: the server answered `status`.
    fn failure(class: fn(Arc<ApplyError>) -> WriteError, status: serde_json::Value) -> WriteError {
        class(Arc::new(ApplyError::Failed {
            what: "create ValidatingAdmissionPolicy/gatekeeper-k8sx".into(),
            source: Box::new(kube::Error::Api(Box::new(
                serde_json::from_value(status).expect("a Status"),
            ))),
        }))
    }

    #[tokio::test(start_paused = true)]
    async fn an_invalid_write_is_not_retried_and_a_forbidden_one_slowly() {
        let code = |code: u16| serde_json::json!({ "code": code, "message": "m" });
        let invalid = failure(WriteError::Invalid, code(422));
        let forbidden = failure(WriteError::Forbidden, code(403));
        let unavailable = failure(WriteError::Failed, code(503));
        let throttled = failure(
            WriteError::Failed,
            serde_json::json!({
                "status": "Failure", "code": 429, "reason": "TooManyRequests",
                "message": "too many requests", "details": { "retryAfterSeconds": 7 }
            }),
        );
        assert_eq!(throttled.retry_after(), Duration::from_secs(7));
        let (secs, ms) = (|s| Some(Duration::from_secs(s)), Duration::from_millis);
        let refused = Outcome::from(invalid.clone());
        assert!(
            matches!(refused, Outcome::Refused(_)),
            "a 422 is refused: {refused:?}"
        );
        // Each class as `Outcome::from` sorts it: its schedule tells which it got.
        for (outcome, attempt, back) in [
            // 422: the server refuses this body whatever happens: only a change brings it back.
            (invalid.into(), 0, None),
            // 403: a grant may come, unannounced: retried from 1 s, doubling, at most every 5 min.
            (forbidden.clone().into(), 0, secs(1)),
            (forbidden.clone().into(), 3, secs(8)),
            (forbidden.clone().into(), 30, secs(300)),
            // What may pass soon (conflict, server away) keeps the fast backoff, capped at 30 s.
            (unavailable.clone().into(), 30, secs(30)),
            (unavailable.into(), 0, Some(ms(100))),
            (Outcome::RequeueAfter(Duration::from_secs(7)), 0, secs(7)),
            // A throttled write (429) comes back no sooner than the server asked, however young
            // its backoff; a later attempt's longer backoff wins over a short Retry-After.
            (throttled.clone().into(), 0, secs(7)),
            (throttled.into(), 30, secs(30)),
        ] {
            let said = format!("{outcome:?} at attempt {attempt}");
            assert_eq!(next(outcome, attempt).await, back, "{said}");
        }
        // A forbidden step of a reconcile is not lost behind one that is done, and keeps its
        // cause.
        let merged = Outcome::Done.merge(Outcome::Forbidden(forbidden));
        assert!(
            matches!(&merged, Outcome::Forbidden(e) if e.cause().to_string().ends_with("(403)")),
            "{merged:?}"
        );
    }
}
