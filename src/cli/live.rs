//! The commands that talk to a live cluster: `run`, `replay`, `reconcile`, and `check`/`plan`
//! without `-f`. Each builds a client from kubectl's connection flags; the
//! one-shot commands go through the same reconciler and lease as `run` and the TUI.

use super::args::{Cli, OutputArgs, PlanArgs, RunArgs};
use super::report;
use crate::cluster::{discover_admission_api, list_snapshot};
use crate::controller::runtime::{Running, Tuning, launch, wait_for_lease, wait_idle};
use crate::controller::state::{AccessErrorKind, EventResult};
use crate::controller::{Command, Config, Mode};
use crate::core::analyze;
use anyhow::{Context, bail};
use std::process::ExitCode;
use std::time::Duration;

/// The Lease the one-shot commands join (the `run` defaults).
/// How long a one-shot command waits to acquire a free (or expired) lease.
const LEASE_WAIT: Duration = Duration::from_secs(20);

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// Resolves on SIGINT or SIGTERM.
async fn terminated() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

async fn stop(running: Running) {
    running.handle.shutdown();
    match tokio::time::timeout(Duration::from_secs(10), running.join).await {
        Ok(Ok(Err(e))) => tracing::warn!("stopping: {e}"),
        Ok(Err(e)) => tracing::warn!("stopping: {e}"),
        Err(_) => tracing::warn!("stopping: timed out releasing the lease"),
        Ok(Ok(Ok(()))) => {}
    }
}

/// Why the lease could not be used (RBAC, missing namespace), if that is the problem.
fn lease_problem(running: &Running) -> Option<String> {
    running
        .world
        .access
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get("leases.coordination.k8s.io")
        .map(|e| e.message.clone())
}

/// Refuses when Gatekeeper's generator is active and writes are off; says how to fix it.
fn gatekeeper_refusal(running: &Running) -> Option<String> {
    let state = running.handle.current();
    match (&state.gatekeeper_generator, state.writes_enabled) {
        (Some(found), false) => Some(format!(
            "Gatekeeper's own VAP generator looks active ({found}); two generators would fight over the same objects. Not writing: {}",
            crate::controller::gatekeeper::HOW_TO_DISABLE
        )),
        _ => None,
    }
}

/// The event log as lines, and how many entries are failures that were not retried away.
fn event_lines(running: &Running) -> (Vec<String>, usize) {
    let events = running
        .world
        .events
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let mut failures = 0;
    let lines = events
        .iter()
        .map(|e| {
            let result = match &e.result {
                EventResult::Ok => String::new(),
                EventResult::Skipped(why) => format!(" (skipped: {why})"),
                EventResult::Failed(why) => {
                    if !why.starts_with("conflict") {
                        failures += 1;
                    }
                    format!(" (FAILED: {why})")
                }
            };
            format!("{} {}: {}{result}", e.verb.as_str(), e.object, e.message)
        })
        .collect();
    (lines, failures)
}

/// How long a store may stay forbidden (or not served) before `--once` gives up on it: the
/// authorizer's caches take a moment to see a new grant.
const UNREADABLE_GRACE: Duration = Duration::from_secs(3);

/// Stores that cannot be read for a reason retrying does not fix (forbidden, not served).
fn definitely_unreadable(running: &Running) -> bool {
    let unknown = running.world.unknown_stores();
    let access = running
        .world
        .access
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    !unknown.is_empty()
        && unknown.iter().all(|(r, _)| {
            access
                .get(r)
                .is_some_and(|e| e.kind != AccessErrorKind::Other)
        })
}

/// Waits until the queue drains with every store known; gives up early when a write was
/// forbidden or a store stays forbidden (a missing right does not fix itself by retrying).
async fn wait_idle_or_forbidden(running: &Running, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    let mut unreadable_since: Option<tokio::time::Instant> = None;
    loop {
        let slice = Duration::from_secs(1).min(deadline - tokio::time::Instant::now());
        if wait_idle(&running.world, slice).await && running.world.unknown_stores().is_empty() {
            return true;
        }
        if definitely_unreadable(running) {
            let since = *unreadable_since.get_or_insert_with(tokio::time::Instant::now);
            if since.elapsed() >= UNREADABLE_GRACE {
                return false;
            }
        } else {
            unreadable_since = None;
        }
        let forbidden = running
            .world
            .events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|e| matches!(&e.result, EventResult::Failed(m) if m.contains("forbidden")));
        if forbidden || tokio::time::Instant::now() >= deadline {
            return false;
        }
    }
}

/// Checks the stores against the analysis (the I3 oracle): the remaining plan.
async fn remaining_plan(running: &Running, opts: &crate::core::Options) -> Vec<String> {
    // The stores may lag the last writes by a watch event: look a few times.
    let mut left = Vec::new();
    for _ in 0..20 {
        let snap = running.world.snapshot();
        left = analyze(&snap, opts)
            .plan
            .iter()
            .map(|w| format!("{} {} ({})", w.verb.as_str(), w.object, w.reason))
            .collect();
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    left
}

/// Connects and starts a headless reconciler that competes for the Lease; refuses (and stops
/// it) when Gatekeeper's own generator is active and `take_over` is not set.
async fn start_electing(
    cli: &Cli,
    in_cluster: bool,
    take_over: bool,
    metrics_addr: Option<std::net::SocketAddr>,
    workers: Option<u16>,
    lease_duration: Option<Duration>,
) -> anyhow::Result<Running> {
    let (client, url) = crate::cluster::client::connect(&cli.conn, in_cluster)
        .await
        .context("connecting to the cluster")?;
    let mut config = Config::new(
        cli.gen_flags.options(),
        Mode::Elect {
            lease_namespace: cli.lease_namespace.clone(),
            lease_name: cli.lease_name.clone(),
            take_over,
        },
    );
    config.metrics_addr = metrics_addr;
    if let Some(w) = workers {
        config.workers = usize::from(w);
    }
    let defaults = Tuning::default();
    let tuning = Tuning {
        publish_snapshot: false,
        lease_duration: lease_duration.unwrap_or(defaults.lease_duration),
        ..defaults
    };
    let running = launch(client, config, tuning)
        .await
        .with_context(|| format!("starting the reconciler against {url}"))?;
    if let Some(msg) = gatekeeper_refusal(&running) {
        stop(running).await;
        bail!(msg);
    }
    Ok(running)
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
            Say::Human => eprintln!("{line}"),
            Say::Log => tracing::info!("{line}"),
        }
    }
    fn error(self, line: &str) {
        match self {
            Say::Human => eprintln!("error: {line}"),
            Say::Log => tracing::error!("{line}"),
        }
    }
}

pub fn run(cli: &Cli, args: &RunArgs) -> anyhow::Result<ExitCode> {
    let rt = runtime()?;
    let say = Say::for_run(args);
    rt.block_on(async {
        let opts = cli.gen_flags.options();
        let running = start_electing(
            cli,
            args.in_cluster,
            args.take_over,
            args.metrics_addr,
            Some(args.workers),
            args.lease_duration,
        )
        .await?;
        for e in &running.handle.current().access_errors {
            tracing::warn!("{}", e.message);
        }
        tracing::info!(
            identity = %running.identity,
            "reconciler started; competing for Lease {}/{}",
            cli.lease_namespace,
            cli.lease_name
        );
        if !args.once {
            terminated().await;
            tracing::info!("stopping: releasing the lease");
            stop(running).await;
            return Ok(ExitCode::SUCCESS);
        }
        // --once: lead, converge, verify, release.
        if let Err(holder) = wait_for_lease(&running, LEASE_WAIT).await {
            let why = lease_problem(&running);
            stop(running).await;
            match (holder, why) {
                (None, Some(why)) => say.error(&why),
                (holder, _) => say.error(&format!(
                    "Lease {}/{} is held by {}; that copy reconciles. Not converging from here.",
                    cli.lease_namespace,
                    cli.lease_name,
                    holder.unwrap_or_else(|| "another copy".into())
                )),
            }
            return Ok(ExitCode::from(1));
        }
        let limit = opts.binding_wait + Duration::from_secs(90);
        let idle = wait_idle_or_forbidden(&running, limit).await;
        let unknown = running.world.unknown_stores();
        if !unknown.is_empty() {
            // Knowledge before action: what rests on these stores was neither written nor
            // deleted, so "converged" cannot be claimed.
            let (lines, _) = event_lines(&running);
            for l in &lines {
                say.info(l);
            }
            let writes = running.world.metrics.writes_total();
            stop(running).await;
            say.error(&format!(
                "cannot read everything the reconciler needs; nothing that rests on it was written or deleted ({writes} other write(s)):\n  {}",
                unknown
                    .iter()
                    .map(|(_, why)| why.as_str())
                    .collect::<Vec<_>>()
                    .join("\n  ")
            ));
            return Ok(ExitCode::from(2));
        }
        let left = remaining_plan(&running, &opts).await;
        let (lines, failures) = event_lines(&running);
        for l in &lines {
            say.info(l);
        }
        if failures > 0 {
            say.error(&format!("{failures} write(s) failed (see above)"));
        }
        let writes = running.world.metrics.writes_total();
        stop(running).await;
        if idle && left.is_empty() {
            say.info(&format!("converged: {writes} write(s)"));
            Ok(ExitCode::SUCCESS)
        } else {
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
            Ok(ExitCode::from(1))
        }
    })
}

/// `replay TEMPLATE`, `reconcile TEMPLATE`, `reconcile --all`: join the election briefly,
/// send the command, wait for the queue to drain, print what was done.
pub fn one_shot(cli: &Cli, cmd: Command) -> anyhow::Result<ExitCode> {
    let rt = runtime()?;
    rt.block_on(async {
        let opts = cli.gen_flags.options();
        let running = start_electing(cli, false, false, None, None, None).await?;
        if let Err(holder) = wait_for_lease(&running, LEASE_WAIT).await {
            let why = lease_problem(&running);
            stop(running).await;
            if let (None, Some(why)) = (&holder, why) {
                eprintln!("error: {why}");
                return Ok(ExitCode::from(1));
            }
            eprintln!(
                "error: Lease {}/{} is held by {}; that copy is the one that writes and it reconciles on its own. Refusing to write from here.",
                cli.lease_namespace,
                cli.lease_name,
                holder.unwrap_or_else(|| "another copy".into())
            );
            return Ok(ExitCode::from(1));
        }
        running
            .handle
            .send(cmd)
            .await
            .context("sending the command")?;
        // Let the command be handled, then drain.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let idle =
            wait_idle_or_forbidden(&running, opts.binding_wait + Duration::from_secs(90)).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        // Everything since joining: gaining the lease resyncs, so writes may precede the command.
        let (lines, failures) = event_lines(&running);
        for l in &lines {
            println!("{l}");
        }
        stop(running).await;
        if idle && failures == 0 {
            Ok(ExitCode::SUCCESS)
        } else {
            Ok(ExitCode::from(1))
        }
    })
}

/// `check`/`plan` against the live cluster: one listing, then the same report as for files.
/// `check` on the current context.
pub fn check(cli: &Cli, out: &OutputArgs) -> anyhow::Result<ExitCode> {
    let snap = read_cluster(cli)?;
    let (text, code) = report::check_report(&snap, &cli.gen_flags.options(), out.output)?;
    print!("{text}");
    Ok(code)
}

/// `plan` on the current context.
pub fn plan(cli: &Cli, args: &PlanArgs) -> anyhow::Result<ExitCode> {
    let snap = read_cluster(cli)?;
    let (text, writes) = report::plan_report(&snap, &cli.gen_flags.options(), args.out.output)?;
    print!("{text}");
    Ok(report::plan_exit_code(args, writes))
}

/// Everything `check` and `plan` read, or an error naming what could not be read (a partial
/// report would hide problems).
fn read_cluster(cli: &Cli) -> anyhow::Result<crate::snapshot::Snapshot> {
    let rt = runtime()?;
    rt.block_on(async {
        let (client, url) = crate::cluster::client::connect(&cli.conn, false)
            .await
            .context("connecting to the cluster")?;
        let api = discover_admission_api(&client)
            .await
            .with_context(|| format!("discovering the VAP API of {url}"))?;
        let (snap, errors) = list_snapshot(&client, &api)
            .await
            .with_context(|| format!("reading {url}"))?;
        let forbidden: Vec<String> = errors
            .iter()
            .filter(|e| e.kind != AccessErrorKind::NotServed)
            .map(|e| e.message.clone())
            .collect();
        for e in errors.iter().filter(|e| e.kind == AccessErrorKind::NotServed) {
            eprintln!("warning: {}", e.message);
        }
        if !forbidden.is_empty() {
            bail!(
                "cannot read everything the report needs (a partial report would hide problems):\n  {}",
                forbidden.join("\n  ")
            );
        }
        Ok(snap)
    })
}
