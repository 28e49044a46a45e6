//! Requests (the TUI's `p`/`r`/`R`, the one-shot `replay`/`reconcile`) as this copy handles
//! them: here when it leads, through the lease holder otherwise (`requests.rs` has the
//! channel); and the holder's side of that channel.

use super::events::{Outgoing, Regarding};
use super::keys::Key;
use super::lease::HolderView;
use super::requests::{self, Answer, REQUEST_DEADLINE};
use super::shared::Shared;
use super::state::{Command, EventResult, EventVerb, RequestOutcome};
use super::tasks::Lifetime;
use super::world::{ConstraintStore, Enqueue, Read, TemplateStore};
use super::{Error, RequestError};
use crate::model::ObjectRef;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Where requests go: this copy's identity and the Lease whose holder handles them.
#[derive(Debug, Clone)]
pub struct Route {
    pub identity: String,
    pub lease_namespace: String,
    pub lease_name: String,
    /// This copy leads for one request only ([`super::Config::one_shot`]).
    pub one_shot: bool,
}

fn template_ref(name: &str) -> ObjectRef {
    ObjectRef::new("templates.gatekeeper.sh/v1", "ConstraintTemplate", name)
}

fn verb_of(c: &Command) -> EventVerb {
    match c {
        Command::Replay(_) => EventVerb::Replay,
        Command::Reconcile(_) => EventVerb::Reconcile,
        Command::ReconcileAll => EventVerb::ReconcileAll,
    }
}

/// The keys `command` concerns, from the local stores.
fn keys_of(shared: &Shared, command: &Command) -> Result<Vec<Key>, Error> {
    match command {
        Command::Replay(t) => match shared.stores.template(t) {
            Read::Known(Some(tpl)) if tpl.kind.is_some() => Ok(keys_of_template(shared, t, false)),
            Read::Known(Some(_)) => Err(Error::NoKind(t.clone())),
            Read::Known(None) => Err(Error::NotFound(t.clone())),
            Read::Unknown(u) => Err(RequestError::NotListed(u).into()),
        },
        // A template that is gone still has its key: reconciling it sweeps its VAP. With
        // neither (a typo) there is nothing to reconcile: not found, and no Event saying
        // otherwise.
        Command::Reconcile(t) => {
            let policy = crate::core::names::policy_name(t);
            match (shared.stores.template(t), shared.stores.policy(&policy)) {
                (Read::Known(None), Read::Known(None)) => Err(Error::NotFound(t.clone())),
                _ => Ok(keys_of_template(shared, t, true)),
            }
        }
        Command::ReconcileAll => Ok(shared.stores.all_keys()),
    }
}

/// Handles `command` on this copy, which leads: enqueues its keys and waits until each has
/// been reconciled; logs the outcome and reports it as a Kubernetes Event.
pub async fn handle_here(
    shared: &Shared,
    route: &Route,
    command: Command,
) -> Result<RequestOutcome, Error> {
    let verb = verb_of(&command);
    let regarding = match &command {
        Command::Replay(t) | Command::Reconcile(t) => Regarding::Template(t.clone()),
        Command::ReconcileAll => Regarding::Lease {
            namespace: route.lease_namespace.clone(),
            name: route.lease_name.clone(),
        },
    };
    let object = match &command {
        Command::Replay(t) | Command::Reconcile(t) => template_ref(t),
        Command::ReconcileAll => ObjectRef::new("", "All", "*"),
    };
    let keys = match keys_of(shared, &command) {
        Ok(keys) => keys,
        Err(e) => {
            shared.status.log(
                verb,
                object,
                EventResult::Failed(e.to_string()),
                String::new(),
            );
            return Err(e);
        }
    };
    // Scoped copies (a one-shot of one template) leave other keys alone: not waited for.
    let keys: Vec<Key> = keys
        .into_iter()
        .filter(|k| shared.queue.scope().contains(k))
        .collect();
    let outcome = shared.tracker.begin(command.clone(), &keys);
    for k in keys {
        shared.queue.enqueue(k);
    }
    let tallied = outcome.await.map_err(|_| Error::Stopped)?;
    let super::requests::Tallied {
        writes,
        failures,
        refused,
        keys,
        summary,
        ..
    } = if route.one_shot {
        whole_lead(shared, &command, tallied)
    } else {
        tallied
    };
    shared
        .status
        .log(verb, object, EventResult::Ok, summary.clone());
    shared.recorder.publish(Outgoing {
        regarding,
        reason: match verb {
            EventVerb::Replay => "Replayed",
            _ => "Reconciled",
        },
        action: "Request",
        note: summary.clone(),
        warning: failures > 0 || refused > 0,
    });
    Ok(RequestOutcome {
        handled_by: route.identity.clone(),
        summary,
        writes,
        failures,
        refused,
        keys,
    })
}

/// A one-shot copy's request, counted over everything the copy did: gaining the Lease
/// reconciled the request's scope before the request's own keys came round (so it found them
/// in sync: "0 writes" while the copy had written). Writes are those the server accepted from
/// this copy; failures and refusals count objects, once each however often retried.
fn whole_lead(
    shared: &Shared,
    command: &Command,
    t: super::requests::Tallied,
) -> super::requests::Tallied {
    let events = shared.status.events();
    let failed: std::collections::BTreeSet<String> = events
        .iter()
        .filter(|e| e.result.is_failure())
        .map(|e| e.object.to_string())
        .collect();
    let refused = events
        .iter()
        .filter(|e| {
            matches!(
                &e.result,
                EventResult::WriteFailed(super::state::WriteError::Invalid(_))
            )
        })
        .map(|e| e.object.to_string())
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    let writes = shared.metrics.writes_total();
    let failures = failed.len() as u64;
    super::requests::Tallied {
        summary: super::requests::summary(
            command,
            t.keys,
            writes,
            failures,
            refused,
            t.waiting,
            t.unfinished,
        ),
        writes,
        failures,
        refused,
        ..t
    }
}

/// Handles `command` wherever it can be: here when this copy leads, otherwise by the lease
/// holder through the requests ConfigMap; an error when nobody holds the Lease.
pub async fn handle(
    shared: &Shared,
    route: &Route,
    view: &watch::Receiver<HolderView>,
    command: Command,
) -> Result<RequestOutcome, Error> {
    if shared.may_write() {
        return handle_here(shared, route, command).await;
    }
    let v = view.borrow().clone();
    match (v.holder, v.unreadable) {
        (Some(h), _) if h == route.identity => Err(RequestError::MayNotWrite.into()),
        (Some(h), _) if !v.vacant => {
            tracing::info!("asking the lease holder {h}");
            requests::ask(
                &shared.client,
                &route.lease_namespace,
                &route.lease_name,
                &command,
                &route.identity,
                REQUEST_DEADLINE + Duration::from_secs(15),
            )
            .await
        }
        (None, Some(why)) => Err(Error::LeaseUnreadable {
            lease: format!("{}/{}", route.lease_namespace, route.lease_name),
            why,
        }),
        _ => Err(Error::NoLeader {
            lease: format!("{}/{}", route.lease_namespace, route.lease_name),
        }),
    }
}

/// The holder's side of the requests ConfigMap: while this copy leads, every request written
/// there is handled here and answered there.
pub async fn serve(shared: Arc<Shared>, route: Route) {
    use futures::StreamExt;
    let name = requests::configmap_name(&route.lease_name);
    let api: Api<ConfigMap> = Api::namespaced(shared.client.clone(), &route.lease_namespace);
    let in_progress: Arc<Mutex<HashSet<String>>> = Arc::default();
    let mut leading = shared.leadership.subscribe();
    loop {
        // Only the holder serves: the others wait for leadership.
        if leading.wait_for(|l| *l).await.is_err() {
            return;
        }
        let what = format!("ConfigMap {}/{name}", route.lease_namespace);
        let mut stream = crate::cluster::watch::object(api.clone(), &name, what);
        loop {
            let item = tokio::select! {
                item = stream.next() => item,
                r = leading.changed() => {
                    if r.is_ok() && *leading.borrow_and_update() { continue } else { break }
                }
            };
            let cm = match item {
                Some(Ok(Some(cm))) => cm,
                Some(Ok(None)) => continue,
                // Logged by the watch, retried with its backoff.
                Some(Err(_)) => continue,
                None => break,
            };
            let data = cm.data.unwrap_or_default();
            // Handled ids are kept while their request is in the ConfigMap: an event that
            // predates the answer must not handle it again.
            in_progress
                .lock()
                .retain(|id| data.contains_key(&format!("request.{id}")));
            for (id, asked) in requests::unanswered(&data) {
                if !in_progress.lock().insert(id.clone()) {
                    continue;
                }
                let stale = requests::stale(&data, chrono::Utc::now(), requests::KEEP_ANSWERED);
                let (shared, route, api, name) =
                    (shared.clone(), route.clone(), api.clone(), name.clone());
                let task = format!("request {id}");
                let world = shared.clone();
                world.tasks.spawn(task, Lifetime::Job, async move {
                    tracing::info!(request = %id, by = %asked.by, "handling a request: {} {}", asked.command, asked.template.as_deref().unwrap_or(""));
                    let result = match asked.command() {
                        Some(c) => handle_here(&shared, &route, c).await,
                        None => Err(RequestError::Unknown(asked.command.clone()).into()),
                    };
                    let answer = match result {
                        Ok(o) => Answer {
                            handled_by: o.handled_by,
                            handled_at: now(),
                            summary: o.summary,
                            writes: o.writes,
                            failures: o.failures,
                            refused: o.refused,
                            keys: o.keys,
                            error: None,
                        },
                        Err(e) => Answer {
                            handled_by: route.identity.clone(),
                            handled_at: now(),
                            summary: String::new(),
                            writes: 0,
                            failures: 0,
                            refused: 0,
                            keys: 0,
                            error: Some(e.to_string()),
                        },
                    };
                    // Fenced like every write: a holder that lost the Lease meanwhile leaves
                    // the request to the next one.
                    if !shared.leadership.may_write() {
                        tracing::info!(request = %id, "not leading any more: not answering");
                        return;
                    }
                    if let Err(e) = requests::answer(&api, &name, &id, &answer, &stale).await {
                        tracing::warn!(
                            "answering request {id} in ConfigMap {name}: {}",
                            crate::cluster::describe(&e)
                        );
                    }
                });
            }
        }
    }
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The keys of a command: the template's (reconcile only) and its kind's constraints.
pub fn keys_of_template(shared: &Shared, template: &str, with_template: bool) -> Vec<Key> {
    let mut keys = Vec::new();
    if with_template {
        keys.push(Key::Template(template.to_string()));
    }
    // A command only enqueues: an unknown store just means no constraint keys here.
    if let Read::Known(Some(t)) = shared.stores.template(template)
        && let Some(kind) = t.kind
    {
        keys.extend(
            shared
                .stores
                .constraint_names(&kind)
                .into_iter()
                .map(|n| Key::constraint(&kind, n)),
        );
    }
    keys
}
