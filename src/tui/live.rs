//! The live source: a thin adapter over the reconciler's handle. It runs the reconciler on its
//! own tokio runtime (on a background thread), turns each published `LiveState` into `Data`
//! (analysis included, off the UI thread), forwards confirmed writes as `Command`s, and on
//! quit asks the reconciler to stop and waits (bounded) for it to release the lease.

use super::action::{Action, Level, WriteCommand};
use super::data::{AccessError, AccessKind, ClusterInfo, Data, EventLine, Origin};
use super::source::{Notify, Source};
use crate::cli::args::ConnectionArgs;
use crate::controller::{
    self, AccessErrorKind, Command, Config, Controller, EventResult, LiveState, ReconcileEvent,
};
use crate::core::Options;
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

/// How long quitting waits for the reconciler to release the lease.
const STOP_WAIT: Duration = Duration::from_secs(5);
/// Bursts of changes are drawn once per this interval at most.
const COALESCE: Duration = Duration::from_millis(100);

pub struct Live {
    conn: ConnectionArgs,
    opts: Options,
    /// `--reconcile` (and not `--readonly`): compete for the lease and write.
    reconcile: bool,
    /// `--lease-namespace`, `--lease-name`: the Lease to compete for, or to read the holder of.
    lease: (String, String),
    handle: Arc<Mutex<Option<Controller>>>,
    /// The runtime the reconciler runs on (requests are sent from it).
    runtime: Arc<Mutex<Option<tokio::runtime::Handle>>>,
    /// To report audits (`a`), which run beside the reconciler.
    notify: Option<Notify>,
    stop: Option<tokio::sync::watch::Sender<bool>>,
    done: Option<mpsc::Receiver<()>>,
}

impl Live {
    pub fn new(
        conn: ConnectionArgs,
        opts: Options,
        reconcile: bool,
        lease: (String, String),
    ) -> Self {
        Live {
            conn,
            opts,
            reconcile,
            lease,
            handle: Arc::new(Mutex::new(None)),
            runtime: Arc::new(Mutex::new(None)),
            notify: None,
            stop: None,
            done: None,
        }
    }
}

/// The kubeconfig context the header shows.
fn context_name(conn: &ConnectionArgs) -> String {
    if let Some(c) = &conn.context {
        return c.clone();
    }
    let first = conn
        .kubeconfig
        .as_deref()
        .and_then(|p| std::env::split_paths(p).find(|p| !p.as_os_str().is_empty()));
    let kc = match first {
        Some(path) => kube::config::Kubeconfig::read_from(path).ok(),
        None => kube::config::Kubeconfig::read().ok(),
    };
    kc.and_then(|k| k.current_context)
        .unwrap_or_else(|| "(current context)".to_string())
}

/// Data that says the cluster cannot be shown, and why.
fn unavailable(context: &str, reconcile: bool, resource: &str, message: String) -> Data {
    unavailable_as(context, reconcile, resource, AccessKind::Other, message)
}

/// What a failed start means on screen: a 403 is "restricted", a missing VAP API "disabled".
pub fn start_error_kind(e: &controller::Error) -> (String, AccessKind) {
    use crate::cluster::KubeError;
    match e {
        controller::Error::Kube(KubeError::Forbidden { what, .. }) => {
            (what.clone(), AccessKind::Forbidden)
        }
        controller::Error::Kube(KubeError::VapApiMissing) => (
            "validatingadmissionpolicies.admissionregistration.k8s.io".to_string(),
            AccessKind::Disabled,
        ),
        _ => ("cluster".to_string(), AccessKind::Other),
    }
}

fn unavailable_as(
    context: &str,
    reconcile: bool,
    resource: &str,
    kind: AccessKind,
    message: String,
) -> Data {
    let info = ClusterInfo {
        context: context.to_string(),
        access_errors: vec![AccessError {
            resource: resource.to_string(),
            kind,
            message,
        }],
        ..ClusterInfo::default()
    };
    Data::prepare(
        Origin::Live {
            reconciling: reconcile,
            refusal: Some("not connected".to_string()),
        },
        info,
        Arc::default(),
        &Options::default(),
        Vec::new(),
    )
}

/// Assigns stable sequence numbers to the reconciler's bounded event log, so each event is
/// shown once.
#[derive(Default)]
pub struct EventCursor {
    last: Option<ReconcileEvent>,
    seq: u64,
}

impl EventCursor {
    pub fn new_events(&mut self, state: &LiveState) -> Vec<EventLine> {
        let start = match &self.last {
            Some(last) => state
                .events
                .iter()
                .rposition(|e| e == last)
                .map_or(0, |i| i + 1),
            None => 0,
        };
        let mut out = Vec::new();
        for e in state.events.iter().skip(start) {
            self.seq += 1;
            let (error, result) = match (&e.result, e.result.failure()) {
                (EventResult::Skipped(why), _) => (false, format!(" skipped: {why}")),
                (_, Some(why)) => (true, format!(" FAILED: {why}")),
                _ => (false, String::new()),
            };
            let message = if e.message.is_empty() {
                String::new()
            } else {
                format!(" — {}", e.message)
            };
            out.push(EventLine {
                seq: self.seq,
                time: e
                    .time
                    .with_timezone(&chrono::Local)
                    .format("%H:%M:%S")
                    .to_string(),
                error,
                text: format!("{} {}{result}{message}", e.verb.as_str(), e.object),
            });
        }
        if let Some(last) = state.events.back() {
            self.last = Some(last.clone());
        }
        out
    }
}

/// One published state as the UI's data. Pure (analysis included): tested without a cluster.
pub fn data_from_live(
    state: &LiveState,
    context: &str,
    reconcile: bool,
    opts: &Options,
    events: Vec<EventLine>,
) -> Data {
    let lease = &state.lease;
    let refusal = if !reconcile {
        Some(
            "observing: this TUI does not reconcile; start it with --reconcile, or run `kubectl vap reconcile …`"
                .to_string(),
        )
    } else if !state.writes_enabled {
        Some(match &state.gatekeeper_generator {
            Some(seen) => format!(
                "writes are off: Gatekeeper's own VAP generator looks active ({seen}); turn it off or use `kubectl vap run --take-over`"
            ),
            None => "writes are off for this copy".to_string(),
        })
    } else if !lease.leading {
        Some(format!(
            "this copy does not hold the lease ({} does): only the holder writes",
            lease.holder.as_deref().unwrap_or("nobody yet")
        ))
    } else {
        None
    };
    let access_errors = state
        .access_errors
        .iter()
        .map(|e| AccessError {
            resource: e.resource.clone(),
            kind: match e.kind {
                AccessErrorKind::Forbidden => AccessKind::Forbidden,
                AccessErrorKind::NotServed if e.resource.contains("admissionregistration") => {
                    AccessKind::Disabled
                }
                AccessErrorKind::NotServed => AccessKind::Missing,
                AccessErrorKind::Other => AccessKind::Other,
            },
            message: e.message.clone(),
        })
        .collect();
    let info = ClusterInfo {
        context: context.to_string(),
        server_version: state.server_version.clone(),
        vap_api: state.vap_api.clone(),
        lease_holder: lease.holder.clone(),
        leading: lease.leading,
        access_errors,
        syncing: !state.synced,
    };
    let mut data = Data::prepare(
        Origin::Live {
            reconciling: reconcile,
            refusal,
        },
        info,
        Arc::new(state.snapshot.clone()),
        opts,
        events,
    );
    note_write_failures(Arc::make_mut(&mut data.analysis), &state.events);
    data
}

/// Adds to each finding the failure of the last write of its object, if that write failed: a
/// node that stays missing or out of sync says why, after the event log has scrolled on.
fn note_write_failures(
    analysis: &mut crate::core::analysis::Analysis,
    events: &std::collections::VecDeque<ReconcileEvent>,
) {
    use crate::controller::EventVerb;
    let mut failed: std::collections::HashMap<(&str, &str), String> =
        std::collections::HashMap::new();
    for e in events {
        if !matches!(
            e.verb,
            EventVerb::Create | EventVerb::Update | EventVerb::Delete
        ) {
            continue;
        }
        let key = (e.object.kind.as_str(), e.object.name.as_str());
        match (&e.result, e.result.failure()) {
            (EventResult::Ok, _) => {
                failed.remove(&key);
            }
            (_, Some(why)) => {
                failed.insert(key, why);
            }
            _ => {}
        }
    }
    if failed.is_empty() {
        return;
    }
    for f in &mut analysis.findings {
        if let Some(why) = failed.get(&(f.object.kind.as_str(), f.object.name.as_str())) {
            f.message = format!("{} — the last write failed: {why}", f.message);
        }
    }
}

/// The reconciler's command for a write; audits are not the reconciler's (`None`).
fn to_command(cmd: WriteCommand) -> Option<Command> {
    Some(match cmd {
        WriteCommand::Audit(_) | WriteCommand::Test(_) => return None,
        WriteCommand::Replay(t) => Command::Replay(t),
        WriteCommand::Reconcile(t) => Command::Reconcile(t),
        WriteCommand::ReconcileAll => Command::ReconcileAll,
    })
}

impl Live {
    /// Runs `kubectl vap audit TARGET` on a thread of its own: progress as flashes, then one
    /// event-log line per violation and a summary. The UI never waits for it.
    fn audit(&mut self, target: String) -> Action {
        let Some(notify) = self.notify.clone() else {
            return Action::Flash(Level::Error, "not connected: nothing to audit".into());
        };
        let conn = self.conn.clone();
        let dispatch = tracing::dispatcher::get_default(Clone::clone);
        let label = target.clone();
        std::thread::spawn(move || {
            let _log = tracing::dispatcher::set_default(&dispatch);
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    notify.send(Action::Flash(Level::Error, format!("audit: {e}")));
                    return;
                }
            };
            let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let total = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let result = rt.block_on(async {
                let progress = {
                    let (notify, done, total, target) =
                        (notify.clone(), done.clone(), total.clone(), target.clone());
                    async move {
                        loop {
                            tokio::time::sleep(Duration::from_millis(500)).await;
                            let n = total.load(std::sync::atomic::Ordering::Relaxed);
                            if n > 0 {
                                let d = done.load(std::sync::atomic::Ordering::Relaxed);
                                notify.send(Action::Flash(
                                    Level::Info,
                                    format!("auditing {target}: {d}/{n} dry-runs"),
                                ));
                            }
                        }
                    }
                };
                let listed = |n: usize| total.store(n, std::sync::atomic::Ordering::Relaxed);
                let ticker = tokio::spawn(progress);
                let r = crate::cli::admission::audit_quietly(&conn, &target, listed, done.clone())
                    .await;
                ticker.abort();
                r
            });
            let result = result.map(|report| {
                let lines = crate::admission::audit::event_lines(&report);
                // The typed result first: the tree and detail pane keep it.
                notify.send(Action::Audited(Arc::new(report)));
                lines
            });
            flash_outcome(&notify, &format!("audit {target}"), result);
        });
        Action::Flash(Level::Info, format!("auditing {label}…"))
    }
}

impl Live {
    /// Runs `kubectl vap test -f PATH` on a thread of its own; one event-log line per verdict.
    fn test(&mut self, path: String) -> Action {
        let Some(notify) = self.notify.clone() else {
            return Action::Flash(
                Level::Error,
                "not connected: nothing to test against".into(),
            );
        };
        let conn = self.conn.clone();
        let opts = self.opts.clone();
        let dispatch = tracing::dispatcher::get_default(Clone::clone);
        let label = path.clone();
        std::thread::spawn(move || {
            let _log = tracing::dispatcher::set_default(&dispatch);
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(anyhow::Error::from)
                .and_then(|rt| {
                    rt.block_on(crate::cli::admission::test_quietly(&conn, &path, &opts))
                });
            let result = result.map(|report| crate::admission::test::event_lines(&report));
            flash_outcome(&notify, &format!("test {path}"), result);
        });
        Action::Flash(Level::Info, format!("testing {label}…"))
    }
}

/// The outcome of an audit or test run off the UI thread, as event-log lines (`true`: an
/// error line); a failure as one error line naming `what`.
fn flash_outcome(notify: &Notify, what: &str, result: anyhow::Result<Vec<(bool, String)>>) {
    match result {
        Ok(lines) => {
            for (error, line) in lines {
                let level = if error { Level::Error } else { Level::Info };
                if !notify.send(Action::Flash(level, line)) {
                    return;
                }
            }
        }
        Err(e) => {
            notify.send(Action::Flash(
                Level::Error,
                format!("{what}: {}", crate::cli::error_text(&e)),
            ));
        }
    }
}

impl Source for Live {
    fn start(&mut self, notify: Notify) {
        self.notify = Some(notify.clone());
        let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
        let (done_tx, done_rx) = mpsc::channel();
        self.stop = Some(stop_tx);
        self.done = Some(done_rx);
        let conn = self.conn.clone();
        let opts = self.opts.clone();
        let reconcile = self.reconcile;
        let lease = self.lease.clone();
        let slot = self.handle.clone();
        let rt_slot = self.runtime.clone();
        let dispatch = tracing::dispatcher::get_default(Clone::clone);
        std::thread::spawn(move || {
            let _log = tracing::dispatcher::set_default(&dispatch);
            let thread_dispatch = dispatch.clone();
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                // The reconciler's logs go to the TUI's log file, never the screen.
                .on_thread_start(move || {
                    std::mem::forget(tracing::dispatcher::set_default(&thread_dispatch));
                })
                .build();
            let context = context_name(&conn);
            notify.send(Action::Flash(
                Level::Info,
                format!("connecting to {context}: listing and watching…"),
            ));
            let rt = match rt {
                Ok(rt) => rt,
                Err(e) => {
                    notify.send(Action::Data(Arc::new(unavailable(
                        &context,
                        reconcile,
                        "runtime",
                        format!("cannot start the async runtime: {e}"),
                    ))));
                    let _ = done_tx.send(());
                    return;
                }
            };
            rt.block_on(async move {
                let client = match crate::cluster::client_from(&conn, false).await {
                    Ok(c) => c,
                    Err(e) => {
                        notify.send(Action::Data(Arc::new(unavailable(
                            &context,
                            reconcile,
                            "kubeconfig",
                            e.to_string(),
                        ))));
                        return;
                    }
                };
                let (lease_namespace, lease_name) = lease.clone();
                let mode = if reconcile {
                    controller::Mode::Elect {
                        lease_namespace,
                        lease_name,
                        take_over: false,
                    }
                } else {
                    controller::Mode::ReadOnly {
                        lease_namespace,
                        lease_name,
                    }
                };
                let mut config = Config::new(opts.clone(), mode);
                config.workers = 2;
                let handle = match controller::start(client, config).await {
                    Ok(x) => x,
                    Err(e) => {
                        let (resource, kind) = start_error_kind(&e);
                        notify.send(Action::Data(Arc::new(unavailable_as(
                            &context,
                            reconcile,
                            &resource,
                            kind,
                            format!("the live view could not start: {e}"),
                        ))));
                        return;
                    }
                };
                if let Ok(mut s) = slot.lock() {
                    *s = Some(handle.clone());
                }
                if let Ok(mut s) = rt_slot.lock() {
                    *s = Some(tokio::runtime::Handle::current());
                }
                let mut state_rx = handle.subscribe();
                let mut cursor = EventCursor::default();
                loop {
                    let state = state_rx.borrow_and_update().clone();
                    let events = cursor.new_events(&state);
                    let data = data_from_live(&state, &context, reconcile, &opts, events);
                    if !notify.send(Action::Data(Arc::new(data))) {
                        break;
                    }
                    tokio::time::sleep(COALESCE).await;
                    tokio::select! {
                        changed = state_rx.changed() => if changed.is_err() {
                            notify.send(Action::Flash(Level::Error, "the reconciler stopped".into()));
                            break;
                        },
                        _ = stop_rx.changed() => break,
                    }
                }
                match handle.stop(STOP_WAIT).await {
                    Ok(()) => tracing::info!("reconciler stopped"),
                    Err(e) => tracing::warn!(error = %e, "stopping the reconciler"),
                }
            });
            let _ = done_tx.send(());
        });
    }

    fn execute(&mut self, cmd: WriteCommand) -> Option<Action> {
        let cli = cmd.cli();
        let command = match (to_command(cmd.clone()), cmd) {
            (Some(command), _) => command,
            (None, WriteCommand::Audit(target)) => return Some(self.audit(target)),
            (None, WriteCommand::Test(path)) => return Some(self.test(path)),
            (None, _) => return None,
        };
        let handle = self.handle.lock().ok().and_then(|h| h.clone());
        let Some(handle) = handle else {
            return Some(Action::Flash(
                Level::Error,
                "not connected: nothing to send the command to".into(),
            ));
        };
        let Some(notify) = self.notify.clone() else {
            return Some(Action::Flash(Level::Error, "not connected".into()));
        };
        let Some(rt) = self.runtime.lock().ok().and_then(|r| r.clone()) else {
            return Some(Action::Flash(Level::Error, "not connected".into()));
        };
        let what = cli.clone();
        rt.spawn(async move {
            let (level, line) = match handle.request(command).await {
                Ok(o) => (
                    Level::Info,
                    format!("`{what}`: {} (by {})", o.summary, o.handled_by),
                ),
                Err(e) => (Level::Error, format!("`{what}`: {e}")),
            };
            notify.send(Action::Flash(level, line));
        });
        Some(Action::Flash(Level::Info, format!("sent `{cli}`…")))
    }

    fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
        if let Some(done) = self.done.take() {
            let _ = done.recv_timeout(STOP_WAIT + Duration::from_secs(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::{EventVerb, LeaseInfo};
    use crate::model::ObjectRef;

    fn event(i: u32) -> ReconcileEvent {
        ReconcileEvent {
            time: chrono::DateTime::from_timestamp(1_700_000_000 + i64::from(i), 0).unwrap(),
            verb: EventVerb::Update,
            object: ObjectRef::new("v1", "K", format!("o{i}")),
            result: if i.is_multiple_of(2) {
                EventResult::Ok
            } else {
                EventResult::Failed("boom".into())
            },
            message: String::new(),
        }
    }

    #[test]
    fn each_event_is_shown_once_even_when_the_log_wraps() {
        let mut state = LiveState::default();
        let mut cursor = EventCursor::default();
        state.push_event(event(0));
        state.push_event(event(1));
        let first = cursor.new_events(&state);
        assert_eq!(first.len(), 2);
        assert!(first[1].error && first[1].text.contains("FAILED: boom"));
        assert!(cursor.new_events(&state).is_empty());
        // The bounded log drops its oldest entries: only the new ones come out, in order.
        for i in 2..(2 + crate::controller::state::EVENT_LOG_CAPACITY as u32) {
            state.push_event(event(i));
        }
        let more = cursor.new_events(&state);
        assert_eq!(more.len(), crate::controller::state::EVENT_LOG_CAPACITY);
        assert!(more.windows(2).all(|w| w[0].seq < w[1].seq));
        assert!(more[0].seq > first[1].seq);
    }

    #[test]
    fn a_failed_write_shows_on_its_objects_finding_until_a_write_succeeds() {
        use crate::core::findings::Code;
        // A template that generates, no VAP yet: the analysis finds the VAP missing.
        let mut snapshot = crate::snapshot::Snapshot::default();
        snapshot
            .insert(
                serde_json::json!({
                    "apiVersion": "templates.gatekeeper.sh/v1", "kind": "ConstraintTemplate",
                    "metadata": { "name": "k8sx", "uid": "u1" },
                    "spec": { "crd": { "spec": { "names": { "kind": "K8sX" } } },
                              "targets": [{ "target": "admission.k8s.gatekeeper.sh",
                                            "code": [{ "engine": "K8sNativeValidation",
                                                       "source": { "generateVAP": true,
                                                                   "validations": [{ "expression": "true" }] } }] }] }
                }),
                crate::model::Source::default(),
            )
            .unwrap();
        let mut state = LiveState {
            snapshot,
            ..LiveState::default()
        };
        let write = |result| ReconcileEvent {
            time: chrono::DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
            verb: EventVerb::Create,
            object: ObjectRef::new(
                "admissionregistration.k8s.io/v1",
                "ValidatingAdmissionPolicy",
                "gatekeeper-k8sx",
            ),
            result,
            message: "the template generates a VAP".into(),
        };
        let message = |state: &LiveState| {
            let data = data_from_live(state, "ctx", true, &Options::default(), Vec::new());
            data.analysis
                .findings
                .iter()
                .find(|f| f.code == Code::PolicyMissing)
                .map(|f| f.message.clone())
                .unwrap()
        };
        assert!(!message(&state).contains("last write failed"));
        state.push_event(write(EventResult::Failed("forbidden: no create".into())));
        assert!(
            message(&state).ends_with("the last write failed: forbidden: no create"),
            "{}",
            message(&state)
        );
        state.push_event(write(EventResult::Ok));
        assert!(!message(&state).contains("last write failed"));
    }

    #[test]
    fn writes_are_refused_with_the_reason() {
        let opts = Options::default();
        let refusal = |state: &LiveState, reconcile: bool| {
            data_from_live(state, "ctx", reconcile, &opts, Vec::new()).write_refusal()
        };
        let mut state = LiveState {
            writes_enabled: true,
            lease: LeaseInfo {
                holder: Some("other".into()),
                ..LeaseInfo::default()
            },
            ..LiveState::default()
        };
        assert!(refusal(&state, false).unwrap().starts_with("observing"));
        assert!(refusal(&state, true).unwrap().contains("(other does)"));
        state.lease.leading = true;
        assert_eq!(refusal(&state, true), None);
        state.writes_enabled = false;
        state.gatekeeper_generator = Some("gatekeeper-controller --default-create-vap".into());
        assert!(
            refusal(&state, true)
                .unwrap()
                .contains("Gatekeeper's own VAP generator")
        );
    }

    #[test]
    fn access_errors_keep_their_meaning() {
        let state = LiveState {
            access_errors: vec![
                crate::controller::AccessError {
                    resource: "validatingadmissionpolicies.admissionregistration.k8s.io".into(),
                    kind: AccessErrorKind::NotServed,
                    message: "not served".into(),
                },
                crate::controller::AccessError {
                    resource: "constrainttemplates.templates.gatekeeper.sh".into(),
                    kind: AccessErrorKind::NotServed,
                    message: "CRD missing".into(),
                },
                crate::controller::AccessError {
                    resource: "validatingadmissionpolicybindings.admissionregistration.k8s.io"
                        .into(),
                    kind: AccessErrorKind::Forbidden,
                    message: "403".into(),
                },
            ],
            synced: false,
            ..LiveState::default()
        };
        let data = data_from_live(&state, "ctx", false, &Options::default(), Vec::new());
        let kinds: Vec<_> = data
            .info
            .access_errors
            .iter()
            .map(|e| e.kind.clone())
            .collect();
        assert_eq!(
            kinds,
            vec![
                AccessKind::Disabled,
                AccessKind::Missing,
                AccessKind::Forbidden
            ]
        );
        assert!(data.info.syncing);
    }
}
