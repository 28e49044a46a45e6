//! A real kube-controller-manager against a [`TestEnv`]: garbage collection by ownerReferences,
//! namespace deletion, default ServiceAccounts.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::{Binaries, Probe, STOP_GRACE, TestEnv, free_ports, log_tail, process};

/// How long kube-controller-manager may take to answer `/healthz` with 200.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const LOG_NAME: &str = "kube-controller-manager.log";

/// What to run: `--controllers` and any extra flags.
#[derive(Debug, Clone)]
pub struct ControllerManagerOptions {
    /// The `--controllers` list. Default: `garbagecollector`, `namespace`, `serviceaccount`.
    pub controllers: Vec<String>,
    /// Appended to the command line (a later flag wins over an earlier one).
    pub extra_args: Vec<String>,
}

impl Default for ControllerManagerOptions {
    fn default() -> Self {
        ControllerManagerOptions {
            controllers: ["garbagecollector", "namespace", "serviceaccount"]
                .map(String::from)
                .to_vec(),
            extra_args: Vec::new(),
        }
    }
}

/// A running kube-controller-manager; stopped (SIGTERM, then SIGKILL) on drop, and killed with
/// the test process like the apiserver. Its log is `<env dir>/kube-controller-manager.log`,
/// part of [`TestEnv::logs_tail`] and of what a failing test prints.
pub struct ControllerManager {
    child: Option<Child>,
    pid: u32,
    port: u16,
    log: PathBuf,
    startup: Duration,
}

impl TestEnv {
    /// Starts kube-controller-manager with [`ControllerManagerOptions::default`] and waits for
    /// its `/healthz`. On the shared env it collects garbage for every test of the binary:
    /// tests that need it usually take a private env ([`TestEnv::start`]).
    pub async fn start_controller_manager(&self) -> anyhow::Result<ControllerManager> {
        self.start_controller_manager_with(ControllerManagerOptions::default())
            .await
    }

    /// Like [`TestEnv::start_controller_manager`], with other controllers or flags.
    pub async fn start_controller_manager_with(
        &self,
        options: ControllerManagerOptions,
    ) -> anyhow::Result<ControllerManager> {
        let binary = Binaries::kube_controller_manager()?;
        let [port] = free_ports()?;
        let certs = self.dir().join("kube-controller-manager-certs");
        std::fs::create_dir_all(&certs).with_context(|| format!("creating {}", certs.display()))?;
        let kubeconfig = self.kubeconfig_admin();
        let mut cmd = Command::new(binary);
        cmd.arg(format!("--kubeconfig={}", kubeconfig.display()))
            // Delegated authn/authz of its own endpoints (/healthz is always allowed) asks the
            // apiserver as the admin. Skip the client-CA lookup: the apiserver has no client
            // CA, so there is no extension-apiserver-authentication ConfigMap to read.
            .arg(format!(
                "--authentication-kubeconfig={}",
                kubeconfig.display()
            ))
            .arg("--authentication-skip-lookup=true")
            .arg(format!(
                "--authorization-kubeconfig={}",
                kubeconfig.display()
            ))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={port}"))
            .arg(format!("--cert-dir={}", certs.display()))
            .arg("--leader-elect=false")
            .arg(format!("--controllers={}", options.controllers.join(",")))
            .args(&options.extra_args);
        let started = Instant::now();
        let child = self.spawn_logged(cmd, LOG_NAME)?;
        let mut kcm = ControllerManager {
            pid: child.id(),
            child: Some(child),
            port,
            log: self.dir().join(LOG_NAME),
            startup: Duration::ZERO,
        };
        kcm.wait_healthy(self).await?;
        kcm.startup = started.elapsed();
        tracing::info!(port, startup = ?kcm.startup, "kube-controller-manager ready");
        Ok(kcm)
    }
}

impl ControllerManager {
    async fn wait_healthy(&mut self, env: &TestEnv) -> anyhow::Result<()> {
        // Its serving certificate is self-signed (in --cert-dir): probe without verification.
        let url = format!("https://127.0.0.1:{}", self.port);
        let probe = Probe {
            url: &url,
            path: "/healthz",
            process: "kube-controller-manager",
            state: "healthy",
            timeout: READY_TIMEOUT,
        };
        let (child, log) = (&mut self.child, &self.log);
        probe
            .wait(
                env.admin_token(),
                || child.as_mut().and_then(|c| c.try_wait().ok().flatten()),
                || log_tail(log, 40),
            )
            .await
    }

    /// Its pid (e.g. for [`crate::rss_kib`]).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Its `--secure-port` on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Time from spawning it to its first 200 on `/healthz`.
    pub fn startup_time(&self) -> Duration {
        self.startup
    }

    /// The last `lines` lines of its log, with the path.
    pub fn logs_tail(&self, lines: usize) -> String {
        log_tail(&self.log, lines)
    }

    /// Stops it: SIGTERM, then SIGKILL after a grace period.
    pub fn stop(mut self) {
        self.terminate();
    }

    fn terminate(&mut self) {
        if let Some(mut child) = self.child.take() {
            process::terminate(&mut child, STOP_GRACE);
        }
    }
}

impl Drop for ControllerManager {
    fn drop(&mut self) {
        self.terminate();
    }
}
