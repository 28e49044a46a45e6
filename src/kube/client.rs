//! A client from kubectl's connection flags (`--kubeconfig`, `--context`, `--cluster`,
//! `--user`, `--as`, `--request-timeout`) or from the in-cluster service account.

use super::KubeError;
use crate::cli::args::ConnectionArgs;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// The client configuration the flags describe.
pub async fn config_from(
    conn: &ConnectionArgs,
    in_cluster: bool,
) -> Result<kube::Config, KubeError> {
    let mut config = if in_cluster {
        kube::Config::incluster().map_err(|e| KubeError::InCluster(e.to_string()))?
    } else {
        let kubeconfig = match conn.kubeconfig.as_deref().filter(|k| !k.is_empty()) {
            // KUBECONFIG may list several files, like kubectl merges them.
            Some(paths) => {
                let mut merged: Option<Kubeconfig> = None;
                for path in std::env::split_paths(paths) {
                    if path.as_os_str().is_empty() {
                        continue;
                    }
                    let next = Kubeconfig::read_from(&path)
                        .map_err(|e| KubeError::Config(format!("{}: {e}", path.display())))?;
                    merged = Some(match merged {
                        None => next,
                        Some(m) => m
                            .merge(next)
                            .map_err(|e| KubeError::Config(e.to_string()))?,
                    });
                }
                merged.ok_or_else(|| KubeError::Config("--kubeconfig is empty".into()))?
            }
            None => Kubeconfig::read().map_err(|e| {
                KubeError::Config(format!(
                    "{e} (set --kubeconfig or KUBECONFIG, or create ~/.kube/config)"
                ))
            })?,
        };
        let options = KubeConfigOptions {
            context: conn.context.clone(),
            cluster: conn.cluster.clone(),
            user: conn.user.clone(),
        };
        kube::Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .map_err(|e| KubeError::Config(e.to_string()))?
    };
    if let Some(user) = &conn.as_user {
        config.auth_info.impersonate = Some(user.clone());
    }
    if let Some(timeout) = conn.request_timeout.filter(|t| !t.is_zero()) {
        // kubectl's --request-timeout bounds one request. Watches are long requests: the
        // watcher asks the server for a shorter timeout than this (see runtime).
        config.connect_timeout = Some(timeout);
        config.write_timeout = Some(timeout);
    }
    Ok(config)
}

/// A client for the flags.
pub async fn client_from(
    conn: &ConnectionArgs,
    in_cluster: bool,
) -> Result<kube::Client, KubeError> {
    let config = config_from(conn, in_cluster).await?;
    kube::Client::try_from(config).map_err(|e| KubeError::Client(Box::new(e)))
}
