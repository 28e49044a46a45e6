//! The requests channel between a copy and the lease holder.
//!
//! - **Asking**: a `request.<id>` entry merge-patched into the ConfigMap `<lease>-requests` in
//!   the Lease's namespace (one entry per request, so two people asking at once do not
//!   overwrite each other; no resourceVersion, no conflicts). Flux's
//!   `reconcile.fluxcd.io/requestedAt` convention, on an object we own instead of the user's
//!   templates (annotating a ConstraintTemplate would be GitOps drift).
//! - **Reading** ([`Desk`]): the holder takes each entry once, within the bounds below, and
//!   removes every entry it has read, so the ConfigMap holds only what arrived since; a command
//!   asked many times is handled once for all of them. What it ignores is said in one line.
//! - **Answering**: in the Lease, annotation [`ANSWERS_ANNOTATION`], written with the holder's
//!   renewals. Only the holder (and whoever may write the Lease, which the operator role may
//!   not) can write there, so the asker knows the answer is the holder's; an answer in the
//!   ConfigMap, which every asker may patch, could be anyone's.
//!
//! Every text that crossed the cluster (`by`, a template name, a summary, an error) is escaped
//! ([`crate::text::printable`]) before it reaches a log line, a terminal or an outcome.

use crate::controller::error::{Error, RequestError};
use crate::controller::view::state::{Command, EventVerb, RequestOutcome};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::hash::{BuildHasher, BuildHasherDefault};
use std::time::{Duration, Instant};

/// A request older than this (its `requestedAt`, by the holder's clock) is ignored and
/// removed: its asker has given up ([`ASK_TIMEOUT`]), and a holder that starts later must not
/// carry out what was asked of another long ago.
pub const MAX_AGE: Duration = Duration::from_secs(120);
/// A request dated further ahead than this is ignored and removed (clocks differ by less).
pub const MAX_SKEW: Duration = Duration::from_secs(60);
/// The largest entry read (a request is ~150 bytes).
pub const MAX_ENTRY_BYTES: usize = 1024;
/// Requests waiting, at most; the rest are removed unread.
pub const MAX_HELD: usize = 64;
/// Commands handled at once (each enqueues its keys and waits for them).
pub const MAX_RUNNING: usize = 4;
/// How often the ConfigMap is written: one merge patch removes what was read.
pub const PRUNE_EVERY: Duration = Duration::from_secs(1);
/// Request ids the Lease carries answers for, at most.
pub const PUBLISHED_IDS: usize = 32;
/// A flood coalesced into one run cannot push every other answer out of the Lease.
pub const IDS_PER_ANSWER: usize = 8;
/// Unknown commands answered (with an error) per reading; the rest ignored.
pub const REFUSED_PER_READ: usize = 4;
pub const KEEP_PUBLISHED: Duration = Duration::from_secs(120);
/// The longest summary or error of an answer published.
const MAX_TEXT: usize = 400;
pub const ANSWERS_ANNOTATION: &str = "kubectl-vap.io/answers";
/// How long an asker waits for its answer: the holder's own deadline for a request, and
/// time for the answer to ride on a renewal.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(75);

const REQUEST: &str = "request.";

pub fn configmap_name(lease: &str) -> String {
    format!("{lease}-requests")
}

/// `s` escaped for a terminal or a log line, and cut to `max` bytes.
pub fn said(s: &str, max: usize) -> String {
    crate::controller::view::status::clip(&crate::text::printable(s), max)
}

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

impl Asked {
    pub fn new(command: &Command, by: &str) -> Self {
        let (verb, template) = wire(command);
        Asked {
            command: verb.as_str().into(),
            template: template.map(Into::into),
            by: by.into(),
            requested_at: now_text(),
        }
    }

    /// The command asked, if it is one this version knows and its template a possible name.
    pub fn command(&self) -> Option<Command> {
        let template = || self.template.clone().filter(|t| is_object_name(t));
        match self.command.as_str() {
            "replay" => Some(Command::Replay(template()?)),
            "reconcile" => Some(Command::Reconcile(template()?)),
            "reconcile-all" => Some(Command::ReconcileAll),
            _ => None,
        }
    }
}

/// Whether `s` can be the name of a cluster-scoped object (a DNS-1123 subdomain): what a
/// template name must be. Anything else is not looked up, nor logged as a name.
fn is_object_name(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    s.len() <= 253
        && s.chars().all(|c| alnum(c) || c == '-' || c == '.')
        && s.starts_with(alnum)
        && s.ends_with(alnum)
}

fn now_text() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A command's verb (its name on the wire) and template.
pub fn wire(command: &Command) -> (EventVerb, Option<&str>) {
    match command {
        Command::Replay(t) => (EventVerb::Replay, Some(t)),
        Command::Reconcile(t) => (EventVerb::Reconcile, Some(t)),
        Command::ReconcileAll => (EventVerb::ReconcileAll, None),
    }
}

/// A command as a log line or an error says it (its template escaped).
pub fn said_command(name: &str, template: Option<&str>) -> String {
    let s = said(&format!("{name} {}", template.unwrap_or_default()), 300);
    s.trim_end().to_string()
}

/// An answer as the Lease carries it: for every request id it answers, what was done.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Published {
    pub ids: Vec<String>,
    /// The command handled (`replay`, …) and its template: the asker checks it is its own.
    pub command: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    pub handled_at: String,
    /// What was done (its id and handler are not on the wire).
    #[serde(flatten)]
    pub outcome: RequestOutcome,
    /// The request could not be handled (its template does not exist, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Published {
    pub fn of(ids: Vec<String>, command: &Command, result: &Result<RequestOutcome, Error>) -> Self {
        let (verb, template) = wire(command);
        let base = Published {
            ids,
            command: verb.as_str().into(),
            template: template.map(Into::into),
            handled_at: now_text(),
            ..Default::default()
        };
        match result {
            Ok(o) => Published {
                outcome: RequestOutcome {
                    summary: said(&o.summary, MAX_TEXT),
                    ..o.clone()
                },
                ..base
            },
            Err(e) => Published {
                error: Some(said(&crate::text::error_text(e), MAX_TEXT)),
                ..base
            },
        }
    }

    /// A request the holder refuses to handle (an unknown command), answered at once.
    fn refused(id: String, asked: &Asked) -> Self {
        let why =
            "not a request this version knows (replay TEMPLATE, reconcile TEMPLATE, reconcile-all)";
        Published {
            ids: vec![id],
            command: said(&asked.command, 64),
            template: asked.template.as_deref().map(|t| said(t, 253)),
            handled_at: now_text(),
            error: Some(why.into()),
            ..Default::default()
        }
    }
}

/// The answers this copy publishes in the Lease while it holds it.
#[derive(Default)]
pub struct Answers {
    published: Mutex<VecDeque<(Instant, Published)>>,
    before: Mutex<BTreeSet<String>>,
}

impl Answers {
    /// Published with the next renewal (the oldest make room).
    pub fn publish(&self, mut answer: Published) {
        answer.ids.truncate(IDS_PER_ANSWER);
        let mut a = self.published.lock();
        a.push_front((Instant::now(), answer));
        a.retain(|(at, _)| at.elapsed() < KEEP_PUBLISHED);
        // Newest first, at most PUBLISHED_IDS ids in all (a flood answers few of its own).
        let mut room = PUBLISHED_IDS;
        for (_, p) in a.iter_mut() {
            p.ids.truncate(room);
            room -= p.ids.len();
        }
        a.retain(|(_, p)| !p.ids.is_empty());
    }

    pub fn annotation(&self) -> Option<String> {
        let mut a = self.published.lock();
        a.retain(|(at, _)| at.elapsed() < KEEP_PUBLISHED);
        if a.is_empty() {
            return None;
        }
        let list: Vec<&Published> = a.iter().map(|(_, p)| p).collect();
        serde_json::to_string(&list).ok()
    }

    /// Nothing more is published (this copy lost the Lease).
    pub fn clear(&self) {
        self.published.lock().clear();
        self.before.lock().clear();
    }

    /// This copy took the Lease over, where the previous holder left `raw`: a request it
    /// answered but had not yet removed (it stopped within [`PRUNE_EVERY`]) is not done again.
    pub fn took_over(&self, raw: Option<&str>) {
        let ids = raw
            .and_then(|r| serde_json::from_str::<Vec<Published>>(r).ok())
            .into_iter()
            .flatten()
            .flat_map(|p| p.ids);
        let mut before = self.before.lock();
        before.clear();
        before.extend(ids);
    }

    /// The request ids the previous holder answered (taken: a term's desk asks once).
    pub fn answered_before(&self) -> BTreeSet<String> {
        std::mem::take(&mut *self.before.lock())
    }
}

pub fn answer_in(l: &Lease, id: &str) -> Option<Published> {
    let raw = l.metadata.annotations.as_ref()?.get(ANSWERS_ANNOTATION)?;
    let list: Vec<Published> = serde_json::from_str(raw).ok()?;
    list.into_iter().find(|p| p.ids.iter().any(|i| i == id))
}

/// Why an entry is ignored; declared in the order the warning says them (a map of them
/// iterates in that order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ignored {
    NotARequest,
    TooLarge,
    Unparsable,
    TooOld,
    DatedAhead,
    TooManyWaiting,
    UnknownBeyondAnswered,
    AnsweredBefore,
}

// The bounds as the warning says them: whole KiB and whole minutes.
const _: () = assert!(MAX_ENTRY_BYTES.is_multiple_of(1024) && MAX_AGE.as_secs().is_multiple_of(60));

/// Why, with the bound it passed said from the bound itself ("larger than 1 KiB"), so the
/// warning cannot name a bound the desk no longer keeps.
impl std::fmt::Display for Ignored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ignored::NotARequest => write!(f, "not a request"),
            Ignored::TooLarge => write!(f, "larger than {} KiB", MAX_ENTRY_BYTES / 1024),
            Ignored::Unparsable => write!(f, "unparsable"),
            Ignored::TooOld => write!(f, "older than {} minutes", MAX_AGE.as_secs() / 60),
            Ignored::DatedAhead => write!(f, "dated ahead"),
            Ignored::TooManyWaiting => write!(f, "beyond {MAX_HELD} waiting"),
            Ignored::UnknownBeyondAnswered => {
                write!(f, "unknown commands beyond {REFUSED_PER_READ} answered")
            }
            Ignored::AnsweredBefore => write!(f, "answered by the previous holder"),
        }
    }
}

/// Requests asking one command, handled together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub command: Command,
    /// Request ids, and who asked each (escaped).
    pub asked: Vec<(String, String)>,
}

/// The holder's bookkeeping of the ConfigMap: what it has read, what waits, what to remove.
/// Pure (the clock is passed in), so the bounds are unit-tested.
#[derive(Default)]
pub struct Desk {
    /// Entries already read (key and a digest of the value): read once, until removed.
    read: HashMap<String, u64>,
    waiting: VecDeque<Batch>,
    prune: BTreeSet<String>,
    refused: Vec<Published>,
    /// What was ignored since it was last said.
    ignored: BTreeMap<Ignored, usize>,
    /// Request ids the previous holder answered ([`Answers::took_over`]).
    answered: BTreeSet<String>,
}

impl Desk {
    pub fn after(answered: BTreeSet<String>) -> Desk {
        Desk {
            answered,
            ..Desk::default()
        }
    }

    /// New requests wait; everything read is to be removed.
    pub fn read(&mut self, data: &BTreeMap<String, String>, wall: chrono::DateTime<chrono::Utc>) {
        // Forget what is gone from the ConfigMap (removed): a new entry of that key is new.
        self.read.retain(|k, _| data.contains_key(k));
        for (key, value) in data {
            let d = BuildHasherDefault::<DefaultHasher>::default().hash_one(value);
            if self.read.insert(key.clone(), d) == Some(d) {
                continue;
            }
            self.prune.insert(key.clone());
            let why = match self.take(key, value, wall) {
                Ok((id, asked)) => match asked.command() {
                    Some(c) => {
                        self.wait(id, &asked, c);
                        continue;
                    }
                    None if self.refused.len() < REFUSED_PER_READ => {
                        self.refused.push(Published::refused(id, &asked));
                        continue;
                    }
                    None => Ignored::UnknownBeyondAnswered,
                },
                Err(why) => why,
            };
            *self.ignored.entry(why).or_default() += 1;
        }
    }

    /// The request an entry holds, or why it is ignored.
    fn take(
        &self,
        key: &str,
        value: &str,
        wall: chrono::DateTime<chrono::Utc>,
    ) -> Result<(String, Asked), Ignored> {
        let id = key
            .strip_prefix(REQUEST)
            .filter(|id| !id.is_empty() && id.len() <= 64)
            .filter(|id| id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
            .ok_or(Ignored::NotARequest)?;
        if value.len() > MAX_ENTRY_BYTES {
            return Err(Ignored::TooLarge);
        }
        let asked: Asked = serde_json::from_str(value).map_err(|_| Ignored::Unparsable)?;
        let at = chrono::DateTime::parse_from_rfc3339(&asked.requested_at)
            .map_err(|_| Ignored::Unparsable)?;
        let age = wall.signed_duration_since(at);
        if age.to_std().is_ok_and(|a| a > MAX_AGE) {
            return Err(Ignored::TooOld);
        }
        if (-age).to_std().is_ok_and(|a| a > MAX_SKEW) {
            return Err(Ignored::DatedAhead);
        }
        if self.answered.contains(id) {
            return Err(Ignored::AnsweredBefore);
        }
        if self.waiting.iter().map(|b| b.asked.len()).sum::<usize>() >= MAX_HELD {
            return Err(Ignored::TooManyWaiting);
        }
        Ok((id.to_string(), asked))
    }

    fn wait(&mut self, id: String, asked: &Asked, command: Command) {
        let by = said(&asked.by, 128);
        match self.waiting.iter_mut().find(|b| b.command == command) {
            Some(b) => b.asked.push((id, by)),
            None => self.waiting.push_back(Batch {
                command,
                asked: vec![(id, by)],
            }),
        }
    }

    pub fn next(&mut self) -> Option<Batch> {
        self.waiting.pop_front()
    }

    /// Answers to publish now.
    pub fn refused(&mut self) -> Vec<Published> {
        std::mem::take(&mut self.refused)
    }

    /// Put back with [`Desk::unpruned`] if the patch fails.
    pub fn take_prune(&mut self) -> BTreeSet<String> {
        std::mem::take(&mut self.prune)
    }

    pub fn unpruned(&mut self, keys: BTreeSet<String>) {
        self.prune.extend(keys);
    }

    /// What was ignored since last asked, as one clause ("3 unparsable, 1 older than …"),
    /// or `None`.
    pub fn ignored(&mut self) -> Option<String> {
        let counts = std::mem::take(&mut self.ignored);
        let said: Vec<String> = counts.iter().map(|(why, n)| format!("{n} {why}")).collect();
        (!said.is_empty()).then(|| said.join(", "))
    }
}

pub fn prune_patch(keys: &BTreeSet<String>) -> serde_json::Value {
    // `()` is written as null: the key is removed.
    let data: BTreeMap<_, ()> = keys.iter().map(|k| (k, ())).collect();
    serde_json::json!({ "data": data })
}

/// A request's id: unique per asker and moment; its answer, Event and log line carry it.
pub fn request_id(by: &str) -> String {
    let nanos = chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default();
    let digest = hmac_sha256::Hash::hash(format!("{by}/{nanos}/{}", std::process::id()).as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

pub fn request_error(doing: &'static str, ns: &str, name: &str, e: kube::Error) -> RequestError {
    let configmap = format!("{ns}/{name}");
    match crate::cluster::status_code(&e) {
        Some(404) => RequestError::NoConfigMap { configmap },
        status => RequestError::ConfigMap {
            doing,
            configmap,
            forbidden: matches!(status, Some(401 | 403)),
            source: Box::new(e),
        },
    }
}

/// The outcome an answer says, if it answers `command`: an answer to another command under
/// our id means our request was overwritten (the ConfigMap is anyone's to patch).
fn outcome_of(
    p: Published,
    id: &str,
    command: &Command,
    holder: &str,
) -> Result<RequestOutcome, RequestError> {
    let (verb, template) = wire(command);
    if p.command != verb.as_str() || p.template.as_deref() != template {
        return Err(RequestError::NotOurs {
            asked: said_command(verb.as_str(), template),
            answered: said_command(&p.command, p.template.as_deref()),
        });
    }
    let holder = said(holder, 253);
    match p.error {
        Some(error) => Err(RequestError::Failed {
            holder,
            error: said(&error, MAX_TEXT),
        }),
        None => Ok(RequestOutcome {
            id: id.to_string(),
            handled_by: holder,
            summary: said(&p.outcome.summary, MAX_TEXT),
            ..p.outcome
        }),
    }
}

/// Asks the holder of Lease `namespace/lease` to handle `command` through the requests
/// ConfigMap, and waits (at most [`ASK_TIMEOUT`]) for its answer in the Lease.
pub async fn ask(
    client: &kube::Client,
    namespace: &str,
    lease: &str,
    command: &Command,
    by: &str,
) -> Result<RequestOutcome, Error> {
    use futures::StreamExt;
    let name = configmap_name(lease);
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let id = request_id(by);
    let asked = serde_json::to_string(&Asked::new(command, by)).map_err(Error::Encode)?;
    // Watching before asking: an answer that comes at once is not missed.
    let what = format!("Lease {namespace}/{lease}");
    let mut stream = crate::cluster::watch::object(leases, lease, what);
    let patch = serde_json::json!({ "data": { format!("{REQUEST}{id}"): asked } });
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| request_error("writing the request into", namespace, &name, e))?;
    let answer = async {
        while let Some(item) = stream.next().await {
            // Errors are logged by the watch and retried with its backoff until the timeout.
            let Ok(Some(l)) = item else { continue };
            if let Some(p) = answer_in(&l, &id) {
                let holder = l.spec.and_then(|s| s.holder_identity).unwrap_or_default();
                return outcome_of(p, &id, command, &holder);
            }
        }
        Err(RequestError::WatchEnded)
    };
    match tokio::time::timeout(ASK_TIMEOUT, answer).await {
        Ok(r) => r.map_err(Error::from),
        Err(_) => {
            // Still there: nobody read it. Gone: the holder took it (and may still carry it
            // out) or ignored it.
            let cm = api.get_opt(&name).await.ok().flatten();
            let data = cm.and_then(|cm| cm.data).unwrap_or_default();
            Err(RequestError::NoAnswer {
                secs: ASK_TIMEOUT.as_secs(),
                read: !data.contains_key(&format!("{REQUEST}{id}")),
            }
            .into())
        }
    }
}

/// Creates the requests ConfigMap unless it exists (a holder does this on gaining the Lease).
pub async fn ensure_configmap(client: &kube::Client, namespace: &str, lease: &str) {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kube::api::PostParams;
    let name = configmap_name(lease);
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some(BTreeMap::from([(
                crate::model::MANAGED_BY_LABEL.to_string(),
                crate::controller::tell::events::REPORTER.to_string(),
            )])),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    let created = match api.get_opt(&name).await {
        Ok(Some(_)) => return,
        Ok(None) => ("creating", api.create(&PostParams::default(), &cm).await),
        Err(e) => ("reading", Err(e)),
    };
    match created {
        (_, Ok(_)) => {
            tracing::info!("created ConfigMap {namespace}/{name} for requests from other copies")
        }
        ("creating", Err(e)) if crate::cluster::status_code(&e) == Some(409) => {}
        (doing, Err(e)) => tracing::warn!(
            "{}; requests from other copies cannot reach this one",
            request_error(doing, namespace, &name, e)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Command::ReconcileAll;

    fn at(wall: chrono::DateTime<chrono::Utc>, ago: i64) -> String {
        (wall - chrono::Duration::seconds(ago)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    }

    fn replay() -> Command {
        Command::Replay("k8sx".into())
    }

    fn json(a: &Asked) -> String {
        serde_json::to_string(a).unwrap_or_default()
    }

    fn asked(command: &Command, by: &str, requested_at: String) -> String {
        json(&Asked {
            requested_at,
            ..Asked::new(command, by)
        })
    }

    /// 500 reconcile-all requests in one patch are one batch of 64 (the rest removed unread),
    /// handled once; junk, old, future and oversized entries are ignored, counted, removed.
    #[test]
    fn a_flood_is_bounded_coalesced_and_removed_in_one_patch() {
        let wall = chrono::Utc::now();
        let all = ReconcileAll;
        let flood = asked(&all, "mallory", at(wall, 1));
        let mut data: BTreeMap<_, _> = (0..500)
            .map(|i| (format!("request.flood{i:03}"), flood.clone()))
            .collect();
        let big = "x".repeat(2000);
        data.extend([
            ("request.junk".into(), "{".into()),
            ("request.old".into(), asked(&all, "x", at(wall, 24 * 60))),
            ("request.ahead".into(), asked(&all, "x", at(wall, -3600))),
            ("request.big".into(), asked(&all, &big, at(wall, 1))),
            ("result.forged".into(), "{}".into()),
        ]);
        let mut desk = Desk::default();
        desk.read(&data, wall);
        let batch = desk.next().expect("one batch");
        assert_eq!(batch.command, ReconcileAll);
        assert_eq!(batch.asked.len(), MAX_HELD);
        assert!(desk.next().is_none(), "coalesced: one command, one batch");
        assert_eq!(
            desk.take_prune().len(),
            data.len(),
            "every entry read is removed"
        );
        assert_eq!(
            desk.ignored().as_deref(),
            Some(
                "1 not a request, 1 larger than 1 KiB, 1 unparsable, 1 older than 2 minutes, 1 dated ahead, 436 beyond 64 waiting"
            )
        );
        // Read again before the patch lands: nothing is taken twice.
        desk.read(&data, wall);
        assert!(desk.next().is_none() && desk.ignored().is_none());
        assert!(desk.take_prune().is_empty());
        // A new value under a read key is a new entry.
        data.insert(
            "request.flood000".into(),
            asked(&replay(), "alice", at(wall, 0)),
        );
        desk.read(&data, wall);
        assert_eq!(desk.next().map(|b| b.command), Some(replay()));
    }

    /// A holder that answered a request and stopped before removing it from the ConfigMap:
    /// the copy that takes the Lease over finds the answer in it and does not carry the
    /// request out again (a `reconcile --all` one-shot handled such a `replay` of a template
    /// deleted since, and counted its "not found" among its own failures).
    #[test]
    fn a_request_the_previous_holder_answered_is_not_handled_again() {
        let wall = chrono::Utc::now();
        let request = asked(&replay(), "alice", at(wall, 1));
        let data =
            BTreeMap::from(["done", "new"].map(|id| (format!("request.{id}"), request.clone())));
        let previous = Answers::default();
        let stopped = Err(Error::Stopped);
        previous.publish(Published::of(vec!["done".into()], &replay(), &stopped));
        let ours = Answers::default();
        ours.took_over(previous.annotation().as_deref());
        let mut desk = Desk::after(ours.answered_before());
        desk.read(&data, wall);
        let batch = desk.next().expect("the new request");
        assert_eq!((batch.asked.len(), batch.asked[0].0.as_str()), (1, "new"));
        assert!(desk.next().is_none());
        assert_eq!(desk.take_prune().len(), 2, "both removed");
        assert_eq!(
            desk.ignored().as_deref(),
            Some("1 answered by the previous holder")
        );
        // Taken once: the next term's desk starts empty.
        assert!(ours.answered_before().is_empty());
        // Without an answer in the Lease, both are handled.
        let mut fresh = Desk::after(BTreeSet::new());
        fresh.read(&data, wall);
        assert_eq!(fresh.next().map(|b| b.asked.len()), Some(2));
    }

    /// Escapes and forged lines in `by` and an unknown command never reach a log raw; an
    /// unknown command is answered with an error, not handled.
    #[test]
    fn what_a_request_says_is_escaped_and_an_unknown_command_refused() {
        let wall = chrono::Utc::now();
        let evil = "x\n2026-01-01T00:00:00Z  INFO forged\u{1b}]0;owned\u{7}\u{1b}[2J";
        let unknown = Asked {
            command: "rm -rf\u{1b}[2J".into(),
            ..Asked::new(&ReconcileAll, "m")
        };
        let template = Asked {
            command: "replay".into(),
            template: Some("Not A Name\u{1b}".into()),
            ..unknown.clone()
        };
        let data = BTreeMap::from([
            ("request.a".into(), asked(&replay(), evil, at(wall, 0))),
            ("request.b".into(), json(&unknown)),
            ("request.c".into(), json(&template)),
        ]);
        let mut desk = Desk::default();
        desk.read(&data, wall);
        let batch = desk.next().expect("a batch");
        let (_, by) = &batch.asked[0];
        assert!(!by.contains('\u{1b}') && !by.contains('\n'), "{by}");
        let refused = desk.refused();
        assert_eq!(refused.len(), 2);
        // A flood of unknown commands: a few answered, the rest ignored and counted.
        let many: BTreeMap<_, _> = (0..10)
            .map(|i| (format!("request.u{i}"), json(&unknown)))
            .collect();
        let mut flood = Desk::default();
        flood.read(&many, wall);
        assert_eq!(flood.refused().len(), REFUSED_PER_READ);
        assert_eq!(
            flood.ignored().as_deref(),
            Some("6 unknown commands beyond 4 answered")
        );
        for r in &refused {
            assert!(r.error.is_some());
            assert!(!r.command.contains('\u{1b}'), "{r:?}");
            assert!(!r.template.as_deref().unwrap_or_default().contains('\u{1b}'));
        }
    }

    /// The answer's JSON in the Lease is what it was when the outcome's fields were copied
    /// into it (an asker of another version reads it): same names, defaults written; and an
    /// answer written in that shape, or by an older version without the counts, still reads.
    #[test]
    fn an_answer_on_the_wire_keeps_its_shape() {
        let outcome = RequestOutcome {
            id: "not on the wire".into(),
            handled_by: "nor this".into(),
            summary: "replayed 2 constraints of template k8sx: 1 write".into(),
            writes: 1,
            keys: 2,
            ..Default::default()
        };
        let mut ok = Published::of(vec!["a".into()], &replay(), &Ok(outcome.clone()));
        ok.handled_at = "2026-01-01T00:00:00Z".into();
        let mut failed = Published::of(vec!["b".into()], &ReconcileAll, &Err(Error::Stopped));
        failed.handled_at = ok.handled_at.clone();
        let json = serde_json::to_string(&[&ok, &failed]).expect("json");
        let old = r#"[{"ids":["a"],"command":"replay","template":"k8sx","handledAt":"2026-01-01T00:00:00Z","summary":"replayed 2 constraints of template k8sx: 1 write","writes":1,"failures":0,"refused":0,"keys":2},{"ids":["b"],"command":"reconcile-all","handledAt":"2026-01-01T00:00:00Z","summary":"","writes":0,"failures":0,"refused":0,"keys":0,"error":"the reconciler has stopped"}]"#;
        assert_eq!(json, old);
        let read: Vec<Published> = serde_json::from_str(&json).expect("reads");
        let o = outcome_of(read[0].clone(), "a", &replay(), "h").expect("ours");
        assert_eq!(
            o,
            RequestOutcome {
                id: "a".into(),
                handled_by: "h".into(),
                ..outcome
            }
        );
        let older = r#"{"ids":["c"],"command":"reconcile-all","handledAt":"2026-01-01T00:00:00Z","summary":"reconciled everything (0 items): 0 writes","writes":0}"#;
        let older: Published = serde_json::from_str(older).expect("reads");
        assert_eq!((older.outcome.keys, older.error), (0, None));
    }

    /// A refused ConfigMap names the role that grants it; another failure only says itself.
    #[test]
    fn a_configmap_error_says_the_role_only_when_forbidden() {
        let said = |code: u16| {
            let e = kube::Error::Api(Box::new(kube::core::Status {
                message: "no".into(),
                reason: "R".into(),
                code,
                ..Default::default()
            }));
            request_error("reading", "ns", "cm", e).to_string()
        };
        assert_eq!(
            said(403),
            "reading ConfigMap ns/cm: no (R, 403) (grant the kubectl-vap-operator ClusterRole from `kubectl vap install --print`)"
        );
        assert_eq!(said(500), "reading ConfigMap ns/cm: no (R, 500)");
    }

    /// The Lease carries at most PUBLISHED_IDS ids, newest first; an answer to another
    /// command under our id is refused, and what an answer says is escaped.
    #[test]
    fn published_answers_are_bounded_and_checked_by_the_asker() {
        let answers = Answers::default();
        let outcome = RequestOutcome {
            summary: "reconciled everything (3 items): 0 writes".into(),
            keys: 3,
            ..Default::default()
        };
        let (ok, k8sy) = (Ok(outcome.clone()), Command::Reconcile("k8sy".into()));
        answers.publish(Published::of(vec!["early".into()], &k8sy, &ok));
        for round in 0..5 {
            let flood: Vec<String> = (0..100).map(|i| format!("f{round}-{i}")).collect();
            answers.publish(Published::of(flood, &ReconcileAll, &ok));
        }
        let escaped = Ok(RequestOutcome {
            summary: "replayed 1 constraint\u{1b}[2J".into(),
            ..outcome
        });
        answers.publish(Published::of(vec!["mine".into()], &replay(), &escaped));
        let raw = answers.annotation().expect("published");
        let list: Vec<Published> = serde_json::from_str(&raw).expect("json");
        assert!(list.iter().all(|p| p.ids.len() <= IDS_PER_ANSWER));
        assert_eq!(
            list.iter().map(|p| p.ids.len()).sum::<usize>(),
            PUBLISHED_IDS,
            "{list:?}"
        );
        assert_eq!(list[0].ids, ["mine"]);
        let mut lease = Lease::default();
        lease.metadata.annotations = Some(BTreeMap::from([(ANSWERS_ANNOTATION.into(), raw)]));
        let mine = answer_in(&lease, "mine").expect("answered");
        let o = outcome_of(mine.clone(), "mine", &replay(), "holder\u{1b}").expect("ours");
        assert!(!o.summary.contains('\u{1b}') && !o.handled_by.contains('\u{1b}'));
        // Our id, another command: someone overwrote our request.
        assert!(matches!(
            outcome_of(mine, "mine", &ReconcileAll, "holder"),
            Err(RequestError::NotOurs { .. })
        ));
        assert!(
            answer_in(&lease, "f4-99").is_none(),
            "beyond one answer's cap"
        );
        assert!(answer_in(&lease, "f4-0").is_some());
        // Four floods of 8 and ours fill the 32: the earliest answers make room.
        assert!(answer_in(&lease, "early").is_none() && answer_in(&lease, "f0-0").is_none());
    }
}
