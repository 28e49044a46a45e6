//! Requests (the TUI's `p`/`r`/`R`, the one-shot `replay`/`reconcile`) as this copy handles
//! them: here when it leads, through the lease holder otherwise (`channel.rs` has the
//! channel); and the holder's side of that channel.

use crate::controller::ask::channel::{
    self, Answers, Batch, Desk, MAX_RUNNING, PRUNE_EVERY, Published,
};
use crate::controller::ask::requests::Tracker;
use crate::controller::error::{Error, RequestError};
use crate::controller::reconcile::keys::Key;
use crate::controller::reconcile::queue::SharedQueue;
use crate::controller::reconcile::world::{ConstraintStore, Enqueue, Read, TemplateStore};
use crate::controller::store::stores::Stores;
use crate::controller::tell::events::{Outgoing, Recorder, Regarding};
use crate::controller::tell::metrics::Metrics;
use crate::controller::tell::outage::SUMMARY_EVERY;
use crate::controller::view::fence::{Fence, Leadership};
use crate::controller::view::state::{
    Command, EventReason, EventResult, EventVerb, LeaseInfo, ReconcileEvent, RequestOutcome,
};
use crate::controller::view::status::Status;
use crate::model::ObjectRef;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use std::collections::BTreeSet;
use std::sync::Arc;
use tokio::sync::watch;

/// Where requests go: this copy's identity and the Lease whose holder handles them.
#[derive(Debug, Clone)]
pub struct Route {
    pub identity: String,
    pub lease_namespace: String,
    pub lease_name: String,
    /// This copy leads for one request only ([`crate::controller::Config::one_shot`]).
    pub one_shot: bool,
}

/// May touch what handling a request uses: the client (asking the holder, the requests
/// ConfigMap), the stores (the keys a command concerns), the queue (they are enqueued), the
/// tracker (until each is reconciled), the status (the event log; whether this copy writes),
/// the Events recorder, the metrics (a one-shot's writes), the leadership (whether this copy
/// leads and serves) and the answers it publishes.
#[derive(Clone)]
pub struct RequestContext {
    pub client: kube::Client,
    pub stores: Arc<Stores>,
    pub queue: Arc<SharedQueue>,
    pub tracker: Arc<Tracker>,
    pub status: Arc<Status>,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    pub leadership: Arc<Leadership>,
    pub answers: Arc<Answers>,
}

impl RequestContext {
    /// Whether this copy may write now: it leads within its fence, and writes are enabled.
    fn may_write(&self) -> bool {
        self.leadership.fence.may_write() && self.status.writes_enabled()
    }
}

/// The keys `command` concerns, from the local stores (each template read once): a template's
/// own (reconcile only) and its kind's constraints.
fn keys_of(stores: &Stores, command: &Command) -> Result<Vec<Key>, Error> {
    let constraints = |kind: &str| {
        let names = stores.constraint_names(kind).into_iter();
        names.map(|n| Key::constraint(kind, n)).collect::<Vec<_>>()
    };
    match command {
        Command::ReconcileAll => Ok(stores.all_keys()),
        Command::Replay(t) => match stores.template(t) {
            Read::Known(Some(tpl)) => match tpl.kind {
                Some(kind) => Ok(constraints(&kind)),
                None => Err(Error::NoKind(t.clone())),
            },
            Read::Known(None) => Err(not_found(stores, t)),
            Read::Unknown(u) => Err(RequestError::NotListed(u).into()),
        },
        Command::Reconcile(t) => {
            let read = stores.template(t);
            // A template that is gone still has its key: reconciling it sweeps its VAP. With
            // neither (a typo) there is nothing to reconcile: not found, and no Event saying
            // otherwise.
            let policy = || stores.policy(&crate::core::names::policy_name(t));
            if read == Read::Known(None) && policy() == Read::Known(None) {
                return Err(not_found(stores, t));
            }
            let mut keys = vec![Key::Template(t.clone())];
            // A reconcile only enqueues: an unknown store just means no constraint keys here.
            if let Read::Known(Some(tpl)) = read
                && let Some(kind) = tpl.kind
            {
                keys.extend(constraints(&kind));
            }
            Ok(keys)
        }
    }
}

/// Handles `command` (request `id`) on this copy, which leads: enqueues its keys and waits
/// until each has been reconciled; logs the outcome and reports it as a Kubernetes Event,
/// both carrying `id`.
pub async fn handle_here(
    ctx: &RequestContext,
    route: &Route,
    id: &str,
    command: Command,
) -> Result<RequestOutcome, Error> {
    let (verb, _) = channel::wire(&command);
    let (regarding, object) = match &command {
        Command::Replay(t) | Command::Reconcile(t) => (
            Regarding::Template(t.clone()),
            ObjectRef::new("templates.gatekeeper.sh/v1", "ConstraintTemplate", t),
        ),
        Command::ReconcileAll => (
            Regarding::Lease {
                namespace: route.lease_namespace.clone(),
                name: route.lease_name.clone(),
            },
            ObjectRef::new("", "All", "*"),
        ),
    };
    let mut keys = keys_of(&ctx.stores, &command).inspect_err(|e| {
        let e = EventResult::Failed(e.to_string());
        ctx.status.log(verb, object.clone(), e, String::new());
    })?;
    // Scoped copies (a one-shot of one template) leave other keys alone: not waited for.
    keys.retain(|k| ctx.queue.scope().contains(k));
    let outcome = ctx.tracker.begin(&keys);
    for k in keys {
        ctx.queue.enqueue(k);
    }
    let mut t = outcome.await.map_err(|_| Error::Stopped)?;
    if route.one_shot {
        whole_lead(ctx, &mut t);
    }
    let summary = crate::controller::ask::requests::summary(&command, &t);
    ctx.status.record(ReconcileEvent {
        time: chrono::Utc::now(),
        verb,
        object,
        result: EventResult::Ok,
        message: summary.clone(),
        request: Some(id.to_string()),
    });
    ctx.recorder.publish(Outgoing {
        regarding,
        reason: match verb {
            EventVerb::Replay => EventReason::Replayed,
            _ => EventReason::Reconciled,
        },
        action: "Request",
        note: summary.clone(),
        warning: t.failures > 0 || t.refused > 0,
        request: Some(id.to_string()),
    });
    Ok(RequestOutcome {
        id: id.to_string(),
        handled_by: route.identity.clone(),
        summary,
        writes: t.writes,
        failures: t.failures,
        refused: t.refused,
        keys: t.keys,
    })
}

/// A one-shot copy's request, counted over everything the copy did: gaining the Lease
/// reconciled the request's scope before the request's own keys came round (so it found them
/// in sync: "0 writes" while the copy had written). Writes are those the server accepted from
/// this copy; failures and refusals count objects, once each however often retried.
fn whole_lead(ctx: &RequestContext, t: &mut crate::controller::ask::requests::Tallied) {
    let (mut failed, mut refused) = (BTreeSet::new(), BTreeSet::new());
    for e in ctx.status.events() {
        // This copy's own actions: another request it handled meanwhile (one left by the last
        // holder) has its own outcome, answered to its own asker.
        if matches!(
            e.verb,
            EventVerb::Replay | EventVerb::Reconcile | EventVerb::ReconcileAll
        ) {
            continue;
        }
        if e.result.is_failure() {
            failed.insert(e.object.id());
        }
        if let EventResult::WriteFailed(crate::controller::view::state::WriteError::Invalid(_)) =
            e.result
        {
            refused.insert(e.object.id());
        }
    }
    t.writes = ctx.metrics.writes_total();
    t.failures = failed.len() as u64;
    t.refused = refused.len();
}

/// Handles `command` wherever it can be: here when this copy leads, otherwise by the lease
/// holder through the requests ConfigMap; an error when nobody holds the Lease.
pub async fn handle(
    ctx: &RequestContext,
    route: &Route,
    view: &watch::Receiver<LeaseInfo>,
    command: Command,
) -> Result<RequestOutcome, Error> {
    if ctx.may_write() {
        let id = channel::request_id(&route.identity);
        return handle_here(ctx, route, &id, command).await;
    }
    let v = view.borrow().clone();
    let lease = format!("{}/{}", route.lease_namespace, route.lease_name);
    match (v.holder, v.unreadable) {
        (Some(h), _) if h == route.identity => Err(RequestError::MayNotWrite.into()),
        (Some(h), _) if !v.vacant => {
            tracing::info!("asking the lease holder {}", channel::said(&h, 253));
            channel::ask(
                &ctx.client,
                &route.lease_namespace,
                &route.lease_name,
                &command,
                &route.identity,
            )
            .await
        }
        (None, Some(why)) => Err(Error::LeaseUnreadable { lease, why }),
        _ => Err(Error::NoLeader { lease }),
    }
}

/// The holder's side of the requests channel (`channel.rs`): requests handled at most
/// [`MAX_RUNNING`] commands at once, removed with one fenced patch per [`PRUNE_EVERY`] at most.
pub async fn serve(ctx: RequestContext, route: Route) {
    use futures::StreamExt;
    let name = channel::configmap_name(&route.lease_name);
    let configmap = format!("{}/{name}", route.lease_namespace);
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &route.lease_namespace);
    let mut leading = ctx.leadership.subscribe();
    // The batches in progress, kept across terms: aborted with this task when the copy stops.
    let mut running = tokio::task::JoinSet::new();
    loop {
        // Only the holder serves: the others wait for leadership (an earlier term's batches
        // finish meanwhile).
        loop {
            tokio::select! {
                led = leading.wait_for(|l| *l) => if led.is_ok() { break } else { return },
                Some(end) = running.join_next() => rethrow(end),
            }
        }
        let what = format!("ConfigMap {configmap}");
        let mut stream = crate::cluster::watch::object(api.clone(), &name, what);
        let mut desk = Desk::after(ctx.answers.answered_before());
        let mut pruning = Pruning::default();
        let mut tick = tokio::time::interval(PRUNE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            while running.len() < MAX_RUNNING
                && let Some(batch) = desk.next()
            {
                running.spawn(handle_batch(ctx.clone(), route.clone(), batch));
            }
            for refused in desk.refused() {
                ctx.answers.publish(refused);
            }
            tokio::select! {
                item = stream.next() => match item {
                    Some(Ok(Some(cm))) => desk.read(&cm.data.unwrap_or_default(), chrono::Utc::now()),
                    // Gone (deleted by hand, or never created): without it no request can
                    // reach this copy while `/readyz` says it serves, so the holder puts it
                    // back (the election created it on gaining the Lease; this is every time
                    // after). Only while the fence is open: a copy that lost the Lease leaves
                    // it to the next holder.
                    Some(Ok(None)) => {
                        if ctx.leadership.fence.may_write() {
                            channel::ensure_configmap(
                                &ctx.client,
                                &route.lease_namespace,
                                &route.lease_name,
                            )
                            .await;
                        }
                    }
                    // Failing: logged by the watch, retried with its backoff.
                    Some(Err(_)) => {}
                    None => break,
                },
                Some(end) = running.join_next(), if !running.is_empty() => rethrow(end),
                _ = tick.tick() => pruning.prune(&ctx.leadership.fence, &api, &configmap, &mut desk).await,
                r = leading.changed() => {
                    if r.is_ok() && *leading.borrow_and_update() { continue } else { break }
                }
            }
        }
        // What is in progress finishes on its own (its answer is not published once this copy
        // no longer leads); a new term starts with a fresh desk.
    }
}

/// A batch's panic is its server's: the copy's supervisor sees it.
fn rethrow(end: Result<(), tokio::task::JoinError>) {
    if let Err(e) = end
        && e.is_panic()
    {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// Handles a batch, and publishes its answer to every request of it in the Lease.
async fn handle_batch(ctx: RequestContext, route: Route, batch: Batch) {
    let Batch { command, asked } = batch;
    let (verb, template) = channel::wire(&command);
    // The Event and the log line carry the first request's id (a batch has one at least):
    // that asker pairs the answer with the Event; a coalesced asker sees both.
    let (id, by) = asked.first().cloned().unwrap_or_default();
    tracing::info!(
        "handling {} for {} request(s) (request {id}, asked by {by}{})",
        channel::said_command(verb.as_str(), template),
        asked.len(),
        if asked.len() > 1 { ", and others" } else { "" }
    );
    let result = handle_here(&ctx, &route, &id, command.clone()).await;
    if !ctx.leadership.fence.may_write() {
        tracing::info!(
            "not leading any more: not answering {} request(s)",
            asked.len()
        );
        return;
    }
    let ids = asked.into_iter().map(|(id, _)| id).collect();
    let answer = Published::of(ids, &command, &result);
    ctx.answers.publish(answer);
}

/// The holder's writes to the ConfigMap: what the desk read, removed; what it ignored, said at
/// most once per [`SUMMARY_EVERY`]; a failing patch said once until one passes.
#[derive(Default)]
struct Pruning {
    last_said: Option<std::time::Instant>,
    failing: bool,
}

impl Pruning {
    async fn prune(
        &mut self,
        fence: &Fence,
        api: &Api<ConfigMap>,
        configmap: &str,
        desk: &mut Desk,
    ) {
        if self.last_said.is_none_or(|t| t.elapsed() >= SUMMARY_EVERY)
            && let Some(ignored) = desk.ignored()
        {
            self.last_said = Some(std::time::Instant::now());
            tracing::warn!(
                "ignored and removed entries of ConfigMap {configmap}: {ignored} (said at most every {}s)",
                SUMMARY_EVERY.as_secs()
            );
        }
        let keys = desk.take_prune();
        if keys.is_empty() {
            return;
        }
        // Fenced like every write, and its answer awaited no longer than the fence allows.
        let Some(left) = fence.remaining() else {
            desk.unpruned(keys);
            return;
        };
        let patch = channel::prune_patch(&keys);
        let name = configmap.rsplit('/').next().unwrap_or(configmap);
        let (params, patch) = (PatchParams::default(), Patch::Merge(&patch));
        let sent = api.patch(name, &params, &patch);
        let failure = match tokio::time::timeout(left, sent).await {
            Ok(Ok(_)) => None,
            // Gone: nothing left to remove.
            Ok(Err(e)) if crate::cluster::status_code(&e) == Some(404) => None,
            Ok(Err(e)) => Some(crate::cluster::describe(&e)),
            Err(_) => Some(format!(
                "no answer within {:.1}s, before the write fence closed",
                left.as_secs_f32()
            )),
        };
        match failure {
            None if std::mem::take(&mut self.failing) => {
                tracing::info!("removing read requests from ConfigMap {configmap} works again");
            }
            None => {}
            Some(why) => {
                desk.unpruned(keys);
                if !std::mem::replace(&mut self.failing, true) {
                    tracing::warn!(
                        "removing read requests from ConfigMap {configmap}: {why}; retried every {}s (not logged again until it passes)",
                        PRUNE_EVERY.as_secs()
                    );
                }
            }
        }
    }
}

/// Template `name` is not there: said with a close name the cluster has, if one is.
fn not_found(stores: &Stores, name: &str) -> Error {
    let names = stores.template_names();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    Error::NotFound {
        name: name.to_string(),
        hint: crate::text::did_you_mean_text(name, &names),
    }
}
