//! Wiring of the live reconciler: discovery, watches, workers, leader election, commands,
//! the published [`LiveState`], the metrics server, graceful shutdown.

use super::Error;
use super::cache::OpinionCache;
use super::handle::{Controller, Request};
use super::live::{LiveQueue, LiveWorld};
use super::logic::{Ctx, Outcome, reconcile, schedule};
use super::metrics::Metrics;
use super::queue::Key;
use super::state::{Command, EventResult, EventVerb, LeaseInfo, LiveState, RequestOutcome};
use super::watches;
use super::world::{ConstraintStore, Enqueue, TemplateStore};
use crate::cluster::discovery::{discover_admission_api, resource_name, templates_resource};
use crate::core::Options;
use crate::model::ObjectRef;
use chrono::Utc;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject};
use kube::runtime::reflector::store::Writer;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Whether this copy takes part in the lease election (and so may write).
#[derive(Debug, Clone)]
pub enum Mode {
    /// Watch only: the TUI without `--reconcile` (the Lease is read to show its holder).
    ReadOnly {
        lease_namespace: String,
        lease_name: String,
    },
    /// Compete for the lease; write while holding it.
    Elect {
        lease_namespace: String,
        lease_name: String,
        /// Write even though Gatekeeper's generator looks active.
        take_over: bool,
    },
}

#[derive(Debug, Clone)]
pub struct Config {
    pub options: Options,
    pub mode: Mode,
    /// Concurrent reconciles (a key is never processed twice at once).
    pub workers: usize,
    /// The identity in the Lease; default `<hostname>-<pid>-<random>`.
    pub identity: Option<String>,
    /// Serve `/metrics`, `/healthz`, `/readyz` here.
    pub metrics_addr: Option<std::net::SocketAddr>,
}

impl Config {
    pub fn new(options: Options, mode: Mode) -> Self {
        Config {
            options,
            mode,
            workers: DEFAULT_WORKERS,
            identity: None,
            metrics_addr: None,
        }
    }
}

/// Concurrent reconciles by default: enough requests in flight to keep a busy API server
/// working between responses (measured in docs/benchmarks.md).
pub const DEFAULT_WORKERS: usize = 16;

/// Settings views do not need (kept out of [`Config`], whose shape the TUI relies on).
#[derive(Debug, Clone)]
pub struct Tuning {
    /// Publish the store snapshot in [`LiveState`] (the TUI needs it; a headless `run` does not).
    pub publish_snapshot: bool,
    /// Enqueue everything this often, to catch what no event reports.
    pub resync_every: Duration,
    /// Look for Gatekeeper's own generator again this often (it may be switched on later).
    pub gatekeeper_recheck: Duration,
    /// The Lease's duration: a crashed holder is replaced after at most this long.
    pub lease_duration: Duration,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            publish_snapshot: true,
            resync_every: Duration::from_secs(600),
            gatekeeper_recheck: Duration::from_secs(60),
            lease_duration: Duration::from_secs(super::lease::LEASE_DURATION),
        }
    }
}

/// Starts the reconciler on `client` with the default tuning.
pub async fn start(client: kube::Client, config: Config) -> Result<Controller, Error> {
    launch(client, config, Tuning::default()).await
}

/// The Lease `run` competes for by default (and the one read-only views report on).
pub const DEFAULT_LEASE_NAMESPACE: &str = "gatekeeper-system";
pub const DEFAULT_LEASE_NAME: &str = "kubectl-vap";

/// How long start-up waits for the first list of every watch.
const SYNC_TIMEOUT: Duration = Duration::from_secs(60);

/// Starts the reconciler and returns its handle.
pub async fn launch(
    client: kube::Client,
    config: Config,
    tuning: Tuning,
) -> Result<Controller, Error> {
    let started = std::time::Instant::now();
    // Independent round trips, in parallel: start-up latency is time nothing is written.
    let detect_gatekeeper = async {
        match &config.mode {
            Mode::Elect { .. } => Some(super::gatekeeper::detect(&client).await),
            Mode::ReadOnly { .. } => None,
        }
    };
    let (admission, server_version, detected) = tokio::join!(
        discover_admission_api(&client),
        client.apiserver_version(),
        detect_gatekeeper
    );
    let admission = admission?;
    let server_version = server_version.map(|v| v.git_version).ok();
    let identity = config
        .identity
        .clone()
        .unwrap_or_else(super::lease::default_identity);

    let tar = templates_resource();
    let twriter: Writer<DynamicObject> = Writer::new(tar.clone());
    let cwriter: Writer<CustomResourceDefinition> = Writer::default();
    let pwriter: Writer<DynamicObject> = Writer::new(admission.policy());
    let bwriter: Writer<DynamicObject> = Writer::new(admission.binding());
    let queue = Arc::new(LiveQueue::default());
    let metrics = Arc::new(Metrics::default());
    let world = Arc::new(LiveWorld::new(
        client.clone(),
        admission.clone(),
        twriter.as_reader(),
        cwriter.as_reader(),
        pwriter.as_reader(),
        bwriter.as_reader(),
        queue.clone(),
        metrics.clone(),
    ));
    let cache = Arc::new(OpinionCache::new());
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    // Watches.
    let mut tasks = vec![
        watches::spawn_watch_with(
            Api::all_with(client.clone(), &tar),
            twriter,
            resource_name(&tar),
            world.clone(),
            watches::on_template,
        ),
        watches::spawn_watch(
            Api::<CustomResourceDefinition>::all(client.clone()),
            cwriter,
            "customresourcedefinitions.apiextensions.k8s.io".into(),
            world.clone(),
            watches::on_crd,
        ),
        watches::spawn_watch_with(
            Api::all_with(client.clone(), &admission.policy()),
            pwriter,
            resource_name(&admission.policy()),
            world.clone(),
            watches::on_policy,
        ),
        watches::spawn_watch_with(
            Api::all_with(client.clone(), &admission.binding()),
            bwriter,
            resource_name(&admission.binding()),
            world.clone(),
            watches::on_binding,
        ),
    ];

    // Gatekeeper's generator.
    let mut gatekeeper_generator = None;
    let mut writes_enabled = false;
    if let (Mode::Elect { take_over, .. }, Some(detected)) = (&config.mode, detected) {
        match detected {
            Ok(Some(found)) => {
                if *take_over {
                    tracing::warn!(
                        "Gatekeeper's generator looks active ({found}); writing anyway (--take-over)"
                    );
                    writes_enabled = true;
                } else {
                    tracing::error!(
                        "Gatekeeper's generator looks active: {found}. Not writing: {}",
                        super::gatekeeper::HOW_TO_DISABLE
                    );
                }
                gatekeeper_generator = Some(found);
            }
            Ok(None) => writes_enabled = true,
            Err(e) => {
                tracing::warn!(
                    "{e}; cannot tell whether Gatekeeper's generator is active, assuming it is not"
                );
                writes_enabled = true;
            }
        }
    }
    world.writes_enabled.store(writes_enabled, Ordering::SeqCst);
    *world
        .gatekeeper_generator
        .lock()
        .unwrap_or_else(|p| p.into_inner()) = gatekeeper_generator.clone();
    if let Mode::Elect {
        take_over: false, ..
    } = &config.mode
        && writes_enabled
    {
        tasks.push(tokio::spawn(recheck_gatekeeper(
            world.clone(),
            tuning.gatekeeper_recheck,
        )));
    }

    // Leader election.
    let (holder_tx, holder_rx) = watch::channel(None);
    let mut lease_task = None;
    let mut lease_info = LeaseInfo {
        identity: identity.clone(),
        ..LeaseInfo::default()
    };
    if let Mode::Elect {
        lease_namespace,
        lease_name,
        ..
    } = &config.mode
        && writes_enabled
    {
        lease_info.lease = format!("{lease_namespace}/{lease_name}");
        lease_info.participating = true;
        lease_task = Some(tokio::spawn(super::lease::run(
            world.clone(),
            lease_namespace.clone(),
            lease_name.clone(),
            identity.clone(),
            tuning.lease_duration,
            holder_tx,
            shutdown_rx.clone(),
        )));
    } else {
        // Read-only (or refusing to write next to Gatekeeper's generator: holding the lease
        // without writing would only block the copies that do write): not competing, but
        // show who holds the Lease.
        let (ns, name) = match &config.mode {
            Mode::Elect {
                lease_namespace,
                lease_name,
                ..
            } => (lease_namespace.as_str(), lease_name.as_str()),
            Mode::ReadOnly {
                lease_namespace,
                lease_name,
            } => (lease_namespace.as_str(), lease_name.as_str()),
        };
        lease_info.lease = format!("{ns}/{name}");
        tasks.push(tokio::spawn(super::lease::watch_holder(
            world.clone(),
            ns.to_string(),
            name.to_string(),
            holder_tx,
        )));
    }

    // Wait for the first lists of templates, CRDs, VAPs and bindings (or a definite read
    // error on each). Constraint kinds keep listing meanwhile: the workers start now and a
    // kind's constraints are reconciled once that kind has listed.
    wait_synced(&world, SYNC_TIMEOUT).await;
    tracing::info!(
        "templates, CRDs, VAPs and bindings listed in {:?}",
        started.elapsed()
    );
    // No enqueue here: each watch's `Listed` handler has queued what its list concerns.
    // No template listed: the opinion cache is primed at once (otherwise by the template side,
    // once it has reconciled every listed template).
    cache.prime_if_ready(
        world.templates_listed(),
        &world.template_names(),
        &*world.queue,
    );
    {
        let world = world.clone();
        tasks.push(tokio::spawn(async move {
            let _ =
                tokio::time::timeout(SYNC_TIMEOUT, watches::constraint_watches_ready(&world)).await;
            let kinds = world
                .constraints
                .read()
                .map(|w| w.len())
                .unwrap_or_default();
            let unlisted = world.unlisted_kinds();
            if unlisted.is_empty() {
                tracing::info!(
                    constraint_kinds = kinds,
                    "every watch listed in {:?}",
                    started.elapsed()
                );
            } else {
                // Unreadable (reported with its reason by the watch) or still failing after
                // SYNC_TIMEOUT: their constraints wait until they list.
                tracing::warn!(
                    "constraint kinds not listed yet: {}; their constraints are reconciled once they are",
                    unlisted.join(", ")
                );
            }
            world.synced.store(true, Ordering::SeqCst);
            world.dirty.store(true, Ordering::Relaxed);
        }));
    }

    // Workers.
    let attempts: Arc<Mutex<HashMap<Key, u32>>> = Arc::default();
    for _ in 0..config.workers.max(1) {
        tasks.push(tokio::spawn(worker(
            world.clone(),
            cache.clone(),
            config.options.clone(),
            attempts.clone(),
            shutdown_rx.clone(),
        )));
    }

    // Commands.
    let (cmd_tx, cmd_rx) = mpsc::channel(32);
    tasks.push(tokio::spawn(commands(
        world.clone(),
        cmd_rx,
        holder_rx.clone(),
        identity.clone(),
    )));

    // Periodic resync.
    {
        let world = world.clone();
        let every = tuning.resync_every;
        tasks.push(tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                for k in world.all_keys() {
                    world.queue.enqueue(k);
                }
            }
        }));
    }

    // Published state.
    let initial = LiveState {
        synced: world.synced.load(Ordering::SeqCst),
        lease: lease_info.clone(),
        vap_api: Some(admission.api_version()),
        server_version,
        gatekeeper_generator,
        writes_enabled,
        ..LiveState::default()
    };
    let (state_tx, state_rx) = watch::channel(Arc::new(initial.clone()));
    tasks.push(tokio::spawn(publish(
        world.clone(),
        initial,
        state_tx,
        holder_rx,
        tuning.publish_snapshot,
    )));

    // Metrics.
    if let Some(addr) = config.metrics_addr {
        let metrics = metrics.clone();
        let rx = shutdown_rx.clone();
        tasks.push(tokio::spawn(async move {
            if let Err(e) = super::metrics::serve(addr, metrics, rx).await {
                tracing::error!("metrics server on {addr}: {e}");
            }
        }));
    }

    let mut stop = shutdown_rx.clone();
    let join = tokio::spawn(async move {
        while !*stop.borrow() {
            if stop.changed().await.is_err() {
                break;
            }
        }
        // Stop writing first, then release the lease, then stop watching.
        let result = match lease_task {
            Some(t) => t.await.unwrap_or(Ok(())),
            None => Ok(()),
        };
        for t in tasks {
            t.abort();
        }
        result
    });
    Ok(Controller::new(
        identity,
        state_rx,
        cmd_tx,
        shutdown_tx,
        join,
        world,
        cache,
    ))
}

/// Stops writing while Gatekeeper's own generator is active, and resumes (with a resync) once
/// it is off again. Only for a copy that was allowed to write at start.
async fn recheck_gatekeeper(world: Arc<LiveWorld>, every: Duration) {
    let generator = |w: &LiveWorld| {
        w.gatekeeper_generator
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    };
    loop {
        tokio::time::sleep(every).await;
        let found = match super::gatekeeper::detect(&world.client).await {
            Ok(found) => found,
            Err(e) => {
                tracing::debug!("{e}; keeping the last answer");
                continue;
            }
        };
        if found == generator(&world) {
            continue;
        }
        let deployments = ObjectRef::new("apps/v1", "Deployment", "*");
        match &found {
            Some(what) => {
                world.writes_enabled.store(false, Ordering::SeqCst);
                let msg = format!(
                    "Gatekeeper's generator looks active: {what}. Not writing until it is off: {}",
                    super::gatekeeper::HOW_TO_DISABLE
                );
                tracing::error!("{msg}");
                world.log(
                    EventVerb::Gatekeeper,
                    deployments,
                    EventResult::Skipped(msg),
                    String::new(),
                );
            }
            None => {
                world.writes_enabled.store(true, Ordering::SeqCst);
                tracing::info!("Gatekeeper's generator is off again: writing (resync)");
                world.log(
                    EventVerb::Gatekeeper,
                    deployments,
                    EventResult::Ok,
                    "Gatekeeper's generator is off again; resync".into(),
                );
                for k in world.all_keys() {
                    world.queue.enqueue(k);
                }
            }
        }
        *world
            .gatekeeper_generator
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = found;
        world.dirty.store(true, Ordering::Relaxed);
    }
}

/// Waits until templates, CRDs, VAPs and bindings have listed (or failed with a definite read
/// error), or `timeout` passes.
async fn wait_synced(world: &Arc<LiveWorld>, timeout: Duration) {
    let deadline = tokio::time::Instant::now() + timeout;
    let resources = [
        resource_name(&templates_resource()),
        "customresourcedefinitions.apiextensions.k8s.io".to_string(),
        resource_name(&world.admission.policy()),
        resource_name(&world.admission.binding()),
    ];
    while tokio::time::Instant::now() < deadline {
        let errs = world
            .access
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if resources
            .iter()
            .all(|r| world.is_listed(r) || errs.contains_key(r))
        {
            return;
        }
        // Short: every millisecond here is a millisecond nothing is written.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tracing::warn!("not every watch listed within {timeout:?}; continuing");
}

async fn worker(
    world: Arc<LiveWorld>,
    cache: Arc<OpinionCache>,
    opts: Options,
    attempts: Arc<Mutex<HashMap<Key, u32>>>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        if *shutdown.borrow() {
            return;
        }
        let (key, due) = {
            let mut q = world.queue.inner.lock().unwrap_or_else(|p| p.into_inner());
            (q.pop(Utc::now()), q.next_due())
        };
        let Some(key) = key else {
            // Idle and still cold: a template list that completed after start-up, with no
            // template to reconcile, primes the cache here.
            if !cache.is_primed() && world.templates_listed() {
                cache.prime_if_ready(true, &world.template_names(), &*world.queue);
            }
            let wait = due
                .and_then(|d| (d - Utc::now()).to_std().ok())
                .unwrap_or(Duration::from_secs(1))
                .min(Duration::from_secs(1));
            tokio::select! {
                _ = world.queue.notify.notified() => {}
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.changed() => return,
            }
            continue;
        };
        let ctx = Ctx {
            cache: &cache,
            queue: &*world.queue,
            opts: &opts,
        };
        let outcome = reconcile(&key, &*world, &ctx).await;
        world.metrics.reconciles.fetch_add(1, Ordering::Relaxed);
        let attempt = {
            let mut a = attempts.lock().unwrap_or_else(|p| p.into_inner());
            match &outcome {
                Outcome::Retry(_) | Outcome::Forbidden(_) => {
                    let n = a.entry(key.clone()).or_default();
                    *n += 1;
                    *n
                }
                _ => {
                    a.remove(&key);
                    0
                }
            }
        };
        match &outcome {
            Outcome::Retry(why) | Outcome::Forbidden(why) => {
                tracing::debug!(%key, attempt, "retrying: {why}")
            }
            // The store's own watch reports why it is unknown (once, not per key); the key
            // comes back when a store lists.
            Outcome::Unknown(what) => {
                tracing::debug!(%key, "nothing decided: {what} is not listed and watched");
                world.park(key.clone());
            }
            _ => {}
        }
        schedule(
            &*world.queue,
            &key,
            &outcome,
            Utc::now(),
            attempt.saturating_sub(1),
        );
        world.queue.done(&key);
        world
            .metrics
            .queue_depth
            .store(world.queue.len() as u64, Ordering::Relaxed);
        world.dirty.store(true, Ordering::Relaxed);
    }
}

fn template_ref(name: &str) -> ObjectRef {
    ObjectRef::new("templates.gatekeeper.sh/v1", "ConstraintTemplate", name)
}

/// Handles one command: enqueue its keys and log what happened; returns the log line.
pub fn handle_command(world: &LiveWorld, cmd: &Command, holder: Option<&str>) -> String {
    let leading = world.leading.load(Ordering::SeqCst);
    let result = |n: usize| {
        if !world.writes_enabled.load(Ordering::SeqCst) {
            EventResult::Skipped(format!("{n} item(s) re-checked; this copy does not write"))
        } else if leading {
            EventResult::Ok
        } else {
            EventResult::Skipped(format!(
                "{n} item(s) re-checked; this copy does not hold the lease{}",
                holder
                    .map(|h| format!(" ({h} does and reconciles)"))
                    .unwrap_or_default()
            ))
        }
    };
    match cmd {
        Command::Replay(t) | Command::Reconcile(t) => {
            let verb = if matches!(cmd, Command::Replay(_)) {
                EventVerb::Replay
            } else {
                EventVerb::Reconcile
            };
            // A command only enqueues: an unknown store just means no constraint keys here.
            let kind = match world.template(t) {
                super::world::Read::Known(t) => t.and_then(|t| t.kind),
                super::world::Read::Unknown(_) => None,
            };
            let mut n = 0;
            if verb == EventVerb::Reconcile {
                world.queue.enqueue(Key::Template(t.clone()));
                n += 1;
            }
            let Some(kind) = kind else {
                let msg = if verb == EventVerb::Replay {
                    let msg = format!("template {t} not found (or has no kind)");
                    world.log(
                        verb,
                        template_ref(t),
                        EventResult::Failed(msg.clone()),
                        String::new(),
                    );
                    msg
                } else {
                    let msg = "template gone: its VAP is swept".to_string();
                    world.log(verb, template_ref(t), result(n), msg.clone());
                    msg
                };
                return msg;
            };
            for name in world.constraint_names(&kind) {
                world.queue.enqueue(Key::constraint(&kind, name));
                n += 1;
            }
            let msg = format!("enqueued {n} item(s) of kind {kind}");
            world.log(verb, template_ref(t), result(n), msg.clone());
            msg
        }
        Command::ReconcileAll => {
            let keys = world.all_keys();
            let n = keys.len();
            for k in keys {
                world.queue.enqueue(k);
            }
            let msg = format!("enqueued {n} item(s)");
            world.log(
                EventVerb::ReconcileAll,
                ObjectRef::new("", "All", "*"),
                result(n),
                msg.clone(),
            );
            msg
        }
    }
}

async fn commands(
    world: Arc<LiveWorld>,
    mut rx: mpsc::Receiver<Request>,
    holder: watch::Receiver<Option<String>>,
    identity: String,
) {
    while let Some(req) = rx.recv().await {
        let h = holder.borrow().clone();
        let summary = handle_command(&world, &req.command, h.as_deref());
        let _ = req.reply.send(Ok(RequestOutcome {
            handled_by: identity.clone(),
            summary,
            writes: 0,
            failures: 0,
        }));
    }
}

async fn publish(
    world: Arc<LiveWorld>,
    mut state: LiveState,
    tx: watch::Sender<Arc<LiveState>>,
    holder: watch::Receiver<Option<String>>,
    with_snapshot: bool,
) {
    loop {
        world.sweep_overlay();
        // Ready only while every store is listed and watched: a copy that cannot read
        // something decides nothing that rests on it, and says so.
        let unknown = world.unknown_stores();
        let ready = world.synced.load(Ordering::SeqCst) && unknown.is_empty();
        world.metrics.set_ready(if ready {
            Ok(())
        } else if unknown.is_empty() {
            Err("watches not synced yet".into())
        } else {
            Err(unknown
                .iter()
                .map(|(_, why)| why.clone())
                .collect::<Vec<_>>()
                .join("\n"))
        });
        let h = holder.borrow().clone();
        let depth = world.queue.len();
        let dirty = world.dirty.swap(false, Ordering::Relaxed);
        if dirty || h != state.lease.holder || depth != state.queue_depth {
            state.lease.holder = h;
            world.fill_state(&mut state, with_snapshot);
            world
                .metrics
                .queue_depth
                .store(state.queue_depth as u64, Ordering::Relaxed);
            if tx.send(Arc::new(state.clone())).is_err() {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
