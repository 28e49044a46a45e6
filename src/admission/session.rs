//! What `test` and `audit` need before they start: two clients and the cluster's snapshot
//! (attribution reads its policies, bindings and constraints); and the TUI's quiet runs of
//! both, which print nothing (the screen is the TUI's): `*_quietly` read the snapshot,
//! `*_on_snapshot` take the one the live TUI's reconciler already holds.

use super::AdmissionError;
use super::audit::{self, AuditOptions, AuditProgress, AuditReport};
use super::{objects, test};
use crate::cluster::KubeError;
use crate::cluster::client::ConnectionOptions;
use crate::load::files::LoadError;
use crate::load::input::ReadOptions;
use crate::snapshot::Snapshot;
use tokio::sync::watch;

/// Why a quiet run (or the clients of a printed one) could not be made: what was being done,
/// the cause as its source.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("connecting to the cluster")]
    Connect(#[source] KubeError),
    #[error("discovering the VAP API of {url}")]
    Discover {
        url: String,
        #[source]
        source: KubeError,
    },
    #[error("reading {url}")]
    Read {
        url: String,
        #[source]
        source: KubeError,
    },
    #[error("auditing {target} on {url}")]
    Audit {
        target: String,
        url: String,
        #[source]
        source: AdmissionError,
    },
    #[error("standard input is the terminal here: give a file or folder")]
    StdinIsTerminal,
    #[error("reading input")]
    Input(#[source] LoadError),
}

/// Two clients: `reader` as the user's own identity reads what attribution needs (bindings,
/// policies, discovery, namespaces); `actor` makes the dry-runs, as `--as`/`--as-group` when
/// given, so a verdict is the impersonated user's and attribution still works. And the API
/// server's URL.
pub async fn clients(
    conn: impl Into<ConnectionOptions>,
) -> Result<(kube::Client, kube::Client, String), SessionError> {
    let conn: ConnectionOptions = conn.into();
    let (reader, url) = crate::cluster::client::connect(conn.without_impersonation(), false)
        .await
        .map_err(SessionError::Connect)?;
    let (actor, _) = crate::cluster::client::connect(conn, false)
        .await
        .map_err(SessionError::Connect)?;
    Ok((reader, actor, url))
}

/// The VAP API the cluster at `url` serves.
pub async fn discover(
    reader: &kube::Client,
    url: &str,
) -> Result<crate::cluster::AdmissionApi, SessionError> {
    crate::cluster::discover_admission_api(reader)
        .await
        .map_err(|source| SessionError::Discover {
            url: url.to_string(),
            source,
        })
}

/// The cluster's snapshot; what could not be read is left out (it only weakens attribution).
async fn snapshot(reader: &kube::Client, url: &str) -> Result<Snapshot, SessionError> {
    let api = discover(reader, url).await?;
    let (snap, _unreadable) =
        crate::cluster::list_snapshot(reader, &api)
            .await
            .map_err(|source| SessionError::Read {
                url: url.to_string(),
                source,
            })?;
    Ok(snap)
}

/// The TUI's `a`: an audit of `target` with the default rate, nothing printed; `progress` is
/// told how many objects will be dry-run and how many are answered. Reads the cluster's
/// templates, constraints, VAPs and bindings first (see [`audit_on_snapshot`] to pass them).
pub async fn audit_quietly(
    conn: impl Into<ConnectionOptions>,
    target: &str,
    progress: watch::Sender<AuditProgress>,
) -> Result<AuditReport, SessionError> {
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
) -> Result<AuditReport, SessionError> {
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
) -> Result<AuditReport, SessionError> {
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
    .map_err(|source| SessionError::Audit {
        target: target.to_string(),
        url: url.to_string(),
        source,
    })
}

/// The TUI's `t`: `test -f PATH` against the cluster, nothing printed. Standard input is the
/// terminal there, so `-` is refused. Reads the cluster's objects first (see
/// [`test_on_snapshot`] to pass them).
pub async fn test_quietly(
    conn: impl Into<ConnectionOptions>,
    path: &str,
    opts: &crate::core::Options,
) -> Result<test::TestReport, SessionError> {
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
) -> Result<test::TestReport, SessionError> {
    let manifests = read_manifests(path)?;
    let (reader, actor, _) = clients(conn).await?;
    Ok(test::live(&reader, &actor, snap, &manifests, opts).await)
}

/// The manifests `t` tests; `-` (standard input) is the terminal in the TUI.
fn read_manifests(path: &str) -> Result<Vec<objects::Manifest>, SessionError> {
    if path == "-" {
        return Err(SessionError::StdinIsTerminal);
    }
    objects::read(
        &[path.to_string()],
        &mut std::io::empty(),
        ReadOptions::default(),
    )
    .map_err(SessionError::Input)
}
