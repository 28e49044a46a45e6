//! The commands that talk to a live cluster: `run`, `replay`, `reconcile`, and `check`/`plan`
//! without `-f`. Each builds a client from kubectl's connection flags; the
//! one-shot commands go through the same reconciler and lease as `run` and the TUI.

use super::args::{Cli, PlanArgs, ReportOutputArgs, RunArgs};
use super::exit::Exit;
use super::report;
use super::stdio::{self, errln};
use crate::cluster::{discover_admission_api, list_snapshot};
use crate::controller::state::AccessErrorKind;
use crate::controller::{Command, Config, Controller, Convergence, EventVerb, Mode, NotLeading};
use crate::controller::{Tuning, launch};
use crate::core::analyze;
use anyhow::{Context, bail};
use std::time::Duration;

/// The Lease the one-shot commands join (the `run` defaults).
/// How long a one-shot command waits to acquire a free (or expired) lease.
const LEASE_WAIT: Duration = Duration::from_secs(20);

pub(super) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// Resolves on SIGINT or SIGTERM (what a CI job's timeout sends). A handler that cannot be
/// installed never resolves: the signal then kills the process, as without one.
pub(super) async fn terminated() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    () = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => ctrl_c.await,
        }
    }
    #[cfg(not(unix))]
    ctrl_c.await;
}

pub(super) async fn stop(controller: Controller) {
    if let Err(e) = controller.stop().await {
        tracing::warn!("stopping: {e}");
    }
}

/// Refuses when Gatekeeper's generator is active and writes are off; says how to fix it.
fn gatekeeper_refusal(controller: &Controller) -> Option<String> {
    let state = controller.state();
    match (&state.gatekeeper_generator, state.writes_enabled) {
        (Some(found), false) => Some(format!(
            "Gatekeeper's own VAP generator looks active ({found}); two generators would fight over the same objects. Not writing: {}",
            crate::controller::gatekeeper::HOW_TO_DISABLE
        )),
        _ => None,
    }
}

/// The event log as lines, and how many entries are failures that were not retried away.
fn event_lines(controller: &Controller) -> (Vec<String>, usize) {
    let mut failures = 0;
    let lines = controller
        .events()
        .iter()
        .map(|e| {
            if e.result.is_failure() {
                failures += 1;
            }
            e.to_string()
        })
        .collect();
    (lines, failures)
}

/// What is left after `run --once` converged, as lines.
struct Remaining {
    /// Writes still needed.
    plan: Vec<String>,
    /// Error findings: what cannot be generated or put in place as written.
    problems: Vec<String>,
}

/// Checks the stores against the analysis (the I3 oracle): the remaining plan, and the error
/// findings (a warning such as a CRD whose template is gone is left by design). Called after `converged`, whose idle includes "the
/// stores show every write of this copy", so one look at the snapshot is enough.
fn remaining(controller: &Controller, opts: &crate::core::Options) -> Remaining {
    let analysis = analyze(&controller.snapshot(), opts);
    Remaining {
        plan: analysis
            .plan
            .iter()
            .map(|w| format!("{} {} ({})", w.verb.as_str(), w.object, w.reason))
            .collect(),
        problems: analysis
            .findings
            .iter()
            .filter(|f| f.severity == crate::core::Severity::Error)
            .map(|f| {
                crate::text::printable(&format!(
                    "{} {}: {}",
                    f.code.as_str(),
                    report::kubectl_name(&f.object),
                    f.message
                ))
                .into_owned()
            })
            .collect(),
    }
}

/// Tests only: the name of one of the reconciler's tasks that is to end as a panic once
/// started, so a test sees the supervisor notice (`/healthz` fails, `run` exits 2). Not a
/// flag: no user has a use for it.
const FAIL_TASK_ENV: &str = "KUBECTL_VAP_TEST_FAIL_TASK";

/// How long `run` waits for its first attempt at the Lease before it judges what it may not do.
const FIRST_ATTEMPT: Duration = Duration::from_secs(10);

/// How a headless copy that competes for the Lease is started.
#[derive(Debug, Default)]
struct Electing {
    in_cluster: bool,
    take_over: bool,
    metrics_addr: Option<std::net::SocketAddr>,
    workers: Option<u16>,
    lease_duration: Option<Duration>,
    scope: crate::controller::Scope,
    one_shot: bool,
    expect_guard: bool,
}

/// Connects and starts a headless reconciler that competes for the Lease; refuses (and stops
/// it) when Gatekeeper's own generator is active and `take_over` is not set.
async fn start_electing(cli: &Cli, how: Electing) -> anyhow::Result<Controller> {
    let (client, url) = crate::cluster::client::connect(&cli.conn, how.in_cluster)
        .await
        .context("connecting to the cluster")?;
    let mut config = Config::new(
        cli.generation_options(),
        Mode::Elect {
            take_over: how.take_over,
        },
        cli.lease().lease_namespace.clone(),
        cli.lease().lease_name.clone(),
    );
    config.metrics_addr = how.metrics_addr;
    config.scope = how.scope;
    config.one_shot = how.one_shot;
    config.expect_guard = how.expect_guard;
    if let Some(w) = how.workers {
        config.workers = usize::from(w);
    }
    let defaults = Tuning::default();
    let tuning = Tuning {
        publish_snapshot: false,
        lease_duration: how.lease_duration.unwrap_or(defaults.lease_duration),
        // Tests of the supervisor: a task of this name panics (see docs/testing.md).
        fail_task: std::env::var(FAIL_TASK_ENV).ok(),
        ..defaults
    };
    let controller = launch(client, config, tuning)
        .await
        .with_context(|| format!("starting the reconciler against {url}"))?;
    if let Some(msg) = gatekeeper_refusal(&controller) {
        stop(controller).await;
        bail!(msg);
    }
    Ok(controller)
}

/// Where `run`'s own report lines go: stderr for a person; JSON log lines in-cluster, where
/// a log collector parses every line.
#[derive(Debug, Clone, Copy)]
enum Say {
    Human,
    Log,
}

impl Say {
    fn for_run(args: &RunArgs) -> Say {
        if args.in_cluster {
            Say::Log
        } else {
            Say::Human
        }
    }
    fn info(self, line: &str) {
        match self {
            Say::Human => errln!("{line}"),
            Say::Log => tracing::info!("{line}"),
        }
    }
    fn error(self, line: &str) {
        match self {
            Say::Human => errln!("error: {line}"),
            Say::Log => tracing::error!("{line}"),
        }
    }
}

pub fn run(cli: &Cli, args: &RunArgs) -> anyhow::Result<Exit> {
    let rt = runtime()?;
    let say = Say::for_run(args);
    rt.block_on(async {
        let opts = cli.generation_options();
        let running = start_electing(
            cli,
            Electing {
                in_cluster: args.in_cluster,
                take_over: args.take_over,
                metrics_addr: args.metrics_addr,
                workers: Some(args.workers),
                lease_duration: args.lease_duration,
                scope: crate::controller::Scope::All,
                one_shot: false,
                expect_guard: args.expect_guard,
            },
        )
        .await?;
        // In the foreground, a right that is missing at the first attempt is said (once, by
        // what met it) and ends the run, as `check` does; a copy told to wait, or in a pod (a
        // grant may be on its way with the rollout), stays up, unready, and retries.
        if !args.in_cluster && !args.wait_for_access {
            let forbidden = running.forbidden(FIRST_ATTEMPT).await;
            if !forbidden.is_empty() {
                stop(running).await;
                say.error(&lacking(cli, &forbidden));
                return Ok(Exit::CannotTell);
            }
        }
        tracing::info!(
            identity = %running.identity(),
            "reconciler started; competing for Lease {}/{}",
            cli.lease().lease_namespace,
            cli.lease().lease_name
        );
        if !args.once {
            tokio::select! {
                () = terminated() => {}
                failed = running.failed() => {
                    // Said by the supervisor when it happened (`stop` answers it again); the
                    // rest stops now, and a kubelet (or the developer) starts a fresh copy.
                    let _ = running.stop().await;
                    say.error(&format!("{failed}; the reconciler stopped"));
                    return Ok(Exit::CannotTell);
                }
            }
            // The Lease module says "released Lease …" if this copy held it (the published
            // state can be a moment behind a takeover, so it cannot say it here).
            tracing::info!("stopping");
            stop(running).await;
            return Ok(Exit::Clean);
        }
        // --once: lead, converge, verify, release.
        if let Err(why) = running.leading(LEASE_WAIT).await {
            stop(running).await;
            // Another copy reconciles (or the Lease cannot be used): whether the cluster
            // converges is not known from here.
            say.error(&not_leading_text(cli, &why, "Not converging from here."));
            return Ok(Exit::CannotTell);
        }
        let limit = opts.binding_wait + Duration::from_secs(90);
        let convergence = running.converged(limit).await;
        if let Convergence::Unreadable(unknown) = &convergence {
            // Knowledge before action: what rests on these stores was neither written nor
            // deleted, so "converged" cannot be claimed.
            let (lines, _) = event_lines(&running);
            for l in &lines {
                say.info(l);
            }
            let writes = running.writes_total();
            stop(running).await;
            say.error(&format!(
                "cannot read everything the reconciler needs; nothing that rests on it was written or deleted ({writes} other write(s)):\n  {}",
                unknown
                    .iter()
                    .map(|(_, why)| why.as_str())
                    .collect::<Vec<_>>()
                    .join("\n  ")
            ));
            return Ok(Exit::CannotTell);
        }
        let idle = convergence == Convergence::Idle;
        let Remaining { plan: left, problems } = remaining(&running, &opts);
        let (lines, failures) = event_lines(&running);
        for l in &lines {
            say.info(l);
        }
        if failures > 0 {
            say.error(&format!("{failures} write(s) failed (see above)"));
        }
        let writes = running.writes_total();
        stop(running).await;
        if convergence == Convergence::Forbidden {
            // A right is missing: retrying does not help, and what the rest would need is
            // not known (the events above name the refused write and the grant).
            say.error(&format!(
                "a write was forbidden (see above); {writes} write(s) made: the ClusterRole of `kubectl vap install --print` grants what run needs"
            ));
            return Ok(Exit::CannotTell);
        }
        if !(idle && left.is_empty()) {
            say.error(&format!(
                "did not converge{}; {} write(s) still needed:",
                if idle {
                    ""
                } else {
                    " (work still queued: writes keep failing?)"
                },
                left.len()
            ));
            for l in left {
                say.info(&format!("  {l}"));
            }
            return Ok(Exit::Findings);
        }
        if !problems.is_empty() {
            // Converged, yet not everything can be generated as written (a template error, a
            // constraint error): as `check` reports them, exit 1.
            say.error(&format!(
                "converged: {writes} write(s); {} error finding(s) remain (`kubectl vap check` lists every finding):",
                problems.len()
            ));
            for p in problems {
                say.info(&format!("  {p}"));
            }
            return Ok(Exit::Findings);
        }
        say.info(&format!("converged: {writes} write(s)"));
        Ok(Exit::Clean)
    })
}

/// What `run` may not read or use (each refusal said when it was met, with what to grant),
/// as the last line before it exits 2.
fn lacking(cli: &Cli, forbidden: &[crate::controller::AccessError]) -> String {
    // The rights to lead are said on their own line above, and only when nothing else is.
    let (rights, forbidden): (Vec<_>, Vec<_>) = forbidden
        .iter()
        .partition(|e| e.resource == crate::controller::RIGHTS);
    if forbidden.is_empty()
        && let Some(rights) = rights.first()
    {
        return format!(
            "{} (pass --wait-for-access to stay up, unready, and ask again every {}s)",
            rights.message,
            crate::controller::RIGHTS_ASKED_AGAIN.as_secs()
        );
    }
    let (lease, stores): (Vec<_>, Vec<_>) = forbidden
        .into_iter()
        .partition(|e| e.resource == crate::controller::LEASES);
    let stores: Vec<&str> = stores.iter().map(|e| e.resource.as_str()).collect();
    let lease = (!lease.is_empty()).then(|| {
        format!(
            "Lease {}/{}",
            cli.lease().lease_namespace,
            cli.lease().lease_name
        )
    });
    let what = match (stores.is_empty(), lease) {
        (false, None) => format!(
            "cannot read everything the reconciler needs: {}",
            stores.join(", ")
        ),
        (false, Some(l)) => format!(
            "cannot read everything the reconciler needs: {}; nor use {l}",
            stores.join(", ")
        ),
        (true, Some(l)) => format!("cannot use {l}"),
        (true, None) => "cannot read everything the reconciler needs".into(),
    };
    format!(
        "{what} (each said above, with what to grant); pass --wait-for-access to stay up and retry until it is granted"
    )
}

/// Why this copy does not lead, for a person: the Lease problem, or who holds it.
fn not_leading_text(cli: &Cli, why: &NotLeading, then: &str) -> String {
    match why {
        NotLeading::LeaseUnusable(e) => e.message.clone(),
        NotLeading::HeldBy(holder) => format!(
            "Lease {}/{} is held by {}; that copy reconciles. {then}",
            cli.lease().lease_namespace,
            cli.lease().lease_name,
            holder.as_deref().unwrap_or("another copy")
        ),
        NotLeading::NotParticipating => format!("this copy does not compete for the Lease. {then}"),
    }
}

/// `replay TEMPLATE`, `reconcile TEMPLATE`, `reconcile --all`. When a copy holds the Lease
/// (in the cluster, another terminal), it is asked and its answer printed; when none does,
/// this command leads briefly itself, working on that template's objects only, and prints
/// what it wrote.
pub fn one_shot(cli: &Cli, cmd: Command) -> anyhow::Result<Exit> {
    let rt = runtime()?;
    rt.block_on(async {
        let (client, url) = crate::cluster::client::connect(&cli.conn, false)
            .await
            .context("connecting to the cluster")?;
        // Before the holder is asked or this command leads: either would answer "0
        // constraints" (and leave a `Reconciled` Event) on a cluster with no templates at all.
        require_templates(&client, &url).await?;
        let (ns, lease) = (
            cli.lease().lease_namespace.as_str(),
            cli.lease().lease_name.as_str(),
        );
        let view = crate::controller::read_lease(&client, ns, lease)
            .await
            .with_context(|| format!("reading Lease {ns}/{lease} on {url}"))?;
        match view.holder.filter(|_| !view.vacant) {
            Some(holder) => ask_the_holder(&client, cli, &cmd, &holder).await,
            None => lead_briefly(cli, cmd).await,
        }
    })
}

/// The holder of the Lease handles `cmd`; its answer is printed.
async fn ask_the_holder(
    client: &kube::Client,
    cli: &Cli,
    cmd: &Command,
    holder: &str,
) -> anyhow::Result<Exit> {
    errln!(
        "Lease {}/{} is held by {holder}: asking it",
        cli.lease().lease_namespace,
        cli.lease().lease_name
    );
    let outcome = crate::controller::ask_holder(
        client,
        &cli.lease().lease_namespace,
        &cli.lease().lease_name,
        cmd,
        &crate::controller::default_identity(),
    )
    .await
    .context("asking the lease holder")?;
    errln!("settings: the leader's ({holder}): it carries the command out");
    stdio::stdout(&format!(
        "{} (by {})\n",
        outcome.summary, outcome.handled_by
    ))?;
    Ok(Exit::findings_if(
        outcome.failures > 0 || outcome.refused > 0,
    ))
}

/// Nobody leads: this command does, for `cmd`'s objects only, then releases the Lease.
/// Gaining the Lease reconciles the scope, so the writes may come before the request's own: the
/// copy is a one-shot ([`Config::one_shot`]), whose request counts every write it made. Its
/// summary — the last line printed — is the line in its log and the Kubernetes Event alike.
async fn lead_briefly(cli: &Cli, cmd: Command) -> anyhow::Result<Exit> {
    let opts = cli.generation_options();
    let scope = match &cmd {
        Command::Replay(t) | Command::Reconcile(t) => crate::controller::Scope::Template(t.clone()),
        Command::ReconcileAll => crate::controller::Scope::All,
    };
    let running = start_electing(
        cli,
        Electing {
            scope,
            one_shot: true,
            ..Electing::default()
        },
    )
    .await?;
    if let Err(why) = running.leading(LEASE_WAIT).await {
        stop(running).await;
        errln!(
            "error: {}",
            not_leading_text(cli, &why, "Refusing to write from here.")
        );
        return Ok(Exit::CannotTell);
    }
    errln!(
        "settings: local flags (this command leads Lease {}/{} for now)",
        cli.lease().lease_namespace,
        cli.lease().lease_name
    );
    let limit = opts.binding_wait + Duration::from_secs(90);
    // The constraints of a kind are known once its store has listed: asked before, a replay
    // found none ("replayed 0 constraints") while the writes of taking the Lease went on.
    let _ = running.converged(limit).await;
    let outcome = running
        .request(cmd.clone())
        .await
        .context("handling the command");
    let convergence = running.converged(limit).await;
    // Every action of this copy, the request's own line (its summary) among them.
    let text: String = running
        .events()
        .iter()
        .filter(|e| {
            !matches!(
                e.verb,
                EventVerb::Replay | EventVerb::Reconcile | EventVerb::ReconcileAll
            )
        })
        .map(|e| format!("{e}\n"))
        .collect();
    stop(running).await;
    stdio::stdout(&text)?;
    let outcome = outcome?;
    stdio::stdout(&format!("{}\n", outcome.summary))?;
    Ok(Exit::findings_if(
        convergence != Convergence::Idle || outcome.failures > 0 || outcome.refused > 0,
    ))
}

/// `check`/`plan` against the live cluster: one listing, then the same report as for files,
/// judged by the leader's settings when a leader publishes them, with each planned write
/// sent as a server-side dry-run. `check` on the current context.
pub fn check(cli: &Cli, out: &ReportOutputArgs) -> anyhow::Result<Exit> {
    let (snap, opts, live) = read_cluster(cli)?;
    let statics = super::static_check::static_findings(cli, &snap, &opts)?;
    let (text, code) = report::check_report_live(&snap, &opts, &out.shown(), statics, &live)?;
    stdio::stdout(&text)?;
    Ok(code)
}

/// `check`'s first report of `check -w`, with what the watch goes on with: the findings, the
/// options they were judged by, the client and the server's URL.
pub(super) struct FirstReport {
    pub text: String,
    pub findings: Vec<crate::core::Finding>,
    pub options: crate::core::Options,
    pub client: kube::Client,
    pub url: String,
}

pub(super) async fn first_report(cli: &Cli, out: &ReportOutputArgs) -> anyhow::Result<FirstReport> {
    let read = read_cluster_with(cli).await?;
    let options = read.judgement.options;
    let plan = analyze(&read.snap, &options).plan;
    let live = report::Live {
        settings: Some(read.judgement.judged),
        refused: dry_run_plan(&read.client, &read.api, &plan).await,
        contested: read.judgement.contested,
        guard: read.judgement.guard,
        templates_refused: probe_templates(&read.client, &read.api, &read.snap, &options, &plan)
            .await,
    };
    let findings = report::live_findings(&read.snap, &options, Vec::new(), &live);
    let (text, _) =
        report::check_report_live(&read.snap, &options, &out.shown(), Vec::new(), &live)?;
    Ok(FirstReport {
        text,
        findings,
        options,
        client: read.client,
        url: read.url,
    })
}

/// `plan` on the current context. Exit 1 when the server refuses a planned write, whatever
/// `--exit-code` says: that plan cannot be carried out.
pub fn plan(cli: &Cli, args: &PlanArgs) -> anyhow::Result<Exit> {
    let (snap, opts, live) = read_cluster(cli)?;
    let (text, writes) = report::plan_report_live(&snap, &opts, args.out.format(), Some(&live))?;
    stdio::stdout(&text)?;
    if !live.refused.is_empty() {
        return Ok(Exit::Findings);
    }
    Ok(report::plan_exit_code(args, writes))
}

/// What the leader's Lease tells a one-shot command: whose settings to judge by, and the
/// objects the leader does not write for now because another writer contests them.
pub(super) struct Judgement {
    pub options: crate::core::Options,
    pub judged: crate::core::settings::Judged,
    /// (the object, what the leader says of it): `writer-conflict` findings.
    pub contested: Vec<(crate::model::ObjectId, String)>,
    /// What the leader says is wrong with the guard that confines it: `guard-missing`.
    pub guard: Option<String>,
}

/// Whose settings to judge by: the leader's as it publishes them with its renewals, or this
/// copy's flags, and why. Said on stderr (every format), and in the report's JSON.
pub(super) async fn judged_settings(client: &kube::Client, cli: &Cli) -> Judgement {
    use crate::core::settings::judge;
    let local = cli.generation_options();
    let lease = cli.lease();
    let (ns, name) = (lease.lease_namespace.as_str(), lease.lease_name.as_str());
    // The controller's one rule, as the TUI judges by it too.
    let (options, judged, health) = match crate::controller::read_lease(client, ns, name).await {
        Ok(view) => {
            let (options, judged) = judged_by(&view, &local, cli);
            let live_leader = !view.vacant;
            let health = view.health.filter(|_| live_leader);
            (options, judged, health.unwrap_or_default())
        }
        Err(e) => {
            let why = format!(
                "cannot read Lease {ns}/{name}: {}",
                crate::cluster::describe(&e)
            );
            let (options, judged) = judge(&local, None, &why);
            (options, judged, crate::controller::LeaderHealth::default())
        }
    };
    for line in judged.lines() {
        errln!("{line}");
    }
    Judgement {
        options,
        judged,
        contested: health.contested,
        guard: health.guard,
    }
}

/// The controller's one rule ([`crate::controller::LeaseInfo::judge`]), but for `plan` with
/// generation flags typed on its command line beside a leader: a preview of those flags over the
/// leader's settings (`core::settings::preview`), said as one.
fn judged_by(
    view: &crate::controller::LeaseInfo,
    local: &crate::core::Options,
    cli: &Cli,
) -> (crate::core::Options, crate::core::settings::Judged) {
    let plan = matches!(cli.command, Some(super::args::Command::Plan(_)));
    let leader = view
        .holder
        .as_deref()
        .filter(|_| !view.vacant && !view.leading);
    let settings = view.health.as_ref().and_then(|h| h.settings.as_ref());
    match (leader, settings) {
        (Some(holder), Some(settings)) if plan && !cli.typed_generation_flags.is_empty() => {
            let typed = &cli.typed_generation_flags;
            crate::core::settings::preview(local, holder, settings, typed)
        }
        _ => view.judge(local),
    }
}

/// Each write of `plan` sent as a server-side dry-run: those the server refuses, with its
/// message. A dry-run that fails otherwise (forbidden to this user, no answer) is said on
/// stderr and proves nothing either way.
async fn dry_run_plan(
    client: &kube::Client,
    api: &crate::cluster::discovery::AdmissionApi,
    plan: &[crate::core::PlannedWrite],
) -> Vec<report::Refused> {
    let writes: Vec<_> = plan.iter().collect();
    dry_run_refusals(client, api, &writes, "a planned write")
        .await
        .into_iter()
        .map(|(w, message)| report::Refused {
            verb: w.verb,
            object: w.object.clone(),
            message,
        })
        .collect()
}

/// The VAP of each template that has nothing written yet (`core::probe`), sent as a
/// server-side dry-run: a `template-error` for each the server's compiler refuses, so a
/// template's broken CEL is said on the template before its first constraint.
async fn probe_templates(
    client: &kube::Client,
    api: &crate::cluster::discovery::AdmissionApi,
    snap: &crate::snapshot::Snapshot,
    opts: &crate::core::Options,
    plan: &[crate::core::PlannedWrite],
) -> Vec<crate::core::Finding> {
    use crate::core::probe;
    let probes = probe::template_probes(snap, opts, plan);
    let writes: Vec<_> = probes.iter().map(|p| &p.write).collect();
    let refusals = dry_run_refusals(client, api, &writes, "a template's VAP").await;
    probes
        .iter()
        .filter_map(|p| {
            let (_, message) = refusals.iter().find(|(w, _)| std::ptr::eq(*w, &p.write))?;
            Some(probe::refused(p, message))
        })
        .collect()
}

/// `writes` sent as server-side dry-runs (8 at a time): those the server refuses, with its
/// message. The first dry-run that fails otherwise is said on stderr, naming `what` was sent.
async fn dry_run_refusals<'w>(
    client: &kube::Client,
    api: &crate::cluster::discovery::AdmissionApi,
    writes: &[&'w crate::core::PlannedWrite],
    what: &str,
) -> Vec<(&'w crate::core::PlannedWrite, String)> {
    use futures::StreamExt;
    let results: Vec<_> = futures::stream::iter(writes.iter().copied())
        .map(|w| async move {
            (
                w,
                crate::cluster::apply::dry_run_write(client, api, w).await,
            )
        })
        .buffered(8)
        .collect()
        .await;
    let mut refused = Vec::new();
    let mut unchecked = 0;
    for (w, result) in results {
        let Err(e) = result else { continue };
        match crate::cluster::apply::refusal(&e) {
            Some(message) => refused.push((w, message)),
            None => {
                unchecked += 1;
                tracing::debug!("dry-run of {} {}: {e}", w.verb.as_str(), w.object);
                if unchecked == 1 {
                    errln!(
                        "warning: the server-side dry-run of {what} failed ({e}); what the server would refuse is not known"
                    );
                }
            }
        }
    }
    refused
}

/// The one line every command that needs templates ends on (exit 2) when the cluster at `url`
/// does not serve Gatekeeper's ConstraintTemplate CRD: no templates is not the same as none
/// served, and a command pointed at the wrong cluster must not report success.
fn no_templates_served(url: &str) -> String {
    let templates =
        crate::cluster::discovery::resource_name(&crate::cluster::discovery::templates_resource());
    format!(
        "{templates} is not served: Gatekeeper's ConstraintTemplate CRD is not installed on {url}, so nothing can be judged or reconciled there (the right cluster? install Gatekeeper, or its chart's CRDs, first: `kubectl vap help prerequisites`)"
    )
}

/// Ends the command (exit 2, [`no_templates_served`]) unless the cluster at `url` serves
/// Gatekeeper's ConstraintTemplate CRD. For the commands that do not list everything first
/// (`replay`, `reconcile`, `audit`), asked before anything is written, an Event included.
pub(super) async fn require_templates(client: &kube::Client, url: &str) -> anyhow::Result<()> {
    let served = crate::cluster::discovery::serves_templates(client)
        .await
        .with_context(|| format!("asking {url} whether it serves ConstraintTemplates"))?;
    if !served {
        bail!(no_templates_served(url));
    }
    Ok(())
}

/// Whether a report on the cluster at `url` can be true, given what could not be read: not if
/// anything was forbidden or failed (a partial report would hide problems), nor without
/// Gatekeeper's ConstraintTemplate CRD (no templates is not the same as none served: a report
/// on the wrong cluster must not pass). Other kinds not served (a constraint kind whose CRD
/// is not Established yet) are said as warnings.
pub(super) fn everything_read(
    errors: &[crate::controller::AccessError],
    url: &str,
) -> anyhow::Result<()> {
    let templates =
        crate::cluster::discovery::resource_name(&crate::cluster::discovery::templates_resource());
    let (not_served, failed): (Vec<_>, Vec<_>) = errors
        .iter()
        .partition(|e| e.kind == AccessErrorKind::NotServed);
    if not_served.iter().any(|e| e.resource == templates) {
        bail!(no_templates_served(url));
    }
    for e in not_served {
        errln!("warning: {}", e.message);
    }
    if !failed.is_empty() {
        let lines: Vec<&str> = failed.iter().map(|e| e.message.as_str()).collect();
        bail!(
            "cannot read everything the report needs (a partial report would hide problems):\n  {}",
            lines.join("\n  ")
        );
    }
    Ok(())
}

/// Everything `check` and `plan` read, or an error naming what could not be read (a partial
/// report would hide problems, see [`everything_read`]); the options to judge by; what the server refuses of the plan.
fn read_cluster(
    cli: &Cli,
) -> anyhow::Result<(
    crate::snapshot::Snapshot,
    crate::core::Options,
    report::Live,
)> {
    let rt = runtime()?;
    rt.block_on(async {
        let read = read_cluster_with(cli).await?;
        let opts = read.judgement.options;
        let plan = analyze(&read.snap, &opts).plan;
        let refused = dry_run_plan(&read.client, &read.api, &plan).await;
        let templates_refused =
            probe_templates(&read.client, &read.api, &read.snap, &opts, &plan).await;
        let live = report::Live {
            settings: Some(read.judgement.judged),
            refused,
            contested: read.judgement.contested,
            guard: read.judgement.guard,
            templates_refused,
        };
        Ok((read.snap, opts, live))
    })
}

/// What `render` reads of a cluster: the snapshot (complete, or an error naming what could
/// not be read), the options to render by (the leader's, as `plan` judges), whose they are,
/// and the API server's URL.
pub(super) fn read_cluster_for_render(
    cli: &Cli,
) -> anyhow::Result<(
    crate::snapshot::Snapshot,
    crate::core::Options,
    crate::core::settings::Judged,
    String,
)> {
    let rt = runtime()?;
    rt.block_on(async {
        let read = read_cluster_with(cli).await?;
        let Judgement {
            options, judged, ..
        } = read.judgement;
        Ok((read.snap, options, judged, read.url))
    })
}

/// A cluster as `check`, `plan` and `render` read it.
struct ClusterRead {
    client: kube::Client,
    api: crate::cluster::discovery::AdmissionApi,
    snap: crate::snapshot::Snapshot,
    judgement: Judgement,
    url: String,
}

async fn read_cluster_with(cli: &Cli) -> anyhow::Result<ClusterRead> {
    let (client, url) = crate::cluster::client::connect(&cli.conn, false)
        .await
        .context("connecting to the cluster")?;
    let api = discover_admission_api(&client)
        .await
        .with_context(|| format!("discovering the VAP API of {url}"))?;
    let (snap, errors) = list_snapshot(&client, &api)
        .await
        .with_context(|| format!("reading {url}"))?;
    everything_read(&errors, &url)?;
    let judgement = judged_settings(&client, cli).await;
    Ok(ClusterRead {
        client,
        api,
        snap,
        judgement,
        url: url.to_string(),
    })
}
