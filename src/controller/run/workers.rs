//! The live workers (`run`, one task each): each reconciles the keys the queue hands out
//! through [`process`], the step the tier-2 tests run too, writing through [`Live`]; and the
//! Warning Event that says why a template or constraint is invalid.

use super::writer::{Live, WriterContext};
use crate::controller::ask::requests::Tracker;
use crate::controller::reconcile::cache::OpinionCache;
use crate::controller::reconcile::keys::Key;
use crate::controller::reconcile::queue::SharedQueue;
use crate::controller::reconcile::reconcilers::Ctx;
use crate::controller::reconcile::worker::process;
use crate::controller::reconcile::world::{ConstraintStore, Read, TemplateStore};
use crate::controller::store::stores::Stores;
use crate::controller::tell::events::Regarding;
use crate::controller::tell::pod_status::PodStatuses;
use crate::core::Options;
use crate::core::decide::{ConstraintIntent, TemplateVerdict, decide_constraint, decide_template};
use crate::core::desired;
use crate::core::scope::Coverage;
use crate::model::Constraint;
use std::sync::Arc;

/// May touch what a live worker uses: its writer's parts (the stores it reads, the fence, the
/// status, the metrics and the Events recorder among them), the queue it takes keys from, the
/// tracker of requests it reports each key to, and the pod statuses it publishes.
pub struct WorkerContext {
    pub writer: WriterContext,
    pub queue: Arc<SharedQueue>,
    pub tracker: Arc<Tracker>,
    pub pod_statuses: Arc<PodStatuses>,
}

/// The leader says, as a Warning Event on the object, why a template or constraint it just
/// reconciled cannot be turned into a VAP or binding (template-error, constraint-error) —
/// once per reason (`events::Recorder::decided`), where `kubectl events --for` looks.
fn report_invalid(ctx: &WriterContext, cache: &OpinionCache, key: &Key, opts: &Options) {
    if !ctx.leadership.fence.may_write() {
        return;
    }
    let (regarding, reason, raw) = match key {
        Key::Template(t) => {
            let Read::Known(Some(tpl)) = ctx.stores.template(t) else {
                return;
            };
            let reason = match decide_template(&tpl, opts) {
                TemplateVerdict::Invalid { reason } => Some(reason),
                _ => None,
            };
            (Regarding::Template(t.clone()), reason, tpl.raw)
        }
        Key::Constraint { kind, name } => {
            let Read::Known(Some(c)) = ctx.stores.constraint(kind, name) else {
                return;
            };
            let reason = match decide_constraint(&c, opts) {
                ConstraintIntent::Invalid { reason } => Some(reason),
                ConstraintIntent::Bind { .. } => cannot_inline(&c, cache, opts),
                ConstraintIntent::NoBinding { .. } => None,
            };
            let (kind, name) = (kind.clone(), name.clone());
            (Regarding::Constraint { kind, name }, reason, c.raw)
        }
    };
    let logged = crate::model::undecodable(&raw).is_some();
    ctx.recorder.decided(regarding, reason, logged);
}

/// Why constraint `c` cannot get the VAP of its own its kind's opinion asks for (the inline
/// shape: parameters past CEL's limits, a VAP too large to store); `None` in the other shapes.
/// Under `auto` its template is narrowed instead (`core::shape`), so this is
/// `--policy-shape inline`'s case.
fn cannot_inline(c: &Constraint, cache: &OpinionCache, opts: &Options) -> Option<String> {
    let opinion = cache.get(&c.kind)?;
    let body = opinion.body.as_ref()?;
    desired::inline_policy(c, body, &Coverage::default(), opts).err()
}

/// A live worker, until the copy stops (its task is aborted): reconciles each key
/// [`SharedQueue::next`](crate::controller::reconcile::queue::SharedQueue::next) hands out and
/// tells the metrics, requests and status what it did.
pub(super) async fn run(ctx: WorkerContext, cache: Arc<OpinionCache>, opts: Options) {
    let stores: &Stores = &ctx.writer.stores;
    // The flags' options with Gatekeeper's Config and webhook applied, recomputed on a change.
    let (mut seen, mut merged) = (None, opts.clone());
    loop {
        let key = ctx.queue.next().await;
        let (c, w) = (stores.gatekeeper_configs(), stores.gatekeeper_webhooks());
        if !seen
            .as_ref()
            .is_some_and(|(sc, sw)| Arc::ptr_eq(sc, &c) && Arc::ptr_eq(sw, &w))
        {
            merged = opts.with_gatekeeper_config(&c).with_gatekeeper_webhook(&w);
            seen = Some((c, w));
        }
        let writer = Live {
            ctx: &ctx.writer,
            key: key.clone(),
            writes: Default::default(),
            failures: Default::default(),
            concluded: Default::default(),
        };
        let reconcile = Ctx {
            cache: &cache,
            queue: &*ctx.queue,
            opts: &merged,
            writer: &writer,
        };
        let p = process(key, stores, &reconcile).await;
        ctx.writer.metrics.reconciled();
        let (writes, failures) = (writer.writes.into_inner(), writer.failures.into_inner());
        ctx.tracker
            .processed(&p.key, p.started, &p.outcome, writes, failures);
        report_invalid(&ctx.writer, &cache, &p.key, &merged);
        let concluded = writer.concluded.into_inner().unwrap_or_default();
        if ctx.writer.status.writes_enabled() {
            for c in concluded {
                let fence = &ctx.writer.leadership.fence;
                ctx.pod_statuses.publish(fence, c).await;
            }
        }
        ctx.writer.status.touch();
    }
}
