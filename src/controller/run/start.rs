//! Starting a copy, in named phases: discovery (served VAP API, server version, Gatekeeper's
//! generator), [`watch_everything`] (reflector stores), [`decide_writes`] (may this copy write
//! at all), [`elect`] (compete for the Lease, or follow its holder), [`read_before_deciding`]
//! (what is served, Gatekeeper's Config and webhook), [`await_first_lists`], then
//! [`spawn_workers`], [`serve_requests`], a periodic resync, [`publish_state`] and
//! [`serve_metrics`], every task through the copy's supervisor (`tasks`). [`launch`] returns the
//! [`Controller`] handle; everything else stays inside.
//!
//! Start-up alone holds every part of a copy ([`Parts`]): each task is given a context of the
//! parts it touches, defined beside the task and built here.

use super::handle::{Controller, HandleContext, Request};
use super::publish::{PublishContext, Sources};
use super::workers::WorkerContext;
use super::writer::WriterContext;
use crate::cluster::discovery::{
    discover_admission_api, pod_status_resources, resource_name, templates_resource,
};
use crate::controller::ask::channel::Answers;
use crate::controller::ask::requests::Tracker;
use crate::controller::error::Error;
use crate::controller::lead::commands::{RequestContext, Route};
use crate::controller::lead::lease::{Election, FollowContext, LeaseContext, watch_holder};
use crate::controller::reconcile::cache::OpinionCache;
use crate::controller::reconcile::keys::Scope;
use crate::controller::reconcile::queue::SharedQueue;
use crate::controller::reconcile::world::TemplateStore;
use crate::controller::store::stores::{Stores, TypedStore, Writers};
use crate::controller::tasks::changed;
use crate::controller::tasks::{Lifetime, Tasks};
use crate::controller::tell::events::{EVENTS_RESOURCE, Recorder};
use crate::controller::tell::metrics::Metrics;
use crate::controller::tell::outage::{Outage, WriteFailures};
use crate::controller::tell::pod_status::PodStatuses;
use crate::controller::tell::write_log::WriteLog;
use crate::controller::view::fence::Leadership;
use crate::controller::view::state::{Happened, LeaseInfo, LiveState};
use crate::controller::view::status::Status;
use crate::controller::watch::discovery::DiscoveryContext;
use crate::controller::watch::gatekeeper::RecheckContext;
use crate::controller::watch::gatekeeper_config::GatekeeperConfigContext;
use crate::controller::watch::resync::Resync;
use crate::controller::watch::watches::{self, WatchContext};
use crate::core::Options;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject};
use kube::runtime::reflector::store::Writer;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

/// Whether this copy takes part in the lease election (and so may write).
#[derive(Debug, Clone)]
pub enum Mode {
    /// Watch only: the TUI without `--reconcile` (the Lease is read to show its holder, and
    /// requests go to the holder).
    ReadOnly,
    /// Compete for the lease; write while holding it (`take_over`: even though Gatekeeper's
    /// generator looks active).
    Elect { take_over: bool },
}

#[derive(Debug, Clone)]
pub struct Config {
    pub options: Options,
    pub mode: Mode,
    pub lease_namespace: String,
    pub lease_name: String,
    /// Concurrent reconciles (a key is never processed twice at once).
    pub workers: usize,
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// The keys this copy works on (a one-shot `reconcile TEMPLATE`: that template's).
    pub scope: Scope,
    /// This copy leads only to carry out one request (a one-shot `replay`/`reconcile` with
    /// the Lease free): the request's outcome counts every write the copy made, those of
    /// taking the Lease included, so its line, its Event and the command's output agree.
    pub one_shot: bool,
    /// This copy's account is confined by the guard `install --print` ships (`run
    /// --expect-guard`): a copy that may write says when that guard is gone, unbound or changed
    /// (`core::guard`).
    pub expect_guard: bool,
}

impl Config {
    pub fn new(options: Options, mode: Mode, lease_namespace: String, lease_name: String) -> Self {
        Config {
            options,
            mode,
            lease_namespace,
            lease_name,
            workers: DEFAULT_WORKERS,
            metrics_addr: None,
            scope: Scope::All,
            one_shot: false,
            expect_guard: false,
        }
    }
}

/// Concurrent reconciles by default: enough requests in flight to keep a busy API server
/// working between responses (measured in docs/benchmarks.md).
pub const DEFAULT_WORKERS: usize = 16;

/// Settings views do not need.
#[derive(Debug, Clone)]
pub struct Tuning {
    /// Publish the store snapshot and the cluster's Events in [`LiveState`] (the TUI needs
    /// them; a headless `run` does not).
    pub publish_snapshot: bool,
    /// Enqueue everything this often, to catch what no event reports.
    pub resync_every: Duration,
    /// Look for Gatekeeper's own generator again this often (it may be switched on later).
    pub gatekeeper_recheck: Duration,
    pub lease_duration: Duration,
    /// The longest duration another holder's Lease is honoured for: a record beyond it
    /// (`leaseDurationSeconds: 2147483647`) is expired once it is this old (tests: a short one).
    pub longest_lease_duration: Duration,
    /// When another writer's undoing makes an object contested, and how long it is left alone
    /// (`core::contest`; tests: shorter holds).
    pub contest: crate::core::contest::Tuning,
    /// Tests of the supervisor only: the task of this name ends as a panic once started.
    pub fail_task: Option<String>,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            publish_snapshot: true,
            resync_every: Duration::from_secs(600),
            gatekeeper_recheck: Duration::from_secs(60),
            lease_duration: Duration::from_secs(crate::controller::view::fence::LEASE_DURATION),
            longest_lease_duration: crate::controller::view::fence::LONGEST_LEASE_DURATION,
            contest: crate::core::contest::Tuning::default(),
            fail_task: None,
        }
    }
}

/// The Lease `run` competes for by default (and the one read-only views report on).
pub const DEFAULT_LEASE_NAMESPACE: &str = crate::core::options::DEFAULT_LEASE_NAMESPACE;
pub const DEFAULT_LEASE_NAME: &str = "kubectl-vap";

/// How long start-up waits for the first list of every watch.
const SYNC_TIMEOUT: Duration = Duration::from_secs(60);

/// Every part of a running copy, as start-up builds them (cheap to share: each is an `Arc`, or
/// a handle that clones as one). Only start-up holds them all; each task is given the context
/// of the parts it touches, built by the methods below.
struct Parts {
    client: kube::Client,
    stores: Arc<Stores>,
    queue: Arc<SharedQueue>,
    status: Arc<Status>,
    leadership: Arc<Leadership>,
    metrics: Arc<Metrics>,
    /// The one log of an API server that does not answer (watches, Lease, writes).
    outage: Arc<Outage>,
    /// Failed writes that will be retried.
    failures: Arc<WriteFailures>,
    recorder: Recorder,
    /// Requests in progress, and what their keys' reconciles did.
    tracker: Arc<Tracker>,
    tasks: Arc<Tasks>,
    /// Answers to other copies' requests, published in the Lease with the renewals.
    answers: Arc<Answers>,
    /// What was decided, written where Gatekeeper's users look.
    pod_statuses: Arc<PodStatuses>,
    /// Each write's log line; counted when one object is written again and again.
    write_log: Arc<WriteLog>,
}

impl Parts {
    fn new(
        client: kube::Client,
        stores: Stores,
        queue: SharedQueue,
        recorder: Recorder,
        tasks: Tasks,
        pod_statuses: PodStatuses,
    ) -> Self {
        Parts {
            client,
            stores: Arc::new(stores),
            queue: Arc::new(queue),
            status: Arc::default(),
            leadership: Arc::default(),
            metrics: Arc::default(),
            outage: Arc::default(),
            failures: Arc::default(),
            recorder,
            tracker: Arc::default(),
            tasks: Arc::new(tasks),
            answers: Arc::default(),
            pod_statuses: Arc::new(pod_statuses),
            write_log: Arc::default(),
        }
    }

    fn resync(&self) -> Resync {
        Resync {
            stores: self.stores.clone(),
            queue: self.queue.clone(),
            pod_statuses: self.pod_statuses.clone(),
        }
    }

    fn watches(&self) -> WatchContext {
        WatchContext {
            client: self.client.clone(),
            stores: self.stores.clone(),
            queue: self.queue.clone(),
            status: self.status.clone(),
            outage: self.outage.clone(),
            tasks: self.tasks.clone(),
        }
    }

    fn discovery(&self) -> DiscoveryContext {
        DiscoveryContext {
            client: self.client.clone(),
            stores: self.stores.clone(),
            resync: self.resync(),
        }
    }

    fn gatekeeper_config(&self) -> GatekeeperConfigContext {
        GatekeeperConfigContext {
            client: self.client.clone(),
            stores: self.stores.clone(),
            status: self.status.clone(),
            resync: self.resync(),
        }
    }

    fn recheck(&self) -> RecheckContext {
        RecheckContext {
            client: self.client.clone(),
            status: self.status.clone(),
            resync: self.resync(),
        }
    }

    fn lease(&self) -> LeaseContext {
        LeaseContext {
            client: self.client.clone(),
            leadership: self.leadership.clone(),
            status: self.status.clone(),
            queue: self.queue.clone(),
            stores: self.stores.clone(),
            metrics: self.metrics.clone(),
            answers: self.answers.clone(),
            outage: self.outage.clone(),
            recorder: self.recorder.clone(),
            resync: self.resync(),
        }
    }

    fn follow(&self) -> FollowContext {
        FollowContext {
            client: self.client.clone(),
            stores: self.stores.clone(),
            status: self.status.clone(),
            outage: self.outage.clone(),
        }
    }

    fn requests(&self) -> RequestContext {
        RequestContext {
            client: self.client.clone(),
            stores: self.stores.clone(),
            queue: self.queue.clone(),
            tracker: self.tracker.clone(),
            status: self.status.clone(),
            recorder: self.recorder.clone(),
            metrics: self.metrics.clone(),
            leadership: self.leadership.clone(),
            answers: self.answers.clone(),
        }
    }

    fn writer(&self) -> WriterContext {
        WriterContext {
            client: self.client.clone(),
            stores: self.stores.clone(),
            status: self.status.clone(),
            leadership: self.leadership.clone(),
            metrics: self.metrics.clone(),
            outage: self.outage.clone(),
            failures: self.failures.clone(),
            recorder: self.recorder.clone(),
            write_log: self.write_log.clone(),
        }
    }

    fn worker(&self) -> WorkerContext {
        WorkerContext {
            writer: self.writer(),
            queue: self.queue.clone(),
            tracker: self.tracker.clone(),
            pod_statuses: self.pod_statuses.clone(),
        }
    }

    fn publish(&self) -> PublishContext {
        PublishContext {
            client: self.client.clone(),
            stores: self.stores.clone(),
            queue: self.queue.clone(),
            status: self.status.clone(),
            metrics: self.metrics.clone(),
            outage: self.outage.clone(),
            write_log: self.write_log.clone(),
        }
    }

    fn handle(&self) -> HandleContext {
        HandleContext {
            stores: self.stores.clone(),
            queue: self.queue.clone(),
            status: self.status.clone(),
            leadership: self.leadership.clone(),
            metrics: self.metrics.clone(),
            tasks: self.tasks.clone(),
        }
    }
}

/// Phase 2: a reflector store for templates, CRDs, VAPs and bindings (constraint kinds start
/// their own as their CRDs appear), and for views Gatekeeper's pod statuses.
fn watch_everything(parts: &Parts, writers: Writers, views: bool) {
    let client = &parts.client;
    let admission = parts.stores.admission().clone();
    type OnChange = fn(&WatchContext, watches::Change<'_, DynamicObject>);
    for (ar, writer, handler) in [
        (
            templates_resource(),
            writers.templates,
            watches::on_template as OnChange,
        ),
        (admission.policy(), writers.policies, watches::on_policy),
        (admission.binding(), writers.bindings, watches::on_binding),
    ] {
        let api = Api::all_with(client.clone(), &ar);
        watches::spawn_watch(api, writer, resource_name(&ar), parts.watches(), handler);
    }
    watches::spawn_watch(
        Api::<CustomResourceDefinition>::all(client.clone()),
        writers.crds,
        crate::controller::store::stores::CRDS_RESOURCE.into(),
        parts.watches(),
        watches::on_crd,
    );
    if views {
        // Shown, never decided on: kube-runtime's reflector over the one watch, errors only
        // logged (Gatekeeper may not run here at all).
        for ar in pod_status_resources() {
            let writer: Writer<DynamicObject> = Writer::new(ar.clone());
            parts.stores.add_pod_statuses(TypedStore {
                ar: ar.clone(),
                store: writer.as_reader(),
            });
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
            let name = format!("watch {}", resource_name(&ar));
            let status = parts.status.clone();
            parts.tasks.spawn(name, Lifetime::Copy, async move {
                use futures::StreamExt;
                use kube::runtime::{WatchStreamExt, reflector, watcher};
                let what = "Gatekeeper's pod statuses";
                let changes = crate::cluster::watch::changes(api, watcher::Config::default(), what);
                let mut stream = std::pin::pin!(reflector(writer, changes).touched_objects());
                while let Some(item) = stream.next().await {
                    if item.is_ok() {
                        status.touch();
                    }
                }
            });
        }
    }
}

/// Phase 3: whether this copy may write at all (an `Elect` copy, unless Gatekeeper's own
/// generator is active and `--take-over` was not given); one that may looks for the generator
/// again now and then (`--take-over` never looks again).
fn decide_writes(
    parts: &Parts,
    mode: &Mode,
    detected: Option<Result<Option<String>, crate::cluster::KubeError>>,
    namespace: &str,
    recheck: Duration,
) {
    let (Mode::Elect { take_over }, Some(detected)) = (mode, detected) else {
        parts.status.set_writes_enabled(false);
        return;
    };
    let enabled = match detected {
        Ok(Some(found)) => {
            if *take_over {
                tracing::warn!(
                    "Gatekeeper's generator looks active ({found}); writing anyway (--take-over)"
                );
            } else {
                tracing::error!(
                    "Gatekeeper's generator looks active: {found}. Not writing: {}",
                    crate::controller::watch::gatekeeper::HOW_TO_DISABLE
                );
            }
            parts.status.set_gatekeeper_generator(Some(found));
            *take_over
        }
        Ok(None) => true,
        Err(e) => {
            tracing::warn!(
                "{e}; cannot tell whether Gatekeeper's generator is active, assuming it is not"
            );
            true
        }
    };
    parts.status.set_writes_enabled(enabled);
    if enabled && !take_over {
        let recheck = crate::controller::watch::gatekeeper::recheck(
            parts.recheck(),
            namespace.into(),
            recheck,
        );
        let name = "look for Gatekeeper's generator";
        parts.tasks.spawn(name, Lifetime::Copy, recheck);
    }
}

/// Before competing: whether this copy may lead at all (`lead::rights`). One lacking says so
/// once (ERROR, `/readyz`, `run`'s exit 2 in the foreground) and asks again every
/// [`rights::ASK_AGAIN`] until it may; unanswered, nothing is claimed either way.
async fn ask_rights(parts: &Parts, lease_namespace: &str, lease_name: &str) {
    use crate::controller::lead::rights;
    let wanted = rights::to_lead(lease_namespace, lease_name);
    let asked = tokio::time::timeout(
        Duration::from_secs(5),
        rights::missing(&parts.client, &wanted),
    )
    .await;
    let lacking = match asked {
        Ok(Ok(lacking)) if !lacking.is_empty() => lacking,
        Ok(Ok(_)) => return,
        Ok(Err(e)) => {
            tracing::debug!("cannot ask which rights this copy has: {e}");
            return;
        }
        Err(_) => {
            tracing::debug!("no answer to which rights this copy has");
            return;
        }
    };
    let said = rights::lacking_text(&lacking);
    tracing::error!("{said}");
    parts.status.set_lacking_rights(Some(said));
    let (client, status) = (parts.client.clone(), parts.status.clone());
    let ask_again = async move {
        loop {
            tokio::time::sleep(rights::ASK_AGAIN).await;
            if let Ok(lacking) = rights::missing(&client, &wanted).await
                && lacking.is_empty()
            {
                tracing::info!("this copy may lead now: the rights it lacked are granted");
                status.set_lacking_rights(None);
                return;
            }
        }
    };
    parts
        .tasks
        .spawn("ask for the rights to lead", Lifetime::Job, ask_again);
}

/// Phase 4: compete for the Lease (a copy that may write), or follow its holder (read-only,
/// or refusing to write next to Gatekeeper's generator: holding the Lease without writing
/// would only block the copies that do write); the election's task, if it competes.
fn elect(
    parts: &Parts,
    config: &Config,
    identity: &str,
    tuning: &Tuning,
) -> (watch::Receiver<LeaseInfo>, Option<tokio::task::Id>) {
    let (ns, name) = (&config.lease_namespace, &config.lease_name);
    let competes = matches!(config.mode, Mode::Elect { .. }) && parts.status.writes_enabled();
    let (view_tx, view) = watch::channel(LeaseInfo {
        identity: identity.to_string(),
        lease: format!("{ns}/{name}"),
        participating: competes,
        ..LeaseInfo::default()
    });
    let election = if competes {
        let election = Election {
            namespace: ns.to_string(),
            name: name.to_string(),
            identity: identity.to_string(),
            timing: crate::controller::view::fence::Timing::new(tuning.lease_duration)
                .with_longest(tuning.longest_lease_duration),
            pod: std::env::var("POD_NAME").ok().filter(|p| !p.is_empty()),
            settings: crate::core::settings::Settings::of(&config.options),
        };
        let stopping = parts.tasks.stopping();
        let run = crate::controller::lead::lease::run(parts.lease(), election, view_tx, stopping);
        Some(parts.tasks.spawn("election", Lifetime::Copy, run).id())
    } else {
        let follow = watch_holder(parts.follow(), ns.to_string(), name.to_string(), view_tx);
        parts
            .tasks
            .spawn("follow the Lease holder", Lifetime::Copy, follow);
        None
    };
    (view, election)
}

/// Phase 5: what the decisions rest on besides the stores, read before the first one and then
/// kept current: what the API server serves, Gatekeeper's Config and, for its own shape, its
/// webhook.
async fn read_before_deciding(parts: &Parts, options: &Options) {
    // What is served, before the first constraint decides (until then its reconcile waits).
    // Subscribed first: a CRD that changes during this discovery brings another.
    let crd_changes = parts.stores.crd_changes();
    let discovery = parts.discovery();
    let first_ok = crate::controller::watch::discovery::refresh(&discovery)
        .await
        .is_ok();
    let discovery = crate::controller::watch::discovery::run(discovery, crd_changes, first_ok);
    parts.tasks.spawn("discovery", Lifetime::Copy, discovery);
    // Gatekeeper's Config, before the first VAP is written (its exclusions shape them).
    let gatekeeper_config = parts.gatekeeper_config();
    let first = crate::controller::watch::gatekeeper_config::first_read(&gatekeeper_config).await;
    let config_watch = crate::controller::watch::gatekeeper_config::run(gatekeeper_config, first);
    parts
        .tasks
        .spawn("watch Gatekeeper's Config", Lifetime::Copy, config_watch);
    // Gatekeeper's webhook, for its own shape: what each VAP copies.
    if options.policy_shape == crate::core::PolicyShape::Gatekeeper {
        let name = options.webhook_configuration_name.clone();
        let gatekeeper_webhook = parts.gatekeeper_config();
        crate::controller::watch::gatekeeper_config::first_read_webhook(&gatekeeper_webhook, &name)
            .await;
        let webhook_watch =
            crate::controller::watch::gatekeeper_config::run_webhook(gatekeeper_webhook, name);
        parts
            .tasks
            .spawn("watch Gatekeeper's webhook", Lifetime::Copy, webhook_watch);
    }
}

/// Phase 6: waits until templates, CRDs, VAPs and bindings have listed (or failed with a
/// definite read error), or [`SYNC_TIMEOUT`] passes. Constraint kinds keep listing meanwhile: the
/// workers start now and a kind's constraints are reconciled once that kind has listed.
async fn await_first_lists(stores: &Stores, status: &Status, started: std::time::Instant) {
    let fixed = stores.fixed_resources();
    let done = || {
        fixed
            .iter()
            .all(|r| stores.is_listed(r) || status.access_error(r).is_some())
    };
    if !until_listed(stores, status, done).await {
        tracing::warn!("not every watch listed within {SYNC_TIMEOUT:?}; continuing");
    } else if fixed_listed(stores) {
        let took = started.elapsed();
        tracing::info!("templates, CRDs, VAPs and bindings listed in {took:?}");
    }
}

/// Whether templates, CRDs, VAPs and bindings are all listed (not merely tried: a refusal
/// ends the first wait too, and is said by its watch).
fn fixed_listed(stores: &Stores) -> bool {
    let fixed = stores.fixed_resources();
    fixed.iter().all(|r| stores.is_listed(r))
}

/// Waits until `done` (looked at again whenever a store lists or an access error changes), or
/// [`SYNC_TIMEOUT`] passes: whether it is done.
async fn until_listed(stores: &Stores, status: &Status, done: impl Fn() -> bool) -> bool {
    let mut changes = stores.listing_changes();
    let mut access = status.subscribe();
    let waited = tokio::time::timeout(SYNC_TIMEOUT, async {
        while !done() {
            tokio::select! {
                () = changed(&mut changes) => {}
                () = changed(&mut access) => {}
            }
        }
    })
    .await;
    waited.is_ok()
}

/// Marks the copy synced once every constraint watch started so far has listed (a kind this
/// copy may not read is reported, not waited for).
async fn mark_synced(stores: Arc<Stores>, status: Arc<Status>, started: std::time::Instant) {
    let listed = || {
        stores
            .unlisted_kinds()
            .iter()
            .all(|r| status.access_error(r).is_some())
    };
    until_listed(&stores, &status, listed).await;
    let unlisted = stores.unlisted_kinds();
    if unlisted.is_empty() && fixed_listed(&stores) {
        tracing::info!(
            constraint_kinds = stores.watched_kinds().len(),
            "every watch listed in {:?}",
            started.elapsed()
        );
    } else if !unlisted.is_empty() {
        tracing::warn!(
            "constraint kinds not listed yet: {}; their constraints are reconciled once they are",
            unlisted.join(", ")
        );
    }
    status.set_synced();
}

/// Whether Gatekeeper's generator runs, for a copy that would write; `None` for a view.
async fn look_for_gatekeeper(
    client: &kube::Client,
    config: &Config,
) -> Option<Result<Option<String>, crate::cluster::KubeError>> {
    let namespace = &config.options.gatekeeper_namespace;
    match config.mode {
        Mode::Elect { .. } => {
            Some(crate::controller::watch::gatekeeper::detect(client, namespace).await)
        }
        Mode::ReadOnly => None,
    }
}

pub async fn launch(
    client: kube::Client,
    mut config: Config,
    tuning: Tuning,
) -> Result<Controller, Error> {
    let started = std::time::Instant::now();
    // Phase 1: independent round trips, in parallel (start-up latency is time nothing is
    // written); Gatekeeper's generator only matters to a copy that would write.
    let detect = look_for_gatekeeper(&client, &config);
    let (admission, version, gatekeeper) = tokio::join!(
        discover_admission_api(&client),
        client.apiserver_version(),
        detect
    );
    let admission = admission?;
    // The Lease, the requests ConfigMap and our Events live in the Lease's namespace: no
    // generated policy may ever judge them, whatever options this copy was given.
    let lease_ns = config.lease_namespace.clone();
    config.options.exemptions.namespaces.insert(lease_ns);
    let identity = crate::controller::lead::lease::default_identity();
    // The copy's parts, on empty reflector stores (the watches fill them through `Writers`);
    // the facts of its writes for the Events recorder in a copy that may write.
    let (stores, writers) = Stores::new(admission.clone(), config.scope.clone());
    let elects = matches!(config.mode, Mode::Elect { .. });
    let (recorder, facts) = elects.then(Recorder::new).unzip();
    let queue = SharedQueue::new(config.scope.clone());
    let tasks = Tasks::new(tuning.fail_task.clone());
    let recorder = recorder.unwrap_or_default();
    // The entries' id is the Lease's name: a hand-over adds no second entry.
    let pod_statuses = PodStatuses::new(
        client.clone(),
        &config.lease_name,
        &config.options.gatekeeper_namespace,
    );
    let parts = Parts::new(client, stores, queue, recorder, tasks, pod_statuses);
    parts.status.set_contest_tuning(tuning.contest);
    if config.expect_guard && matches!(config.mode, Mode::Elect { .. }) {
        let (ns, lease) = (&config.lease_namespace, &config.lease_name);
        let requests = crate::controller::requests_configmap(lease);
        // The user it confines is not compared (`guard_problem`): any name will do.
        let [policy, _] = crate::core::guard::guard_objects(ns, lease, &requests, "");
        parts.status.expect_guard(policy);
    }
    let cache = Arc::new(OpinionCache::default());

    watch_everything(&parts, writers, tuning.publish_snapshot);
    decide_writes(
        &parts,
        &config.mode,
        gatekeeper,
        &config.options.gatekeeper_namespace,
        tuning.gatekeeper_recheck,
    );
    if let Some(facts) = facts {
        report_events(&parts, &identity, facts);
    }

    // A one-shot request (replay, reconcile) asks the holder when there is one: whether it
    // could lead itself is said if it has to, by the write or the Lease that refuses it.
    let competes = matches!(config.mode, Mode::Elect { .. }) && parts.status.writes_enabled();
    if competes && !config.one_shot {
        ask_rights(&parts, &config.lease_namespace, &config.lease_name).await;
    }
    let (lease, election) = elect(&parts, &config, &identity, &tuning);

    read_before_deciding(&parts, &config.options).await;
    await_first_lists(&parts.stores, &parts.status, started).await;
    // No enqueue here: each watch's `Listed` handler has queued what its list concerns.
    prime_when_listed(&parts, &cache);
    let synced = mark_synced(parts.stores.clone(), parts.status.clone(), started);
    parts.tasks.spawn("mark synced", Lifetime::Job, synced);

    spawn_workers(&parts, &cache, &config);
    let route = Route {
        identity: identity.clone(),
        lease_namespace: config.lease_namespace.clone(),
        lease_name: config.lease_name.clone(),
        one_shot: config.one_shot,
    };
    let req_tx = serve_requests(&parts, route, lease.clone(), election.is_some());
    let resync = parts.resync();
    repeat(&parts.tasks, "resync", tuning.resync_every, move || {
        resync.resync();
    });
    let initial = LiveState {
        vap_api: Some(admission.api_version()),
        server_version: version.map(|v| v.git_version).ok(),
        ..LiveState::default()
    };
    let state_rx = publish_state(
        &parts,
        initial,
        lease,
        &config.lease_namespace,
        &identity,
        &tuning,
    );
    serve_metrics(&parts, config.metrics_addr).await;

    let stop = CancellationToken::new();
    let (tasks, status, metrics) = (
        parts.tasks.clone(),
        parts.status.clone(),
        parts.metrics.clone(),
    );
    let join = tokio::spawn(supervise(tasks, status, metrics, stop.clone(), election));
    Ok(Controller {
        inner: Arc::new(super::handle::Inner {
            identity,
            state: state_rx,
            requests: req_tx,
            stop,
            join: parking_lot::Mutex::new(Some(join)),
            world: parts.handle(),
            cache,
        }),
    })
}

/// This copy's outcomes as Kubernetes Events (regarding the template, by its uid), sent
/// only while it may write.
fn report_events(parts: &Parts, identity: &str, facts: crate::controller::tell::events::Facts) {
    let (stores, leadership) = (parts.stores.clone(), parts.leadership.clone());
    let report = crate::controller::tell::events::run(
        parts.client.clone(),
        identity.to_string(),
        facts,
        move |template| {
            stores
                .templates()
                .iter()
                .find(|t| t.metadata.name.as_deref() == Some(template))
                .and_then(|t| t.metadata.uid.clone())
        },
        move || leadership.fence.remaining(),
    );
    // Ends when the recorder's senders are gone, which only the copy's end drops.
    parts.tasks.spawn("report Events", Lifetime::Copy, report);
}

/// Phase 7: the workers.
fn spawn_workers(parts: &Parts, cache: &Arc<OpinionCache>, config: &Config) {
    for n in 1..=config.workers.max(1) {
        let worker = super::workers::run(parts.worker(), cache.clone(), config.options.clone());
        parts
            .tasks
            .spawn(format!("worker {n}"), Lifetime::Copy, worker);
    }
}

/// Phase 8: requests from the handle, and (while this copy leads, if it competes) from other
/// copies through the requests ConfigMap; requests that outlive their deadline are answered.
fn serve_requests(
    parts: &Parts,
    route: Route,
    view: watch::Receiver<LeaseInfo>,
    competes: bool,
) -> mpsc::Sender<Request> {
    let (tx, rx) = mpsc::channel(32);
    let tasks = parts.tasks.clone();
    let from_handle = requests_from_handle(tasks, parts.requests(), route.clone(), view, rx);
    // Ends when every handle is gone: nobody can ask any more.
    parts
        .tasks
        .spawn("requests from the handle", Lifetime::Job, from_handle);
    if competes {
        let serve = crate::controller::lead::commands::serve(parts.requests(), route);
        parts
            .tasks
            .spawn("serve the requests ConfigMap", Lifetime::Copy, serve);
    }
    let tracker = parts.tracker.clone();
    let expire = move || tracker.expire(crate::controller::ask::requests::REQUEST_DEADLINE);
    repeat(
        &parts.tasks,
        "expire requests",
        Duration::from_secs(1),
        expire,
    );
    tx
}

/// A periodic tick: `tick` every `period`, as a task of the copy.
fn repeat(tasks: &Tasks, name: &str, period: Duration, tick: impl Fn() + Send + 'static) {
    tasks.spawn(name, Lifetime::Copy, async move {
        loop {
            tokio::time::sleep(period).await;
            tick();
        }
    });
}

/// Phase 9: the published state (and, for views, the cluster's Events on the feed).
fn publish_state(
    parts: &Parts,
    mut initial: LiveState,
    lease: watch::Receiver<LeaseInfo>,
    lease_namespace: &str,
    identity: &str,
    tuning: &Tuning,
) -> watch::Receiver<Arc<LiveState>> {
    if tuning.publish_snapshot {
        let (told, refused) = (parts.status.clone(), parts.status.clone());
        let holder_now = lease.clone();
        // The leader's words only: an Event is the leader's if its reporter holds or held the
        // Lease (anyone allowed to create Events can set a label and a reporter).
        let told = move |mut e: crate::controller::view::state::ClusterEvent| {
            if let Some(holder) = holder_now.borrow().holder.as_deref() {
                told.saw_holder(holder);
            }
            e.from_a_holder = told.was_holder(&e.reporter);
            told.happened(Happened::Cluster(e));
        };
        let follow = crate::controller::tell::events::follow(
            parts.client.clone(),
            crate::controller::tell::events::watched_namespaces(lease_namespace),
            identity.to_string(),
            told,
            move |why| refused.set_access(EVENTS_RESOURCE, why),
        );
        parts
            .tasks
            .spawn("follow the cluster's Events", Lifetime::Copy, follow);
    }
    let sources = Sources {
        lease,
        with_snapshot: tuning.publish_snapshot,
    };
    let publisher = parts.publish();
    super::publish::fill(&publisher, &mut initial, &sources);
    let (state_tx, state_rx) = watch::channel(Arc::new(initial.clone()));
    let publish = super::publish::run(publisher, initial, state_tx, sources);
    parts.tasks.spawn("publish", Lifetime::Copy, publish);
    state_rx
}

/// Phase 10: `/metrics`, `/healthz` and `/readyz`, if asked for.
async fn serve_metrics(parts: &Parts, addr: Option<std::net::SocketAddr>) {
    let Some(addr) = addr else { return };
    // A port that cannot be bound is said, and is not worth stopping the copy for; once
    // bound, the server lives as long as the copy (its probes judge the copy), so its end
    // would be a failure the supervisor reports.
    match crate::controller::tell::metrics::bind(addr).await {
        Ok(listener) => {
            let metrics = parts.metrics.clone();
            parts.tasks.spawn(
                "metrics server",
                Lifetime::Copy,
                crate::controller::tell::metrics::serve(listener, metrics),
            );
        }
        Err(e) => tracing::error!("metrics server on {addr}: {e}"),
    }
}

/// The task [`Controller::stop`] waits for ([`Tasks::supervise`]); a failure turns writes off
/// and `/healthz` says it.
async fn supervise(
    tasks: Arc<Tasks>,
    status: Arc<Status>,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
    election: Option<tokio::task::Id>,
) -> Result<(), Error> {
    let failed = |f: &crate::controller::tasks::Failure| {
        status.set_writes_enabled(false);
        metrics.set_failed(f.to_string());
        status.touch();
    };
    Ok(tasks.supervise(stop, election, failed).await?)
}

/// Primes the opinion cache once the template store has listed with no template left to
/// reconcile (otherwise the template side primes it, once it has reconciled every listed
/// template): at once if none listed, or when a list completes later.
fn prime_when_listed(parts: &Parts, cache: &Arc<OpinionCache>) {
    let (stores, queue, cache) = (parts.stores.clone(), parts.queue.clone(), cache.clone());
    let mut listings = parts.stores.listing_changes();
    parts
        .tasks
        .spawn("prime the opinion cache", Lifetime::Job, async move {
            loop {
                let names = stores.template_names();
                let listed = stores.templates_listed();
                if cache.prime_if_ready(listed, &names, &*queue) {
                    return;
                }
                changed(&mut listings).await;
            }
        });
}

/// Requests from the handle: each handled on its own task (one may wait a minute for its
/// keys while another comes in).
async fn requests_from_handle(
    tasks: Arc<Tasks>,
    ctx: RequestContext,
    route: Route,
    view: watch::Receiver<LeaseInfo>,
    mut rx: mpsc::Receiver<Request>,
) {
    while let Some(req) = rx.recv().await {
        let (ctx, route, view) = (ctx.clone(), route.clone(), view.clone());
        let name = format!("request {:?}", req.command);
        tasks.spawn(name, Lifetime::Job, async move {
            let outcome =
                crate::controller::lead::commands::handle(&ctx, &route, &view, req.command).await;
            let _ = req.reply.send(outcome);
        });
    }
}
