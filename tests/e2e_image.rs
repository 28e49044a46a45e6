//! Tier 3: the container image, run by a real OCI runtime (`runc`) against the real API server,
//! the way a kubelet would run the Deployment of `install --print`.
//!
//! The image is `$KUBECTL_VAP_IMAGE` (an OCI layout; `scripts/test` builds it with
//! `scripts/image`) or, when unset, built here by `scripts/image`. Needs root, `runc`, `umoci`
//! and containers-common's seccomp profile (scripts/test installs them from Debian's packages).

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

mod support;

use kubectl_vap::cli::install::IMAGE_UID;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::cluster;
use support::image::{
    ImageFacts, Layout, ROOT, assert_matches_install, dockerfile, script_config, strings,
};
use support::objects::binding_name;
use support::poll::eventually;
use testenv::{TestEnv, gatekeeper, http_get, stdout_of as run};

const TIMEOUT: Duration = Duration::from_secs(90);
/// Where a kubelet mounts the service account (kube's in-cluster config reads it there).
const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The Docker-format default profile of containers-common: what `RuntimeDefault` means to
/// CRI-O and, nearly syscall for syscall, to containerd.
const SECCOMP_PROFILE: &str = "/usr/share/containers/seccomp.json";
const HOW_TO: &str = "run scripts/test as root (it installs runc, umoci and skopeo from Debian's \
     packages), or `apt-get install runc umoci skopeo` and run this test as root";

fn require_container_tools() {
    let mut missing = Vec::new();
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(String::from))
        });
    if uid.as_deref() != Some("0") {
        missing.push("root (runc runs the containers as root, like a kubelet's runtime)".into());
    }
    for tool in ["runc", "umoci"] {
        if !Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            missing.push(format!("`{tool}` on PATH"));
        }
    }
    if !Path::new(SECCOMP_PROFILE).exists() {
        missing.push(format!(
            "{SECCOMP_PROFILE} (Debian: golang-github-containers-common)"
        ));
    }
    assert!(
        missing.is_empty(),
        "the image test needs {}: {HOW_TO}",
        missing.join(", ")
    );
}

/// The OCI layout under test: `$KUBECTL_VAP_IMAGE`, or built now by `scripts/image`.
fn image_layout() -> PathBuf {
    if let Some(dir) = std::env::var_os("KUBECTL_VAP_IMAGE") {
        return PathBuf::from(dir);
    }
    eprintln!("KUBECTL_VAP_IMAGE is not set: building the image with scripts/image (minutes)");
    let out = Command::new("bash")
        .arg(Path::new(ROOT).join("scripts/image"))
        .stderr(Stdio::inherit())
        .output()
        .expect("running scripts/image");
    assert!(out.status.success(), "scripts/image failed: {HOW_TO}");
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    Path::new(ROOT).join(dir)
}

/// True when the ELF file asks for a program interpreter (dynamic linking).
fn has_interpreter(elf: &[u8]) -> bool {
    assert!(elf.starts_with(b"\x7fELF") && elf[4] == 2, "a 64-bit ELF");
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(elf[0x20..0x28].try_into().expect("8 bytes")) as usize;
    let (phentsize, phnum) = (u16_at(0x36), u16_at(0x38));
    (0..phnum).any(|i| {
        let p = phoff + i * phentsize;
        u32::from_le_bytes(elf[p..p + 4].try_into().expect("4 bytes")) == 3 // PT_INTERP
    })
}

/// containers-common's Docker-format profile as an OCI runtime-spec `linux.seccomp` for this
/// machine and a process without capabilities (the Deployment drops them all).
fn runtime_default_seccomp() -> Value {
    let text = std::fs::read_to_string(SECCOMP_PROFILE).expect("seccomp profile");
    let p: Value = serde_json::from_str(&text).expect("seccomp JSON");
    let (go_arch, scmp_arch) = match std::env::consts::ARCH {
        "x86_64" => ("amd64", "SCMP_ARCH_X86_64"),
        "aarch64" => ("arm64", "SCMP_ARCH_AARCH64"),
        other => panic!("no seccomp mapping for {other}"),
    };
    let mut arches = vec![json!(scmp_arch)];
    for m in p["archMap"].as_array().into_iter().flatten() {
        if m["architecture"] == scmp_arch {
            arches.extend(
                m["subArchitectures"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .cloned(),
            );
        }
    }
    let listed = |v: &Value, key: &str| v[key].as_array().is_some_and(|a| !a.is_empty());
    let has_arch = |v: &Value| {
        v["arches"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == go_arch))
    };
    let syscalls: Vec<Value> = p["syscalls"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| {
            // Rules for holders of some capability do not apply; neither do other arches'.
            !listed(&s["includes"], "caps")
                && (!listed(&s["includes"], "arches") || has_arch(&s["includes"]))
                && !has_arch(&s["excludes"])
        })
        .map(|s| {
            let mut rule = json!({ "names": s["names"], "action": s["action"] });
            if let Some(args) = s["args"].as_array().filter(|a| !a.is_empty()) {
                rule["args"] = json!(args);
            }
            if let Some(e) = s.get("errnoRet") {
                rule["errnoRet"] = e.clone();
            }
            rule
        })
        .collect();
    let mut spec = json!({
        "defaultAction": p["defaultAction"],
        "architectures": arches,
        "syscalls": syscalls,
    });
    if let Some(e) = p.get("defaultErrnoRet") {
        spec["defaultErrnoRet"] = e.clone();
    }
    spec
}

const WORK_PREFIX: &str = "kubectl-vap-image-";

/// Kills the containers of earlier runs that were killed themselves (Ctrl-C, SIGKILL) before
/// their clean-up, and removes their folders: a container outlives its runc.
fn remove_stale_containers() {
    for dir in testenv::orphaned_dirs(WORK_PREFIX) {
        let state = dir.join("runc");
        let list = Command::new("runc")
            .arg("--root")
            .arg(&state)
            .args(["list", "-q"])
            .output();
        for id in list
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
            .lines()
        {
            eprintln!("removing container {id} of a killed run");
            let _ = Command::new("runc")
                .arg("--root")
                .arg(&state)
                .args(["delete", "-f", id])
                .output();
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// One container of the Deployment, run by runc in the foreground (its stdio is the log).
struct Container {
    id: String,
    /// The pod's name and hostname.
    name: &'static str,
    state: PathBuf,
    child: Option<Child>,
    log: PathBuf,
    port: u16,
}

impl Container {
    fn runc(&self) -> Command {
        let mut c = Command::new("runc");
        c.arg("--root").arg(&self.state);
        c
    }

    fn pid(&self) -> u32 {
        let state: Value = serde_json::from_str(&run(self.runc().args(["state", &self.id])))
            .expect("runc state JSON");
        state["pid"].as_u64().expect("pid") as u32
    }

    fn proc_status(&self, field: &str) -> String {
        let text = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("the container's /proc status");
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .unwrap_or_default()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn metrics(&self) -> String {
        http_get(self.port, "/metrics")
    }

    /// The gauge's sample line (its HELP text contains "kubectl_vap_leader 1" too).
    fn leads(&self) -> bool {
        self.metrics().lines().any(|l| l == "kubectl_vap_leader 1")
    }

    fn terminate(&mut self) -> std::process::ExitStatus {
        run(self.runc().args(["kill", &self.id, "TERM"]));
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            // The child stays in `self` until it exits, so a timeout still kills it on drop.
            let child = self.child.as_mut().expect("running");
            if let Some(status) = child.try_wait().expect("wait runc") {
                self.child = None;
                let _ = self.runc().args(["delete", "-f", &self.id]).output();
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not stop within 20 s of SIGTERM:\n{}",
                self.id,
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = self.runc().args(["kill", &self.id, "KILL"]).output();
            let _ = child.wait();
            let _ = self.runc().args(["delete", "-f", &self.id]).output();
            eprintln!("---- logs of container {}:\n{}", self.id, self.logs());
        }
    }
}

/// The image `scripts/image` built, run as the Deployment of `install --print` runs it: the
/// manifests pass the API server's validation and match the image; two containers of it, with
/// the service account mounted where a kubelet mounts it, serve their probes, elect one
/// leader that converges a template and constraint, and release the Lease on SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_the_image_runs_the_install_manifests() {
    require_container_tools();
    let layout = Layout::open(&image_layout());
    let facts = ImageFacts::from_config(&layout.config);
    remove_stale_containers();
    let work = testenv::owned_temp_dir(WORK_PREFIX).expect("temp dir");

    // The cluster: Gatekeeper's CRDs, a template that generates and a constraint; the CRD is
    // established first, so the default 30 s binding wait runs while the image is checked and
    // the containers start.
    let env = TestEnv::shared();
    let client = env.client_admin().await;
    let ns = env.create_namespace("vap-image").await;
    gatekeeper::install_gatekeeper_crds(&client)
        .await
        .expect("gatekeeper CRDs");
    // Gatekeeper's namespace, where the manifests grant the pod statuses: it exists wherever
    // Gatekeeper runs.
    testenv::ensure_namespace(&client, "gatekeeper-system")
        .await
        .expect("Gatekeeper's namespace");
    let kind = env.unique_kind("Image");
    let template = gatekeeper::template(
        &kind,
        "v1",
        json!({}),
        gatekeeper::cel_targets(json!({ "generateVAP": true, "failurePolicy": "Ignore",
                                        "validations": [{ "expression": "true" }] })),
    );
    cluster::create_template(&client, &template).await;
    gatekeeper::create_constraint_crd(&client, &template)
        .await
        .expect("constraint CRD");
    let inert =
        json!({ "match": { "labelSelector": { "matchLabels": { "e2e-image": "inert" } } } });
    cluster::create_constraint(&client, &gatekeeper::constraint(&kind, "c", inert)).await;

    // The image is what the recipe and the Dockerfile say, and what install --print expects.
    assert_matches_install(&facts, "the built image");
    let script = ImageFacts::from_config(&script_config());
    let docker = dockerfile();
    for (what, other) in [
        ("scripts/image", &script),
        ("the Dockerfile", &docker.facts),
    ] {
        assert_eq!(
            (&facts.user, &facts.entrypoint, &facts.cmd, &facts.ports),
            (&other.user, &other.entrypoint, &other.cmd, &other.ports),
            "the built image vs {what}"
        );
        assert_eq!(
            facts.fixed_labels(),
            other.fixed_labels(),
            "labels vs {what}"
        );
    }
    let layers = layout.manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 1, "one layer");
    let layer = layout.blob_path(layers[0]["digest"].as_str().expect("digest"));
    let listing = run(Command::new("tar").arg("-tvzf").arg(&layer));
    let entries: Vec<&str> = listing
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .collect();
    assert_eq!(
        entries,
        ["LICENSE", "kubectl-vap"],
        "no shell, nothing else"
    );
    // The entrypoint is the binary; nothing sits where the kubelet mounts the service account.
    assert_eq!(facts.entrypoint[0], "/kubectl-vap");
    assert!(!entries.iter().any(|e| e.starts_with("var/")));
    assert!(
        listing.lines().all(|l| l.contains(" 0/0 ")),
        "root-owned:\n{listing}"
    );

    // umoci turns the image into a runtime bundle, as a container runtime would.
    let bundle0 = work.path().join("unpacked");
    run(Command::new("umoci")
        .arg("unpack")
        .arg("--image")
        .arg(format!("{}:{}", layout.dir.display(), layout.reference))
        .arg(&bundle0));
    let rootfs = bundle0.join("rootfs");
    let binary = std::fs::read(rootfs.join("kubectl-vap")).expect("the binary in the image");
    assert!(!has_interpreter(&binary), "statically linked");
    let base: Value = serde_json::from_slice(
        &std::fs::read(bundle0.join("config.json")).expect("umoci's config.json"),
    )
    .expect("config.json");
    assert_eq!(
        base["process"]["user"]["uid"], IMAGE_UID,
        "the image's user"
    );
    assert_eq!(base["process"]["user"]["gid"], IMAGE_UID);
    assert_eq!(
        strings(&base["process"]["args"]),
        [&facts.entrypoint[..], &facts.cmd[..]].concat()
    );

    // Reproducible: the same binary and inputs (time and revision pinned to the image's, so a
    // tree edited since the build does not matter) assemble the same image, digest for digest.
    let revision = &facts.labels["org.opencontainers.image.revision"];
    let created = layout.config["created"].as_str().expect("created");
    let epoch = chrono::DateTime::parse_from_rfc3339(created)
        .expect("RFC 3339 created")
        .timestamp();
    let again = work.path().join("again");
    run(Command::new("bash")
        .arg(Path::new(ROOT).join("scripts/image"))
        .arg("--binary")
        .arg(rootfs.join("kubectl-vap"))
        .arg("--out")
        .arg(&again)
        .env("SOURCE_DATE_EPOCH", epoch.to_string())
        .env("IMAGE_REVISION", revision));
    let digest = std::fs::read_to_string(again.join("digest")).expect("digest");
    assert_eq!(
        digest.trim(),
        layout.manifest_digest,
        "scripts/image is not reproducible (or the image was built by another scripts/image)"
    );

    // install --print for this image: validated by the API server, then applied for real.
    let image = format!("ghcr.io/kubectl-vap/kubectl-vap:{}", layout.reference);
    let manifests = run(Command::new(env!("CARGO_BIN_EXE_kubectl-vap")).args([
        "install",
        "--print",
        "--metrics-service",
        "--namespace",
        &ns,
        "--image",
        &image,
    ]));
    let file = work.path().join("install.yaml");
    std::fs::write(&file, &manifests).expect("write manifests");
    let kubectl = |args: &[&str]| {
        run(Command::new(&env.binaries().kubectl)
            .arg("--kubeconfig")
            .arg(env.kubeconfig_admin())
            .args(args))
    };
    let dry = kubectl(&["apply", "--dry-run=server", "-f", &file.to_string_lossy()]);
    for kind in [
        "serviceaccount",
        "clusterrole.rbac.authorization.k8s.io",
        "clusterrolebinding.rbac.authorization.k8s.io",
        "role.rbac.authorization.k8s.io",
        "rolebinding.rbac.authorization.k8s.io",
        "deployment.apps",
        "poddisruptionbudget.policy",
        "service",
        // The guard (kubectl-vap-guard).
        "validatingadmissionpolicy.admissionregistration.k8s.io",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io",
    ] {
        assert!(
            dry.contains(&format!("{kind}/kubectl-vap")) && dry.contains("(server dry run)"),
            "{kind} in the server-side dry run:\n{dry}"
        );
    }
    kubectl(&["apply", "-f", &file.to_string_lossy()]);
    let deployment: Value = serde_json::from_str(&kubectl(&[
        "get",
        "deployment",
        "kubectl-vap",
        "-n",
        &ns,
        "-o",
        "json",
    ]))
    .expect("deployment JSON");
    let pod = &deployment["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(c["image"], image.as_str());
    // The image's binary, `run --in-cluster` stated in the args.
    assert_eq!(strings(&c["command"]), [facts.entrypoint[0].clone()]);
    assert_eq!(strings(&c["args"])[..2], ["run", "--in-cluster"]);
    let sc = &c["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(pod["securityContext"]["runAsUser"], IMAGE_UID);
    assert_ne!(
        pod["automountServiceAccountToken"], false,
        "the token is needed"
    );
    let service_account = pod["serviceAccountName"]
        .as_str()
        .expect("serviceAccountName");

    // What the kubelet mounts: a token of the Deployment's ServiceAccount (TokenRequest), the
    // cluster CA and the namespace, read-only.
    let sa = work.path().join("serviceaccount");
    std::fs::create_dir(&sa).expect("sa dir");
    let token = kubectl(&["create", "token", service_account, "-n", &ns]);
    std::fs::write(sa.join("token"), token.trim()).expect("token");
    std::fs::copy(env.dir().join("certs/apiserver.crt"), sa.join("ca.crt")).expect("ca");
    std::fs::write(sa.join("namespace"), &ns).expect("namespace");

    // Two containers of the pod template: the Deployment's command and args, its
    // security context; host network to reach the API server on 127.0.0.1, so each gets its
    // own metrics port (two pods would each have 8080 in their own network namespace).
    let seccomp = runtime_default_seccomp();
    let api_port = env
        .server_url()
        .rsplit(':')
        .next()
        .expect("port")
        .to_string();
    let state = work.path().join("runc");
    let mut containers: Vec<Container> = Vec::new();
    for name in ["kubectl-vap-a", "kubectl-vap-b"] {
        // The pod name is the hostname; the runtime's id is unique to this run (cgroups).
        let id = format!("{name}-{}", std::process::id());
        let port = testenv::free_port();
        let args: Vec<String> = strings(&c["args"])
            .into_iter()
            .map(|a| {
                if a.starts_with("--metrics-addr=") {
                    format!("--metrics-addr=127.0.0.1:{port}")
                } else {
                    a
                }
            })
            .collect();
        let mut config = base.clone();
        let process = &mut config["process"];
        process["terminal"] = json!(false);
        // As the kubelet runs it: the container's command replaces the image's entrypoint.
        let command = match strings(&c["command"]) {
            command if command.is_empty() => facts.entrypoint.clone(),
            command => command,
        };
        process["args"] = json!([&command[..], &args[..]].concat());
        let mut envs = strings(&process["env"]);
        envs.extend([
            "KUBERNETES_SERVICE_HOST=127.0.0.1".to_string(),
            format!("KUBERNETES_SERVICE_PORT={api_port}"),
            format!("HOSTNAME={name}"),
        ]);
        process["env"] = json!(envs);
        // capabilities: drop ALL; allowPrivilegeEscalation: false.
        process["capabilities"] = json!({});
        process["noNewPrivileges"] = json!(true);
        config["root"] = json!({ "path": rootfs, "readonly": true });
        config["hostname"] = json!(name);
        config["mounts"]
            .as_array_mut()
            .expect("mounts")
            .push(json!({
                "destination": SA_DIR, "type": "bind", "source": sa,
                "options": ["rbind", "ro", "nosuid", "nodev", "noexec"]
            }));
        let linux = &mut config["linux"];
        let namespaces: Vec<Value> = linux["namespaces"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|n| n["type"] != "network")
            .cloned()
            .collect();
        linux["namespaces"] = json!(namespaces);
        linux["seccomp"] = seccomp.clone();
        let bundle = work.path().join(name);
        std::fs::create_dir(&bundle).expect("bundle dir");
        std::fs::write(
            bundle.join("config.json"),
            serde_json::to_vec_pretty(&config).expect("config"),
        )
        .expect("write config.json");
        let log = work.path().join(format!("{name}.log"));
        let out = std::fs::File::create(&log).expect("log file");
        let child = Command::new("runc")
            .arg("--root")
            .arg(&state)
            .args(["run", "--bundle"])
            .arg(&bundle)
            .arg(&id)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log fd"))
            .stderr(out)
            .spawn()
            .expect("runc run");
        let container = Container {
            id,
            name,
            state: state.clone(),
            child: Some(child),
            log,
            port,
        };
        eventually(
            &format!("{name} answers /readyz with 200"),
            TIMEOUT,
            || async { http_get(port, "/readyz").starts_with("HTTP/1.1 200") },
        )
        .await;
        assert!(http_get(port, "/healthz").starts_with("HTTP/1.1 200"));
        containers.push(container);
    }

    // The pod's restrictions hold inside: the image's user, no capabilities, no privilege
    // escalation, the seccomp filter, a read-only root.
    for ct in &containers {
        assert_eq!(
            ct.proc_status("Uid"),
            format!("{IMAGE_UID} {IMAGE_UID} {IMAGE_UID} {IMAGE_UID}")
        );
        assert_eq!(ct.proc_status("CapEff"), "0000000000000000");
        assert_eq!(ct.proc_status("NoNewPrivs"), "1");
        assert_eq!(ct.proc_status("Seccomp"), "2", "seccomp filter mode");
        let mountinfo =
            std::fs::read_to_string(format!("/proc/{}/mountinfo", ct.pid())).expect("mountinfo");
        let root = mountinfo
            .lines()
            .find(|l| l.split_whitespace().nth(4) == Some("/"))
            .expect("the root mount");
        assert!(
            root.split_whitespace()
                .nth(5)
                .is_some_and(|o| o.split(',').any(|x| x == "ro")),
            "read-only root: {root}"
        );
    }

    // One leader converges: the VAP, then (after the binding wait) the binding. The manifests
    // run the command line's default shape, `auto`: a template with one constraint gets the
    // inline VAP of that constraint.
    let policy = kubectl_vap::core::names::inline_policy_name(&kind, "c");
    let binding = binding_name(&kind, "c");
    let start = Instant::now();
    eventually("the VAP and binding are written", TIMEOUT, || async {
        cluster::policy(&client, &policy).await.is_some()
            && cluster::binding(&client, &binding).await.is_some()
    })
    .await;
    eprintln!("converged {:?} after both were ready", start.elapsed());
    let leaders: Vec<usize> = (0..2).filter(|&i| containers[i].leads()).collect();
    assert_eq!(leaders.len(), 1, "exactly one leader");
    let (leader, follower) = (leaders[0], 1 - leaders[0]);
    let holder = support::reconciler::lease_holder(&client, &ns, "kubectl-vap")
        .await
        .expect("lease")
        .expect("a holder");
    assert!(
        holder.starts_with(containers[leader].name),
        "the Lease names the leader's pod: {holder}"
    );
    let writes = |m: &str| support::metrics::sum(m, "kubectl_vap_writes_total{");
    assert!(
        writes(&containers[leader].metrics()) >= 2.0,
        "the leader wrote"
    );
    assert_eq!(
        writes(&containers[follower].metrics()),
        0.0,
        "the follower wrote nothing"
    );

    // SIGTERM the leader: it releases the Lease and the follower takes it at once (not after
    // the 15 s expiry); SIGTERM the other: the Lease is left free.
    let term = Instant::now();
    let status = containers[leader].terminate();
    assert!(
        status.success(),
        "the leader exits 0 on SIGTERM: {status:?}"
    );
    eventually("the follower leads", TIMEOUT, || async {
        containers[follower].leads()
    })
    .await;
    let handover = term.elapsed();
    assert!(
        handover < Duration::from_secs(8),
        "hand-over took {handover:?}: the Lease was not released"
    );
    let status = containers[follower].terminate();
    assert!(status.success(), "{status:?}");
    let holder = support::reconciler::lease_holder(&client, &ns, "kubectl-vap")
        .await
        .expect("lease");
    assert_eq!(holder, None, "the Lease is released on SIGTERM");

    // Every log line is a JSON record (a log collector parses them all).
    for ct in &containers {
        let logs = ct.logs();
        // Both held the Lease when stopped: each says it released it.
        assert!(logs.contains("released Lease"), "{}:\n{logs}", ct.id);
        for line in logs.lines().filter(|l| !l.trim().is_empty()) {
            assert!(
                serde_json::from_str::<Value>(line).is_ok(),
                "{}: not JSON: {line}",
                ct.id
            );
        }
    }
    eprintln!("hand-over after SIGTERM: {handover:?}");
}

/// The static-linking check itself: this test binary is dynamically linked.
#[test]
fn a_dynamic_binary_has_an_interpreter() {
    let me = std::fs::read("/proc/self/exe").expect("this test binary");
    assert!(has_interpreter(&me));
}
