//! The live source: a thin adapter over the reconciler's handle ([`Controller`]), the TUI's
//! only door to it. On a thread of its own (one runtime per session) it starts the reconciler (retrying with backoff
//! while the API server does not answer), turns each published `LiveState` into `Data`
//! (analysis included, off the UI thread), sends replay/reconcile as requests to whichever
//! copy leads, runs audits and tests on the snapshot the reconciler holds, switches context
//! (`:ctx`), and on quit asks the reconciler to stop and waits (bounded) for it to release the
//! lease.

use super::action::{Action, Level, WriteCommand};
use super::contexts;
use super::data::{Data, OutcomeKey};
use super::from_live::{connecting, unavailable};
use super::source::{Notify, Source};
use crate::admission::audit::AuditProgress;
use crate::cluster::client::ConnectionOptions;
use crate::controller::{self, AccessErrorKind, Command, Config, Controller, RequestOutcome};
use crate::core::Options;
use crate::text::error_text;
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::sync::watch;

pub use super::from_live::{EventCursor, data_from_live};

/// How long quitting (or switching context) lets a start under way finish, to stop it and
/// release the Lease it may have taken (stopping itself waits `Controller::STOP_WAIT`).
const START_WAIT: Duration = Duration::from_secs(5);
/// Bursts of changes are drawn once per this interval at most.
const COALESCE: Duration = Duration::from_millis(100);
/// How long a replay or reconcile waits for the leader's answer.
const REQUEST_WAIT: Duration = Duration::from_secs(120);
/// Retrying a start that failed: the first wait, doubled each time up to the last.
const FIRST_RETRY: Duration = Duration::from_secs(1);
const LAST_RETRY: Duration = Duration::from_secs(30);

/// How long to wait after the `failures`-th failed start in a row: 1 s, doubling, at most 30 s.
pub fn retry_delay(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    FIRST_RETRY.saturating_mul(1 << doublings).min(LAST_RETRY)
}

/// What the command line chose (`cli` builds it).
#[derive(Clone)]
struct Settings {
    conn: ConnectionOptions,
    opts: Options,
    /// `--reconcile` (and not `--readonly`): compete for the lease and write.
    reconcile: bool,
    /// `--lease-namespace`, `--lease-name`: the Lease to compete for, or to read the holder of.
    lease: (String, String),
}

/// A running live view: what requests, audits and tests go through.
#[derive(Clone)]
struct Session {
    controller: Controller,
    /// The runtime the reconciler runs on (requests are sent from it).
    runtime: tokio::runtime::Handle,
    /// The connection it was started with (audits and tests make their own clients).
    conn: ConnectionOptions,
}

/// What the UI asks of the source thread.
enum Control {
    Switch(String),
    Stop,
}

/// How a session ended.
enum Next {
    Quit,
    Switch(String),
}

impl From<Option<Control>> for Next {
    fn from(c: Option<Control>) -> Self {
        match c {
            Some(Control::Switch(name)) => Next::Switch(name),
            // Stopped, or the source is gone.
            Some(Control::Stop) | None => Next::Quit,
        }
    }
}

pub struct Live {
    settings: Settings,
    session: Arc<Mutex<Option<Session>>>,
    /// The context shown, for the messages of a switch.
    context: Arc<Mutex<String>>,
    /// Why the context shown cannot be served at all (no VAP v1), for the exit.
    refusal: Arc<Mutex<Option<String>>>,
    notify: Option<Notify>,
    control: Option<UnboundedSender<Control>>,
    done: Option<mpsc::Receiver<()>>,
}

impl Live {
    pub fn new(
        conn: impl Into<ConnectionOptions>,
        opts: Options,
        reconcile: bool,
        lease: (String, String),
    ) -> Self {
        Live {
            settings: Settings {
                conn: conn.into(),
                opts,
                reconcile,
                lease,
            },
            session: Arc::new(Mutex::new(None)),
            context: Arc::new(Mutex::new(String::new())),
            refusal: Arc::new(Mutex::new(None)),
            notify: None,
            control: None,
            done: None,
        }
    }

    fn current(&self) -> Option<Session> {
        self.session.lock().ok().and_then(|s| s.clone())
    }
}

/// The reconciler's command for a replay or reconcile (`None`: not the reconciler's).
fn to_command(cmd: &WriteCommand) -> Option<Command> {
    Some(match cmd {
        WriteCommand::Replay(t) => Command::Replay(t.clone()),
        WriteCommand::Reconcile(t) => Command::Reconcile(t.clone()),
        WriteCommand::ReconcileAll => Command::ReconcileAll,
        WriteCommand::Audit(_) | WriteCommand::Test(_) | WriteCommand::SwitchContext(_) => {
            return None;
        }
    })
}

/// The event-log line of a request's answer (`cli`: the command it stands for), or of no
/// answer within [`REQUEST_WAIT`].
pub fn request_outcome(
    cli: &str,
    answer: Option<Result<RequestOutcome, controller::Error>>,
) -> (Level, String) {
    match answer {
        // A write that failed is a failure: red, whatever else the request did.
        Some(Ok(o)) if o.failures > 0 || o.refused > 0 => (
            Level::Error,
            format!(
                "`{cli}`: {} — {} write(s) failed (by {})",
                o.summary,
                o.failures.max(o.refused as u64),
                o.handled_by
            ),
        ),
        Some(Ok(o)) => (
            Level::Info,
            format!("`{cli}`: {} (by {})", o.summary, o.handled_by),
        ),
        Some(Err(e)) => (Level::Error, format!("`{cli}`: {}", error_text(&e))),
        None => (
            Level::Error,
            format!(
                "`{cli}`: no answer within {}s; the leader may still carry it out (its Events show here)",
                REQUEST_WAIT.as_secs()
            ),
        ),
    }
}

/// Who a request goes to, as the flash says it.
fn addressee(controller: &Controller) -> String {
    let lease = controller.state().lease.clone();
    match (&lease.holder, lease.leading) {
        (_, true) => "this copy's reconciler".to_string(),
        (Some(holder), false) => format!("the leader ({holder})"),
        (None, false) => "the leader".to_string(),
    }
}

impl Live {
    /// Replay or reconcile: a request to whichever copy holds the Lease; its answer (or why
    /// there is none) becomes an event-log line.
    fn request(&mut self, cmd: &WriteCommand, command: Command) -> Action {
        let cli = cmd.cli();
        let (Some(session), Some(notify)) = (self.current(), self.notify.clone()) else {
            return Action::Flash(
                Level::Error,
                format!("not connected: nothing to send `{cli}` to"),
            );
        };
        let to = addressee(&session.controller);
        let what = cli.clone();
        session.runtime.spawn(async move {
            let answer = tokio::time::timeout(REQUEST_WAIT, session.controller.request(command))
                .await
                .ok();
            let key = match &answer {
                Some(Ok(o)) => Some(OutcomeKey {
                    by: o.handled_by.clone(),
                    summary: o.summary.clone(),
                }),
                _ => None,
            };
            let (level, line) = request_outcome(&what, answer);
            notify.send(Action::Answer(level, line, key));
        });
        Action::Flash(Level::Info, format!("asked {to}: `{cli}`…"))
    }

    /// Runs `kubectl vap audit TARGET` as a task on the session's runtime, on the snapshot
    /// the reconciler holds: progress as [`Action::Progress`], then one event-log line per violation and a
    /// summary. The UI never waits for it; a context switch ends it with its session.
    fn audit(&mut self, target: String) -> Action {
        let (Some(session), Some(notify)) = (self.current(), self.notify.clone()) else {
            return Action::Flash(Level::Error, "not connected: nothing to audit".into());
        };
        let label = target.clone();
        session.runtime.clone().spawn(async move {
            let (tx, rx) = tokio::sync::watch::channel(AuditProgress::default());
            let ticker = tokio::spawn(progress(notify.clone(), format!("auditing {target}"), rx));
            // Attribution needs the templates, constraints, VAPs and bindings: the
            // reconciler's stores have them, so only the objects in scope are listed.
            let snap = session.controller.snapshot();
            let result =
                crate::admission::audit_on_snapshot(&session.conn, &snap, &target, tx).await;
            ticker.abort();
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

    /// Runs `kubectl vap test -f PATH` as a task on the session's runtime, attributed with
    /// the reconciler's snapshot; one event-log line per verdict.
    fn test(&mut self, path: String) -> Action {
        let (Some(session), Some(notify)) = (self.current(), self.notify.clone()) else {
            return Action::Flash(
                Level::Error,
                "not connected: nothing to test against".into(),
            );
        };
        let opts = self.settings.opts.clone();
        let label = path.clone();
        session.runtime.clone().spawn(async move {
            let snap = session.controller.snapshot();
            let result = crate::admission::test_on_snapshot(&session.conn, &snap, &path, &opts)
                .await
                .map(|report| crate::admission::test::event_lines(&report));
            flash_outcome(&notify, &format!("test {path}"), result);
        });
        Action::Flash(Level::Info, format!("testing {label}…"))
    }

    /// `:ctx NAME`: the source thread stops this context's reconciler and starts one on `name`.
    fn switch(&mut self, name: String) -> Action {
        let Some(control) = &self.control else {
            return Action::Flash(Level::Error, "not started: nothing to switch".into());
        };
        let from = self.context.lock().map(|c| c.clone()).unwrap_or_default();
        let text = format!("switching to context {name}: stopping the live view of {from}…");
        if control.send(Control::Switch(name)).is_err() {
            return Action::Flash(Level::Error, "the live view has stopped".into());
        }
        Action::Flash(Level::Info, text)
    }
}

/// Every half second, where the audit is, as an [`Action::Progress`] once its total is
/// known, until aborted: the UI shows the latest (and keeps it shown while the audit runs).
async fn progress(notify: Notify, what: String, mut at: watch::Receiver<AuditProgress>) {
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let AuditProgress { done, total } = *at.borrow_and_update();
        if total > 0
            && !notify.send(Action::Progress {
                what: what.clone(),
                done,
                total,
            })
        {
            return;
        }
    }
}

/// The outcome of an audit or test run off the UI thread, as event-log lines (`true`: an
/// error line); a failure as one error line naming `what`.
fn flash_outcome<E>(notify: &Notify, what: &str, result: Result<Vec<(bool, String)>, E>)
where
    E: std::error::Error + 'static,
{
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
                format!("{what}: {}", error_text(&e)),
            ));
        }
    }
}

/// Why a start failed: the kubeconfig (reading it again gives the same answer), a cluster
/// without what kubectl-vap needs (ValidatingAdmissionPolicy v1: asking again gives the same
/// answer too), or the cluster otherwise (worth retrying: the API server may come back, a
/// grant may arrive).
enum Failure {
    Config(String),
    Unsupported(String),
    Start(String),
}

/// What one context's sessions have in common: the header's context, the kubeconfig's
/// contexts (for `:ctx`), and the session's number.
struct Base {
    context: String,
    contexts: Vec<String>,
    session: u64,
}

impl Base {
    fn stamp(&self, mut data: Data) -> Action {
        data.info.contexts = self.contexts.clone();
        data.info.session = self.session;
        Action::Data(Arc::new(data))
    }
}

/// Everything the source thread shares with [`Live`].
struct Shared {
    settings: Settings,
    notify: Notify,
    session: Arc<Mutex<Option<Session>>>,
    context: Arc<Mutex<String>>,
    refusal: Arc<Mutex<Option<String>>>,
}

impl Shared {
    fn set_refusal(&self, why: Option<String>) {
        if let Ok(mut slot) = self.refusal.lock() {
            *slot = why;
        }
    }

    fn set_session(&self, s: Option<Session>) {
        if let Ok(mut slot) = self.session.lock() {
            *slot = s;
        }
    }

    /// The source thread: one session per context, each on a runtime of its own, so
    /// whatever a session leaves running (a start abandoned half-way) ends with it.
    fn run(&self, mut control: UnboundedReceiver<Control>) {
        let mut conn = self.settings.conn.clone();
        let mut cursor = EventCursor::default();
        for session in 1.. {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build();
            let rt = match rt {
                Ok(rt) => rt,
                Err(e) => {
                    self.notify.send(Action::Data(Arc::new(unavailable(
                        "–",
                        self.settings.reconcile,
                        "runtime",
                        AccessErrorKind::Other,
                        format!("cannot start the async runtime: {e}"),
                    ))));
                    return;
                }
            };
            let next = rt.block_on(self.session(&conn, session, &mut control, &mut cursor));
            rt.shutdown_timeout(Duration::from_secs(1));
            match next {
                Next::Quit => return,
                Next::Switch(name) => {
                    tracing::info!(context = %name, "switching context");
                    conn = contexts::switched(&conn, &name);
                }
            }
        }
    }

    /// One context: start (retrying), follow the published state, stop.
    async fn session(
        &self,
        conn: &ConnectionOptions,
        session: u64,
        control: &mut UnboundedReceiver<Control>,
        cursor: &mut EventCursor,
    ) -> Next {
        let s = &self.settings;
        // Reading the kubeconfig is quick file IO, on this thread, never the UI's.
        let (context, names) = match contexts::read(conn) {
            Ok(c) => (c.current, c.names),
            Err(e) => {
                tracing::warn!(error = %e, "reading the kubeconfig's contexts");
                (conn.context.clone(), Vec::new())
            }
        };
        let base = Base {
            context: context.unwrap_or_else(|| "(current context)".to_string()),
            contexts: names,
            session,
        };
        if let Ok(mut c) = self.context.lock() {
            c.clone_from(&base.context);
        }
        cursor.enter(&base.context);
        let mut failures = 0u32;
        let mut why: Option<String> = None;
        loop {
            let attempt = failures + 1;
            // The UI has gone: nobody to start for.
            if !self.notify.send(base.stamp(connecting(
                &base.context,
                s.reconcile,
                attempt,
                None,
                why.clone(),
                chrono::Utc::now(),
            ))) {
                return Next::Quit;
            }
            let starting = start(s, conn);
            tokio::pin!(starting);
            let started = tokio::select! {
                r = &mut starting => r,
                c = control.recv() => {
                    // A start under way may take the Lease any moment: let it finish (bounded)
                    // and stop it, so the Lease is released rather than left to expire.
                    if let Ok(Ok(controller)) = tokio::time::timeout(START_WAIT, starting).await {
                        stop(&controller).await;
                    }
                    return c.into();
                }
            };
            let message = match started {
                Ok(controller) => {
                    self.set_session(Some(Session {
                        controller: controller.clone(),
                        runtime: tokio::runtime::Handle::current(),
                        conn: conn.clone(),
                    }));
                    let ended = self.follow(&base, &controller, control, cursor).await;
                    self.set_session(None);
                    stop(&controller).await;
                    match ended {
                        Some(next) => return next,
                        // It stopped by itself: start again (after the first wait).
                        None => {
                            failures = 0;
                            "the reconciler stopped".to_string()
                        }
                    }
                }
                Err(Failure::Config(message)) => {
                    // The same file says the same: wait for `:ctx` or quit.
                    self.notify.send(base.stamp(unavailable(
                        &base.context,
                        s.reconcile,
                        "kubeconfig",
                        AccessErrorKind::Other,
                        message,
                    )));
                    return control.recv().await.into();
                }
                Err(Failure::Unsupported(message)) => {
                    // The server says the same each time: on screen until `:ctx` or quit,
                    // and the reason the TUI exits 2 if it is still what the screen shows.
                    self.set_refusal(Some(message.clone()));
                    self.notify.send(base.stamp(unavailable(
                        &base.context,
                        s.reconcile,
                        "validatingadmissionpolicies.admissionregistration.k8s.io",
                        AccessErrorKind::NotServed,
                        message,
                    )));
                    let next = control.recv().await.into();
                    if matches!(next, Next::Switch(_)) {
                        self.set_refusal(None);
                    }
                    return next;
                }
                Err(Failure::Start(message)) => message,
            };
            failures += 1;
            let delay = retry_delay(failures);
            tracing::warn!(attempt = failures, ?delay, error = %message, "the live view could not start; retrying");
            let retry_at = chrono::Utc::now()
                + chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::zero());
            if !self.notify.send(base.stamp(connecting(
                &base.context,
                s.reconcile,
                failures,
                Some(retry_at),
                Some(message.clone()),
                chrono::Utc::now(),
            ))) {
                return Next::Quit;
            }
            why = Some(message);
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                c = control.recv() => return c.into(),
            }
        }
    }

    /// Publishes every state the reconciler publishes (bursts coalesced) until the UI asks
    /// for something else (`Some`) or the reconciler stops by itself (`None`).
    async fn follow(
        &self,
        base: &Base,
        controller: &Controller,
        control: &mut UnboundedReceiver<Control>,
        cursor: &mut EventCursor,
    ) -> Option<Next> {
        let s = &self.settings;
        let mut state_rx = controller.subscribe();
        loop {
            let state = state_rx.borrow_and_update().clone();
            let events = cursor.new_events(&state);
            let data = data_from_live(&state, &base.context, s.reconcile, &s.opts, events);
            if !self.notify.send(base.stamp(data)) {
                return Some(Next::Quit);
            }
            tokio::select! {
                () = tokio::time::sleep(COALESCE) => {}
                c = control.recv() => return Some(c.into()),
            }
            tokio::select! {
                changed = state_rx.changed() => if changed.is_err() {
                    self.notify.send(Action::Flash(Level::Error, "the reconciler stopped; starting it again".into()));
                    return None;
                },
                // A task of it died: it has stopped writing and released the Lease.
                failed = controller.failed() => {
                    self.notify.send(Action::Flash(Level::Error, format!("{failed}; starting the reconciler again")));
                    return None;
                },
                c = control.recv() => return Some(c.into()),
            }
        }
    }
}

/// A client for `conn` and the reconciler on it (observing, or competing for the lease).
async fn start(s: &Settings, conn: &ConnectionOptions) -> Result<Controller, Failure> {
    let client = crate::cluster::client_from(conn, false)
        .await
        .map_err(|e| Failure::Config(error_text(&e)))?;
    let (lease_namespace, lease_name) = s.lease.clone();
    let mode = if s.reconcile {
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
    let mut config = Config::new(s.opts.clone(), mode);
    config.workers = 2;
    controller::start(client, config)
        .await
        .map_err(|e| match e {
            controller::Error::Kube(crate::cluster::KubeError::NoVapV1(_)) => {
                Failure::Unsupported(error_text(&e))
            }
            e => Failure::Start(error_text(&e)),
        })
}

async fn stop(controller: &Controller) {
    match controller.stop().await {
        Ok(()) => tracing::info!("reconciler stopped"),
        Err(e) => tracing::warn!(error = %e, "stopping the reconciler"),
    }
}

impl Source for Live {
    fn start(&mut self, notify: Notify) {
        self.notify = Some(notify.clone());
        let (control_tx, control_rx) = unbounded_channel();
        let (done_tx, done_rx) = mpsc::channel();
        self.control = Some(control_tx);
        self.done = Some(done_rx);
        let shared = Shared {
            settings: self.settings.clone(),
            notify,
            session: self.session.clone(),
            context: self.context.clone(),
            refusal: self.refusal.clone(),
        };
        std::thread::spawn(move || {
            shared.run(control_rx);
            let _ = done_tx.send(());
        });
    }

    fn execute(&mut self, cmd: WriteCommand) -> Option<Action> {
        if let Some(command) = to_command(&cmd) {
            return Some(self.request(&cmd, command));
        }
        Some(match cmd {
            WriteCommand::Audit(target) => self.audit(target),
            WriteCommand::Test(path) => self.test(path),
            WriteCommand::SwitchContext(name) => self.switch(name),
            // `to_command` took these.
            WriteCommand::Replay(_) | WriteCommand::Reconcile(_) | WriteCommand::ReconcileAll => {
                return None;
            }
        })
    }

    fn stop(&mut self) {
        if let Some(control) = self.control.take() {
            let _ = control.send(Control::Stop);
        }
        if let Some(done) = self.done.take() {
            // A start under way gets START_WAIT to finish, then the reconciler STOP_WAIT to stop.
            let _ = done.recv_timeout(START_WAIT + Controller::STOP_WAIT + Duration::from_secs(1));
        }
    }

    fn refusal(&self) -> Option<String> {
        self.refusal.lock().ok().and_then(|r| r.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_wait_one_second_doubling_to_thirty() {
        let waits: Vec<u64> = (1..=8).map(|n| retry_delay(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(retry_delay(u32::MAX), LAST_RETRY);
        assert_eq!(retry_delay(0), FIRST_RETRY);
    }

    #[test]
    fn a_request_answer_is_one_line_saying_who_handled_it() {
        let outcome = |failures| RequestOutcome {
            handled_by: "kubectl-vap-7c9d".into(),
            summary: "replayed 2 constraints of K8sX: 1 write".into(),
            writes: 1,
            failures,
            refused: 0,
            keys: 2,
        };
        let cli = "kubectl vap replay k8sx";
        assert_eq!(
            request_outcome(cli, Some(Ok(outcome(0)))),
            (
                Level::Info,
                "`kubectl vap replay k8sx`: replayed 2 constraints of K8sX: 1 write (by kubectl-vap-7c9d)".into()
            )
        );
        // A failed write is red (it was yellow, beside "0 writes").
        assert_eq!(request_outcome(cli, Some(Ok(outcome(1)))).0, Level::Error);
        let refused = request_outcome(
            cli,
            Some(Err(controller::Error::NoLeader {
                lease: "gatekeeper-system/kubectl-vap".into(),
            })),
        );
        assert_eq!(refused.0, Level::Error);
        assert!(
            refused.1.ends_with(
                "no copy reconciles: nobody holds Lease gatekeeper-system/kubectl-vap (start `kubectl vap run`, or the TUI with --reconcile)"
            ),
            "{}",
            refused.1
        );
        assert!(
            request_outcome(cli, None)
                .1
                .contains("no answer within 120s")
        );
    }

    /// The source thread against an API server that refuses connections (nothing listens on
    /// the port): it says it is connecting, retries with a countdown, switches context on
    /// `:ctx`, and stops at once when asked.
    #[test]
    fn a_dead_api_server_is_retried_and_a_switch_starts_the_other_context() {
        use super::super::data::Link;
        use super::super::source::Msg;
        // A port nothing listens on: bound, then released.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("config");
        std::fs::write(
            &kubeconfig,
            format!(
                r#"
apiVersion: v1
kind: Config
current-context: dead-a
clusters:
- name: dead
  cluster: {{ server: "https://127.0.0.1:{port}", insecure-skip-tls-verify: true }}
users:
- name: u
  user: {{ token: t }}
contexts:
- name: dead-a
  context: {{ cluster: dead, user: u }}
- name: dead-b
  context: {{ cluster: dead, user: u }}
"#
            ),
        )
        .unwrap();
        let conn = ConnectionOptions {
            kubeconfig: Some(kubeconfig.display().to_string()),
            ..ConnectionOptions::default()
        };
        let mut live = Live::new(
            &conn,
            crate::load::cel::default_options(),
            false,
            ("gatekeeper-system".into(), "kubectl-vap".into()),
        );
        let (tx, rx) = mpsc::channel();
        live.start(Notify(tx));
        // The data the source sends, until `done` says enough (or 20 s pass).
        let next_data = |done: &dyn Fn(&Data) -> bool| -> Arc<Data> {
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            loop {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                match rx.recv_timeout(left) {
                    Ok(Msg::Action(Action::Data(d))) if done(&d) => return d,
                    Ok(_) => {}
                    Err(e) => panic!("no such data from the source: {e}"),
                }
            }
        };
        let first = next_data(&|_| true);
        assert_eq!(first.info.context, "dead-a");
        assert_eq!(first.info.contexts, ["dead-a", "dead-b"]);
        assert!(matches!(
            first.info.link,
            Link::Connecting {
                attempt: 1,
                retry_at: None,
                message: None
            }
        ));
        // The failure, with why and when the next attempt starts; then the next attempt.
        let failed = next_data(&|d| {
            matches!(
                &d.info.link,
                Link::Connecting {
                    retry_at: Some(_),
                    ..
                }
            )
        });
        let Link::Connecting {
            attempt,
            retry_at: Some(at),
            message: Some(why),
        } = &failed.info.link
        else {
            unreachable!()
        };
        assert_eq!(*attempt, 1);
        let wait = *at - chrono::Utc::now();
        assert!(wait <= chrono::Duration::seconds(1), "{wait}");
        // The cause that says what is wrong, not only "client error (Connect)".
        assert!(why.to_lowercase().contains("refused"), "{why}");
        next_data(&|d| matches!(d.info.link, Link::Connecting { attempt: 2, .. }));
        // `:ctx dead-b`: a new session on the other context.
        assert!(matches!(
            live.execute(WriteCommand::SwitchContext("dead-b".into())),
            Some(Action::Flash(Level::Info, _))
        ));
        let switched = next_data(&|d| d.info.session == 2);
        assert_eq!(switched.info.context, "dead-b");
        // Nothing is running: a request says so rather than waiting.
        assert!(matches!(
            live.execute(WriteCommand::ReconcileAll),
            Some(Action::Flash(Level::Error, _))
        ));
        let started = std::time::Instant::now();
        live.stop();
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "stopping waits for nothing"
        );
    }

    #[test]
    fn only_replay_and_reconcile_are_requests() {
        assert_eq!(
            to_command(&WriteCommand::Replay("t".into())),
            Some(Command::Replay("t".into()))
        );
        assert_eq!(
            to_command(&WriteCommand::ReconcileAll),
            Some(Command::ReconcileAll)
        );
        assert_eq!(to_command(&WriteCommand::Audit("t".into())), None);
        assert_eq!(to_command(&WriteCommand::SwitchContext("c".into())), None);
    }
}
