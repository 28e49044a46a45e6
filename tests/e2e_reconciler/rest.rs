//! A copy left running: the real binary's `run` at rest uses no CPU (issue 27), and a task of
//! the copy that dies is noticed by its supervisor: `/healthz` and `/readyz` fail, `run` exits
//! non-zero, in the foreground and in a pod.

use crate::env::{Env, LEASE_NS, TIMEOUT, eventually, leads, opts, template};
use crate::support::cli::{self, Served};
use crate::support::objects::{binding_name, crd_name};
use crate::support::rbac::{self, Grant};
use crate::support::reconciler::{self, Start, Tuning};
use futures::StreamExt;
use std::process::{Command, Stdio};
use std::time::Duration;

/// How long the CPU of a copy at rest is measured (`KUBECTL_VAP_AT_REST_SECS` for the
/// benchmark in docs/benchmarks.md, which measures 20 s).
fn window() -> Duration {
    let secs = std::env::var("KUBECTL_VAP_AT_REST_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    Duration::from_secs(secs)
}

/// The share of one core process `pid` used over [`window`], from its CPU ticks.
async fn cpu_share(pid: u32) -> f64 {
    let before = testenv::cpu_secs(pid);
    let w = window();
    tokio::time::sleep(w).await;
    (testenv::cpu_secs(pid) - before) / w.as_secs_f64()
}

/// At most this share of a core at rest. The issue asks for 1% over 20 s; over the 10 s of
/// the test, a tick is 0.1%, and the copy renews its Lease (TLS, JSON) every ~2 s, so 3%
/// leaves room for a slow shared machine while a busy loop (99% of a core measured with 0
/// constraints, 63% with 2,000) cannot pass.
const AT_REST: f64 = 0.03;

/// `kubectl-vap run` on Lease `lease` as the admin (`KUBECTL_VAP_AT_REST_BIN`: another build
/// of it, for the before/after of docs/benchmarks.md).
fn run_cmd(e: &Env, lease: &str) -> Command {
    let bin = std::env::var("KUBECTL_VAP_AT_REST_BIN").unwrap_or_else(|_| cli::BIN.into());
    let mut cmd = Command::new(bin);
    // One VAP per template, as the measurement was first made (and as 024c5dc, which has no
    // --policy-shape, writes them): the environment, which an older binary ignores.
    cmd.env(cli::SHAPE_ENV, "narrowed")
        .args(["run", "--binding-wait=0s"])
        .args(["--lease-namespace", LEASE_NS, "--lease-name", lease])
        .arg("--kubeconfig")
        .arg(e.env.kubeconfig_admin())
        .stderr(Stdio::null());
    cmd
}

/// Waits until `run` has written everything: every kind's VAP and `per_kind` bindings each,
/// and its queue is empty; then a moment for the watch events of its last writes.
async fn until_converged(e: &Env, run: &Served, kinds: &[String], per_kind: usize) {
    eventually("every VAP and binding written, the queue empty", || async {
        let bindings = e
            .vapbs()
            .list(&Default::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        let written = kinds.iter().all(|k| {
            let prefix = binding_name(k, "");
            bindings
                .iter()
                .filter(|b| {
                    b.metadata
                        .name
                        .as_deref()
                        .unwrap_or("")
                        .starts_with(&prefix)
                })
                .count()
                == per_kind
        });
        written && run.metrics().contains("kubectl_vap_queue_depth 0\n")
    })
    .await;
    for k in kinds {
        e.until_vap(
            "the VAP is written",
            &crate::support::objects::policy_name(k),
            true,
        )
        .await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
}

/// A converged `run` (the real binary) with 20 templates, then with 2,000 constraints, uses
/// at most [`AT_REST`] of a core while nothing changes. Issue 27: a `select!` over a channel
/// whose sender was dropped spun at 99% of a core.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_run_at_rest_uses_no_cpu() {
    let e = Env::new().await;
    let kinds: Vec<String> = (0..20).map(|_| e.env.unique_kind("Rest")).collect();
    for k in &kinds {
        e.put_template(&template(k, Some(true))).await;
    }
    let lease = e.env.unique_name("rest");
    let run = Served::spawn(run_cmd(&e, &lease));
    run.wait_ready(TIMEOUT, Duration::from_millis(200)).await;
    until_converged(&e, &run, &kinds, 0).await;
    let idle = cpu_share(run.pid()).await;
    eprintln!(
        "at rest, 20 templates, 0 constraints: {:.2}% of a core over {:?}",
        idle * 100.0,
        window()
    );

    // 100 constraints of each kind.
    let names: Vec<(String, String)> = kinds
        .iter()
        .flat_map(|k| (0..100).map(move |i| (k.clone(), format!("c{i}"))))
        .collect();
    futures::stream::iter(&names)
        .for_each_concurrent(16, |(k, n)| e.constrain(k, n))
        .await;
    until_converged(&e, &run, &kinds, 100).await;
    let loaded = cpu_share(run.pid()).await;
    eprintln!(
        "at rest, 20 templates, 2,000 constraints: {:.2}% of a core over {:?}",
        loaded * 100.0,
        window()
    );

    // Cleaned up by the copy itself while it still runs.
    let kind_refs: Vec<&str> = kinds.iter().map(String::as_str).collect();
    e.cleanup(&kind_refs).await;
    for k in &kinds {
        e.until_vap(
            "the VAP is deleted",
            &crate::support::objects::policy_name(k),
            false,
        )
        .await;
        e.until_vapb("the bindings are deleted", &binding_name(k, "c99"), false)
            .await;
    }
    assert!(run.terminate().success());
    assert!(
        idle <= AT_REST && loaded <= AT_REST,
        "a copy at rest used {:.1}% of a core with 0 constraints and {:.1}% with 2,000 (at most {:.0}%)",
        idle * 100.0,
        loaded * 100.0,
        AT_REST * 100.0
    );
}

/// A task of a copy that dies is noticed by its supervisor, with its name and cause:
/// `/healthz` and `/readyz` answer 503 saying so, the copy stops writing and releases its
/// Lease at once (no lease duration to wait out: another copy may lead), and stopping it
/// reports the failure. The failure is injected by the supervisor itself
/// (`Tuning::fail_task`): the watch a new constraint CRD starts ends as a panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_a_dead_task_fails_health_and_releases_the_lease() {
    let e = Env::new().await;
    let kind = e.env.unique_kind("Dies");
    let task = format!("watch {}", crd_name(&kind));
    let lease = e.env.unique_name("dies");
    let port = testenv::free_port();
    let tuning = Tuning {
        fail_task: Some(task.clone()),
        ..Tuning::default()
    };
    let start = Start::on(LEASE_NS, &lease, opts(0))
        .workers(2)
        .tuning(tuning)
        .metrics_port(port);
    let r = reconciler::start(e.env.client_admin().await, start).await;
    leads(&r).await;
    let answers = |path: &str, status: u16| {
        testenv::http_get(port, path).starts_with(&format!("HTTP/1.1 {status}"))
    };
    eventually("/healthz and /readyz answer 200", || async {
        answers("/healthz", 200) && answers("/readyz", 200)
    })
    .await;

    // The kind's CRD starts its constraint watch: the task that fails.
    e.put_template(&template(&kind, Some(true))).await;
    let failed = r.failed(TIMEOUT).await;
    assert_eq!(
        failed,
        format!("task {task} panicked: failure injected for a test")
    );
    for path in ["/healthz", "/readyz"] {
        let answer = testenv::http_get(port, path);
        assert!(
            answer.starts_with("HTTP/1.1 503") && answer.contains(&failed),
            "{path}: {answer}"
        );
    }
    assert!(
        !r.writes_enabled(),
        "a copy with a dead task writes nothing"
    );
    eventually("the Lease is released", || async {
        reconciler::lease_holder(&e.client, LEASE_NS, &lease).await == Ok(None)
    })
    .await;
    assert_eq!(r.stop_result().await, Err(failed));
    e.sweep(&[&kind], "dies-clean").await;
}

/// `run` (the real binary) whose task dies exits 2 (cannot tell), saying which task and why, having
/// released its Lease: in the foreground, and in a pod's shoes (`--in-cluster`, JSON logs;
/// a kubelet restarts it). The failure is injected through the hidden test hook
/// `KUBECTL_VAP_TEST_FAIL_TASK` (the supervisor's `Tuning::fail_task`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_run_exits_non_zero_when_a_task_dies() {
    let e = Env::new().await;
    let lease = e.env.unique_name("dies-run");
    let role = e.env.unique_name("vap-dies");
    let grant = Grant::install(&role, testenv::USER_NAME, LEASE_NS, &lease);
    rbac::grant(&e.client, &grant).await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let mut kinds = Vec::new();
    for in_cluster in [false, true] {
        let kind = e.env.unique_kind("DiesRun");
        let task = format!("watch {}", crd_name(&kind));
        let mut cmd = if in_cluster {
            let mut cmd = e
                .env
                .in_pod_command(std::path::Path::new(cli::BIN), LEASE_NS)
                .expect("in-pod command");
            cmd.args(["run", "--in-cluster", "--binding-wait=0s"])
                .args(["--lease-namespace", LEASE_NS, "--lease-name", &lease]);
            cmd
        } else {
            run_cmd(&e, &lease)
        };
        let log = dir.path().join(format!("run-{in_cluster}.log"));
        let file = std::fs::File::create(&log).expect("the log file");
        cmd.env("KUBECTL_VAP_TEST_FAIL_TASK", &task).stderr(file);
        let mut run = Served::spawn(cmd);
        run.wait_ready(TIMEOUT, Duration::from_millis(200)).await;
        eventually("it holds the Lease", || async {
            matches!(
                reconciler::lease_holder(&e.client, LEASE_NS, &lease).await,
                Ok(Some(_))
            )
        })
        .await;
        e.put_template(&template(&kind, Some(true))).await;
        kinds.push(kind);
        let status = run.exited_within(TIMEOUT).await;
        let stderr = std::fs::read_to_string(&log).expect("the log");
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(2),
            "in cluster: {in_cluster}: {stderr}"
        );
        let said = format!("task {task} panicked: failure injected for a test");
        assert!(stderr.contains(&said), "in cluster: {in_cluster}: {stderr}");
        if in_cluster {
            let errors: Vec<&str> = stderr
                .lines()
                .filter(|l| l.contains(&said) && l.contains("\"level\":\"ERROR\""))
                .collect();
            assert!(!errors.is_empty(), "a JSON error line: {stderr}");
        }
        assert_eq!(
            reconciler::lease_holder(&e.client, LEASE_NS, &lease).await,
            Ok(None),
            "released before it exited: {stderr}"
        );
    }
    testenv::rbac::revoke(&e.client, &role, LEASE_NS).await;
    let kind_refs: Vec<&str> = kinds.iter().map(String::as_str).collect();
    e.sweep(&kind_refs, "dies-run-clean").await;
}

/// `prlimit --nofile=SOFT:HARD` on process `pid`, or panics saying why.
fn set_nofile(pid: u32, soft: u64, hard: u64) {
    let out = cli::output(
        Command::new("prlimit")
            .arg(format!("--pid={pid}"))
            .arg(format!("--nofile={soft}:{hard}")),
    );
    assert!(out.status.success(), "prlimit: {}", cli::stderr(&out));
}

/// The soft and hard `RLIMIT_NOFILE` of process `pid`, from `/proc/PID/limits`.
fn nofile(pid: u32) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("its limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("a Max open files line");
    let numbers: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (numbers[0], numbers[1])
}

/// `kubectl-vap run --metrics-addr …` on Lease `lease`, its stderr in `log`, `/readyz` 200.
async fn serving(e: &Env, lease: &str, log: &std::path::Path) -> Served {
    let mut cmd = e.run(lease);
    cmd.stderr(std::fs::File::create(log).expect("the log file"));
    let run = Served::spawn(cmd);
    run.wait_ready(TIMEOUT, Duration::from_millis(200)).await;
    run
}

/// Doors that stay open (issue 42, item 8): the `/healthz`, `/readyz`, `/metrics` server of
/// the real binary closes a connection that sends nothing within its header timeout (5 s).
/// Before: an idle connection stayed open for the life of the process (each one a file
/// descriptor a client could hold).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_the_probe_server_closes_idle_connections() {
    use std::io::Read;
    let e = Env::new().await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let log = dir.path().join("run.log");
    let run = serving(&e, &e.env.unique_name("idle"), &log).await;
    let mut idle = std::net::TcpStream::connect(("127.0.0.1", run.port())).expect("connect");
    idle.set_read_timeout(Some(Duration::from_secs(15)))
        .expect("a read timeout");
    let opened = std::time::Instant::now();
    let mut buf = [0u8; 16];
    let read = idle.read(&mut buf);
    let closed = matches!(read, Ok(0))
        || read
            .as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset);
    assert!(
        closed && opened.elapsed() < Duration::from_secs(10),
        "an idle connection is closed by the server within 10 s: {read:?} after {:?}",
        opened.elapsed()
    );
    assert!(run.answers("/healthz", 200));
    let status = run.terminate();
    assert!(status.success(), "{status:?}");
}

/// Doors that stay open (issue 42, item 8): the real binary's probe server survives `accept`
/// failing for want of file descriptors. The copy runs under a soft `RLIMIT_NOFILE` a few above
/// what it has open (`prlimit --pid`); 64 connections held open exhaust it, so `accept`
/// fails ("Too many open files"); once they are closed and the limit is back, `/healthz`
/// answers 200 again, and the log says the run of failures once and its end once. Before:
/// the first failed `accept` ended the server for good (`/healthz` refused) while the copy
/// ran on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_the_probe_server_survives_running_out_of_file_descriptors() {
    let e = Env::new().await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let log = dir.path().join("run.log");
    let run = serving(&e, &e.env.unique_name("fds"), &log).await;
    let said = || std::fs::read_to_string(&log).expect("the log");
    let pid = run.pid();
    let (soft, hard) = nofile(pid);
    let open = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("its fds")
        .count() as u64;
    // The soft limit only: raising a hard limit back needs CAP_SYS_RESOURCE.
    set_nofile(pid, open + 4, hard);
    let held: Vec<std::net::TcpStream> = (0..64)
        .filter_map(|_| std::net::TcpStream::connect(("127.0.0.1", run.port())).ok())
        .collect();
    assert!(!held.is_empty(), "the kernel queues connections");
    eventually("accept fails: too many open files", || async {
        said().contains("Too many open files")
    })
    .await;
    // Held a moment longer: a server that gives up has done so by now.
    tokio::time::sleep(Duration::from_secs(2)).await;
    drop(held);
    set_nofile(pid, soft, hard);
    eventually("/healthz answers 200 again", || async {
        run.answers("/healthz", 200)
    })
    .await;
    assert!(run.answers("/readyz", 200), "{}", said());
    let text = said();
    let failing = text
        .lines()
        .filter(|l| l.contains("cannot accept a connection"))
        .count();
    let again = text
        .lines()
        .filter(|l| l.contains("accepts connections again"))
        .count();
    assert!(failing == 1 && again == 1, "said once each: {text}");
    let status = run.terminate();
    assert!(status.success(), "{status:?}: {}", said());
}
