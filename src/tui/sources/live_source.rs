//! The live source: a thin adapter over the reconciler's handle ([`Controller`]), the TUI's
//! only door to it. One task on the TUI's runtime runs one session per context: it starts
//! the reconciler (retrying with backoff while the API server does not answer), turns each
//! published `LiveState` into `Data` (analysis on a blocking thread, never the UI's), forwards
//! what the controller's feed tells, sends replay/reconcile as requests to whichever copy
//! leads, runs audits and tests on the snapshot the reconciler holds, switches context
//! (`:ctx`), and on quit asks the reconciler to stop and waits (bounded) for it to release the
//! lease. The UI talks to that task through one channel: nothing is shared behind a lock.

use super::from_live::{connecting, unavailable, while_unreachable};
use super::source::{Notify, Source, at_deadline};
use crate::admission::audit::AuditProgress;
use crate::cluster::client::ConnectionOptions;
use crate::controller::{
    self, AccessErrorKind, Command, Config, Controller, Happened, RequestOutcome,
};
use crate::core::Options;
use crate::text::error_text;
use crate::tui::model::action::{Action, Level, WriteCommand};
use crate::tui::model::contexts;
use crate::tui::model::data::{Connecting, Data};
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

pub use super::from_live::data_from_live;

/// How long quitting (or switching context) lets a start under way finish, to stop it and
/// release the Lease it may have taken (stopping itself waits `Controller::STOP_WAIT`).
const START_WAIT: Duration = Duration::from_secs(5);
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

/// What the UI asks of the source's task.
enum Control {
    /// A confirmed command: a request, an audit, a test.
    Run(WriteCommand),
    Switch(String),
    Stop,
}

/// How a session ended.
enum Next {
    Quit,
    Switch(String),
}

pub struct Live {
    settings: Settings,
    control: Option<UnboundedSender<Control>>,
    task: Option<JoinHandle<()>>,
    /// Why the context shown cannot be served at all (no VAP v1), for the exit.
    refusal: Arc<parking_lot::Mutex<Option<String>>>,
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
            control: None,
            task: None,
            refusal: Arc::default(),
        }
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

/// What one running session does for a command: a request to whichever copy leads (its
/// answer, with its id, becomes an event-log line), an audit or a test on the snapshot the
/// reconciler holds (progress and results as actions). Each runs as a task of `tasks`: the
/// UI never waits for it, and a context switch ends it with its session.
fn run_command(
    tasks: &mut JoinSet<()>,
    controller: &Controller,
    s: &Settings,
    conn: &ConnectionOptions,
    cmd: WriteCommand,
    notify: &Notify,
) {
    let (controller, notify, conn) = (controller.clone(), notify.clone(), conn.clone());
    let cli = cmd.cli();
    if let Some(command) = to_command(&cmd) {
        notify.send(Action::Flash(
            Level::Info,
            format!("asked {}: `{cli}`…", addressee(&controller)),
        ));
        tasks.spawn(async move {
            let answer = tokio::time::timeout(REQUEST_WAIT, controller.request(command))
                .await
                .ok();
            let id = answer
                .as_ref()
                .and_then(|a| a.as_ref().ok())
                .map(|o| o.id.clone());
            let (level, line) = request_outcome(&cli, answer);
            notify.send(Action::Answer(level, line, id));
        });
        return;
    }
    match cmd {
        WriteCommand::Audit(target) => {
            notify.send(Action::Flash(Level::Info, format!("auditing {target}…")));
            tasks.spawn(async move {
                let (tx, rx) = watch::channel(AuditProgress::default());
                let what = format!("auditing {target}");
                let ticker = tokio::spawn(progress(notify.clone(), what, rx));
                // Attribution needs the templates, constraints, VAPs and bindings: the
                // reconciler's stores have them, so only the objects in scope are listed.
                let snap = controller.snapshot();
                let result = crate::admission::audit_on_snapshot(&conn, &snap, &target, tx).await;
                ticker.abort();
                let result = result.map(|report| {
                    let lines = crate::admission::audit::event_lines(&report);
                    // The typed result first: the tree and detail pane keep it.
                    notify.send(Action::Audited(Arc::new(report)));
                    lines
                });
                flash_outcome(&notify, &format!("audit {target}"), result);
            });
        }
        WriteCommand::Test(path) => {
            notify.send(Action::Flash(Level::Info, format!("testing {path}…")));
            let opts = s.opts.clone();
            tasks.spawn(async move {
                let snap = controller.snapshot();
                let result = crate::admission::test_on_snapshot(&conn, &snap, &path, &opts)
                    .await
                    .map(|report| crate::admission::test::event_lines(&report));
                flash_outcome(&notify, &format!("test {path}"), result);
            });
        }
        // Requests above; a switch is the session's own.
        _ => {}
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

/// Why a start failed: the kubeconfig (reading it again gives the same answer) or the
/// cluster (worth retrying: the API server may come back, a grant may arrive).
enum Failure {
    Config(String),
    /// A cluster without what kubectl-vap needs (ValidatingAdmissionPolicy v1): asking again
    /// gives the same answer.
    Unsupported(String),
    Start(String),
}

/// What one context's session says besides the controller's state: the header's context,
/// the kubeconfig's contexts (for `:ctx`), and the session's number.
struct Base {
    context: String,
    contexts: Vec<String>,
    session: u64,
}

impl Base {
    fn stamp(&self, data: Data) -> Action {
        Action::Data(Arc::new(Data {
            context: self.context.clone(),
            contexts: self.contexts.clone(),
            session: self.session,
            ..data
        }))
    }
}

/// The source's task: one session per context, until the UI quits. A start abandoned by
/// `:ctx` or quit is never cancelled half-way (it may take the Lease any moment): it runs to
/// its end and is stopped then, so a Lease it took is released rather than left to expire.
async fn run(
    s: Settings,
    notify: Notify,
    mut control: UnboundedReceiver<Control>,
    refusal: Arc<parking_lot::Mutex<Option<String>>>,
) {
    let mut conn = s.conn.clone();
    let mut shown = HashMap::new();
    let mut abandoned = JoinSet::new();
    for session in 1.. {
        let mut ctx = Session {
            s: &s,
            conn: &conn,
            notify: &notify,
            control: &mut control,
            shown: &mut shown,
            abandoned: &mut abandoned,
            refusal: &refusal,
        };
        match ctx.run(session).await {
            Next::Quit => break,
            Next::Switch(name) => {
                tracing::info!(context = %name, "switching context");
                conn = contexts::switched(&conn, &name);
            }
        }
    }
    let _ = tokio::time::timeout(START_WAIT + Controller::STOP_WAIT, abandoned.join_all()).await;
}

/// One context's session, and what the task keeps across sessions.
struct Session<'a> {
    s: &'a Settings,
    conn: &'a ConnectionOptions,
    notify: &'a Notify,
    control: &'a mut UnboundedReceiver<Control>,
    /// By context: the time of the newest cluster Event shown. A reconciler started again
    /// (or a context visited again) reads every Event anew; of those, only the ones newer
    /// than this are new to the user (a series counted up is newer too).
    shown: &'a mut HashMap<String, DateTime<Utc>>,
    /// Starts left running when the UI moved on, each stopping its reconciler once started.
    abandoned: &'a mut JoinSet<()>,
    /// Why the context shown cannot be served at all (`Live::refusal`).
    refusal: &'a parking_lot::Mutex<Option<String>>,
}

impl From<Option<Control>> for Next {
    fn from(c: Option<Control>) -> Self {
        match c {
            Some(Control::Switch(name)) => Next::Switch(name),
            // Stopped, or the source is gone.
            _ => Next::Quit,
        }
    }
}

impl Session<'_> {
    /// Waits for `fut` while answering the UI: a command is refused (nothing runs yet), a
    /// switch or quit ends the wait (`fut` is left to the caller).
    async fn waiting<F: Future + Unpin>(
        &mut self,
        fut: &mut F,
        why: &str,
    ) -> Result<F::Output, Next> {
        loop {
            tokio::select! {
                out = &mut *fut => return Ok(out),
                c = self.control.recv() => match c {
                    Some(Control::Run(cmd)) => {
                        self.notify.send(Action::Flash(
                            Level::Error,
                            format!("{why}: nothing to send `{}` to", cmd.cli()),
                        ));
                    }
                    c => return Err(c.into()),
                },
            }
        }
    }

    /// One context: start (retrying), follow the published state, stop.
    async fn run(&mut self, session: u64) -> Next {
        let s = self.s;
        // Reading the kubeconfig is quick file IO, on a runtime thread, never the UI's.
        let (context, names) = match contexts::read(self.conn) {
            Ok(c) => (c.current, c.names),
            Err(e) => {
                tracing::warn!(error = %e, "reading the kubeconfig's contexts");
                (self.conn.context.clone(), Vec::new())
            }
        };
        let base = Base {
            context: context.unwrap_or_else(|| "(current context)".to_string()),
            contexts: names,
            session,
        };
        let mut failures = 0u32;
        let mut why: Option<String> = None;
        loop {
            let attempt = Connecting {
                attempt: failures + 1,
                retry_at: None,
                message: why.clone(),
            };
            let data = connecting(&base.context, s.reconcile, attempt, Utc::now());
            // The UI has gone: nobody to start for.
            if !self.notify.send(base.stamp(data)) {
                return Next::Quit;
            }
            let mut starting = tokio::spawn(start(s.clone(), self.conn.clone()));
            let started = match self.waiting(&mut starting, "not connected yet").await {
                Ok(started) => started,
                Err(next) => {
                    self.abandoned.spawn(async move {
                        if let Ok(Ok(controller)) = starting.await {
                            stop(&controller).await;
                        }
                    });
                    return next;
                }
            };
            let message = match started {
                Ok(Ok(controller)) => {
                    let ended = self.follow(&base, &controller).await;
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
                Ok(Err(Failure::Unsupported(message))) => {
                    // The server says the same each time: on screen until `:ctx` or quit, and
                    // the reason the TUI exits 2 if it is still what the screen shows.
                    *self.refusal.lock() = Some(message.clone());
                    let data = unavailable(
                        &base.context,
                        s.reconcile,
                        "validatingadmissionpolicies.admissionregistration.k8s.io",
                        AccessErrorKind::NotServed,
                        message,
                    );
                    self.notify.send(base.stamp(data));
                    let mut never = std::future::pending::<()>();
                    return match self.waiting(&mut never, "not connected").await {
                        Ok(()) | Err(Next::Quit) => Next::Quit,
                        Err(next) => {
                            *self.refusal.lock() = None;
                            next
                        }
                    };
                }
                Ok(Err(Failure::Config(message))) => {
                    // The same file says the same: wait for `:ctx` or quit.
                    let data = unavailable(
                        &base.context,
                        s.reconcile,
                        "kubeconfig",
                        AccessErrorKind::Other,
                        message,
                    );
                    self.notify.send(base.stamp(data));
                    let mut never = std::future::pending::<()>();
                    return match self.waiting(&mut never, "not connected").await {
                        Ok(()) | Err(Next::Quit) => Next::Quit,
                        Err(next) => next,
                    };
                }
                Ok(Err(Failure::Start(message))) => message,
                Err(e) => format!("starting the reconciler: {e}"),
            };
            failures += 1;
            let delay = retry_delay(failures);
            tracing::warn!(attempt = failures, ?delay, error = %message, "the live view could not start; retrying");
            let retry_at = Utc::now() + chrono::Duration::from_std(delay).unwrap_or_default();
            let attempt = Connecting {
                attempt: failures,
                retry_at: Some(retry_at),
                message: Some(message.clone()),
            };
            let data = connecting(&base.context, s.reconcile, attempt, Utc::now());
            if !self.notify.send(base.stamp(data)) {
                return Next::Quit;
            }
            why = Some(message);
            let mut wait = Box::pin(tokio::time::sleep(delay));
            if let Err(next) = self.waiting(&mut wait, "not connected yet").await {
                return next;
            }
        }
    }

    /// Sends every state the reconciler publishes (it coalesces bursts) and everything its
    /// feed tells, until the UI asks for something else (`Some`) or the reconciler stops by
    /// itself (`None`).
    async fn follow(&mut self, base: &Base, controller: &Controller) -> Option<Next> {
        let s = self.s;
        let mut state_rx = controller.subscribe();
        let mut feed = controller.feed();
        let mut feed_open = true;
        // Events of a reconciler started again: only those newer than what was shown.
        let shown_before = self.shown.get(&base.context).copied();
        let mut tasks = JoinSet::new();
        let mut last: Option<Data> = None;
        let mut fresh = true;
        loop {
            if fresh {
                let state = state_rx.borrow_and_update().clone();
                let data = analysed(state, base, s, last.as_ref()).await;
                if !self.notify.send(base.stamp(data.clone())) {
                    return Some(Next::Quit);
                }
                last = Some(data);
                fresh = false;
            }
            let deadline = async {
                match &last {
                    Some(d) => at_deadline(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = state_rx.changed() => {
                    if changed.is_err() {
                        self.notify.send(Action::Flash(
                            Level::Error,
                            "the reconciler stopped; starting it again".into(),
                        ));
                        return None;
                    }
                    fresh = true;
                }
                told = feed.recv(), if feed_open => match told {
                    Ok(Happened::Cluster(e)) if shown_before.is_some_and(|t| e.time <= t) => {}
                    Ok(h) => {
                        if let Happened::Cluster(e) = &h {
                            let mark = self.shown.entry(base.context.clone()).or_insert(e.time);
                            *mark = e.time.max(*mark);
                        }
                        self.notify.send(Action::Happened(Arc::new(h)));
                    }
                    Err(RecvError::Lagged(n)) => {
                        self.notify.send(Action::Flash(
                            Level::Warn,
                            format!("{n} event(s) not shown: the event log fell behind"),
                        ));
                    }
                    // The reconciler is gone: the state channel says so.
                    Err(RecvError::Closed) => feed_open = false,
                },
                // A task of it died: it has stopped writing and released the Lease.
                failed = controller.failed() => {
                    self.notify.send(Action::Flash(
                        Level::Error,
                        format!("{failed}; starting the reconciler again"),
                    ));
                    return None;
                },
                c = self.control.recv() => match c {
                    Some(Control::Run(cmd)) => {
                        run_command(&mut tasks, controller, s, self.conn, cmd, self.notify);
                    }
                    c => return Some(c.into()),
                },
                again = deadline => {
                    self.notify.send(base.stamp(again.clone()));
                    last = Some(again);
                }
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            }
        }
    }
}

/// The data of `state`, analysed on a blocking thread. While the API server does not answer,
/// the last state analysed while it did is kept (`last`), with the controller's new state: the
/// view says since when it is unreachable, and never draws a cluster emptied by the outage.
async fn analysed(
    state: Arc<controller::LiveState>,
    base: &Base,
    s: &Settings,
    last: Option<&Data>,
) -> Data {
    if let Some(stale) = while_unreachable(&state, last) {
        return stale;
    }
    let (context, reconcile, opts) = (base.context.clone(), s.reconcile, s.opts.clone());
    let fallback = state.clone();
    let analysis =
        tokio::task::spawn_blocking(move || data_from_live(state, &context, reconcile, &opts));
    match analysis.await {
        Ok(d) => d,
        // The analysis panicked (the panic hook said so): the state without a tree.
        Err(_) => unavailable(
            &base.context,
            s.reconcile,
            "analysis",
            AccessErrorKind::Other,
            format!(
                "the analysis of {} objects failed (the log says why)",
                fallback.snapshot.object_count()
            ),
        ),
    }
}

/// A client for `conn` and the reconciler on it (observing, or competing for the lease).
async fn start(s: Settings, conn: ConnectionOptions) -> Result<Controller, Failure> {
    let client = crate::cluster::client_from(&conn, false)
        .await
        .map_err(|e| Failure::Config(error_text(&e)))?;
    let (lease_namespace, lease_name) = s.lease.clone();
    let mode = if s.reconcile {
        controller::Mode::Elect { take_over: false }
    } else {
        controller::Mode::ReadOnly
    };
    let mut config = Config::new(s.opts.clone(), mode, lease_namespace, lease_name);
    config.workers = 2;
    controller::launch(client, config, controller::Tuning::default())
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
        let (control, rx) = unbounded_channel();
        self.control = Some(control);
        self.task = Some(tokio::spawn(run(
            self.settings.clone(),
            notify,
            rx,
            self.refusal.clone(),
        )));
    }

    fn execute(&mut self, cmd: WriteCommand) -> Option<Action> {
        let Some(control) = &self.control else {
            return Some(Action::Flash(Level::Error, "not started".into()));
        };
        let (control_msg, said) = match cmd {
            WriteCommand::SwitchContext(name) => {
                let text = format!("switching to context {name}: stopping this live view…");
                (
                    Control::Switch(name),
                    Some(Action::Flash(Level::Info, text)),
                )
            }
            cmd => (Control::Run(cmd), None),
        };
        if control.send(control_msg).is_err() {
            return Some(Action::Flash(
                Level::Error,
                "the live view has stopped".into(),
            ));
        }
        said
    }

    fn stop(&mut self) -> Option<JoinHandle<()>> {
        if let Some(control) = self.control.take() {
            let _ = control.send(Control::Stop);
        }
        self.task.take()
    }

    fn refusal(&self) -> Option<String> {
        self.refusal.lock().clone()
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
            id: "r1".into(),
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

    /// The source's task against an API server that refuses connections (nothing listens on
    /// the port): it says it is connecting, retries with a countdown, switches context on
    /// `:ctx`, and stops at once when asked.
    #[tokio::test]
    async fn a_dead_api_server_is_retried_and_a_switch_starts_the_other_context() {
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
        let (tx, mut rx) = unbounded_channel();
        live.start(Notify(tx));
        // The data the source sends, until `done` says enough (or 20 s pass).
        let mut next_data = async |done: &dyn Fn(&Data) -> bool| -> Arc<Data> {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
            loop {
                match tokio::time::timeout_at(deadline, rx.recv()).await {
                    Ok(Some(Action::Data(d))) if done(&d) => return d,
                    Ok(Some(_)) => {}
                    other => panic!("no such data from the source: {}", other.is_err()),
                }
            }
        };
        let first = next_data(&|_| true).await;
        assert_eq!(first.context, "dead-a");
        assert_eq!(first.contexts, ["dead-a", "dead-b"]);
        assert_eq!(
            first.connecting,
            Some(Connecting {
                attempt: 1,
                retry_at: None,
                message: None
            })
        );
        // The failure, with why and when the next attempt starts; then the next attempt.
        let failed =
            next_data(&|d| d.connecting.as_ref().is_some_and(|c| c.retry_at.is_some())).await;
        let Some(Connecting {
            attempt,
            retry_at: Some(at),
            message: Some(why),
        }) = &failed.connecting
        else {
            unreachable!()
        };
        assert_eq!(*attempt, 1);
        let wait = *at - Utc::now();
        assert!(wait <= chrono::Duration::seconds(1), "{wait}");
        // The cause that says what is wrong, not only "client error (Connect)".
        assert!(why.to_lowercase().contains("refused"), "{why}");
        next_data(&|d| d.connecting.as_ref().is_some_and(|c| c.attempt == 2)).await;
        // `:ctx dead-b`: a new session on the other context.
        assert!(matches!(
            live.execute(WriteCommand::SwitchContext("dead-b".into())),
            Some(Action::Flash(Level::Info, _))
        ));
        let switched = next_data(&|d| d.session == 2).await;
        assert_eq!(switched.context, "dead-b");
        // Nothing is running: a request says so rather than waiting.
        assert!(live.execute(WriteCommand::ReconcileAll).is_none());
        let refused = loop {
            match tokio::time::timeout(Duration::from_secs(5), rx.recv()).await {
                Ok(Some(Action::Flash(level, text))) => break (level, text),
                Ok(Some(_)) => {}
                other => panic!("no refusal: {}", other.is_err()),
            }
        };
        assert_eq!(refused.0, Level::Error);
        assert!(refused.1.contains("nothing to send"), "{}", refused.1);
        let started = std::time::Instant::now();
        if let Some(task) = live.stop() {
            tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("stops")
                .expect("its task ends well");
        }
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
