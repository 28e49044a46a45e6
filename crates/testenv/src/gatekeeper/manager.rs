//! The real Gatekeeper manager, run outside a cluster against a [`TestEnv`].

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use serde::Deserialize as _;

use super::{FIELD_MANAGER, wait_established};
use crate::{STOP_GRACE, TestEnv, free_ports, http_get, is_executable, log_tail, unique_suffix};

/// How long Gatekeeper may take to answer `/readyz` with 200 (2 shared cores).
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// The namespace Gatekeeper believes it runs in (`POD_NAMESPACE`): created if missing.
pub const GATEKEEPER_NAMESPACE: &str = "gatekeeper-system";

const HOW_TO_GET_GATEKEEPER: &str = "run the tests with `scripts/test` (it builds Gatekeeper), or \
     export GATEKEEPER_ASSETS=$(tests/gatekeeper/build.sh) before `cargo test -- --include-ignored`";

/// Gatekeeper's manager binary and its chart's CRDs: `$GATEKEEPER_ASSETS/manager` and
/// `$GATEKEEPER_ASSETS/crds/*.yaml`, as `tests/gatekeeper/build.sh` lays them out.
#[derive(Debug, Clone)]
pub struct GatekeeperAssets {
    pub manager: PathBuf,
    pub crds: PathBuf,
}

impl GatekeeperAssets {
    /// From `GATEKEEPER_ASSETS`; an error with instructions when it is unset or incomplete.
    pub fn discover() -> anyhow::Result<GatekeeperAssets> {
        GatekeeperAssets::discover_with(|var| std::env::var_os(var))
    }

    fn discover_with(
        env: impl Fn(&str) -> Option<std::ffi::OsString>,
    ) -> anyhow::Result<GatekeeperAssets> {
        let Some(dir) = env("GATEKEEPER_ASSETS")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
        else {
            bail!("no Gatekeeper: GATEKEEPER_ASSETS is not set; {HOW_TO_GET_GATEKEEPER}");
        };
        let assets = GatekeeperAssets {
            manager: dir.join("manager"),
            crds: dir.join("crds"),
        };
        if !is_executable(&assets.manager) {
            bail!(
                "Gatekeeper's manager not found or not executable at {}; {HOW_TO_GET_GATEKEEPER}",
                assets.manager.display()
            );
        }
        if assets.crd_files().map_or(true, |f| f.is_empty()) {
            bail!(
                "no Gatekeeper CRDs (*.yaml) in {}; {HOW_TO_GET_GATEKEEPER}",
                assets.crds.display()
            );
        }
        Ok(assets)
    }

    /// The chart's CRD files, sorted.
    pub fn crd_files(&self) -> anyhow::Result<Vec<PathBuf>> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&self.crds)
            .with_context(|| format!("reading {}", self.crds.display()))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
            .collect();
        files.sort();
        Ok(files)
    }

    /// Every CRD of the chart, parsed.
    pub fn crds(&self) -> anyhow::Result<Vec<CustomResourceDefinition>> {
        let mut crds = Vec::new();
        for file in self.crd_files()? {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            for doc in serde_norway::Deserializer::from_str(&text) {
                let value = serde_json::Value::deserialize(doc)
                    .with_context(|| format!("parsing {}", file.display()))?;
                if value.is_null() {
                    continue; // an empty document (a leading or trailing `---`)
                }
                crds.push(
                    serde_json::from_value(value)
                        .with_context(|| format!("{} is not a CRD", file.display()))?,
                );
            }
        }
        Ok(crds)
    }
}

/// Server-side applies every CRD of Gatekeeper's chart (replacing the hand-written
/// ConstraintTemplate CRD of [`super::install_gatekeeper_crds`], same field manager) and waits
/// until each is Established. Returns their names.
pub async fn install_chart_crds(
    client: &kube::Client,
    assets: &GatekeeperAssets,
) -> anyhow::Result<Vec<String>> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut names = Vec::new();
    for crd in assets.crds()? {
        let name = crd
            .metadata
            .name
            .clone()
            .context("a chart CRD without a name")?;
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&crd),
        )
        .await
        .with_context(|| format!("applying Gatekeeper's CRD {name}"))?;
        names.push(name);
    }
    for name in &names {
        wait_established(&api, name).await?;
    }
    Ok(names)
}

/// What [`Gatekeeper::start`] sets up before the manager runs: the chart's CRDs
/// ([`install_chart_crds`]) and the `gatekeeper-system` namespace. Returns the CRDs' names.
pub async fn install_chart(
    client: &kube::Client,
    assets: &GatekeeperAssets,
) -> anyhow::Result<Vec<String>> {
    let names = install_chart_crds(client, assets).await?;
    crate::ensure_namespace(client, GATEKEEPER_NAMESPACE).await?;
    Ok(names)
}

/// How to run Gatekeeper.
#[derive(Debug, Clone)]
pub struct GatekeeperOptions {
    /// One `--operation=` each. Default: `generate`, `audit`, `status` (no webhook: nothing
    /// calls back into it, the apiserver has no route to it).
    pub operations: Vec<String>,
    /// Appended after the harness's flags (for a repeated flag, Go's `flag` keeps the last),
    /// then the words of `$GATEKEEPER_EXTRA_ARGS` (e.g. `--log-level=DEBUG` while debugging).
    pub extra_args: Vec<String>,
    /// Wait for 200 on `/readyz` before returning (default). Without it, `start` returns once
    /// the process runs, e.g. to watch a configuration that never becomes ready.
    pub wait_ready: bool,
}

impl Default for GatekeeperOptions {
    fn default() -> Self {
        GatekeeperOptions {
            operations: ["generate", "audit", "status"].map(String::from).to_vec(),
            extra_args: Vec::new(),
            wait_ready: true,
        }
    }
}

impl GatekeeperOptions {
    /// The default options with these operations.
    pub fn with_operations(operations: &[&str]) -> GatekeeperOptions {
        GatekeeperOptions {
            operations: operations.iter().map(|o| o.to_string()).collect(),
            ..GatekeeperOptions::default()
        }
    }
}

/// A running Gatekeeper manager: stopped (SIGTERM, then SIGKILL) on drop, killed with the
/// test process. Its log is `<env dir>/gatekeeper-<n>.log`, printed on failure with the others.
pub struct Gatekeeper {
    child: Option<Child>,
    pid: u32,
    log: PathBuf,
    certs: PathBuf,
    health_port: u16,
    webhook_port: u16,
    prometheus_port: u16,
    startup: Duration,
}

impl Gatekeeper {
    /// Installs Gatekeeper's chart CRDs and the `gatekeeper-system` namespace, then starts the
    /// manager outside a cluster (`--debug-use-fake-pod`, admin kubeconfig, free loopback
    /// ports, certificates and audit cache in the env's folder, no cert rotation, no external
    /// data, `--audit-interval=0`, `--shutdown-delay=0`) and, unless told not to, waits for
    /// `/readyz`. Use a private env: see the module docs.
    pub async fn start(env: &TestEnv, options: GatekeeperOptions) -> anyhow::Result<Gatekeeper> {
        let assets = GatekeeperAssets::discover()?;
        let client = env.client_admin().await;
        install_chart(&client, &assets).await?;

        let id = unique_suffix();
        let certs = env.dir().join(format!("gatekeeper-{id}-certs"));
        let audit_cache = env.dir().join(format!("gatekeeper-{id}-audit"));
        for d in [&certs, &audit_cache] {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
        }
        let serves_webhooks = options
            .operations
            .iter()
            .any(|o| o == "webhook" || o == "mutation-webhook");
        if serves_webhooks {
            // Without cert rotation, the webhook server needs tls.crt/tls.key in --cert-dir.
            self_signed_cert(&certs)?;
        }
        let [webhook_port, health_port, prometheus_port] = free_ports()?;
        let kubeconfig = env.kubeconfig_admin();
        let mut cmd = Command::new(&assets.manager);
        cmd.args(
            options
                .operations
                .iter()
                .map(|o| format!("--operation={o}")),
        )
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg("--debug-use-fake-pod")
        .arg("--disable-cert-rotation")
        .arg("--enable-external-data=false")
        .arg("--audit-interval=0")
        .arg(format!("--api-cache-dir={}", audit_cache.display()))
        .arg("--host=127.0.0.1")
        .arg(format!("--port={webhook_port}"))
        .arg(format!("--health-addr=127.0.0.1:{health_port}"))
        .arg(format!("--prometheus-port={prometheus_port}"))
        .arg(format!("--cert-dir={}", certs.display()))
        // Nothing routes traffic to it: no endpoint to drain before stopping.
        .arg("--shutdown-delay=0")
        .args(&options.extra_args)
        // For debugging a run without editing the test, e.g. `--log-level=DEBUG`.
        .args(
            std::env::var("GATEKEEPER_EXTRA_ARGS")
                .unwrap_or_default()
                .split_whitespace(),
        )
        .env("KUBECONFIG", &kubeconfig)
        .env("POD_NAMESPACE", GATEKEEPER_NAMESPACE)
        // --debug-use-fake-pod overrides it with `no-pod` (status objects are `no--pod-…`, so
        // two Gatekeepers on one env share them); set for any flag set without that one.
        .env("POD_NAME", format!("gatekeeper-testenv-{id}"))
        // Never the in-cluster config of a CI runner that happens to be a pod.
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT");
        let log_name = format!("gatekeeper-{id}.log");
        let started = Instant::now();
        let child = env.spawn_logged(cmd, &log_name)?;
        let mut gk = Gatekeeper {
            pid: child.id(),
            child: Some(child),
            log: env.dir().join(log_name),
            certs,
            health_port,
            webhook_port,
            prometheus_port,
            startup: Duration::ZERO,
        };
        if options.wait_ready {
            gk.wait_ready().await?;
        }
        gk.startup = started.elapsed();
        tracing::info!(startup = ?gk.startup, log = %gk.log.display(), "gatekeeper started");
        Ok(gk)
    }

    /// Polls `/readyz` on the health address until 200, the deadline, or the process exiting.
    pub async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = self.exit_status() {
                bail!(
                    "gatekeeper exited early ({status}):\n{}",
                    self.logs_tail(60)
                );
            }
            let port = self.health_port;
            let response = tokio::task::spawn_blocking(move || http_get(port, "/readyz"))
                .await
                .unwrap_or_default();
            if response.starts_with("HTTP/1.1 200") {
                return Ok(());
            }
            if Instant::now() > deadline {
                let status = response.lines().next().unwrap_or("no answer");
                bail!(
                    "gatekeeper not ready after {READY_TIMEOUT:?} (last: {status}):\n{}",
                    self.logs_tail(60)
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// `Some(status)` once the process has exited.
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Its pid (e.g. for [`crate::rss_kib`] or `/proc/<pid>/stat`).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// `--health-addr` port (`/readyz`, `/healthz`) on 127.0.0.1.
    pub fn health_port(&self) -> u16 {
        self.health_port
    }

    /// `--port`: the webhook server's port (listening only with `--operation=webhook` or
    /// `mutation-webhook`; its self-signed certificate is [`Gatekeeper::webhook_ca`]).
    pub fn webhook_port(&self) -> u16 {
        self.webhook_port
    }

    /// The webhook server's self-signed certificate (PEM; a `caBundle` for a webhook
    /// configuration pointing at `https://127.0.0.1:<webhook_port>`); written only when a
    /// webhook operation runs.
    pub fn webhook_ca(&self) -> PathBuf {
        self.certs.join("tls.crt")
    }

    /// `--prometheus-port`: Gatekeeper's own `/metrics`.
    pub fn prometheus_port(&self) -> u16 {
        self.prometheus_port
    }

    /// Time from spawning it to its first 200 on `/readyz` (zero without `wait_ready`).
    pub fn startup_time(&self) -> Duration {
        self.startup
    }

    /// Its log file (JSON lines at the default log level).
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The whole log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `lines` lines of its log, with the path.
    pub fn logs_tail(&self, lines: usize) -> String {
        log_tail(&self.log, lines)
    }

    /// SIGTERM, then SIGKILL after a grace period; returns how it exited.
    pub fn stop(mut self) -> Option<ExitStatus> {
        self.terminate()
    }

    fn terminate(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        crate::process::terminate(&mut child, STOP_GRACE);
        child.try_wait().ok().flatten()
    }
}

impl Drop for Gatekeeper {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// A self-signed serving certificate for 127.0.0.1 (`tls.crt`, also its own CA, and `tls.key`).
fn self_signed_cert(dir: &Path) -> anyhow::Result<()> {
    let out = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args(["-subj", "/CN=gatekeeper-testenv"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"])
        .arg("-keyout")
        .arg(dir.join("tls.key"))
        .arg("-out")
        .arg(dir.join("tls.crt"))
        .output()
        .context("running openssl for Gatekeeper's webhook certificate")?;
    if !out.status.success() {
        bail!(
            "openssl req failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_gatekeeper_gives_instructions() {
        let err = GatekeeperAssets::discover_with(|_| None).expect_err("nothing configured");
        assert!(
            format!("{err}").contains("tests/gatekeeper/build.sh"),
            "{err}"
        );
        let err = GatekeeperAssets::discover_with(|v| {
            (v == "GATEKEEPER_ASSETS").then(|| "/nonexistent".into())
        })
        .expect_err("empty folder");
        assert!(format!("{err}").contains("/nonexistent/manager"), "{err}");
        let err = GatekeeperAssets::discover_with(|_| Some("".into())).expect_err("empty value");
        assert!(format!("{err}").contains("is not set"), "{err}");
    }
}
