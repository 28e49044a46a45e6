//! The one door to a reconciler running in the test process: every test and benchmark that
//! starts one, waits for it, or looks inside it goes through [`Reconciler`] (and reads a Lease
//! through [`lease_holder`]), so a change of the controller's API changes this file only.
//! (`tests/reconciler_logic.rs` drives `controller::logic` on a world of its own instead.)

use kubectl_vap::controller::runtime::{Running, launch, wait_for_lease, wait_idle};
use kubectl_vap::controller::state::{EventResult, EventVerb, ReconcileEvent};
use kubectl_vap::controller::{Command, Config, Mode};
use kubectl_vap::core::Options;
use kubectl_vap::core::desired::Opinion;
use std::sync::atomic::Ordering;
use std::time::Duration;

pub use kubectl_vap::controller::runtime::Tuning;

/// The holder named in Lease `namespace/name` (`None`: free), as any copy reads it.
pub async fn lease_holder(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Option<String>, String> {
    kubectl_vap::controller::lease::holder(client, namespace, name)
        .await
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
    running: Running,
}

/// Starts a copy on `client` (as that client's user).
pub async fn start(client: kube::Client, s: Start) -> Reconciler {
    let mut config = Config::new(
        s.options,
        Mode::Elect {
            lease_namespace: s.lease_namespace,
            lease_name: s.lease_name,
            take_over: false,
        },
    );
    if let Some(w) = s.workers {
        config.workers = w;
    }
    let running = launch(client, config, s.tuning)
        .await
        .expect("the reconciler starts");
    Reconciler { running }
}

impl Reconciler {
    /// Waits until this copy leads; after `timeout`, `Err` with the holder when another copy
    /// holds the Lease.
    pub async fn wait_leading(&self, timeout: Duration) -> Result<(), Option<String>> {
        wait_for_lease(&self.running, timeout).await
    }

    /// Waits until every watch has listed and the queue has stayed empty for a moment; false
    /// when `timeout` passes first.
    pub async fn idle(&self, timeout: Duration) -> bool {
        wait_idle(&self.running.world, timeout).await
    }

    /// [`Reconciler::idle`], or fails the test with what the copy is still doing, so a slow or
    /// stuck run says why.
    pub async fn assert_idle(&self, timeout: Duration) {
        if self.idle(timeout).await {
            return;
        }
        let world = &self.running.world;
        let queue = world
            .queue
            .inner
            .lock()
            .map(|q| format!("{q:?}"))
            .unwrap_or_default();
        let events: Vec<String> = self
            .events()
            .iter()
            .rev()
            .take(10)
            .map(|e| format!("{e:?}"))
            .collect();
        panic!(
            "not idle within {timeout:?}: synced={}, unlisted kinds={:?}, access errors={:?}, queue={queue}, last events (newest first)={events:#?}",
            world.synced.load(Ordering::SeqCst),
            world.unlisted_kinds(),
            self.access_errors(),
        );
    }

    /// The Lease holder's identity this copy writes into the Lease.
    pub fn identity(&self) -> &str {
        &self.running.identity
    }

    /// Writes sent (`kubectl_vap_writes_total`, every verb and resource).
    pub fn writes_total(&self) -> u64 {
        self.running.world.metrics.writes_total()
    }

    /// The copy's `/metrics` text.
    pub fn metrics_text(&self) -> String {
        self.running.world.metrics.render()
    }

    /// `kubectl_vap_write_errors_total{reason="<reason>"}` (0 when absent).
    pub fn write_errors(&self, reason: &str) -> u64 {
        let prefix = format!("kubectl_vap_write_errors_total{{reason=\"{reason}\"}} ");
        super::metrics::sum(&self.metrics_text(), &prefix) as u64
    }

    /// The event log, oldest first.
    pub fn events(&self) -> Vec<ReconcileEvent> {
        self.running
            .world
            .events
            .lock()
            .map(|e| e.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Every write it logged (sent or refused), as `verb object: message (result)`, for failure
    /// messages.
    pub fn writes(&self) -> Vec<String> {
        self.events()
            .iter()
            .filter(|e| {
                matches!(
                    e.verb,
                    EventVerb::Create | EventVerb::Update | EventVerb::Delete
                )
            })
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

    /// The writes to objects of `kind` that succeeded, as `verb name`.
    pub fn ok_writes_of(&self, kind: &str) -> Vec<String> {
        self.events()
            .iter()
            .filter(|e| e.result == EventResult::Ok && e.object.kind == kind)
            .filter(|e| {
                matches!(
                    e.verb,
                    EventVerb::Create | EventVerb::Update | EventVerb::Delete
                )
            })
            .map(|e| format!("{} {}", e.verb.as_str(), e.object.name))
            .collect()
    }

    /// Why the server refused each create of `object` (by name) in the event log.
    pub fn refused_creates(&self, object: &str) -> Vec<String> {
        self.events()
            .iter()
            .filter(|e| e.verb == EventVerb::Create && e.object.name == object)
            .filter_map(|e| match &e.result {
                EventResult::Failed(why) => Some(why.clone()),
                _ => None,
            })
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
        self.running
            .world
            .constraints
            .read()
            .map(|w| w.contains_key(kind))
            .unwrap_or_default()
    }

    /// What it cannot read or use, by message.
    pub fn access_errors(&self) -> Vec<String> {
        self.running
            .world
            .access
            .lock()
            .map(|a| a.values().map(|e| e.message.clone()).collect())
            .unwrap_or_default()
    }

    /// False while it holds its writes (Gatekeeper's generator is on).
    pub fn writes_enabled(&self) -> bool {
        self.running.world.writes_enabled.load(Ordering::SeqCst)
    }

    /// Gatekeeper's generator as it last found it running (`None`: off).
    pub fn gatekeeper_generator(&self) -> Option<String> {
        self.running.handle.current().gatekeeper_generator.clone()
    }

    /// The template side's opinion of `kind` in its cache.
    pub fn opinion(&self, kind: &str) -> Option<Opinion> {
        self.running.cache.get(kind)
    }

    /// Asks for a full resync (every object queued again).
    pub async fn reconcile_all(&self) {
        self.running
            .handle
            .send(Command::ReconcileAll)
            .await
            .expect("command");
    }

    /// Stops it (a held Lease is released) and waits up to 15 s for it to end.
    pub async fn stop(self) {
        self.running.handle.shutdown();
        let _ = tokio::time::timeout(Duration::from_secs(15), self.running.join).await;
    }
}
