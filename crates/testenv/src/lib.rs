//! A real kube-apiserver + etcd on loopback, for kubectl-vap's integration tests and benchmarks.
//!
//! Binaries are found the envtest way (`KUBEBUILDER_ASSETS`, or `TEST_ASSET_KUBE_APISERVER`,
//! `TEST_ASSET_ETCD`, `TEST_ASSET_KUBECTL`); `tests/kubeenv/build.sh` builds them and `scripts/test`
//! wires it all up. `KUBEENV_VERSION=1.30` (the [`version`] knob) makes sure the kube-apiserver
//! found is that minor. See `docs/testing.md`.
//!
//! ```no_run
//! # async fn demo() {
//! let env = testenv::TestEnv::shared();
//! let client = env.client_admin().await; // a fresh client for *this* runtime
//! let ns = env.create_namespace("demo").await;
//! # let _ = (client, ns);
//! # }
//! ```
// Test support calls libc (a parent-death signal, kill, waitpid): the workspace denies
// `unsafe` (Cargo.toml, `[workspace.lints]`), this crate allows it.
#![allow(unsafe_code)]

mod controller_manager;
pub mod gatekeeper;
pub mod poll;
mod process;
pub mod proxy;
pub mod rbac;
pub mod version;

pub use controller_manager::{ControllerManager, ControllerManagerOptions};

pub use process::{
    Stopped, cpu_secs, own_cpu_secs, peak_rss_kib, rss_kib, signal, spawn_tied_to_process,
    stdout_of,
};

/// A free loopback port (for a process's `--metrics-addr` and the like).
pub fn free_port() -> u16 {
    let [port] = free_ports().expect("a free loopback port");
    port
}

/// Creates namespace `name` unless it exists.
pub async fn ensure_namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": { "name": name },
    }))
    .context("static Namespace JSON")?;
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating namespace {name}")),
    }
}

/// A plain `GET http://127.0.0.1:<port><path>` (status line, headers and body), or an empty
/// string when nothing answers: for the reconciler's own `/metrics` and probes.
pub fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    let _ = write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    );
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, Once, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// How long kube-apiserver may take to answer `/readyz` with 200 (2 shared cores, cold caches).
const READY_TIMEOUT: Duration = Duration::from_secs(90);
const ETCD_READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Grace period between SIGTERM and SIGKILL when stopping a process.
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(15);
/// How long [`TestEnv::stop_apiserver`] waits for kube-apiserver to exit after SIGTERM: it
/// stops listening at once but was measured living past 30 s (its graceful shutdown drains
/// requests and watches), and a restart test that claims SIGTERM must not end on a SIGKILL.
pub const SIGTERM_EXIT_WAIT: Duration = Duration::from_secs(90);
/// Name of the non-admin user in the token file: only `system:authenticated`, no RBAC grants.
pub const USER_NAME: &str = "vap-user";
/// Name of the admin user in the token file: member of `system:masters`.
pub const ADMIN_NAME: &str = "vap-admin";

const HOW_TO_GET_BINARIES: &str = "run the tests with `scripts/test` (it builds them), or export \
     KUBEBUILDER_ASSETS=$(tests/kubeenv/build.sh) before `cargo test -- --include-ignored`; \
     setup-envtest's folders work too";

/// Paths of the three binaries, found the envtest way.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub kube_apiserver: PathBuf,
    pub etcd: PathBuf,
    pub kubectl: PathBuf,
}

impl Binaries {
    /// `TEST_ASSET_<NAME>` wins per binary; otherwise `$KUBEBUILDER_ASSETS/<name>`.
    pub fn discover() -> anyhow::Result<Binaries> {
        Binaries::discover_with(|var| std::env::var_os(var))
    }

    fn discover_with(env: impl Fn(&str) -> Option<std::ffi::OsString>) -> anyhow::Result<Binaries> {
        let find = |var, name| find_binary(&env, var, name, HOW_TO_GET_BINARIES);
        Ok(Binaries {
            kube_apiserver: find("TEST_ASSET_KUBE_APISERVER", "kube-apiserver")?,
            etcd: find("TEST_ASSET_ETCD", "etcd")?,
            kubectl: find("TEST_ASSET_KUBECTL", "kubectl")?,
        })
    }

    /// kube-controller-manager, found like the others (`TEST_ASSET_KUBE_CONTROLLER_MANAGER`, or
    /// `$KUBEBUILDER_ASSETS/kube-controller-manager`). Looked up only by the tests that start
    /// one: setup-envtest's folders do not have it.
    pub fn kube_controller_manager() -> anyhow::Result<PathBuf> {
        Binaries::kube_controller_manager_with(|var| std::env::var_os(var))
    }

    fn kube_controller_manager_with(
        env: impl Fn(&str) -> Option<std::ffi::OsString>,
    ) -> anyhow::Result<PathBuf> {
        find_binary(
            &env,
            "TEST_ASSET_KUBE_CONTROLLER_MANAGER",
            "kube-controller-manager",
            "tests/kubeenv/build.sh builds it (setup-envtest does not ship one): run the tests with \
             `scripts/test`, or export KUBEBUILDER_ASSETS=$(tests/kubeenv/build.sh), or point \
             TEST_ASSET_KUBE_CONTROLLER_MANAGER at a kube-controller-manager 1.36",
        )
    }
}

/// `$<var>` wins; otherwise `$KUBEBUILDER_ASSETS/<name>`; it must be an executable file.
fn find_binary(
    env: &impl Fn(&str) -> Option<std::ffi::OsString>,
    var: &str,
    name: &str,
    how: &str,
) -> anyhow::Result<PathBuf> {
    let path = match (env(var), env("KUBEBUILDER_ASSETS")) {
        (Some(p), _) => PathBuf::from(p),
        (None, Some(dir)) => PathBuf::from(dir).join(name),
        (None, None) => {
            bail!("no {name} binary: neither {var} nor KUBEBUILDER_ASSETS is set; {how}")
        }
    };
    if !is_executable(&path) {
        bail!(
            "{name} not found or not executable at {}; {how}",
            path.display()
        );
    }
    Ok(path)
}

pub(crate) fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Writes only, at metadata level, once each request completes.
const AUDIT_POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
"#;

/// How a private env's kube-apiserver differs from the shared one's.
#[derive(Debug, Clone, Default)]
pub struct EnvOptions {
    /// Write an audit log of every create, update, patch and delete ([`TestEnv::audit_events`]).
    pub audit: bool,
    /// More kube-apiserver flags, after the env's own (a repeated list flag adds to it).
    pub apiserver_args: Vec<String>,
}

impl EnvOptions {
    /// A server that does not serve ValidatingAdmissionPolicy v1, as one older than 1.30 (or
    /// one whose operator switched it off) does: both v1 resources off in `--runtime-config`,
    /// and the admission plugin off too — it lists VAPs at v1, so kube-apiserver exits at
    /// start without it.
    pub fn without_vap_v1() -> EnvOptions {
        EnvOptions {
            apiserver_args: vec![
                "--runtime-config=admissionregistration.k8s.io/v1/validatingadmissionpolicies=false,admissionregistration.k8s.io/v1/validatingadmissionpolicybindings=false".into(),
                "--disable-admission-plugins=ValidatingAdmissionPolicy".into(),
            ],
            ..EnvOptions::default()
        }
    }
}

/// One etcd and one kube-apiserver, each on a free loopback port, with RBAC and two token users.
pub struct TestEnv {
    dir: PathBuf,
    /// `None` for the shared env, whose folder is removed by an exit hook instead.
    tempdir: Mutex<Option<tempfile::TempDir>>,
    bins: Binaries,
    etcd_url: String,
    apiserver_port: u16,
    etcd: Mutex<Option<Child>>,
    apiserver: Mutex<Option<Child>>,
    // Pids kept outside the mutexes so the exit hook never blocks on a lock.
    etcd_pid: AtomicU32,
    apiserver_pid: AtomicU32,
    admin_token: String,
    user_token: String,
    startup: Duration,
    /// The audit log kube-apiserver writes, if started with [`TestEnv::start_audited`].
    audit_log: Option<PathBuf>,
    /// Flags added to kube-apiserver's ([`EnvOptions::apiserver_args`]).
    apiserver_args: Vec<String>,
    /// What kube-apiserver says it is (`v1.36.3`).
    kubernetes: String,
}

static SHARED: OnceLock<TestEnv> = OnceLock::new();
/// Set by the panic hook: keep the shared env's folder (and logs) for inspection.
static SAW_PANIC: AtomicBool = AtomicBool::new(false);
/// Folders of the envs alive in this process, for the panic hook.
static LIVE_DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

impl TestEnv {
    /// The env shared by every test of this test binary, started on first use (and blocking
    /// the caller until `/readyz` answers). Its processes die with the test binary.
    ///
    /// Panics with instructions when the binaries are missing: a test that needs a cluster
    /// must never pass by skipping.
    pub fn shared() -> &'static TestEnv {
        SHARED.get_or_init(|| {
            let env = TestEnv::try_start().unwrap_or_else(|e| panic!("testenv: {e:#}"));
            // SAFETY: registering a plain extern "C" fn; it runs once at process exit.
            unsafe {
                libc::atexit(cleanup_shared_at_exit);
            }
            env
        })
    }

    /// A private env (e.g. for tests that restart or break it); stopped and removed on drop,
    /// except that its folder is kept when the dropping thread is panicking.
    pub fn start() -> TestEnv {
        TestEnv::try_start().unwrap_or_else(|e| panic!("testenv: {e:#}"))
    }

    /// A private env whose kube-apiserver writes an audit log of every create, update, patch
    /// and delete (metadata level: who, verb, object, response code); read it with
    /// [`TestEnv::audit_events`].
    pub fn start_audited() -> TestEnv {
        TestEnv::start_with(EnvOptions {
            audit: true,
            ..EnvOptions::default()
        })
    }

    /// A private env started with `opts` (stopped and removed on drop, like [`TestEnv::start`]).
    pub fn start_with(opts: EnvOptions) -> TestEnv {
        TestEnv::try_start_with(opts).unwrap_or_else(|e| panic!("testenv: {e:#}"))
    }

    /// The audit events written so far (JSON objects), oldest first; empty without an audit log.
    pub fn audit_events(&self) -> Vec<serde_json::Value> {
        let Some(path) = &self.audit_log else {
            return Vec::new();
        };
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Like [`TestEnv::start`], but returns the error instead of panicking.
    pub fn try_start() -> anyhow::Result<TestEnv> {
        TestEnv::try_start_with(EnvOptions::default())
    }

    /// [`TestEnv::start_with`], returning the error instead of panicking.
    pub fn try_start_with(opts: EnvOptions) -> anyhow::Result<TestEnv> {
        install_panic_hook();
        let bins = Binaries::discover()?;
        let kubernetes = version::binary_version(&bins.kube_apiserver)?;
        if let Some(wanted) = version::wanted()? {
            version::check(&bins.kube_apiserver, &kubernetes, &wanted)?;
        }
        remove_stale_dirs();
        let tempdir = owned_temp_dir(DIR_PREFIX).context("creating the env's temp dir")?;
        let dir = tempdir.path().to_path_buf();
        std::fs::create_dir_all(dir.join("certs")).context("creating certs dir")?;

        generate_service_account_key(&dir.join("sa.key"))?;
        let admin_token = random_hex(16);
        let user_token = random_hex(16);
        // Format: token,user,uid,"group1,group2". The user gets no group: only
        // system:authenticated, which the apiserver adds to every authenticated user.
        std::fs::write(
            dir.join("tokens.csv"),
            format!(
                "{admin_token},{ADMIN_NAME},{ADMIN_NAME}-uid,\"system:masters\"\n\
                 {user_token},{USER_NAME},{USER_NAME}-uid\n"
            ),
        )
        .context("writing tokens.csv")?;

        let audit_log = if opts.audit {
            std::fs::write(dir.join("audit-policy.yaml"), AUDIT_POLICY)
                .context("writing the audit policy")?;
            Some(dir.join("audit.log"))
        } else {
            None
        };
        let [mut etcd_port, mut etcd_peer_port, apiserver_port] = free_ports()?;
        let mut env = TestEnv {
            dir: dir.clone(),
            tempdir: Mutex::new(Some(tempdir)),
            bins,
            etcd_url: format!("http://127.0.0.1:{etcd_port}"),
            apiserver_port,
            etcd: Mutex::new(None),
            apiserver: Mutex::new(None),
            etcd_pid: AtomicU32::new(0),
            apiserver_pid: AtomicU32::new(0),
            admin_token,
            user_token: user_token.clone(),
            startup: Duration::ZERO,
            audit_log,
            apiserver_args: opts.apiserver_args,
            kubernetes,
        };
        lock(&LIVE_DIRS).push(dir.clone());

        let started = Instant::now();
        let mut attempt = 1;
        while let Err(e) = env.boot(etcd_port, etcd_peer_port) {
            // Keep the logs for the reader of `e` (processes first: etcd owns its data dir).
            env.stop_all();
            if port_taken(&e) && attempt < 3 {
                attempt += 1;
                eprintln!("testenv: a port was taken meanwhile; starting again on others: {e:#}");
                let _ = std::fs::remove_dir_all(dir.join("etcd"));
                let [port, peer_port, apiserver_port] = free_ports()?;
                (etcd_port, etcd_peer_port) = (port, peer_port);
                env.etcd_url = format!("http://127.0.0.1:{etcd_port}");
                env.apiserver_port = apiserver_port;
                continue;
            }
            if let Some(tempdir) = lock(&env.tempdir).take() {
                let kept = keep_dir(tempdir);
                return Err(e.context(format!("env folder kept at {}", kept.display())));
            }
            return Err(e);
        }
        env.startup = started.elapsed();

        let ca = dir.join("certs").join("apiserver.crt");
        if !ca.exists() {
            bail!("kube-apiserver is ready but wrote no {}", ca.display());
        }
        for (file, user, token) in [
            ("kubeconfig-admin", ADMIN_NAME, &env.admin_token),
            ("kubeconfig-user", USER_NAME, &user_token),
        ] {
            let yaml = kubeconfig_yaml(&env.server_url(), Some(&ca), user, token)?;
            std::fs::write(dir.join(file), yaml).with_context(|| format!("writing {file}"))?;
        }
        tracing::info!(dir = %dir.display(), startup = ?env.startup, "testenv ready");
        Ok(env)
    }

    fn boot(&self, etcd_port: u16, etcd_peer_port: u16) -> anyhow::Result<()> {
        self.spawn_etcd(etcd_peer_port)?;
        self.wait_etcd_healthy(etcd_port)?;
        self.spawn_apiserver(self.apiserver_port)?;
        block_on_fresh_runtime(self.wait_apiserver_ready(&self.server_url()))
    }

    fn spawn_etcd(&self, peer_port: u16) -> anyhow::Result<()> {
        let peer = format!("http://127.0.0.1:{peer_port}");
        let mut cmd = Command::new(&self.bins.etcd);
        cmd.arg("--name=testenv")
            .arg(format!("--data-dir={}", self.dir.join("etcd").display()))
            .arg(format!("--listen-client-urls={}", self.etcd_url))
            .arg(format!("--advertise-client-urls={}", self.etcd_url))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=testenv={peer}"))
            // Test data is disposable; fsync dominates etcd latency on shared disks.
            .arg("--unsafe-no-fsync=true")
            .arg("--log-level=warn");
        let child = self.spawn_logged(cmd, "etcd.log")?;
        self.etcd_pid.store(child.id(), Ordering::SeqCst);
        *lock(&self.etcd) = Some(child);
        Ok(())
    }

    fn wait_etcd_healthy(&self, port: u16) -> anyhow::Result<()> {
        let deadline = Instant::now() + ETCD_READY_TIMEOUT;
        loop {
            if let Some(status) = try_wait(&self.etcd) {
                bail!("etcd exited early ({status}):\n{}", self.logs_tail());
            }
            if etcd_health(port) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "etcd not healthy after {ETCD_READY_TIMEOUT:?}:\n{}",
                    self.logs_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn spawn_apiserver(&self, port: u16) -> anyhow::Result<()> {
        let key = self.dir.join("sa.key");
        let mut cmd = Command::new(&self.bins.kube_apiserver);
        // envtest's flag set, plus static tokens instead of client certs.
        cmd.arg(format!("--etcd-servers={}", self.etcd_url))
            .arg(format!("--cert-dir={}", self.dir.join("certs").display()))
            .arg(format!("--secure-port={port}"))
            .arg("--bind-address=127.0.0.1")
            .arg("--advertise-address=127.0.0.1")
            .arg("--service-cluster-ip-range=10.0.0.0/24")
            .arg("--allow-privileged=true")
            // No controller-manager creates ServiceAccounts, so the plugin would reject pods.
            .arg("--disable-admission-plugins=ServiceAccount")
            .arg("--authorization-mode=RBAC")
            // Endpoints reject loopback IPs, so the default reconciler would log an error
            // every 10 s forever; nothing here needs the `kubernetes` service's endpoints.
            .arg("--endpoint-reconciler-type=none")
            .arg(format!(
                "--service-account-issuer=https://127.0.0.1:{port}/"
            ))
            .arg(format!("--service-account-key-file={}", key.display()))
            .arg(format!(
                "--service-account-signing-key-file={}",
                key.display()
            ))
            .arg(format!(
                "--token-auth-file={}",
                self.dir.join("tokens.csv").display()
            ));
        if let Some(log) = &self.audit_log {
            cmd.arg(format!(
                "--audit-policy-file={}",
                self.dir.join("audit-policy.yaml").display()
            ))
            .arg(format!("--audit-log-path={}", log.display()))
            .arg("--audit-log-format=json");
        }
        cmd.args(&self.apiserver_args);
        let child = self.spawn_logged(cmd, "kube-apiserver.log")?;
        self.apiserver_pid.store(child.id(), Ordering::SeqCst);
        *lock(&self.apiserver) = Some(child);
        Ok(())
    }

    /// Spawns `cmd` tied to this process (PDEATHSIG), stdout and stderr appended to
    /// `<dir>/<log_name>`.
    pub(crate) fn spawn_logged(&self, mut cmd: Command, log_name: &str) -> anyhow::Result<Child> {
        let log_path = self.dir.join(log_name);
        let log = File::options()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("opening {}", log_path.display()))?;
        let log2 = log.try_clone().context("duplicating the log file handle")?;
        cmd.stdin(Stdio::null()).stdout(log).stderr(log2);
        let program = cmd.get_program().to_string_lossy().into_owned();
        process::spawn_tied_to_process(cmd).with_context(|| format!("starting {program}"))
    }

    /// Polls `/readyz` as the admin until 200, the deadline, or the process dying.
    async fn wait_apiserver_ready(&self, url: &str) -> anyhow::Result<()> {
        // The CA file does not exist before the first start, so probe without verification.
        let probe = Probe {
            url,
            path: "/readyz",
            process: "kube-apiserver",
            state: "ready",
            timeout: READY_TIMEOUT,
        };
        probe
            .wait(
                &self.admin_token,
                || try_wait(&self.apiserver),
                || self.logs_tail(),
            )
            .await
    }

    /// Stops kube-apiserver with SIGTERM and waits for it to exit by itself, at most
    /// [`SIGTERM_EXIT_WAIT`]; etcd keeps running. Which signal ended it is said on stderr and
    /// in `kube-apiserver.log`. Panics, naming the signal it took, when it had to be SIGKILLed:
    /// the test asked for a graceful stop and did not get one.
    pub async fn stop_apiserver(&self) {
        let child = lock(&self.apiserver).take();
        if let Some(mut child) = child {
            let pid = child.id();
            // The wait sleeps; keep it off the caller's runtime threads.
            let stopped = tokio::task::spawn_blocking(move || {
                process::terminate_waiting(&mut child, SIGTERM_EXIT_WAIT)
            })
            .await
            .expect("the stop task panicked");
            self.apiserver_pid.store(0, Ordering::SeqCst);
            match stopped {
                Ok(s) => self.said_stopped(pid, &s),
                Err(s) => {
                    self.said_stopped(pid, &s);
                    panic!(
                        "testenv: kube-apiserver (pid {pid}) did not exit within {}s of SIGTERM and took SIGKILL ({s}); the stop was not a graceful one",
                        SIGTERM_EXIT_WAIT.as_secs()
                    );
                }
            }
        }
    }

    /// Kills kube-apiserver (SIGKILL: no graceful shutdown, nothing drained or released) and
    /// reaps it; etcd keeps running. For tests that compare a crash with a stop.
    pub async fn kill_apiserver(&self) {
        let child = lock(&self.apiserver).take();
        if let Some(mut child) = child {
            let pid = child.id();
            let stopped = tokio::task::spawn_blocking(move || process::kill(&mut child))
                .await
                .expect("the kill task panicked");
            self.apiserver_pid.store(0, Ordering::SeqCst);
            self.said_stopped(pid, &stopped);
        }
    }

    /// How kube-apiserver's stop ended, on stderr and at the end of its log (where the restart
    /// that follows appends its own lines), so a reader of either knows which signal ended it.
    fn said_stopped(&self, pid: u32, stopped: &process::Stopped) {
        let line = format!("testenv: kube-apiserver (pid {pid}) stopped: {stopped}");
        eprintln!("{line}");
        let log_path = self.dir.join("kube-apiserver.log");
        let appended = File::options()
            .append(true)
            .open(&log_path)
            .and_then(|mut log| writeln!(log, "{line}"));
        if let Err(e) = appended {
            eprintln!("testenv: cannot append to {}: {e}", log_path.display());
        }
    }

    /// Starts kube-apiserver again on the same port, certs and etcd, and waits for `/readyz`.
    /// Clients and kubeconfigs handed out before stay valid.
    pub async fn start_apiserver(&self) -> anyhow::Result<()> {
        if lock(&self.apiserver).is_some() {
            bail!("kube-apiserver is already running");
        }
        self.spawn_apiserver(self.apiserver_port)?;
        self.wait_apiserver_ready(&self.server_url()).await
    }

    /// Starts kube-apiserver again like [`TestEnv::start_apiserver`], but returns as soon as the
    /// process is spawned: for tests that must send requests from the first moment it answers,
    /// before `/readyz` (and the admission plugin's informers) are ready.
    pub fn spawn_apiserver_again(&self) -> anyhow::Result<()> {
        if lock(&self.apiserver).is_some() {
            bail!("kube-apiserver is already running");
        }
        self.spawn_apiserver(self.apiserver_port)
    }

    /// Whether the kube-apiserver this env started has exited (`None`: running, or none).
    pub fn apiserver_exited(&self) -> Option<std::process::ExitStatus> {
        try_wait(&self.apiserver)
    }

    /// Starts kube-apiserver on another free port (same etcd, certs and tokens) while the main
    /// one is stopped, and returns an admin client for it. Clients of [`TestEnv::server_url`]
    /// cannot reach it: what changes through it, they see only once the main server is back
    /// ([`TestEnv::stop_apiserver`], then [`TestEnv::start_apiserver`]) — and since that server
    /// starts with a fresh watch cache, a watch resuming from before learns of it only by a
    /// relist.
    pub async fn start_apiserver_elsewhere(&self) -> anyhow::Result<kube::Client> {
        if lock(&self.apiserver).is_some() {
            bail!("kube-apiserver is already running");
        }
        let [port] = free_ports()?;
        let url = format!("https://127.0.0.1:{port}");
        self.spawn_apiserver(port)?;
        self.wait_apiserver_ready(&url).await?;
        let ca = self.dir.join("certs").join("apiserver.crt");
        let yaml = kubeconfig_yaml(&url, Some(&ca), ADMIN_NAME, &self.admin_token)?;
        client_from_kubeconfig(Kubeconfig::from_yaml(&yaml)?).await
    }

    /// A command that runs `program` the way a pod sees the cluster, as the non-admin user
    /// [`USER_NAME`]: `KUBERNETES_SERVICE_HOST`/`_PORT` set, no `KUBECONFIG`, and the
    /// service-account token, CA and `namespace` in `/var/run/secrets/kubernetes.io/serviceaccount`.
    /// Those files live in a tmpfs over `/var/run` in a private mount namespace (`unshare`; not
    /// as root, inside a user namespace too), so nothing on the host changes. Add the program's arguments to the command.
    pub fn in_pod_command(&self, program: &Path, namespace: &str) -> anyhow::Result<Command> {
        let sa = self.dir.join(format!("serviceaccount-{}", unique_suffix()));
        std::fs::create_dir_all(&sa).with_context(|| format!("creating {}", sa.display()))?;
        std::fs::write(sa.join("token"), &self.user_token).context("writing the token")?;
        std::fs::write(sa.join("namespace"), namespace).context("writing the namespace")?;
        std::fs::copy(
            self.dir.join("certs").join("apiserver.crt"),
            sa.join("ca.crt"),
        )
        .context("copying the CA")?;
        // $0: the service-account folder; $1: the program; then its arguments.
        const SCRIPT: &str = r#"set -e
run=$(readlink -f /var/run)
mount -t tmpfs tmpfs "$run"
mkdir -p /var/run/secrets/kubernetes.io
cp -r "$0" /var/run/secrets/kubernetes.io/serviceaccount
exec "$@""#;
        let mut cmd = Command::new("unshare");
        // Not root: a user namespace of its own makes the mount allowed (tmpfs is mountable there).
        use std::os::unix::fs::MetadataExt;
        if std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() != 0) {
            cmd.args(["--user", "--map-root-user"]);
        }
        cmd.args([
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            SCRIPT,
        ])
        .arg(&sa)
        .arg(program)
        .env("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        .env("KUBERNETES_SERVICE_PORT", self.apiserver_port.to_string())
        .env_remove("KUBECONFIG");
        Ok(cmd)
    }

    /// A new client as the admin (`system:masters`). Call it per test: a client belongs to the
    /// tokio runtime it was built on.
    pub async fn client_admin(&self) -> kube::Client {
        self.client_from(&self.kubeconfig_admin()).await
    }

    /// A new client as the non-admin user [`USER_NAME`] (no RBAC grants by default).
    pub async fn client_user(&self) -> kube::Client {
        self.client_from(&self.kubeconfig_user()).await
    }

    async fn client_from(&self, path: &Path) -> kube::Client {
        let kubeconfig = Kubeconfig::read_from(path)
            .unwrap_or_else(|e| panic!("testenv: reading {}: {e}", path.display()));
        client_from_kubeconfig(kubeconfig)
            .await
            .unwrap_or_else(|e| panic!("testenv: client from {}: {e:#}", path.display()))
    }

    /// Kubeconfig file for the admin user (CA from the apiserver's cert dir, bearer token).
    pub fn kubeconfig_admin(&self) -> PathBuf {
        self.dir.join("kubeconfig-admin")
    }

    /// Kubeconfig file for the non-admin user [`USER_NAME`].
    pub fn kubeconfig_user(&self) -> PathBuf {
        self.dir.join("kubeconfig-user")
    }

    /// `https://127.0.0.1:<port>`
    pub fn server_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.apiserver_port)
    }

    /// The binaries this env runs; `kubectl` is the matching real kubectl.
    pub fn binaries(&self) -> &Binaries {
        &self.bins
    }

    /// The env's folder: logs, kubeconfigs, certs, etcd data.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The Kubernetes version this env runs (`v1.36.3`), as its kube-apiserver says.
    pub fn kubernetes_version(&self) -> &str {
        &self.kubernetes
    }

    /// The minor this env runs (`1.36`).
    pub fn kubernetes_minor(&self) -> &str {
        let v = self.kubernetes.trim_start_matches('v');
        v.rfind('.').map_or(v, |i| &v[..i])
    }

    /// Time from spawning etcd to kube-apiserver's first 200 on `/readyz`.
    pub fn startup_time(&self) -> Duration {
        self.startup
    }

    /// Pid of the running kube-apiserver, if any (e.g. for [`rss_kib`]).
    pub fn apiserver_pid(&self) -> Option<u32> {
        Some(self.apiserver_pid.load(Ordering::SeqCst)).filter(|&p| p != 0)
    }

    /// Pid of etcd.
    pub fn etcd_pid(&self) -> Option<u32> {
        Some(self.etcd_pid.load(Ordering::SeqCst)).filter(|&p| p != 0)
    }

    /// The admin's bearer token (for kubeconfigs pointing elsewhere, e.g. at a probe).
    pub(crate) fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// A name no other test in this process gets: `<prefix>-<n><random>`, DNS-1123, ≤ 63 chars.
    /// All tests of a binary share one apiserver, so every object a test creates needs one.
    pub fn unique_name(&self, prefix: &str) -> String {
        unique_name(prefix)
    }

    /// Like [`TestEnv::unique_name`] but usable as a CRD kind: `<Prefix>X<n><random>`.
    pub fn unique_kind(&self, prefix: &str) -> String {
        let id = unique_suffix();
        // lower(kind) is the plural, a DNS-1035 label: ≤ 63 chars, starting with a letter.
        let prefix: String = prefix
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .skip_while(char::is_ascii_digit)
            .take(40)
            .collect();
        format!("{prefix}X{id}")
    }

    /// Creates a namespace with a unique name (as the admin) and returns its name.
    /// Without kube-controller-manager a deleted namespace stays Terminating, so tests
    /// usually leave it behind; the whole etcd is thrown away with the env.
    pub async fn create_namespace(&self, prefix: &str) -> String {
        let name = self.unique_name(prefix);
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": { "name": name },
        }))
        .expect("static Namespace JSON");
        Api::<Namespace>::all(self.client_admin().await)
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("testenv: creating namespace {name}: {e}"));
        name
    }

    /// Raw Prometheus text of kube-apiserver's `/metrics`, fetched as the admin.
    pub async fn apiserver_metrics(&self) -> anyhow::Result<String> {
        let req = http::Request::get("/metrics")
            .body(Vec::new())
            .context("building the /metrics request")?;
        self.client_admin()
            .await
            .request_text(req)
            .await
            .context("GET /metrics")
    }

    /// The last lines of the etcd and kube-apiserver logs, with their paths.
    pub fn logs_tail(&self) -> String {
        logs_tail_of(&self.dir, 40)
    }
}

impl TestEnv {
    fn stop_all(&self) {
        if let Some(mut c) = lock(&self.apiserver).take() {
            process::terminate(&mut c, STOP_GRACE);
        }
        if let Some(mut c) = lock(&self.etcd).take() {
            process::terminate(&mut c, STOP_GRACE);
        }
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        self.stop_all();
        lock(&LIVE_DIRS).retain(|d| d != &self.dir);
        if let Some(tempdir) = lock(&self.tempdir).take()
            && (std::thread::panicking() || keep_requested())
        {
            eprintln!("testenv: kept {}", keep_dir(tempdir).display());
        }
    }
}

/// `atexit` hook for the shared env: statics are never dropped, so kill and clean up here.
extern "C" fn cleanup_shared_at_exit() {
    let Some(env) = SHARED.get() else { return };
    for pid in [
        env.apiserver_pid.load(Ordering::SeqCst),
        env.etcd_pid.load(Ordering::SeqCst),
    ] {
        if pid != 0 {
            // SAFETY: signalling and reaping our own children; the test threads are done.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
                libc::waitpid(pid as libc::pid_t, std::ptr::null_mut(), 0);
            }
        }
    }
    let Ok(mut guard) = env.tempdir.try_lock() else {
        return;
    };
    if let Some(tempdir) = guard.take() {
        if SAW_PANIC.load(Ordering::SeqCst) || keep_requested() {
            eprintln!(
                "testenv: kept {} (logs, kubeconfigs; etcd data with TESTENV_KEEP=1)",
                keep_dir(tempdir).display()
            );
        } else {
            drop(tempdir);
        }
    }
}

const DIR_PREFIX: &str = "kubectl-vap-testenv-";
/// Pid of the test process that owns a folder, to find folders left by killed runs.
const OWNER_FILE: &str = "owner.pid";
/// Present in folders kept on purpose (failure or `TESTENV_KEEP`): never removed automatically.
const KEPT_FILE: &str = "kept";

/// Removes folders of earlier runs that were killed (Ctrl-C, SIGKILL) before cleaning up:
/// etcd preallocates a 64 MB WAL, so they add up quickly.
fn remove_stale_dirs() {
    for path in orphaned_dirs(DIR_PREFIX) {
        let _ = std::fs::remove_dir_all(&path);
    }
}

/// A temporary folder `<tmp>/<prefix>…` that names this process as its owner, so that
/// [`orphaned_dirs`] in a later run can tell whether a run killed before its clean-up left it.
pub fn owned_temp_dir(prefix: &str) -> anyhow::Result<tempfile::TempDir> {
    let tempdir = tempfile::Builder::new().prefix(prefix).tempdir()?;
    std::fs::write(
        tempdir.path().join(OWNER_FILE),
        std::process::id().to_string(),
    )
    .context("writing the owner pid")?;
    Ok(tempdir)
}

/// The folders `<tmp>/<prefix>…` of [`owned_temp_dir`] whose owner process is gone (runs
/// killed by Ctrl-C or SIGKILL before their clean-up), except those kept on purpose.
pub fn orphaned_dirs(prefix: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let is_ours = entry.file_name().to_string_lossy().starts_with(prefix);
        if !is_ours || path.join(KEPT_FILE).exists() {
            continue;
        }
        let owner = std::fs::read_to_string(path.join(OWNER_FILE))
            .ok()
            .and_then(|p| p.trim().parse::<libc::pid_t>().ok());
        // SAFETY: signal 0 only checks whether the pid exists.
        let dead = owner.is_some_and(|pid| unsafe { libc::kill(pid, 0) } != 0);
        if dead {
            out.push(path);
        }
    }
    out
}

/// Keeps a folder for inspection and marks it so that later runs leave it alone.
/// Call only after etcd has stopped. Without `TESTENV_KEEP`, etcd's data (≈ 120 MB, mostly the
/// preallocated WAL) is dropped: kept folders are never removed automatically, and the logs and
/// kubeconfigs are what a failure needs.
fn keep_dir(tempdir: tempfile::TempDir) -> PathBuf {
    let path = tempdir.keep();
    if !keep_requested() {
        let _ = std::fs::remove_dir_all(path.join("etcd"));
    }
    let _ = std::fs::write(path.join(KEPT_FILE), "");
    path
}

/// Set `TESTENV_KEEP=1` to keep every env's folder.
fn keep_requested() -> bool {
    std::env::var_os("TESTENV_KEEP").is_some_and(|v| !v.is_empty() && v != "0")
}

/// On any panic, print where the logs are and their last lines (CI loses the files).
fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            previous(info);
            SAW_PANIC.store(true, Ordering::SeqCst);
            let dirs = match LIVE_DIRS.try_lock() {
                Ok(d) => d.clone(),
                Err(_) => return,
            };
            for dir in dirs {
                eprintln!("{}", logs_tail_of(&dir, 20));
            }
        }));
    });
}

/// etcd's and kube-apiserver's logs, then every other `*.log` in the folder (controller
/// manager, Gatekeeper), sorted.
fn logs_tail_of(dir: &Path, lines: usize) -> String {
    let mut others: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "log"))
                .filter(|p| !p.ends_with("etcd.log") && !p.ends_with("kube-apiserver.log"))
                .collect()
        })
        .unwrap_or_default();
    others.sort();
    let mut out = String::new();
    for path in [dir.join("etcd.log"), dir.join("kube-apiserver.log")]
        .into_iter()
        .chain(others)
    {
        out.push_str(&log_tail(&path, lines));
    }
    out
}

/// The last `lines` lines of one log file, under a header with its path.
pub(crate) fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    let tail = &all[all.len().saturating_sub(lines)..];
    let mut out = format!(
        "---- testenv: last {} lines of {}\n",
        tail.len(),
        path.display()
    );
    for l in tail {
        out.push_str(l);
        out.push('\n');
    }
    out
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A test that panicked while holding a lock must not cascade into every other test.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn try_wait(child: &Mutex<Option<Child>>) -> Option<std::process::ExitStatus> {
    lock(child)
        .as_mut()
        .and_then(|c| c.try_wait().ok().flatten())
}

/// Runs a future on a new current-thread runtime on a scoped thread, so it works whether or
/// not the caller is inside a runtime (nested `block_on` panics).
pub(crate) fn block_on_fresh_runtime<F: Future + Send>(fut: F) -> F::Output
where
    F::Output: Send,
{
    std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("cannot build a tokio runtime")
                .block_on(fut)
        })
        .join()
        .expect("testenv readiness thread panicked")
    })
}

pub(crate) async fn client_from_kubeconfig(kubeconfig: Kubeconfig) -> anyhow::Result<kube::Client> {
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .context("loading kubeconfig")?;
    kube::Client::try_from(config).context("building kube client")
}

/// A kubeconfig for `server` with one token user, current; `ca` `None` skips TLS verification.
pub fn kubeconfig_yaml(
    server: &str,
    ca: Option<&Path>,
    user: &str,
    token: &str,
) -> anyhow::Result<String> {
    let mut cluster = serde_json::json!({ "server": server });
    match ca {
        Some(ca) => cluster["certificate-authority"] = ca.display().to_string().into(),
        None => cluster["insecure-skip-tls-verify"] = true.into(),
    }
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": "testenv", "cluster": cluster }],
        "users": [{ "name": user, "user": { "token": token } }],
        "contexts": [{
            "name": user,
            "context": { "cluster": "testenv", "user": user, "namespace": "default" },
        }],
        "current-context": user,
    });
    serde_norway::to_string(&doc).context("serializing kubeconfig")
}

/// `GET /health` on etcd's client port, with a bare HTTP/1.0 request (no TLS, no runtime).
fn etcd_health(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body.contains("\"health\":\"true\"")
}

/// A readiness probe of a process the env started: `GET <path>` on `url` as the admin.
pub(crate) struct Probe<'a> {
    pub url: &'a str,
    pub path: &'a str,
    /// Its name, and what an answer means it is (for messages).
    pub process: &'a str,
    pub state: &'a str,
    pub timeout: Duration,
}

impl Probe<'_> {
    /// Polls until the probe answers 2xx; an error once the process has exited (`exited` gives
    /// its status) or after its timeout, with `logs()`. The server's certificate is not
    /// verified (self-signed, or its CA not written yet).
    pub async fn wait(
        &self,
        admin_token: &str,
        mut exited: impl FnMut() -> Option<std::process::ExitStatus>,
        logs: impl Fn() -> String,
    ) -> anyhow::Result<()> {
        let yaml = kubeconfig_yaml(self.url, None, ADMIN_NAME, admin_token)?;
        let client = client_from_kubeconfig(Kubeconfig::from_yaml(&yaml)?).await?;
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(status) = exited() {
                bail!("{} exited early ({status}):\n{}", self.process, logs());
            }
            let req = http::Request::get(self.path)
                .body(Vec::new())
                .with_context(|| format!("building the {} request", self.path))?;
            let last_err = match client.request_text(req).await {
                Ok(_) => return Ok(()),
                Err(e) => e.to_string(),
            };
            if Instant::now() > deadline {
                bail!(
                    "{} not {} after {:?} (last: {last_err}):\n{}",
                    self.process,
                    self.state,
                    self.timeout,
                    logs()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// `N` distinct free loopback ports, none handed out before by this process. A port is free
/// only until someone binds it, and the kernel hands a port just released to the next
/// `bind(0)`: two envs started at once by one test binary got the same etcd port (CI,
/// 2026-12-05). So no port is handed out twice here, and [`TestEnv::try_start`] starts again
/// on other ports when another process took one meanwhile.
pub(crate) fn free_ports<const N: usize>() -> anyhow::Result<[u16; N]> {
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let mut handed_out = lock(&HANDED_OUT);
    // Held until all are chosen, so each bind gets another port.
    let mut held = Vec::new();
    let mut ports = [0; N];
    let mut chosen = 0;
    while chosen < N {
        if held.len() > 1000 {
            bail!("no loopback port left that this process has not used");
        }
        let l = TcpListener::bind("127.0.0.1:0").context("binding a free loopback port")?;
        let port = l.local_addr().context("a bound port's address")?.port();
        if handed_out.insert(port) {
            ports[chosen] = port;
            chosen += 1;
        }
        held.push(l);
    }
    Ok(ports)
}

/// Whether `e` says a port was taken between its choice and its use.
fn port_taken(e: &anyhow::Error) -> bool {
    format!("{e:#}").contains("address already in use")
}

/// The service-account signing key kube-apiserver requires; one PEM key serves both flags.
fn generate_service_account_key(path: &Path) -> anyhow::Result<()> {
    let p = path.display().to_string();
    let attempts: [(&str, Vec<&str>); 2] = [
        ("openssl", vec!["genrsa", "-out", &p, "2048"]),
        // Fallback where openssl is missing: ssh-keygen writes the same PKCS#1 PEM with -m PEM.
        (
            "ssh-keygen",
            vec![
                "-q", "-t", "rsa", "-b", "2048", "-m", "PEM", "-N", "", "-f", &p,
            ],
        ),
    ];
    let mut errors = Vec::new();
    for (program, args) in attempts {
        match Command::new(program).args(&args).output() {
            Ok(out) if out.status.success() && path.exists() => return Ok(()),
            Ok(out) => errors.push(format!(
                "{program}: {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )),
            Err(e) => errors.push(format!("{program}: {e}")),
        }
    }
    bail!(
        "cannot generate the service-account key (need openssl or ssh-keygen): {}",
        errors.join("; ")
    )
}

fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .expect("reading /dev/urandom");
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// Per-process counter plus a random tag, so names also differ across reruns on a kept etcd.
pub(crate) fn unique_suffix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    static TAG: OnceLock<String> = OnceLock::new();
    let tag = TAG.get_or_init(|| random_hex(2));
    format!("{}{}", tag, COUNTER.fetch_add(1, Ordering::SeqCst))
}

fn unique_name(prefix: &str) -> String {
    let suffix = unique_suffix();
    let mut prefix: String = prefix
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    prefix.truncate(62 - suffix.len());
    let prefix = prefix.trim_matches('-');
    if prefix.is_empty() {
        format!("t{suffix}")
    } else {
        format!("{prefix}-{suffix}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Envs started at once by one test binary never share a port (two etcds once did: the
    /// kernel handed a port just released to the next `bind(0)`).
    #[test]
    fn no_port_is_handed_out_twice() {
        let threads: Vec<_> = (0..8)
            .map(|_| {
                std::thread::spawn(|| {
                    (0..100)
                        .flat_map(|_| free_ports::<3>().expect("ports"))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let ports: Vec<u16> = threads
            .into_iter()
            .flat_map(|t| t.join().expect("thread"))
            .collect();
        let distinct: BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len(), "a port was handed out twice");
    }

    #[test]
    fn unique_names_are_dns_labels_and_differ() {
        let a = unique_name("My_Test.Name");
        let b = unique_name("My_Test.Name");
        assert_ne!(a, b);
        for n in [&a, &b, &unique_name(&"x".repeat(100)), &unique_name("--")] {
            assert!(n.len() <= 63, "{n}");
            assert!(
                n.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{n}"
            );
            assert!(!n.starts_with('-') && !n.ends_with('-'), "{n}");
        }
    }

    #[test]
    fn kubeconfig_parses_with_kube() {
        let yaml = kubeconfig_yaml("https://127.0.0.1:1", None, "u", "t").expect("yaml");
        let kc = Kubeconfig::from_yaml(&yaml).expect("kube parses our kubeconfig");
        assert_eq!(kc.current_context.as_deref(), Some("u"));
    }

    #[test]
    fn missing_binaries_give_instructions() {
        let err = Binaries::discover_with(|_| None).expect_err("nothing configured");
        assert!(format!("{err}").contains("scripts/test"), "{err}");
        let err =
            Binaries::discover_with(|v| (v == "KUBEBUILDER_ASSETS").then(|| "/nonexistent".into()))
                .expect_err("empty assets folder");
        assert!(
            format!("{err}").contains("/nonexistent/kube-apiserver"),
            "{err}"
        );
    }

    #[test]
    fn missing_controller_manager_says_how_to_build_it() {
        // setup-envtest's folder: the three binaries, no kube-controller-manager.
        let err = Binaries::kube_controller_manager_with(|v| {
            (v == "KUBEBUILDER_ASSETS").then(|| "/nonexistent".into())
        })
        .expect_err("no kube-controller-manager there");
        let msg = format!("{err}");
        assert!(
            msg.contains("/nonexistent/kube-controller-manager"),
            "{msg}"
        );
        assert!(msg.contains("tests/kubeenv/build.sh"), "{msg}");
        assert!(msg.contains("TEST_ASSET_KUBE_CONTROLLER_MANAGER"), "{msg}");
    }
}
