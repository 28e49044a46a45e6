//! What `test` and `audit` need before they start: two clients and the cluster's snapshot
//! (attribution reads its policies, bindings and constraints); and the TUI's quiet runs of
//! both, which print nothing (the screen is the TUI's): `*_quietly` read the snapshot,
//! `*_on_snapshot` take the one the live TUI's reconciler already holds.

use super::audit::{self, AuditOptions, AuditProgress, AuditReport};
use super::{objects, test};
use crate::cluster::client::ConnectionOptions;
use crate::load::input::ReadOptions;
use crate::snapshot::Snapshot;
use anyhow::Context;
use tokio::sync::watch;

/// Two clients: `reader` as the user's own identity reads what attribution needs (bindings,
/// policies, discovery, namespaces); `actor` makes the dry-runs, as `--as`/`--as-group` when
/// given, so a verdict is the impersonated user's and attribution still works. And the API
/// server's URL.
pub async fn clients(
    conn: impl Into<ConnectionOptions>,
) -> anyhow::Result<(kube::Client, kube::Client, String)> {
    let conn: ConnectionOptions = conn.into();
    let (reader, url) = crate::cluster::client::connect(conn.without_impersonation(), false)
        .await
        .context("connecting to the cluster")?;
    let (actor, _) = crate::cluster::client::connect(conn, false)
        .await
        .context("connecting to the cluster")?;
    Ok((reader, actor, url))
}

/// The VAP API the cluster at `url` serves.
pub async fn discover(
    reader: &kube::Client,
    url: &str,
) -> anyhow::Result<crate::cluster::AdmissionApi> {
    crate::cluster::discover_admission_api(reader)
        .await
        .with_context(|| format!("discovering the VAP API of {url}"))
}

/// The cluster's snapshot; what could not be read is left out (it only weakens attribution).
async fn snapshot(reader: &kube::Client, url: &str) -> anyhow::Result<Snapshot> {
    let api = discover(reader, url).await?;
    let (snap, _unreadable) = crate::cluster::list_snapshot(reader, &api)
        .await
        .with_context(|| format!("reading {url}"))?;
    Ok(snap)
}

/// The TUI's `a`: an audit of `target` with the default rate, nothing printed; `progress` is
/// told how many objects will be dry-run and how many are answered. Reads the cluster's
/// templates, constraints, VAPs and bindings first (see [`audit_on_snapshot`] to pass them).
pub async fn audit_quietly(
    conn: impl Into<ConnectionOptions>,
    target: &str,
    progress: watch::Sender<AuditProgress>,
) -> anyhow::Result<AuditReport> {
    let (reader, actor, url) = clients(conn).await?;
    let snap = snapshot(&reader, &url).await?;
    audit_with(&reader, &actor, &url, &snap, target, progress).await
}

/// [`audit_quietly`] with the templates, constraints, VAPs and bindings already known (the
/// live TUI's reconciler holds them): only the objects under audit are listed.
pub async fn audit_on_snapshot(
    conn: impl Into<ConnectionOptions>,
    snap: &Snapshot,
    target: &str,
    progress: watch::Sender<AuditProgress>,
) -> anyhow::Result<AuditReport> {
    let (reader, actor, url) = clients(conn).await?;
    audit_with(&reader, &actor, &url, snap, target, progress).await
}

/// The quiet audit itself, on clients and a snapshot at hand.
async fn audit_with(
    reader: &kube::Client,
    actor: &kube::Client,
    url: &str,
    snap: &Snapshot,
    target: &str,
    progress: watch::Sender<AuditProgress>,
) -> anyhow::Result<AuditReport> {
    let opts = AuditOptions {
        report_to: Some(progress),
        ..AuditOptions::default()
    };
    audit::audit(
        reader,
        actor,
        snap,
        Some(target),
        &opts,
        |_| {},
        std::future::pending(),
    )
    .await
    .with_context(|| format!("auditing {target} on {url}"))
}

/// The TUI's `t`: `test -f PATH` against the cluster, nothing printed. Standard input is the
/// terminal there, so `-` is refused. Reads the cluster's objects first (see
/// [`test_on_snapshot`] to pass them).
pub async fn test_quietly(
    conn: impl Into<ConnectionOptions>,
    path: &str,
    opts: &crate::core::Options,
) -> anyhow::Result<test::TestReport> {
    let manifests = read_manifests(path)?;
    let (reader, actor, url) = clients(conn).await?;
    let snap = snapshot(&reader, &url).await?;
    Ok(test::live(&reader, &actor, &snap, &manifests, opts).await)
}

/// [`test_quietly`] with the cluster's templates, constraints, VAPs and bindings already known
/// (the live TUI's reconciler holds them): nothing but the dry-runs goes to the server.
pub async fn test_on_snapshot(
    conn: impl Into<ConnectionOptions>,
    snap: &Snapshot,
    path: &str,
    opts: &crate::core::Options,
) -> anyhow::Result<test::TestReport> {
    let manifests = read_manifests(path)?;
    let (reader, actor, _) = clients(conn).await?;
    Ok(test::live(&reader, &actor, snap, &manifests, opts).await)
}

/// The manifests `t` tests; `-` (standard input) is the terminal in the TUI.
fn read_manifests(path: &str) -> anyhow::Result<Vec<objects::Manifest>> {
    if path == "-" {
        anyhow::bail!("standard input is the terminal here: give a file or folder");
    }
    objects::read(
        &[path.to_string()],
        &mut std::io::empty(),
        ReadOptions::default(),
    )
    .context("reading input")
}
