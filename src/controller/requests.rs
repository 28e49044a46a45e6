//! Requests — replay a template's constraints, reconcile a template, reconcile everything —
//! from any copy to the lease holder, wherever it runs, and their outcomes.
//!
//! - **Here** (this copy leads): the request's keys are enqueued and tracked ([`Tracker`]);
//!   once each has been reconciled after the request came in, its writes and failures are
//!   counted into the outcome ("replayed 25 constraints of K8sX: 2 writes"), which also
//!   becomes a Kubernetes Event regarding the template.
//! - **Elsewhere**: the asker adds a `request.<id>` entry to the ConfigMap `<lease>-requests`
//!   in the Lease's namespace; the holder watches that ConfigMap, handles the request as
//!   above and answers with a `result.<id>` entry, which the asker is watching for. This is
//!   Flux's `reconcile.fluxcd.io/requestedAt` convention (ask by writing a token, the
//!   controller echoes what it handled) on an object we own instead of the user's templates
//!   (annotating a ConstraintTemplate would be GitOps drift and contend with Gatekeeper's
//!   status writer, #3982), with one entry per request so that two people asking at once do
//!   not overwrite each other. Entries are merge-patched (no resourceVersion, no conflicts),
//!   and the holder prunes answered ones after [`KEEP_ANSWERED`]. An asker needs `get`,
//!   `watch` and `patch` on that one ConfigMap (`install --print` prints the ClusterRole).

use super::keys::Key;
use super::reconcilers::Outcome;
use super::state::{Command, RequestOutcome};
use super::{Error, RequestError};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How long a request waits for its keys before it reports what it has.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(60);
/// How long an answered request stays in the ConfigMap.
pub const KEEP_ANSWERED: Duration = Duration::from_secs(10 * 60);

/// The requests ConfigMap of Lease `lease`.
pub fn configmap_name(lease: &str) -> String {
    format!("{lease}-requests")
}

// ---- requests handled here ----

struct Pending {
    command: Command,
    begun: Instant,
    /// Keys not reconciled since the request came in.
    left: HashSet<Key>,
    total: usize,
    writes: u64,
    failures: u64,
    /// Keys whose write the API server refused (422): not retried, a failure to report.
    refused: HashSet<Key>,
    /// Keys that came back for later (the binding wait).
    waiting: HashSet<Key>,
    /// Keys whose last reconcile must be retried.
    retrying: HashSet<Key>,
    reply: oneshot::Sender<Tallied>,
}

/// What a request did when it is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tallied {
    pub writes: u64,
    pub failures: u64,
    /// Keys whose write the API server refused.
    pub refused: usize,
    /// Keys the request concerned.
    pub keys: usize,
    /// Keys waiting (the binding wait), and keys not finished by the deadline.
    pub waiting: usize,
    pub unfinished: usize,
    pub summary: String,
}

/// Requests in progress on this copy.
#[derive(Default)]
pub struct Tracker {
    pending: Mutex<Vec<Pending>>,
}

impl Tracker {
    /// Tracks `keys` for `command`; the receiver gets (writes, failures, summary) once each
    /// key has been reconciled (or at [`Tracker::expire`]).
    pub fn begin(&self, command: Command, keys: &[Key]) -> oneshot::Receiver<Tallied> {
        let (reply, rx) = oneshot::channel();
        let p = Pending {
            command,
            begun: Instant::now(),
            left: keys.iter().cloned().collect(),
            total: keys.len(),
            writes: 0,
            failures: 0,
            refused: HashSet::new(),
            waiting: HashSet::new(),
            retrying: HashSet::new(),
            reply,
        };
        if p.left.is_empty() {
            p.finish();
        } else {
            self.pending.lock().push(p);
        }
        rx
    }

    /// A reconcile of `key`, started at `started`, ended with `outcome` after `writes` writes
    /// and `failures` failed ones.
    pub fn processed(
        &self,
        key: &Key,
        started: Instant,
        outcome: &Outcome,
        writes: u64,
        failures: u64,
    ) {
        let mut pending = self.pending.lock();
        if pending.is_empty() {
            return;
        }
        let mut done = Vec::new();
        for (i, p) in pending.iter_mut().enumerate() {
            // A reconcile that began before the request read older state: it does not count.
            if started < p.begun || !(p.left.contains(key) || p.retrying.contains(key)) {
                continue;
            }
            p.writes += writes;
            p.failures += failures;
            match outcome {
                Outcome::Retry(_) | Outcome::Forbidden(_) => {
                    p.retrying.insert(key.clone());
                }
                Outcome::RequeueAfter(_) => {
                    p.retrying.remove(key);
                    p.waiting.insert(key.clone());
                }
                Outcome::Refused(_) => {
                    p.retrying.remove(key);
                    p.refused.insert(key.clone());
                }
                Outcome::Done | Outcome::Unknown(_) => {
                    p.retrying.remove(key);
                }
            }
            p.left.remove(key);
            if p.left.is_empty() && p.retrying.is_empty() {
                done.push(i);
            }
        }
        for i in done.into_iter().rev() {
            pending.remove(i).finish();
        }
    }

    /// Answers the requests older than `deadline` with what they have.
    pub fn expire(&self, deadline: Duration) {
        let mut pending = self.pending.lock();
        let (old, young): (Vec<Pending>, Vec<Pending>) = pending
            .drain(..)
            .partition(|p| p.begun.elapsed() >= deadline);
        *pending = young;
        drop(pending);
        old.into_iter().for_each(Pending::finish);
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.pending.lock().is_empty()
    }
}

impl Pending {
    fn finish(self) {
        let summary = summary(
            &self.command,
            self.total,
            self.writes,
            self.failures,
            self.refused.len(),
            self.waiting.len(),
            self.left.len() + self.retrying.len(),
        );
        let _ = self.reply.send(Tallied {
            writes: self.writes,
            failures: self.failures,
            refused: self.refused.len(),
            keys: self.total,
            waiting: self.waiting.len(),
            unfinished: self.left.len() + self.retrying.len(),
            summary,
        });
    }
}

/// "replayed 25 constraints of k8sx: 2 writes, 1 write refused by the API server, 1 failed,
/// 3 waiting (binding wait)". A request that wrote nothing because its writes were refused
/// never reads "0 writes".
pub fn summary(
    command: &Command,
    total: usize,
    writes: u64,
    failures: u64,
    refused: usize,
    waiting: usize,
    unfinished: usize,
) -> String {
    let plural = |n: usize, one: &str, many: &str| {
        if n == 1 {
            format!("1 {one}")
        } else {
            format!("{n} {many}")
        }
    };
    let what = match command {
        Command::Replay(t) => format!(
            "replayed {} of template {t}",
            plural(total, "constraint", "constraints")
        ),
        Command::Reconcile(t) => format!(
            "reconciled template {t} and {}",
            plural(total.saturating_sub(1), "constraint", "constraints")
        ),
        Command::ReconcileAll => {
            format!("reconciled everything ({})", plural(total, "item", "items"))
        }
    };
    let mut parts = Vec::new();
    if writes > 0 || (failures == 0 && refused == 0) {
        parts.push(plural(
            usize::try_from(writes).unwrap_or(usize::MAX),
            "write",
            "writes",
        ));
    }
    // A refused key refused one write (a refusal ends its reconcile); the other failed
    // writes beside them.
    if refused > 0 {
        parts.push(format!(
            "{} refused by the API server",
            plural(refused, "write", "writes")
        ));
    }
    let other = failures.saturating_sub(refused as u64);
    if other > 0 {
        parts.push(format!("{other} failed"));
    }
    let mut out = format!("{what}: {}", parts.join(", "));
    if waiting > 0 {
        out.push_str(&format!(", {waiting} waiting (binding wait)"));
    }
    if unfinished > 0 {
        out.push_str(&format!(
            ", {unfinished} not finished within {}s",
            REQUEST_DEADLINE.as_secs()
        ));
    }
    out
}

// ---- requests sent elsewhere ----

/// A request as it is written into the ConfigMap.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Asked {
    /// `replay`, `reconcile` or `reconcile-all`.
    pub command: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// The asking copy's identity.
    pub by: String,
    pub requested_at: String,
}

/// An answer as it is written into the ConfigMap.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    pub handled_by: String,
    pub handled_at: String,
    pub summary: String,
    pub writes: u64,
    pub failures: u64,
    /// Keys whose write the API server refused (absent from an older holder).
    #[serde(default)]
    pub refused: usize,
    /// Keys the request concerned (absent from an older holder).
    #[serde(default)]
    pub keys: usize,
    /// The request could not be handled (its template does not exist, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Asked {
    pub fn new(command: &Command, by: &str) -> Self {
        let (command, template) = match command {
            Command::Replay(t) => ("replay", Some(t.clone())),
            Command::Reconcile(t) => ("reconcile", Some(t.clone())),
            Command::ReconcileAll => ("reconcile-all", None),
        };
        Asked {
            command: command.into(),
            template,
            by: by.into(),
            requested_at: now_rfc3339(),
        }
    }

    pub fn command(&self) -> Option<Command> {
        match (self.command.as_str(), &self.template) {
            ("replay", Some(t)) => Some(Command::Replay(t.clone())),
            ("reconcile", Some(t)) => Some(Command::Reconcile(t.clone())),
            ("reconcile-all", _) => Some(Command::ReconcileAll),
            _ => None,
        }
    }
}

fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn request_id(by: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let digest = hmac_sha256::Hash::hash(format!("{by}/{nanos}/{}", std::process::id()).as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

const REQUEST: &str = "request.";
const RESULT: &str = "result.";

/// The requests in `data` that have no answer yet: (id, request).
pub fn unanswered(data: &BTreeMap<String, String>) -> Vec<(String, Asked)> {
    data.iter()
        .filter_map(|(k, v)| {
            let id = k.strip_prefix(REQUEST)?;
            if data.contains_key(&format!("{RESULT}{id}")) {
                return None;
            }
            let asked: Asked = serde_json::from_str(v)
                .map_err(|e| tracing::warn!("ignoring request {id}: {e}"))
                .ok()?;
            Some((id.to_string(), asked))
        })
        .collect()
}

/// The entries of answered requests older than `keep`, to drop (their request and result).
pub fn stale(
    data: &BTreeMap<String, String>,
    now: chrono::DateTime<chrono::Utc>,
    keep: Duration,
) -> Vec<String> {
    let old = |at: &str| {
        chrono::DateTime::parse_from_rfc3339(at)
            .map(|t| now.signed_duration_since(t).to_std().unwrap_or_default() >= keep)
            .unwrap_or(true)
    };
    let mut out = Vec::new();
    for (k, v) in data {
        if let Some(id) = k.strip_prefix(RESULT) {
            let answered: Option<Answer> = serde_json::from_str(v).ok();
            if answered.is_none_or(|a| old(&a.handled_at)) {
                out.push(k.clone());
                out.push(format!("{REQUEST}{id}"));
            }
        } else if let Some(_id) = k.strip_prefix(REQUEST) {
            // Never answered (no holder at the time): dropped after twice as long.
            let asked: Option<Asked> = serde_json::from_str(v).ok();
            if asked.is_none_or(|a| {
                old(&a.requested_at) && {
                    chrono::DateTime::parse_from_rfc3339(&a.requested_at)
                        .map(|t| {
                            now.signed_duration_since(t).to_std().unwrap_or_default() >= keep * 2
                        })
                        .unwrap_or(true)
                }
            }) {
                out.push(k.clone());
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

fn request_error(doing: &'static str, ns: &str, name: &str, e: kube::Error) -> RequestError {
    let configmap = format!("{ns}/{name}");
    match crate::cluster::status_code(&e) {
        Some(404) => RequestError::NoConfigMap { configmap },
        Some(401 | 403) => RequestError::ConfigMapForbidden {
            doing,
            configmap,
            source: Box::new(e),
        },
        _ => RequestError::ConfigMap {
            doing,
            configmap,
            source: Box::new(e),
        },
    }
}

/// Asks the lease holder to handle `command` through the requests ConfigMap of Lease
/// `namespace/lease`, and waits (at most `timeout`) for its answer.
pub async fn ask(
    client: &kube::Client,
    namespace: &str,
    lease: &str,
    command: &Command,
    by: &str,
    timeout: Duration,
) -> Result<RequestOutcome, Error> {
    use futures::StreamExt;
    let name = configmap_name(lease);
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let id = request_id(by);
    let asked = serde_json::to_string(&Asked::new(command, by)).map_err(Error::Encode)?;
    let patch = serde_json::json!({ "data": { format!("{REQUEST}{id}"): asked } });
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| request_error("writing the request into", namespace, &name, e))?;
    let key = format!("{RESULT}{id}");
    let answer = async {
        let what = format!("ConfigMap {namespace}/{name}");
        let mut stream = crate::cluster::watch::object(api.clone(), &name, what);
        while let Some(item) = stream.next().await {
            match item {
                Ok(Some(cm)) => {
                    if let Some(v) = cm.data.as_ref().and_then(|d| d.get(&key)) {
                        return serde_json::from_str::<Answer>(v)
                            .map_err(RequestError::UnreadableAnswer);
                    }
                }
                Ok(None) => {
                    return Err(RequestError::ConfigMapDeleted {
                        configmap: format!("{namespace}/{name}"),
                    });
                }
                // Logged by the watch, retried with its backoff until the timeout.
                Err(_) => {}
            }
        }
        Err(RequestError::WatchEnded)
    };
    match tokio::time::timeout(timeout, answer).await {
        Ok(Ok(a)) => match a.error {
            Some(error) => Err(RequestError::Failed {
                holder: a.handled_by,
                error,
            }
            .into()),
            None => Ok(RequestOutcome {
                handled_by: a.handled_by,
                summary: a.summary,
                writes: a.writes,
                failures: a.failures,
                refused: a.refused,
                keys: a.keys,
            }),
        },
        Ok(Err(e)) => Err(e.into()),
        Err(_) => Err(RequestError::NoAnswer {
            secs: timeout.as_secs(),
        }
        .into()),
    }
}

/// Creates the requests ConfigMap unless it exists (a holder does this on gaining the Lease).
pub async fn ensure_configmap(client: &kube::Client, namespace: &str, lease: &str) {
    let name = configmap_name(lease);
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    match api.get_opt(&name).await {
        Ok(Some(_)) => return,
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(
                "{}; requests from other copies cannot reach this one",
                request_error("reading", namespace, &name, e)
            );
            return;
        }
    }
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some(BTreeMap::from([(
                crate::model::MANAGED_BY_LABEL.to_string(),
                super::events::REPORTER.to_string(),
            )])),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    match api.create(&PostParams::default(), &cm).await {
        Ok(_) => {
            tracing::info!("created ConfigMap {namespace}/{name} for requests from other copies")
        }
        Err(e) if crate::cluster::status_code(&e) == Some(409) => {}
        Err(e) => tracing::warn!(
            "{}; requests from other copies cannot reach this one",
            request_error("creating", namespace, &name, e)
        ),
    }
}

/// Writes `answer` for request `id`, and drops what is stale.
pub async fn answer(
    api: &Api<ConfigMap>,
    name: &str,
    id: &str,
    answer: &Answer,
    stale: &[String],
) -> Result<(), kube::Error> {
    let mut data = serde_json::Map::new();
    for k in stale {
        data.insert(k.clone(), serde_json::Value::Null);
    }
    data.insert(
        format!("{RESULT}{id}"),
        serde_json::to_string(answer)
            .map_err(kube::Error::SerdeError)?
            .into(),
    );
    let patch = serde_json::json!({ "data": data });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_done_when_each_key_was_reconciled_after_it_came_in() {
        let t = Tracker::default();
        let before = Instant::now();
        let keys = [Key::constraint("K8sX", "a"), Key::constraint("K8sX", "b")];
        let mut rx = t.begin(Command::Replay("k8sx".into()), &keys);
        // A reconcile that started before the request does not count.
        t.processed(&keys[0], before, &Outcome::Done, 5, 0);
        let after = Instant::now();
        t.processed(&keys[0], after, &Outcome::Done, 1, 0);
        assert!(rx.try_recv().is_err(), "b is not reconciled yet");
        let conflict = crate::controller::WriteError::Conflict(std::sync::Arc::new(
            crate::cluster::apply::ApplyError::Conflict("update K8sX/b".into()),
        ));
        t.processed(&keys[1], after, &Outcome::Retry(conflict), 0, 0);
        assert!(rx.try_recv().is_err(), "b must be retried");
        t.processed(
            &keys[1],
            after,
            &Outcome::RequeueAfter(Duration::from_secs(1)),
            1,
            1,
        );
        let Tallied {
            writes: w,
            failures: f,
            summary: s,
            ..
        } = rx.try_recv().expect("answered");
        assert_eq!((w, f), (2, 1));
        // A refused write is named as such, and a request whose only write was refused does
        // not say "0 writes".
        let refused = summary(&Command::Reconcile("k8sx".into()), 2, 0, 1, 1, 0, 0);
        assert_eq!(
            refused,
            "reconciled template k8sx and 1 constraint: 1 write refused by the API server"
        );
        assert_eq!(
            s,
            "replayed 2 constraints of template k8sx: 2 writes, 1 failed, 1 waiting (binding wait)"
        );
        assert!(t.is_empty());
    }

    #[test]
    fn a_request_without_keys_is_answered_at_once_and_a_late_one_at_its_deadline() {
        let t = Tracker::default();
        let mut rx = t.begin(Command::Replay("k8sx".into()), &[]);
        assert_eq!(
            rx.try_recv().expect("answered").summary,
            "replayed 0 constraints of template k8sx: 0 writes"
        );
        let mut rx = t.begin(Command::ReconcileAll, &[Key::Template("t".into())]);
        t.expire(Duration::ZERO);
        assert_eq!(
            rx.try_recv().expect("answered").summary,
            "reconciled everything (1 item): 0 writes, 1 not finished within 60s"
        );
    }

    #[test]
    fn unanswered_requests_and_stale_entries() {
        let now = chrono::Utc::now();
        let at = |secs: i64| {
            (now - chrono::Duration::seconds(secs))
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        };
        let asked = |secs| {
            serde_json::to_string(&Asked {
                requested_at: at(secs),
                ..Asked::new(&Command::Replay("t".into()), "laptop")
            })
            .unwrap_or_default()
        };
        let answered = |secs| {
            serde_json::to_string(&Answer {
                handled_by: "pod".into(),
                handled_at: at(secs),
                summary: "s".into(),
                writes: 0,
                failures: 0,
                refused: 0,
                keys: 0,
                error: None,
            })
            .unwrap_or_default()
        };
        let data: BTreeMap<String, String> = [
            ("request.new".to_string(), asked(1)),
            ("request.done".to_string(), asked(700)),
            ("result.done".to_string(), answered(650)),
            ("request.fresh".to_string(), asked(5)),
            ("result.fresh".to_string(), answered(4)),
            ("request.orphan".to_string(), asked(1300)),
            ("request.garbage".to_string(), "{".to_string()),
        ]
        .into_iter()
        .collect();
        let open: Vec<String> = unanswered(&data).into_iter().map(|(id, _)| id).collect();
        assert_eq!(open, vec!["new".to_string(), "orphan".to_string()]);
        assert_eq!(
            stale(&data, now, KEEP_ANSWERED),
            vec![
                "request.done".to_string(),
                "request.garbage".to_string(),
                "request.orphan".to_string(),
                "result.done".to_string()
            ]
        );
        assert_eq!(
            Asked::new(&Command::ReconcileAll, "x").command(),
            Some(Command::ReconcileAll)
        );
    }
}
