//! The live world: reflectors, dynamic constraint watches, workers, leader election.

use super::state::ReconcilerHandle;
use crate::core::Options;

/// Whether this copy takes part in the lease election (and so may write).
#[derive(Debug, Clone)]
pub enum Mode {
    /// Watch only: the TUI without `--reconcile`, `check`.
    ReadOnly,
    /// Compete for the lease; write while holding it.
    Elect {
        lease_namespace: String,
        lease_name: String,
        /// Write even though Gatekeeper's generator looks active.
        take_over: bool,
    },
}

#[derive(Debug, Clone)]
pub struct Config {
    pub options: Options,
    pub mode: Mode,
    /// Concurrent reconciles (keys are never processed twice at once).
    pub workers: usize,
    /// The identity in the Lease; default `<hostname>-<pid>-<random>`.
    pub identity: Option<String>,
    /// Serve `/metrics`, `/healthz`, `/readyz` here.
    pub metrics_addr: Option<std::net::SocketAddr>,
}

/// Starts the reconciler on `client`. Returns the handle and the task that ends when it stops.
pub async fn start(
    client: kube::Client,
    config: Config,
) -> Result<
    (
        ReconcilerHandle,
        tokio::task::JoinHandle<Result<(), super::Error>>,
    ),
    super::Error,
> {
    let _ = (client, config);
    Err(super::Error::Other(
        "the live reconciler is not built yet".into(),
    ))
}
