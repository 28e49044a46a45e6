//! The `kubectl-vap` binary as a child process.

use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::Duration;
use testenv::http_get;

/// The binary cargo built for this test or benchmark.
pub const BIN: &str = env!("CARGO_BIN_EXE_kubectl-vap");

/// The binary with every default of its command line (`--policy-shape auto` among them): what a
/// user runs, so the default's own output is what most tests see. A test about another shape
/// says so ([`kubectl_vap_narrowed`], `--policy-shape`).
pub fn kubectl_vap() -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_remove(SHAPE_ENV);
    cmd
}

/// The binary with the command line's defaults (the same as [`kubectl_vap`]; the name says it
/// where a test is about the defaults).
pub fn kubectl_vap_defaults() -> Command {
    kubectl_vap()
}

/// The binary with `--policy-shape narrowed` as its default (one VAP per template, the
/// constraints as params), for the tests about that shape.
pub fn kubectl_vap_narrowed() -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env(SHAPE_ENV, "narrowed");
    cmd
}

/// What `--policy-shape` defaults to when set (`cli::args::GenerationArgs`).
pub const SHAPE_ENV: &str = "KUBECTL_VAP_POLICY_SHAPE";

/// `cmd`'s output (it must start).
pub fn output(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"))
}

/// `cmd`'s output with `stdin` on its standard input.
pub fn output_with_stdin(cmd: &mut Command, stdin: &[u8]) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}"));
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(stdin)
        .unwrap_or_else(|e| panic!("writing the standard input of {cmd:?}: {e}"));
    child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("waiting for {cmd:?}: {e}"))
}

/// A kubeconfig file in `dir` for `server` (a token user, TLS unverified): for a binary that
/// must reach a server that is not there, or fail before it tries.
pub fn kubeconfig(dir: &Path, server: &str) -> PathBuf {
    let path = dir.join("kubeconfig");
    let yaml = testenv::kubeconfig_yaml(server, None, "u", "t").expect("kubeconfig");
    std::fs::write(&path, yaml).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    path
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Standard output as JSON (fails the test with what it was otherwise).
pub fn stdout_json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "JSON on stdout ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            stderr(out)
        )
    })
}

/// A `kubectl-vap run` serving `--metrics-addr` on a free loopback port; killed on drop, and
/// with this process however it ends (a drop does not run on Ctrl-C or SIGKILL).
pub struct Served {
    child: Option<Child>,
    port: u16,
}

impl Served {
    /// Spawns `cmd` (a `kubectl-vap run …`, possibly behind a wrapper) with
    /// `--metrics-addr=127.0.0.1:<a free port>` added.
    pub fn spawn(mut cmd: Command) -> Served {
        let port = testenv::free_port();
        cmd.arg(format!("--metrics-addr=127.0.0.1:{port}"));
        let what = format!("{cmd:?}");
        let child =
            testenv::spawn_tied_to_process(cmd).unwrap_or_else(|e| panic!("spawning {what}: {e}"));
        Served {
            child: Some(child),
            port,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// The loopback port of its `--metrics-addr`.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `GET <path>` on its metrics port: status line, headers and body (empty when nothing
    /// answers).
    pub fn get(&self, path: &str) -> String {
        http_get(self.port, path)
    }

    pub fn metrics(&self) -> String {
        self.get("/metrics")
    }

    pub fn answers(&self, path: &str, status: u16) -> bool {
        self.get(path).starts_with(&format!("HTTP/1.1 {status}"))
    }

    /// Waits until `/readyz` answers 200, polling every `every`; fails the test after `timeout`.
    pub async fn wait_ready(&self, timeout: Duration, every: Duration) {
        super::poll::within(timeout, every, || async {
            if self.answers("/readyz", 200) {
                Ok(())
            } else {
                Err(())
            }
        })
        .await
        .unwrap_or_else(|()| panic!("kubectl-vap's /readyz is not 200 within {timeout:?}"));
    }

    pub fn signal(&self, signal: i32) {
        testenv::signal(self.pid(), signal);
    }

    /// Its exit status once it exits by itself, looked at every 100 ms; `None` if it still
    /// runs after `timeout`.
    pub async fn exited_within(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut().expect("running");
        super::poll::within(timeout, Duration::from_millis(100), || {
            let status = child.try_wait().expect("the child's status");
            async move { status.ok_or(()) }
        })
        .await
        .ok()
    }

    /// SIGTERM (a held Lease is released), then its exit status.
    pub fn terminate(mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        testenv::signal(child.id(), libc::SIGTERM);
        child.wait().expect("wait for kubectl-vap")
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `run --once` with `extra`, as the admin of `env` and every default of the command line:
/// it must converge (exit 0).
pub fn converge(env: &testenv::TestEnv, extra: &[&str]) {
    let mut args = vec!["run", "--once"];
    args.extend_from_slice(extra);
    let out = as_admin(kubectl_vap_defaults(), env, &args);
    assert!(
        out.status.success(),
        "run --once {extra:?} did not converge: {}",
        stderr(&out)
    );
}

/// `cmd` (the binary) run as the admin of `env` with `args`; what it said on stderr is printed
/// for the test's log.
pub fn as_admin(mut cmd: Command, env: &testenv::TestEnv, args: &[&str]) -> Output {
    let out = output(
        cmd.arg("--kubeconfig")
            .arg(env.kubeconfig_admin())
            .args(args),
    );
    let shown: Vec<String> = args.iter().map(|a| a.chars().take(60).collect()).collect();
    eprintln!(
        "kubectl-vap {shown:?} → {:?}\nstderr: {}",
        out.status.code(),
        stderr(&out)
    );
    out
}
