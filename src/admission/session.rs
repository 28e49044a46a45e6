//! What `test` and `audit` need before they start: two clients and the cluster's snapshot
//! (attribution reads its policies, bindings and constraints); and the TUI's quiet runs of
//! both, which print nothing (the screen is the TUI's).

use super::audit::{self, AuditOptions, AuditReport};
use super::{objects, test};
use crate::cluster::client::ConnectionOptions;
use crate::load::input::ReadOptions;
use crate::snapshot::Snapshot;
use anyhow::Context;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

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

/// The TUI's `a`: an audit of `target` with the default rate, nothing printed; `listed` is told
/// how many objects will be dry-run, `done` counts the answers.
pub async fn audit_quietly(
    conn: impl Into<ConnectionOptions>,
    target: &str,
    listed: impl FnOnce(usize),
    done: Arc<AtomicUsize>,
) -> anyhow::Result<AuditReport> {
    let opts = AuditOptions {
        done: Some(done),
        ..AuditOptions::default()
    };
    let (reader, actor, url) = clients(conn).await?;
    let snap = snapshot(&reader, &url).await?;
    audit::audit(
        &reader,
        &actor,
        &snap,
        Some(target),
        &opts,
        listed,
        std::future::pending(),
    )
    .await
    .with_context(|| format!("auditing {target} on {url}"))
}

/// The TUI's `t`: `test -f PATH` against the cluster, nothing printed. Standard input is the
/// terminal there, so `-` is refused.
pub async fn test_quietly(
    conn: impl Into<ConnectionOptions>,
    path: &str,
    opts: &crate::core::Options,
) -> anyhow::Result<test::TestReport> {
    if path == "-" {
        anyhow::bail!("standard input is the terminal here: give a file or folder");
    }
    let manifests = objects::read(
        &[path.to_string()],
        &mut std::io::empty(),
        ReadOptions::default(),
    )
    .context("reading input")?;
    let (reader, actor, url) = clients(conn).await?;
    let snap = snapshot(&reader, &url).await?;
    Ok(test::live(&reader, &actor, &snap, &manifests, opts).await)
}
