//! Leader election on a `coordination.k8s.io/v1` Lease, client-go's (`tools/leaderelection`):
//! the holder renews every retry period; a follower takes the Lease once it has seen the same
//! record (resourceVersion) for a whole lease duration *by its own clock* (so clock skew does
//! not matter); every write carries the resourceVersion read, so two copies cannot both win.
//!
//! Writes are fenced (fence.rs) by a renew deadline shorter than the lease duration: a copy that
//! was paused or cannot renew stops writing before another can take over, drops its queue,
//! relists every store, and writes again only once the server confirms it holds the Lease again.

use crate::cluster::{describe, status_code};
use crate::controller::ask::channel::{ANSWERS_ANNOTATION, Answers};
use crate::controller::reconcile::queue::SharedQueue;
use crate::controller::store::objects::chrono_of;
use crate::controller::store::stores::Stores;
use crate::controller::tell::events::Recorder;
use crate::controller::tell::metrics::Metrics;
use crate::controller::tell::outage::Outage;
use crate::controller::view::fence::{
    LEASE_DURATION, LONGEST_LEASE_DURATION, Leadership, Timing, mono_now,
};
use crate::controller::view::state::{
    AccessError, AccessErrorKind, EventResult, EventVerb, Happened, LeaderHealth, LeaseChange,
    LeaseInfo, LeaseRefused,
};
use crate::controller::view::status::Status;
use crate::controller::watch::resync::Resync;
use crate::model::{ObjectId, ObjectRef};
use chrono::{DateTime, Utc};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// The Lease resource, as access errors name it.
pub const LEASES: &str = "leases.coordination.k8s.io";
/// The annotation the holder publishes its health in, with every renewal (no extra writes).
pub const HEALTH_ANNOTATION: &str = "kubectl-vap.io/health";

/// How long after a holder's Lease expired a standby has taken it, if one runs: it looks
/// every retry period (at most 2.2 s by default), and a view watching the Lease sees its
/// takeover as it happens. Only after that does a view say that no copy reconciles.
pub const TAKEOVER_GRACE: Duration = Duration::from_secs(5);

/// [`LeaderHealth`] as it is written into the Lease annotation.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct HealthRecord {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pod: Option<String>,
    queue: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_sync: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    settings: Option<crate::core::settings::Settings>,
    /// Keyed by the object's [`ObjectId`] as text (`Kind/name`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    refused: std::collections::BTreeMap<String, String>,
    /// Keyed as `refused`.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    contested: std::collections::BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    guard: Option<String>,
}

fn health_to_annotation(h: &LeaderHealth) -> String {
    serde_json::to_string(&HealthRecord {
        pod: h.pod.clone(),
        queue: h.queue,
        last_sync: h
            .last_sync
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
        settings: h.settings.clone(),
        refused: as_text(&h.refused),
        contested: as_text(&h.contested),
        guard: h.guard.clone(),
    })
    .unwrap_or_default()
}

fn health_of(l: &Lease) -> Option<LeaderHealth> {
    let raw = l.metadata.annotations.as_ref()?.get(HEALTH_ANNOTATION)?;
    let r: HealthRecord = serde_json::from_str(raw).ok()?;
    Some(LeaderHealth {
        pod: r.pod,
        queue: r.queue,
        last_sync: r
            .last_sync
            .and_then(|t| DateTime::parse_from_rfc3339(&t).ok())
            .map(|t| t.with_timezone(&Utc)),
        settings: r.settings,
        refused: as_ids(r.refused),
        contested: as_ids(r.contested),
        guard: r.guard,
    })
}

/// What the holder says of objects, as the annotation keys it: by the objects' ids as text.
fn as_text(said: &[(ObjectId, String)]) -> std::collections::BTreeMap<String, String> {
    let said = said.iter().map(|(o, why)| (o.to_string(), why.clone()));
    said.collect()
}

/// [`as_text`] read back; a key that is no object's id (no holder writes one) is dropped.
fn as_ids(said: std::collections::BTreeMap<String, String>) -> Vec<(ObjectId, String)> {
    let said = said
        .into_iter()
        .filter_map(|(o, why)| Some((o.parse().ok()?, why)));
    said.collect()
}

/// The duration a Lease's holder is honoured for: its own, at most [`LONGEST_LEASE_DURATION`]
/// (what views judge by; the election by its tuned bound, [`Timing::longest`]).
fn duration_of(spec: &LeaseSpec, default: Duration) -> Duration {
    declared_duration(spec, default).min(LONGEST_LEASE_DURATION)
}

/// The duration a Lease says, `default` when it says none.
fn declared_duration(spec: &LeaseSpec, default: Duration) -> Duration {
    spec.lease_duration_seconds
        .and_then(|s| u64::try_from(s).ok())
        .map(Duration::from_secs)
        .unwrap_or(default)
}

/// `info` with the holder as `l` shows it; whether the holder stopped renewing is judged on
/// this copy's clock, from when it first saw the current record (`seen_at`, on [`mono_now`]).
fn view_of(info: &LeaseInfo, l: &Lease, seen_at: Duration, default: Duration) -> LeaseInfo {
    let holder = holder_of(l);
    let spec = l.spec.clone().unwrap_or_default();
    let duration = duration_of(&spec, default);
    let ours = holder.is_some() && holder.as_deref() == Some(info.identity.as_str());
    let unchanged = mono_now().saturating_sub(seen_at);
    let vacant = holder.is_none() || (!ours && unchanged >= duration + TAKEOVER_GRACE);
    let unresponsive_until = (holder.is_some() && !ours && !vacant && unchanged >= duration / 3)
        .then(|| {
            Utc::now()
                + chrono::Duration::from_std(duration.saturating_sub(unchanged)).unwrap_or_default()
        });
    LeaseInfo {
        unresponsive_until,
        since: holder
            .as_ref()
            .and(spec.acquire_time.as_ref())
            .and_then(|t| chrono_of(t.0)),
        health: holder.as_ref().and_then(|_| health_of(l)),
        // Escaped for views, logs and the CLI (an identity we write is unchanged by it).
        holder: holder.map(|h| crate::text::printable(&h).into_owned()),
        vacant,
        unreadable: None,
        ..info.clone()
    }
}

/// `info` without what was seen of a holder (which Lease, this copy, whether it leads),
/// and why it cannot be seen: a Lease refused (`why`) has a holder unknown, not nobody.
fn blank(info: &LeaseInfo, why: Option<LeaseRefused>) -> LeaseInfo {
    LeaseInfo {
        lease: info.lease.clone(),
        identity: info.identity.clone(),
        participating: info.participating,
        leading: info.leading,
        unreadable: why,
        ..LeaseInfo::default()
    }
}

/// A unique identity for this copy: `<hostname>-<pid>-<random>`.
pub fn default_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "kubectl-vap".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("{host}-{}-{:06x}", std::process::id(), nanos & 0xff_ffff)
}

fn holder_of(l: &Lease) -> Option<String> {
    l.spec
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .filter(|h| !h.is_empty())
}

enum Attempt {
    Holds,
    /// Another copy holds it (named, if any); how its record looked, if it showed it holding.
    Other(Option<String>, Option<Standby>),
}

/// How a standby sees the holder's record: its age by the record's own clock, and when this
/// copy takes over (by this copy's clock, which is what counts) unless the holder renews.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Standby {
    /// `now - renewTime`: the holder's clock against ours, so only a guide.
    renewed_ago: Option<chrono::Duration>,
    takeover_in: Duration,
    duration: Duration,
}

/// What a standby says once per holder: who holds the Lease and, when its record is older
/// than a third of its duration (a holder that renews is never that old), how old by the
/// record and when this copy takes over: a dead holder is not called one that writes.
fn standing_by_text(lease: &str, holder: &str, standby: Option<&Standby>) -> String {
    let Some(s) = standby else {
        return format!(
            "Lease {lease} is held by {holder}: that copy writes; standing by (taking over if it stops renewing)"
        );
    };
    let takeover = s.takeover_in.as_secs();
    match s.renewed_ago.map(|d| d.num_seconds().max(0)) {
        Some(ago) if ago >= i64::try_from(s.duration.as_secs() / 3).unwrap_or(i64::MAX) => format!(
            "Lease {lease} is held by {holder}, not renewed for {ago} s by its record; taking over in {takeover} s unless it renews"
        ),
        Some(ago) => format!(
            "Lease {lease} is held by {holder} (renewed {ago} s ago by its record): that copy writes; standing by, taking over in {takeover} s unless it renews"
        ),
        None => format!(
            "Lease {lease} is held by {holder}, with no renewal on record; taking over in {takeover} s unless it renews"
        ),
    }
}

impl Campaign {
    /// client-go's `tryAcquireOrRenew`, publishing `health` with it; `view`: the Lease as read.
    async fn try_acquire_or_renew(
        &mut self,
        health: &LeaderHealth,
        answers: Option<&str>,
        view: &mut LeaseInfo,
    ) -> Result<Attempt, kube::Error> {
        let now = mono_now();
        let pp = PostParams {
            field_manager: Some(crate::cluster::apply::FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        let current = self.api.get_opt(&self.me.name).await?;
        let mut seen_at = now;
        if let Some(c) = &current {
            let rv = c.metadata.resource_version.clone().unwrap_or_default();
            match &self.observed {
                Some((r, at)) if *r == rv => seen_at = *at,
                _ => self.observed = Some((rv, now)),
            }
            *view = view_of(view, c, seen_at, self.me.timing.duration);
        }
        let holder = current.as_ref().and_then(holder_of);
        let ours = holder.as_deref() == Some(self.me.identity.as_str());
        let mut next = current.clone().unwrap_or_else(|| Lease {
            metadata: ObjectMeta {
                name: Some(self.me.name.clone()),
                ..ObjectMeta::default()
            },
            ..Lease::default()
        });
        let mut s = next.spec.take().unwrap_or_default();
        if !ours && holder.is_some() {
            let declared = declared_duration(&s, self.me.timing.duration);
            let their = declared.min(self.me.timing.longest);
            let renewed_ago = s
                .renew_time
                .as_ref()
                .and_then(|t| chrono_of(t.0))
                .map(|t| Utc::now() - t);
            // A duration beyond sense is honoured only up to the bound, on this copy's clock
            // as any other; and a record whose own renewal is already older than the bound
            // (by the wall clock: skew is nothing beside an hour) has expired now, so a copy
            // started long after its holder left does not wait the bound again.
            let beyond = declared > their;
            if beyond {
                self.beyond_sense(holder.as_deref(), declared, their);
            }
            let abandoned = beyond
                && renewed_ago
                    .and_then(|ago| ago.to_std().ok())
                    .is_some_and(|ago| ago >= their);
            if now < seen_at + their && !abandoned {
                let standby = Standby {
                    renewed_ago,
                    takeover_in: (seen_at + their).saturating_sub(now),
                    duration: their,
                };
                return Ok(Attempt::Other(holder, Some(standby)));
            }
        }
        s.holder_identity = Some(self.me.identity.clone());
        s.lease_duration_seconds =
            Some(i32::try_from(self.me.timing.duration.as_secs()).unwrap_or(i32::MAX));
        let stamp = MicroTime(k8s_openapi::jiff::Timestamp::now());
        s.renew_time = Some(stamp.clone());
        if !ours {
            s.acquire_time = Some(stamp);
            let transitions = s.lease_transitions.unwrap_or(0) + 1;
            s.lease_transitions = Some(current.as_ref().map_or(0, |_| transitions));
        }
        next.spec = Some(s);
        next.metadata.managed_fields = None;
        let annotations = next
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        annotations.insert(HEALTH_ANNOTATION.into(), health_to_annotation(health));
        // The answers to requests ride on the renewal: only a Lease writer can put them here.
        match answers {
            Some(a) => annotations.insert(ANSWERS_ANNOTATION.into(), a.to_string()),
            None => annotations.remove(ANSWERS_ANNOTATION),
        };
        let written = match &current {
            None => self.api.create(&pp, &next).await,
            Some(_) => self.api.replace(&self.me.name, &pp, &next).await,
        };
        match written {
            Ok(l) => {
                // What the holder taken over from answered is not handled again.
                if !ours && let Some(c) = &current {
                    let a = c.metadata.annotations.as_ref();
                    let left = a.and_then(|a| a.get(ANSWERS_ANNOTATION));
                    self.ctx.answers.took_over(left.map(String::as_str));
                }
                self.observed = l.metadata.resource_version.clone().map(|rv| (rv, now));
                *view = view_of(view, &l, now, self.me.timing.duration);
                Ok(Attempt::Holds)
            }
            Err(e) if status_code(&e) == Some(409) => Ok(Attempt::Other(holder, None)),
            Err(e) => Err(e),
        }
    }
}

/// What this copy competes with, and what it publishes of itself with its renewals.
pub struct Election {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub timing: Timing,
    pub pod: Option<String>,
    pub settings: crate::core::settings::Settings,
}

/// What a copy does with the Lease, for the message of its failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeaseUse {
    Read,
    Compete,
}

/// `status`: the HTTP status of the failure, if the server answered; `why`: its words.
fn lease_access_error(
    namespace: &str,
    name: &str,
    status: Option<u16>,
    why: &str,
    using: LeaseUse,
) -> AccessError {
    let kind = match status {
        Some(401 | 403) => AccessErrorKind::Forbidden,
        _ => AccessErrorKind::Other,
    };
    AccessError {
        resource: LEASES.into(),
        kind,
        message: match using {
            // kube's own text of an API error ends in a debug dump of the Status: never shown.
            LeaseUse::Read => format!(
                "cannot read Lease {namespace}/{name} to show who reconciles: {why}{}",
                // Views watch the Lease: `get` alone, enough before they did, is not.
                if kind == AccessErrorKind::Forbidden {
                    " (needs get/list/watch on that Lease; `kubectl vap install --print` grants them)"
                } else {
                    ""
                }
            ),
            LeaseUse::Compete => format!(
                "cannot use Lease {namespace}/{name}: {why} (needs get/create/update on leases in namespace {namespace}, and the namespace must exist)"
            ),
        },
    }
}

/// May touch what the election uses: the client (the Lease), the leadership it sets, the
/// status (access errors, the event log, what the health publishes), the queue (its length
/// published; dropped when the Lease is lost, with the stores), the metrics, the answers it
/// publishes, the outage log, the Events recorder (flushed at the end) and a [`Resync`] on
/// gaining the Lease.
pub struct LeaseContext {
    pub client: kube::Client,
    pub leadership: Arc<Leadership>,
    pub status: Arc<Status>,
    pub queue: Arc<SharedQueue>,
    pub stores: Arc<Stores>,
    pub metrics: Arc<Metrics>,
    pub answers: Arc<Answers>,
    pub outage: Arc<Outage>,
    pub recorder: Recorder,
    pub resync: Resync,
}

impl LeaseContext {
    /// The fence is gone (lease lost, renewal deadline passed): what was queued is dropped and
    /// every store lists again, so nothing decided before is acted on after.
    fn forget_everything(&self) {
        self.queue.discard();
        self.stores.forget();
        self.status.touch();
    }
}

/// May touch what following the Lease holder uses: the client (the Lease, and whether the
/// server answers), the stores (only to hear when their watches start over), the status
/// (access errors, the feed) and the outage log.
pub struct FollowContext {
    pub client: kube::Client,
    pub stores: Arc<Stores>,
    pub status: Arc<Status>,
    pub outage: Arc<Outage>,
}

/// Runs the election until `stopping`: keeps the fence (and the leading flag, for views) up
/// to date; releases the lease at the end. `view_tx` receives the Lease as seen.
pub async fn run(
    ctx: LeaseContext,
    election: Election,
    view_tx: watch::Sender<LeaseInfo>,
    stopping: tokio_util::sync::CancellationToken,
) {
    let mut campaign = Campaign {
        api: Api::namespaced(ctx.client.clone(), &election.namespace),
        lease: ObjectRef::new(
            "coordination.k8s.io/v1",
            "Lease",
            format!("{}/{}", election.namespace, election.name),
        ),
        me: election,
        observed: None,
        beyond_sense: None,
        failing_since: None,
        standing_by: None,
        ctx,
    };
    // The election's own handle on the fence: `campaign` changes between its looks.
    let (timing, leadership) = (campaign.me.timing, campaign.ctx.leadership.clone());
    let fence = &leadership.fence;
    loop {
        // A deadline passed while leading (paused, or renewals failed for too long): nothing
        // decided before counts. Checked before asking the server, so even a renewal that
        // succeeds now starts from fresh lists.
        if fence.expired() {
            campaign.lose("the renew deadline passed (this copy was paused, or could not renew)");
        }
        let sent = mono_now();
        let mut view = view_tx.borrow().clone();
        // Bounded as client-go bounds it: the holder's attempt by what is left of its fence (an
        // answer after that confirms nothing), any other by the renew deadline. A renewal nobody
        // answers ends here: the holder stops leading when its fence closes.
        let bound = fence.remaining().unwrap_or(timing.renew_deadline);
        let published = campaign.health();
        let answers = campaign.ctx.answers.annotation();
        let attempt = campaign.try_acquire_or_renew(&published, answers.as_deref(), &mut view);
        let result = tokio::time::timeout(bound, attempt).await;
        match &result {
            Err(_) => campaign.unanswered(bound),
            Ok(Ok(Attempt::Holds)) => campaign.holds(sent).await,
            Ok(Ok(Attempt::Other(h, standby))) => campaign.held_by(h.as_deref(), standby.as_ref()),
            // The fence keeps its deadline: writes go on until it passes, no longer.
            Ok(Err(e)) => campaign.failed(e),
        }
        view.leading = leadership.is_leading();
        let status = &campaign.ctx.status;
        match result {
            // Refused (not merely unanswered): who holds it is unknown from here — but not to
            // a holder still within its deadline.
            Ok(Err(e)) if status_code(&e).is_some() && !view.leading => {
                let why = LeaseRefused::new(status_code(&e), || describe(&e));
                send_view(status, &view_tx, blank(&view, Some(why)));
            }
            Ok(Err(_)) => {}
            _ => send_view(status, &view_tx, view),
        }
        tokio::select! {
            () = tokio::time::sleep(timing.retry) => {}
            () = stopping.cancelled() => break,
        }
    }
    // The last outcomes are this holder's to report, before another copy may take over.
    if fence.may_write() {
        campaign.ctx.recorder.flush().await;
    }
    campaign.release().await;
    view_tx.send_modify(|v| v.leading = false);
}

/// What the election loop of one copy keeps between attempts, and what it does with each.
struct Campaign {
    ctx: LeaseContext,
    api: Api<Lease>,
    lease: ObjectRef,
    me: Election,
    /// The Lease record last seen (resourceVersion) and when, on [`mono_now`].
    observed: Option<(String, Duration)>,
    /// The holder and duration last warned about as beyond sense (said once for each).
    beyond_sense: Option<(Option<String>, Duration)>,
    /// Since when the Lease's own requests fail with an answer (403, 404, …).
    failing_since: Option<Duration>,
    /// The other holder last said (a standby copy says who reconciles, once per holder).
    standing_by: Option<String>,
}

impl Campaign {
    /// What the holder publishes of itself with each renewal.
    fn health(&self) -> LeaderHealth {
        let status = &self.ctx.status;
        LeaderHealth {
            pod: self.me.pod.clone(),
            queue: self.ctx.queue.len(),
            last_sync: status.last_sync(),
            settings: Some(self.me.settings.clone()),
            refused: status.refusals(),
            contested: status.published_contests(),
            guard: status.guard_problem(),
        }
    }

    /// Leadership is not confirmed any more: writes stop at once; the queue and the stores are
    /// dropped (they list again) before this copy writes again.
    fn lose(&self, why: &str) {
        let ctx = &self.ctx;
        let had = ctx.leadership.fence.revoke();
        let was = ctx.leadership.set_leading(false);
        ctx.metrics.set_leader(false);
        // Answers still unpublished are dropped with the queue: their requests' keys will not
        // be reconciled here.
        ctx.answers.clear();
        if !had && !was {
            return;
        }
        tracing::warn!(
            "lost Lease {}: {why}; not writing; dropping the queue and relisting everything before writing again",
            self.lease.name
        );
        let identity = &self.me.identity;
        self.feed(format!(
            "{identity} lost the lease ({why}); writes stop, queue dropped, relisting"
        ));
        ctx.forget_everything();
    }

    /// Says on the copy's feed (the event log) what became of its leadership.
    fn feed(&self, what: String) {
        let lease = self.lease.clone();
        self.ctx
            .status
            .log(EventVerb::Lease, lease, EventResult::Ok, what);
    }

    /// The Lease was read and answered: usable again (an earlier failure no longer stands).
    fn answered(&mut self) {
        self.ctx.outage.reachable();
        self.ctx.status.set_access(LEASES, None);
        if let Some(since) = self.failing_since.take() {
            tracing::info!(
                "Lease {} reachable again after {}s",
                self.lease.name,
                (mono_now() - since).as_secs()
            );
        }
    }

    /// Says once per holder and duration that the Lease's duration is beyond sense and how
    /// long it is honoured instead.
    fn beyond_sense(&mut self, holder: Option<&str>, declared: Duration, honoured: Duration) {
        let key = (holder.map(str::to_string), declared);
        if self.beyond_sense.as_ref() == Some(&key) {
            return;
        }
        tracing::warn!(
            "Lease {} held by {} says leaseDurationSeconds {}, beyond any copy's: it is honoured for {}s only, then taken over (docs/reconciler.md, \"Singleton writes: the Lease\")",
            self.lease.name,
            crate::text::printable(holder.unwrap_or("nobody")),
            declared.as_secs(),
            honoured.as_secs()
        );
        self.beyond_sense = Some(key);
    }

    /// This copy holds the Lease: renewed at `sent`.
    async fn holds(&mut self, sent: Duration) {
        self.answered();
        let ctx = &self.ctx;
        let lease = &self.lease.name;
        // Said before the fence opens: a worker with a key in hand writes as soon as it does,
        // and its writes must not come before the line that says this copy leads.
        let identity = &self.me.identity;
        if !ctx.leadership.is_leading() {
            tracing::info!("acquired Lease {lease} as {identity}: resyncing everything");
            self.feed(format!("{identity} acquired the lease; resync"));
        }
        ctx.leadership.fence.renewed(sent, &self.me.timing);
        // A renewal that took longer than the deadline confirms nothing.
        if !ctx.leadership.fence.may_write() {
            self.lose("the renewal came back too late");
        } else if !ctx.leadership.set_leading(true) {
            self.standing_by = None;
            ctx.metrics.set_leader(true);
            crate::controller::ask::channel::ensure_configmap(
                &ctx.client,
                &self.me.namespace,
                &self.me.name,
            )
            .await;
            ctx.resync.resync();
        }
    }

    fn held_by(&mut self, holder: Option<&str>, standby: Option<&Standby>) {
        self.answered();
        if let Some(h) = holder
            && self.standing_by.as_deref() != Some(h)
        {
            let h = crate::text::printable(h);
            tracing::info!("{}", standing_by_text(&self.lease.name, &h, standby));
            self.standing_by = holder.map(str::to_string);
        }
        if self.ctx.leadership.is_leading() {
            let by = holder.map_or("another copy".into(), crate::text::printable);
            self.lose(&format!("{by} holds the Lease now"));
        }
    }

    fn failed(&mut self, e: &kube::Error) {
        let (ns, name, lease) = (&self.me.namespace, &self.me.name, &self.lease.name);
        let (status, why) = (status_code(e), describe(e));
        let error = lease_access_error(ns, name, status, &why, LeaseUse::Compete);
        if crate::cluster::unanswered(e) {
            // No answer at all: part of the copy's one outage log.
            self.ctx
                .outage
                .failed(&format!("Lease {lease}"), &e.to_string());
        } else if self.failing_since.is_none() {
            self.failing_since = Some(mono_now());
            tracing::warn!("{}", error.message);
        } else {
            tracing::debug!("{}", error.message);
        }
        self.ctx.status.set_access(LEASES, Some(error));
    }

    /// No complete answer within `bound`: a holder stops leading (its fence has closed), and
    /// every copy reports the Lease unusable (so does `/readyz`) until an attempt passes.
    fn unanswered(&mut self, bound: Duration) {
        let why = format!(
            "no answer within {:.1}s (request abandoned)",
            bound.as_secs_f32()
        );
        let (ns, name, lease) = (&self.me.namespace, &self.me.name, &self.lease.name);
        let error = lease_access_error(ns, name, None, &why, LeaseUse::Compete);
        self.ctx.outage.failed(&format!("Lease {lease}"), &why);
        self.ctx.status.set_access(LEASES, Some(error));
        if self.ctx.leadership.is_leading() || self.ctx.leadership.fence.expired() {
            self.lose(&format!(
                "the renewal got no answer within the renew deadline ({why})"
            ));
        }
    }

    /// Writes stop, then the Lease is released if this copy still holds it (whatever it
    /// believes): a waiting copy takes it at once.
    async fn release(self) {
        let ctx = &self.ctx;
        ctx.leadership.fence.revoke();
        let held = ctx.leadership.set_leading(false);
        ctx.metrics.set_leader(false);
        let (lease, name) = (&self.lease.name, &self.me.name);
        let release = async {
            let Some(mut next) = self.api.get_opt(name).await? else {
                return Ok(());
            };
            if holder_of(&next).as_deref() != Some(self.me.identity.as_str()) {
                return Ok(());
            }
            let s = next.spec.get_or_insert_with(Default::default);
            s.holder_identity = None;
            s.renew_time = None;
            next.metadata.managed_fields = None;
            if let Some(a) = next.metadata.annotations.as_mut() {
                a.remove(HEALTH_ANNOTATION);
                a.remove(ANSWERS_ANNOTATION);
            }
            let pp = PostParams::default();
            self.api.replace(name, &pp, &next).await.map(|_| ())
        };
        match release.await {
            Ok(()) if held => tracing::info!("released Lease {lease}"),
            Ok(()) => {}
            Err(e) if held => tracing::warn!("releasing Lease {lease}: {}", describe(&e)),
            // Never held (its refusal was said when it was met): nothing to release.
            Err(e) => tracing::debug!("releasing Lease {lease}: {}", describe(&e)),
        }
    }
}

/// Publishes `v` if it differs from what views have, and tells a change of who leads once
/// on the copy's feed.
fn send_view(status: &Status, tx: &watch::Sender<LeaseInfo>, v: LeaseInfo) {
    tx.send_if_modified(|cur| {
        if *cur == v {
            return false;
        }
        if let Some(what) = cur.turn(&v) {
            status.happened(Happened::Lease(LeaseChange {
                time: Utc::now(),
                lease: v.lease.clone(),
                what,
            }));
        }
        *cur = v;
        true
    });
}

/// The Lease `namespace/name` as one read shows it: who holds it, since when, their health.
/// (Vacancy needs two reads a lease duration apart; one read calls only an unheld Lease
/// vacant, or one whose holder's last renewal is older than its duration by our clock.)
pub async fn read_lease(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<LeaseInfo, kube::Error> {
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let info = LeaseInfo {
        lease: format!("{namespace}/{name}"),
        ..LeaseInfo::default()
    };
    let Some(l) = api.get_opt(name).await? else {
        return Ok(LeaseInfo {
            vacant: true,
            ..info
        });
    };
    let default = Duration::from_secs(LEASE_DURATION);
    let mut view = view_of(&info, &l, mono_now(), default);
    let spec = l.spec.clone().unwrap_or_default();
    let duration = chrono::Duration::from_std(duration_of(&spec, default)).unwrap_or_default();
    let renewed = spec.renew_time.as_ref().and_then(|t| chrono_of(t.0));
    view.vacant |= renewed.is_some_and(|r| Utc::now() - r > duration);
    Ok(view)
}

/// When the view of a Lease last seen at `seen_at` changes with nothing renewed: its holder
/// turns unresponsive at a third of its duration, and the Lease vacant after the duration and
/// [`TAKEOVER_GRACE`] (see [`view_of`]); `None` once past both, or with no holder.
fn next_judgement(l: &Lease, seen_at: Duration, default: Duration) -> Option<Duration> {
    holder_of(l)?;
    let duration = duration_of(&l.spec.clone().unwrap_or_default(), default);
    let now = mono_now();
    [duration / 3, duration + TAKEOVER_GRACE]
        .into_iter()
        .map(|after| seen_at.saturating_add(after))
        .find(|t| *t > now)
}

/// Whether the API server answers this copy now (whatever the answer); when it does not,
/// that is the copy's outage, told where every failure to reach it is (`what` asked).
async fn answers(ctx: &FollowContext, what: &str) -> bool {
    if ctx.outage.unreachable().is_some() {
        return false;
    }
    let asked = tokio::time::timeout(Duration::from_secs(5), ctx.client.apiserver_version());
    let failure = match asked.await {
        Ok(Ok(_)) => return true,
        Ok(Err(e)) if status_code(&e).is_some() => return true,
        Ok(Err(e)) => describe(&e),
        Err(_) => "no answer within 5s".into(),
    };
    ctx.outage.failed(what, &failure);
    false
}

/// Follows a Lease this copy does not compete for (read-only views) by watching it, so a
/// renewal or a takeover is seen as it happens.
pub async fn watch_holder(
    ctx: FollowContext,
    namespace: String,
    name: String,
    view_tx: watch::Sender<LeaseInfo>,
) {
    use futures::StreamExt;
    let api: Api<Lease> = Api::namespaced(ctx.client.clone(), &namespace);
    let what = format!("Lease {namespace}/{name}");
    let mut stream = crate::cluster::watch::object(api.clone(), &name, what.clone());
    // Told when the API server answers again after an outage: the watch starts over at once
    // rather than after its backoff, so the views see the holder as soon as they can.
    let mut retry = ctx.stores.relists();
    let default = Duration::from_secs(LEASE_DURATION);
    // The Lease last seen, and when its record (resourceVersion) was first seen: vacancy is
    // judged on this copy's own clock, as the election judges it.
    let mut seen: Option<(Lease, Duration)> = None;
    // The server did not answer the last time: nothing is judged until it does (a holder
    // that cannot be seen is not one that stopped renewing).
    let mut blind = false;
    loop {
        // A holder that stops renewing sends no event: a timer from when its record was
        // first seen turns the view unresponsive, then vacant.
        let next = seen
            .as_ref()
            .filter(|_| !blind)
            .and_then(|(l, at)| next_judgement(l, *at, default));
        let wait = next.unwrap_or_default().saturating_sub(mono_now());
        let item = tokio::select! {
            () = crate::controller::tasks::changed(&mut retry) => {
                stream = crate::cluster::watch::object(api.clone(), &name, what.clone());
                continue;
            }
            item = stream.next() => item,
            () = tokio::time::sleep(wait), if next.is_some() => {
                // Before the holder is judged by its silence, ask whether the silence is ours
                // (a watch may hang on a server that shuts down, saying nothing for seconds).
                blind = !answers(&ctx, &what).await;
                if let (Some((l, at)), false) = (&seen, blind) {
                    let view = view_of(&view_tx.borrow(), l, *at, default);
                    send_view(&ctx.status, &view_tx, view);
                }
                continue;
            }
        };
        match item {
            None => return,
            Some(Ok(lease)) => {
                // After an outage, the record is first seen now: its holder could not renew
                // while nobody could write, and that time is not its silence.
                let after_outage = std::mem::replace(&mut blind, false);
                ctx.status.set_access(LEASES, None);
                let base = view_tx.borrow().clone();
                let rv = |l: &Lease| l.metadata.resource_version.clone();
                seen = lease.map(|l| match seen.take() {
                    Some((old, at)) if !after_outage && rv(&old) == rv(&l) => (l, at),
                    _ => (l, mono_now()),
                });
                let view = match &seen {
                    None => LeaseInfo {
                        vacant: true,
                        ..blank(&base, None)
                    },
                    Some((l, at)) => view_of(&base, l, *at, default),
                };
                send_view(&ctx.status, &view_tx, view);
            }
            Some(Err(e)) => {
                let status = crate::cluster::watch::status(&e);
                let why = crate::cluster::watch::describe(&e);
                let error = lease_access_error(&namespace, &name, status, &why, LeaseUse::Read);
                ctx.status.set_access(LEASES, Some(error));
                // An answer that refuses: who holds it is unknown, never "nobody". No answer
                // at all keeps the last view (the connection's state says the rest).
                if status.is_some() {
                    seen = None;
                    let view = blank(&view_tx.borrow(), Some(LeaseRefused::new(status, || why)));
                    send_view(&ctx.status, &view_tx, view);
                } else {
                    blind = true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The health annotation keys refusals and contests by the objects' ids as text, in the
    /// format every copy reads (`Kind/name`), byte for byte; read back, they are the same ids.
    /// A key that is no id (no `/`) is dropped, not taken for an object.
    #[test]
    fn the_health_annotation_keys_objects_by_their_ids_as_text() {
        let vap = ObjectId::new("ValidatingAdmissionPolicy", "gatekeeper-k8sx");
        let binding = ObjectId::new("ValidatingAdmissionPolicyBinding", "odd.name-ü/x");
        let health = LeaderHealth {
            refused: vec![(vap.clone(), "spec.validations: Invalid".into())],
            contested: vec![(binding.clone(), "another writer".into())],
            ..LeaderHealth::default()
        };
        let text = health_to_annotation(&health);
        assert_eq!(
            text,
            r#"{"queue":0,"refused":{"ValidatingAdmissionPolicy/gatekeeper-k8sx":"spec.validations: Invalid"},"contested":{"ValidatingAdmissionPolicyBinding/odd.name-ü/x":"another writer"}}"#
        );
        let lease_with = |annotation: &str| -> Lease {
            serde_json::from_value(serde_json::json!({
                "metadata": { "name": "l", "annotations": { HEALTH_ANNOTATION: annotation } },
            }))
            .expect("a Lease")
        };
        assert_eq!(health_of(&lease_with(&text)), Some(health));
        let junk = r#"{"queue":0,"refused":{"no-slash":"x","K8sX/c":"y"}}"#;
        let read = health_of(&lease_with(junk)).expect("health");
        assert_eq!(read.refused, vec![(ObjectId::new("K8sX", "c"), "y".into())]);
    }

    /// Issue 28: a holder killed 50 s earlier was called "that copy writes".
    #[test]
    fn a_standby_says_how_old_the_holders_record_is_and_when_it_takes_over() {
        let standby = |ago: Option<i64>, takeover: u64| Standby {
            renewed_ago: ago.map(chrono::Duration::seconds),
            takeover_in: Duration::from_secs(takeover),
            duration: Duration::from_secs(15),
        };
        assert_eq!(
            standing_by_text("ns/l", "vm-1", Some(&standby(Some(50), 15))),
            "Lease ns/l is held by vm-1, not renewed for 50 s by its record; taking over in 15 s unless it renews"
        );
        assert_eq!(
            standing_by_text("ns/l", "vm-1", Some(&standby(Some(1), 15))),
            "Lease ns/l is held by vm-1 (renewed 1 s ago by its record): that copy writes; standing by, taking over in 15 s unless it renews"
        );
        // A record from the future (its clock ahead of ours) is not a negative age.
        assert!(
            standing_by_text("ns/l", "vm-1", Some(&standby(Some(-3), 14)))
                .contains("(renewed 0 s ago by its record)")
        );
        assert_eq!(
            standing_by_text("ns/l", "vm-1", Some(&standby(None, 9))),
            "Lease ns/l is held by vm-1, with no renewal on record; taking over in 9 s unless it renews"
        );
        assert!(standing_by_text("ns/l", "vm-1", None).contains("that copy writes; standing by"));
    }

    /// A view that may not watch the Lease says what to grant; a failing server is not told
    /// to fix its RBAC.
    #[test]
    fn a_refused_read_of_the_lease_names_the_verbs_views_need() {
        let refused = lease_access_error("ns", "l", Some(403), "forbidden", LeaseUse::Read);
        assert_eq!(refused.kind, AccessErrorKind::Forbidden);
        assert!(
            refused.message.ends_with(
                "(needs get/list/watch on that Lease; `kubectl vap install --print` grants them)"
            ),
            "{}",
            refused.message
        );
        let failed = lease_access_error("ns", "l", Some(500), "etcd timeout", LeaseUse::Read);
        assert_eq!(
            failed.message,
            "cannot read Lease ns/l to show who reconciles: etcd timeout"
        );
    }

    /// A holder that stops renewing (`kill -9`) is unresponsive until its Lease expires and
    /// through the grace a standby needs to take it; only then vacant. A watching view gets no
    /// event meanwhile: it looks again at each turn, counted from when the record was first seen.
    #[test]
    fn a_holder_that_stops_renewing_is_unresponsive_then_vacant_after_the_grace() {
        let lease: Lease = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "l" },
            "spec": { "holderIdentity": "a", "leaseDurationSeconds": 15 }
        }))
        .expect("a Lease");
        let d = Duration::from_secs(LEASE_DURATION);
        let me = |id: &str| LeaseInfo {
            identity: id.into(),
            ..LeaseInfo::default()
        };
        let now = mono_now();
        let vacant_after = 15 + TAKEOVER_GRACE.as_secs();
        // Seconds since the record was first seen: vacant, unresponsive, the next look then.
        for (ago, vacant, unresponsive, next) in [
            (0, false, false, Some(5)),
            (6, false, true, Some(vacant_after)),
            (14, false, true, Some(vacant_after)),
            (16, false, true, Some(vacant_after)),
            (19, false, true, Some(vacant_after)),
            (21, true, false, None),
        ] {
            let at = now - Duration::from_secs(ago);
            let v = view_of(&me("b"), &lease, at, d);
            let judged = (v.vacant, v.unresponsive_until.is_some());
            assert_eq!(judged, (vacant, unresponsive), "{ago}s: {v:?}");
            let next = next.map(|s| at + Duration::from_secs(s));
            assert_eq!(next_judgement(&lease, at, d), next, "{ago}s");
        }
        // Its own Lease is never vacant nor unresponsive to the holder; an unheld one is never
        // judged again.
        let own = view_of(&me("a"), &lease, now - Duration::from_secs(30), d);
        assert!(!own.vacant && own.unresponsive_until.is_none());
        assert_eq!(next_judgement(&Lease::default(), now, d), None);
    }
}
