//! The one door to a reconciler running in the test process: every test and benchmark that
//! starts one, waits for it, or looks inside it goes through [`Reconciler`] (and reads a Lease
//! through [`lease_holder`]), so a change of the controller's API changes this file only.
//! (`tests/reconciler_logic.rs` drives `controller::reconcilers` on a world of its own instead.)

use kubectl_vap::controller::state::{EventResult, EventVerb, ReconcileEvent};
use kubectl_vap::controller::{
    ClusterEvent, Command, Config, Controller, Happened, Mode, NotLeading, RequestOutcome, launch,
};
use kubectl_vap::core::Options;
use kubectl_vap::core::desired::Opinion;
use std::time::Duration;

pub use kubectl_vap::controller::{LiveState, Tuning};

/// The holder named in Lease `namespace/name` (`None`: free), as any copy reads it.
pub async fn lease_holder(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Option<String>, String> {
    kubectl_vap::controller::read_lease(client, namespace, name)
        .await
        .map(|v| v.holder)
        .map_err(|e| e.to_string())
}

/// How to start a copy: its Lease, options, tuning and worker count.
pub struct Start {
    pub lease_namespace: String,
    pub lease_name: String,
    pub options: Options,
    pub tuning: Tuning,
    /// `None`: the default of `run`.
    pub workers: Option<usize>,
    /// Serve `/metrics`, `/healthz`, `/readyz` here.
    pub metrics_addr: Option<std::net::SocketAddr>,
}

impl Start {
    /// Competing for Lease `namespace/name`, default tuning and workers.
    pub fn on(namespace: &str, name: &str, options: Options) -> Start {
        Start {
            lease_namespace: namespace.into(),
            lease_name: name.into(),
            options,
            tuning: Tuning::default(),
            workers: None,
            metrics_addr: None,
        }
    }

    /// Serving `/metrics`, `/healthz`, `/readyz` on `127.0.0.1:port`.
    pub fn metrics_port(self, port: u16) -> Start {
        Start {
            metrics_addr: Some(std::net::SocketAddr::from(([127, 0, 0, 1], port))),
            ..self
        }
    }

    pub fn workers(self, workers: usize) -> Start {
        Start {
            workers: Some(workers),
            ..self
        }
    }

    pub fn tuning(self, tuning: Tuning) -> Start {
        Start { tuning, ..self }
    }
}

/// A copy of the reconciler in this process, started by [`start`].
pub struct Reconciler {
    running: Controller,
    /// Its feed, from its start, and the cluster Events read from it so far.
    feed: std::sync::Mutex<(
        tokio::sync::broadcast::Receiver<Happened>,
        Vec<ClusterEvent>,
    )>,
}

impl Reconciler {
    fn of(running: Controller) -> Reconciler {
        let feed = std::sync::Mutex::new((running.feed(), Vec::new()));
        Reconciler { running, feed }
    }

    /// The cluster's Events this copy told on its feed since it started, oldest first.
    pub fn cluster_events(&self) -> Vec<ClusterEvent> {
        let mut feed = self.feed.lock().unwrap_or_else(|p| p.into_inner());
        let (rx, seen) = &mut *feed;
        loop {
            match rx.try_recv() {
                Ok(Happened::Cluster(e)) => seen.push(e),
                Ok(_) | Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) => {}
                Err(_) => return seen.clone(),
            }
        }
    }
}

/// Starts a copy on `client` (as that client's user).
pub async fn start(client: kube::Client, s: Start) -> Reconciler {
    let mut config = Config::new(
        s.options,
        Mode::Elect { take_over: false },
        s.lease_namespace,
        s.lease_name,
    );
    if let Some(w) = s.workers {
        config.workers = w;
    }
    config.metrics_addr = s.metrics_addr;
    let running = launch(client, config, s.tuning)
        .await
        .expect("the reconciler starts");
    Reconciler::of(running)
}

/// A copy that only observes Lease `namespace/name` (the TUI without `--reconcile`): it
/// watches, follows the holder, and asks it.
pub async fn observe(
    client: kube::Client,
    namespace: &str,
    name: &str,
    options: Options,
) -> Reconciler {
    let config = Config::new(options, Mode::ReadOnly, namespace.into(), name.into());
    let running = launch(client, config, Tuning::default())
        .await
        .expect("the observer starts");
    Reconciler::of(running)
}

impl Reconciler {
    /// Waits until this copy leads; after `timeout`, `Err` with the holder when another copy
    /// holds the Lease.
    pub async fn wait_leading(&self, timeout: Duration) -> Result<(), Option<String>> {
        match self.running.leading(timeout).await {
            Ok(()) => Ok(()),
            Err(NotLeading::HeldBy(holder)) => Err(holder),
            Err(_) => Err(None),
        }
    }

    /// Waits until every watch has listed and the queue has stayed empty for a moment; false
    /// when `timeout` passes first.
    pub async fn idle(&self, timeout: Duration) -> bool {
        self.running.idle(timeout).await
    }

    /// [`Reconciler::idle`], or fails the test with what the copy is still doing, so a slow or
    /// stuck run says why.
    pub async fn assert_idle(&self, timeout: Duration) {
        if self.idle(timeout).await {
            return;
        }
        panic!(
            "not idle within {timeout:?}: {}",
            self.running.progress_report()
        );
    }

    /// The Lease holder's identity this copy writes into the Lease.
    pub fn identity(&self) -> &str {
        self.running.identity()
    }

    /// What it publishes for views, now.
    pub fn state(&self) -> std::sync::Arc<LiveState> {
        self.running.state()
    }

    /// Asks for `command`: handled here when this copy leads, by the holder otherwise.
    pub async fn request(&self, command: Command) -> Result<RequestOutcome, String> {
        self.running
            .request(command)
            .await
            .map_err(|e| e.to_string())
    }

    /// Writes sent (`kubectl_vap_writes_total`, every verb and resource).
    pub fn writes_total(&self) -> u64 {
        self.running.writes_total()
    }

    /// The copy's `/metrics` text.
    pub fn metrics_text(&self) -> String {
        self.running.metrics_text()
    }

    /// `kubectl_vap_write_errors_total{reason="<reason>"}` (0 when absent).
    pub fn write_errors(&self, reason: &str) -> u64 {
        let prefix = format!("kubectl_vap_write_errors_total{{reason=\"{reason}\"}} ");
        super::metrics::sum(&self.metrics_text(), &prefix) as u64
    }

    /// The event log, oldest first.
    pub fn events(&self) -> Vec<ReconcileEvent> {
        self.running.events()
    }

    /// Every write it logged (sent or refused), as `verb object: message (result)`, for failure
    /// messages.
    pub fn writes(&self) -> Vec<String> {
        self.write_events()
            .iter()
            .map(|e| {
                format!(
                    "{} {}: {} ({:?})",
                    e.verb.as_str(),
                    e.object,
                    e.message,
                    e.result
                )
            })
            .collect()
    }

    /// The logged writes (sent or refused).
    pub fn write_events(&self) -> Vec<ReconcileEvent> {
        self.events()
            .into_iter()
            .filter(|e| {
                matches!(
                    e.verb,
                    EventVerb::Create | EventVerb::Update | EventVerb::Delete
                )
            })
            .collect()
    }

    /// The writes to objects of `kind` that succeeded, as `verb name`.
    pub fn ok_writes_of(&self, kind: &str) -> Vec<String> {
        self.write_events()
            .iter()
            .filter(|e| e.result == EventResult::Ok && e.object.kind == kind)
            .map(|e| format!("{} {}", e.verb.as_str(), e.object.name))
            .collect()
    }

    /// Why the server refused each create of `object` (by name) in the event log.
    pub fn refused_creates(&self, object: &str) -> Vec<String> {
        self.events()
            .iter()
            .filter(|e| e.verb == EventVerb::Create && e.object.name == object)
            .filter_map(|e| e.result.failure())
            .collect()
    }

    /// How often it gained the Lease.
    pub fn lease_events(&self) -> usize {
        self.events()
            .iter()
            .filter(|e| matches!(e.verb, EventVerb::Lease))
            .count()
    }

    /// Whether it watches constraints of `kind`.
    pub fn watches_kind(&self, kind: &str) -> bool {
        self.running.watched_kinds().iter().any(|k| k == kind)
    }

    /// What it cannot read or use, by message.
    pub fn access_errors(&self) -> Vec<String> {
        self.running
            .access_errors()
            .into_iter()
            .map(|e| e.message)
            .collect()
    }

    /// False while it holds its writes (Gatekeeper's generator is on).
    pub fn writes_enabled(&self) -> bool {
        self.running.writes_enabled()
    }

    /// Gatekeeper's generator as it last found it running (`None`: off).
    pub fn gatekeeper_generator(&self) -> Option<String> {
        self.running.state().gatekeeper_generator.clone()
    }

    /// The template side's opinion of `kind` in its cache.
    pub fn opinion(&self, kind: &str) -> Option<Opinion> {
        self.running.opinion(kind)
    }

    /// Asks for a full resync (every object queued again) and waits for its answer.
    pub async fn reconcile_all(&self) {
        self.running
            .request(Command::ReconcileAll)
            .await
            .expect("command");
    }

    /// Stops it (a held Lease is released) and waits up to 15 s for it to end.
    pub async fn stop(self) {
        let _ = self.running.stop().await;
    }

    /// Waits until a task of this copy has failed (within `timeout`): what failed.
    pub async fn failed(&self, timeout: Duration) -> String {
        tokio::time::timeout(timeout, self.running.failed())
            .await
            .unwrap_or_else(|_| panic!("no task failed within {timeout:?}"))
            .to_string()
    }

    /// Stops it, and says how it ended (`Err`: a task had failed, or the Lease was not
    /// released in time).
    pub async fn stop_result(self) -> Result<(), String> {
        self.running.stop().await.map_err(|e| e.to_string())
    }
}
