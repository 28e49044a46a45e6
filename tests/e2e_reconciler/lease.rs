//! One writer per Lease: two copies and the hand-over (release, expiry), the one-shot commands
//! beside a holder, an unusable Lease, fencing of a leader that was paused past its Lease, and
//! an observer that watches the Lease.

use crate::env::{Env, LEASE_NS, TIMEOUT, eventually, leads, opts};
use crate::support::cli::{self, Served};
use crate::support::objects::{binding_name as bname, inline_policy_name as ipname};
use crate::support::rbac::{self, Grant};
use crate::support::reconciler::{self, Reconciler, Start, lease_holder, observe};
use kube::api::DeleteParams;
use kubectl_vap::controller::Command;
use kubectl_vap::controller::state::EventVerb;
use serde_json::Value;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Two copies on one Lease: both watch, only the holder writes (and answers the other's
/// request); the other takes over when the holder stops (graceful release), and again when a
/// holder process is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_two_copies_one_writer_and_handover() {
    let e = Env::new().await;
    let lease = e.env.unique_name("pair");
    let o = opts(0);
    let a = e.leader(&lease, o.clone()).await;
    let b = e.reconciler(&lease, o.clone()).await;
    let kind = e.new_kind("Pair").await;
    for c in ["c1", "c2", "c3"] {
        e.constrain(&kind, c).await;
    }
    e.until_vapb("bindings written", &bname(&kind, "c3"), true)
        .await;
    a.assert_idle(TIMEOUT).await;
    b.assert_idle(TIMEOUT).await;
    assert!(a.writes_total() >= 4, "the holder wrote");
    assert_eq!(b.writes_total(), 0, "the other copy never writes");
    // Both caches are warm: the follower reached the same opinion.
    assert_eq!(a.opinion(&kind), b.opinion(&kind));
    // The follower asks; the holder answers (converged: nothing to write) and the follower
    // still writes nothing.
    let template = kind.to_lowercase();
    let outcome = b
        .request(Command::Replay(template.clone()))
        .await
        .expect("the holder answers the follower");
    assert_eq!(
        (outcome.handled_by.as_str(), outcome.summary.as_str()),
        (
            a.identity(),
            format!("replayed 3 constraints of template {template}: 0 writes").as_str()
        )
    );
    assert!(
        a.events().iter().any(|ev| ev.verb == EventVerb::Replay),
        "the holder handled it"
    );
    assert_eq!(b.writes_total(), 0, "the follower still never writes");

    // Graceful stop releases the lease: b takes over at once.
    let t = Instant::now();
    a.stop().await;
    let took_over = TakeOver {
        within: Duration::from_secs(10),
        after: "release",
        since: t,
    };
    took_over.writes(&e, &b, &kind, "c4").await;
    b.stop().await;

    // A holder that dies without releasing: its lease expires, the other copy takes over.
    let mut child = e
        .run(&lease)
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn kubectl-vap run");
    eventually("the process holds the lease", || async {
        lease_holder(&e.client, LEASE_NS, &lease)
            .await
            .ok()
            .flatten()
            .is_some_and(|h| h.contains(&child.id().to_string()))
    })
    .await;
    let c = e.reconciler(&lease, o.clone()).await;
    assert!(
        c.wait_leading(Duration::from_secs(3)).await.is_err(),
        "c waits"
    );
    // SIGKILL: no release.
    child.kill().expect("kill");
    let _ = child.wait();
    let took_over = TakeOver {
        within: Duration::from_secs(40),
        after: "kill",
        since: Instant::now(),
    };
    took_over.writes(&e, &c, &kind, "c5").await;
    e.clean_up_with(c, &[&kind]).await;
}

/// A hand-over: the waiting copy leads `within` a time of the holder's going (`since`, by
/// `after`).
struct TakeOver {
    within: Duration,
    after: &'static str,
    since: Instant,
}

impl TakeOver {
    /// `r` takes over, and writes: constraint `c` of `kind` gets its binding.
    async fn writes(&self, e: &Env, r: &Reconciler, kind: &str, c: &str) {
        r.wait_leading(self.within).await.unwrap_or_else(|holder| {
            panic!("no takeover after {} (holder {holder:?})", self.after)
        });
        eprintln!("takeover after {}: {:?}", self.after, self.since.elapsed());
        e.constrain(kind, c).await;
        e.until_vapb("the new leader writes", &bname(kind, c), true)
            .await;
    }
}

/// The one-shot commands — `replay TEMPLATE`, `reconcile TEMPLATE`, `reconcile --all` — while
/// a copy leads elsewhere ask it (and print its answer, without joining the election; that a
/// request asked this way writes only its template's objects is
/// `e2e_requests_write_what_the_holder_was_refused`); with the Lease free they lead briefly,
/// and `reconcile TEMPLATE` writes only that template's objects; `reconcile --all` converges
/// everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_one_shot_commands_and_the_lease() {
    let e = Env::new().await;
    let kind = e.generating_kind("Shot", "c").await;
    let other = e.generating_kind("Other", "c").await;
    // The one-shot commands use the default Lease gatekeeper-system/kubectl-vap.
    testenv::ensure_namespace(&e.client, "gatekeeper-system")
        .await
        .expect("namespace");
    let holder = e.reconciler_on("gatekeeper-system", "kubectl-vap").await;
    holder
        .wait_leading(Duration::from_secs(30))
        .await
        .expect("holder leads");
    holder.assert_idle(TIMEOUT).await;
    let template = kind.to_lowercase();
    // Each command asks the holder and prints its answer: (arguments, the holder's summary
    // around a count of keys — the whole cluster's for `--all` — and the verb it logs).
    let asking: [(&[&str], [String; 2], EventVerb); 3] = [
        (
            &["replay", &template],
            [
                format!("replayed 1 constraint of template {template}: 0 writes"),
                String::new(),
            ],
            EventVerb::Replay,
        ),
        (
            &["reconcile", &template],
            [
                format!("reconciled template {template} and 1 constraint: 0 writes"),
                String::new(),
            ],
            EventVerb::Reconcile,
        ),
        (
            &["reconcile", "--all"],
            ["reconciled everything (".into(), " items): 0 writes".into()],
            EventVerb::ReconcileAll,
        ),
    ];
    for (args, [before, after], verb) in asking {
        let out = e.cli(&[args, &["--binding-wait=0s"]].concat());
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), cli::stderr(&out));
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stdout}\n{stderr}");
        assert!(
            stderr.contains("is held by") && stderr.contains("asking it"),
            "{args:?}: {stderr}"
        );
        let count = stdout
            .strip_suffix(&format!(" (by {})\n", holder.identity()))
            .and_then(|s| s.strip_prefix(before.as_str()))
            .and_then(|s| s.strip_suffix(after.as_str()));
        assert!(
            count.is_some_and(|n| n.chars().all(|c| c.is_ascii_digit())),
            "{args:?}: the holder's answer: {stdout}"
        );
        assert!(
            holder.events().iter().any(|ev| ev.verb == verb),
            "{args:?}: the holder handled it"
        );
    }
    // An unknown template: the holder says so (bad input: exit 2).
    let out = e.cli(&["replay", "nosuchtemplate", "--binding-wait=0s"]);
    assert_eq!(out.status.code(), Some(2), "{}", cli::stderr(&out));
    assert!(
        cli::stderr(&out).contains("ConstraintTemplate nosuchtemplate not found"),
        "{}",
        cli::stderr(&out)
    );
    holder.stop().await;

    // Lease free: `reconcile TEMPLATE` leads briefly and writes that template's objects only.
    for k in [&kind, &other] {
        e.vapbs()
            .delete(&bname(k, "c"), &DeleteParams::default())
            .await
            .expect("delete a binding by hand");
    }
    let out = e.cli(&["reconcile", &template, "--binding-wait=0s"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", cli::stderr(&out));
    assert!(
        stdout.contains(&format!("reconciled template {template}")),
        "{stdout}"
    );
    assert!(e.vapb(&bname(&kind, "c")).await.is_some(), "{stdout}");
    assert!(
        e.vapb(&bname(&other, "c")).await.is_none(),
        "another template's binding is not written: {stdout}"
    );
    // Lease free: reconcile --all takes it, converges and releases it.
    let out = e.cli(&["reconcile", "--all", "--binding-wait=0s"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", cli::stderr(&out));
    assert!(stdout.contains("reconciled everything"), "{stdout}");
    assert!(e.vapb(&bname(&other, "c")).await.is_some());
    e.cleanup(&[&kind, &other]).await;
    let out = e.cli(&["reconcile", "--all", "--binding-wait=0s"]);
    assert!(out.status.success());
}

/// A copy that does not lead (the TUI without --reconcile) asks the holder and gets its
/// answer; the holder's outcomes are Kubernetes Events that the observer sees and `kubectl
/// events` shows; the holder's health rides on its renewals; once it stops, the observer sees
/// the Lease vacant and a request says nobody reconciles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_requests_reach_the_leader_and_outcomes_are_events() {
    let e = Env::new().await;
    let kind = e.generating_kind("Ask", "c0").await;
    for c in ["c1", "c2"] {
        e.constrain(&kind, c).await;
    }
    let template = kind.to_lowercase();
    let lease = e.env.unique_name("ask");
    let leader = e.leader(&lease, opts(0)).await;
    leader.assert_idle(TIMEOUT).await;
    let observer = observe(e.env.client_admin().await, LEASE_NS, &lease, opts(0)).await;
    eventually("the observer sees the holder and its health", || async {
        let st = observer.state();
        st.lease.holder.as_deref() == Some(leader.identity())
            && !st.lease.vacant
            && st.lease.since.is_some()
            && st
                .lease
                .health
                .as_ref()
                .is_some_and(|h| h.last_sync.is_some())
    })
    .await;

    // A `run` that finds the Lease held says by whom, and stands by.
    let log = e.env.dir().join("standby.log");
    let mut standby = e
        .run(&lease)
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("spawn a standby run");
    // A holder that renews: named, said to write, with the takeover the standby would take.
    let says = format!("is held by {} (renewed ", leader.identity());
    eventually("the standby says who holds the Lease", || async {
        std::fs::read_to_string(&log).is_ok_and(|l| {
            l.lines().any(|l| {
                l.contains(&says)
                    && l.contains(
                        "s ago by its record): that copy writes; standing by, taking over in ",
                    )
            })
        })
    })
    .await;
    let _ = standby.kill();
    let _ = standby.wait();

    // A binding deleted while nobody looks is a write the replay may make (or the leader's
    // watch first).
    let _ = e
        .vapbs()
        .delete(&bname(&kind, "c1"), &DeleteParams::default())
        .await;
    let outcome = observer
        .request(Command::Replay(template.clone()))
        .await
        .expect("the holder answers");
    assert_eq!(outcome.handled_by, leader.identity());
    assert!(
        outcome
            .summary
            .starts_with(&format!("replayed 3 constraints of template {template}")),
        "{outcome:?}"
    );
    assert!(outcome.writes <= 1 && outcome.failures == 0, "{outcome:?}");
    e.until_vapb("the binding back", &bname(&kind, "c1"), true)
        .await;
    let outcome = observer
        .request(Command::Reconcile(template.clone()))
        .await
        .expect("the holder answers");
    assert_eq!(
        (outcome.writes, outcome.failures),
        (0, 0),
        "converged: {outcome:?}"
    );

    // The outcomes, as Events the observer reads back and kubectl shows.
    eventually("the observer shows the holder's Events", || async {
        let st = observer.cluster_events();
        let of_template = |reason: &str| {
            st.iter().any(|ev| {
                ev.reason == reason
                    && ev.regarding.name == template
                    && ev.reporter == leader.identity()
            })
        };
        of_template("Written") && of_template("Replayed") && of_template("Reconciled")
    })
    .await;
    let written = observer
        .cluster_events()
        .iter()
        .find(|ev| ev.reason == "Written" && ev.regarding.name == template)
        .map(|ev| ev.note.clone())
        .unwrap_or_default();
    // The default shape: each constraint's own VAP, then its binding.
    assert!(
        written.contains("created 3 VAPs") && written.contains("created 3 bindings"),
        "one Event for the first convergence of the template: {written}"
    );
    let text = e.kubectl_events_for(&template);
    assert!(
        text.contains("Replayed") && text.contains("Written"),
        "{text}"
    );

    // "Reconcile everything" regards the Lease: its Event lives beside the Lease, where the
    // observer watches too and `kubectl events -n LEASE_NS --for lease/NAME` finds it.
    observer
        .request(Command::ReconcileAll)
        .await
        .expect("the holder answers");
    eventually("the observer shows the Event about the Lease", || async {
        observer.cluster_events().iter().any(|ev| {
            ev.reason == "Reconciled" && ev.regarding.kind == "Lease" && ev.regarding.name == lease
        })
    })
    .await;
    let text = e.kubectl_events(LEASE_NS, &format!("lease/{lease}"));
    assert!(
        text.contains("Reconciled") && text.contains("reconciled everything"),
        "{text}"
    );

    // The leader goes: the observer sees the Lease vacant; a request says nobody reconciles.
    leader.stop().await;
    eventually("the observer sees nobody leads", || async {
        observer.state().lease.vacant
    })
    .await;
    let err = observer
        .request(Command::Replay(template.clone()))
        .await
        .expect_err("nobody to ask");
    assert!(err.contains("no copy reconciles"), "{err}");
    observer.stop().await;
    e.sweep(&[&kind], "ask-clean").await;
}

/// Requests make the writes the holder would not make on its own. The holder runs with the
/// reconciler's roles as `install --print` prints them, minus `create` on bindings: the
/// bindings of two templates' constraints are refused (403) and retried slowly (1 s doubling).
/// Once each has been refused 5 times (its next attempt 16 s away), the right is granted back
/// and, before any retry: the one-shot `reconcile TEMPLATE`, asking the holder, writes that
/// template's binding and nothing else (exactly 1 write; the other binding still missing),
/// reported as Events (`Written`, `Reconciled`) that an observing copy and `kubectl events`
/// show; then the observing copy's "reconcile everything" (the TUI's `R`) writes the other
/// (exactly 1 write).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_requests_write_what_the_holder_was_refused() {
    use kubectl_vap::controller::DEFAULT_LEASE_NAME;
    use serde_json::json;
    let e = Env::new().await;
    let asked_kind = e.generating_kind("Refused", "c").await;
    let other_kind = e.generating_kind("Spared", "c").await;
    let (asked, other) = (bname(&asked_kind, "c"), bname(&other_kind, "c"));
    let template = asked_kind.to_lowercase();
    let printed = rbac::printed(LEASE_NS);
    let (user, grant) = (
        e.env.unique_name("vap-refused"),
        e.env.unique_name("vap-grant"),
    );
    let bindings = "validatingadmissionpolicybindings";
    let refused = rbac::rules_without(&printed.cluster.rules, bindings, &["create"]);
    printed
        .grant_reconciler(&e.client, &grant, &user, &refused)
        .await;
    let on_bindings = |verb| json!({ "verb": verb, "group": "admissionregistration.k8s.io", "resource": bindings });
    rbac::until_authorized(&e.client, &user, on_bindings("watch"), true).await;
    let holder = reconciler::start(
        rbac::client_as(e.env, &user).await,
        Start::on(LEASE_NS, DEFAULT_LEASE_NAME, opts(0)).workers(4),
    )
    .await;
    leads(&holder).await;
    let view = observe(
        e.env.client_admin().await,
        LEASE_NS,
        DEFAULT_LEASE_NAME,
        opts(0),
    )
    .await;
    eventually("each binding refused 5 times", || async {
        [&asked, &other]
            .iter()
            .all(|b| holder.refused_creates(b).len() >= 5)
    })
    .await;
    assert!(e.vapb(&asked).await.is_none() && e.vapb(&other).await.is_none());

    // The right is back; nothing tells the holder, and its next attempts are 16 s away.
    rbac::set_cluster_rules(&e.client, &grant, &printed.cluster.rules).await;
    rbac::until_authorized(&e.client, &user, on_bindings("create"), true).await;
    let out = e.cli(&["reconcile", &template, "--lease-namespace", LEASE_NS]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", cli::stderr(&out));
    let summary = format!("reconciled template {template} and 1 constraint: 1 write");
    assert_eq!(
        stdout,
        format!("{summary} (by {})\n", holder.identity()),
        "the holder's writes: {:#?}",
        holder.writes()
    );
    assert!(
        e.vapb(&asked).await.is_some(),
        "the asked template's binding"
    );
    assert!(
        e.vapb(&other).await.is_none(),
        "only the asked template's objects are written: {:#?}",
        holder.writes()
    );
    let outcome = view
        .request(Command::ReconcileAll)
        .await
        .expect("the holder answers");
    assert_eq!(
        (
            outcome.handled_by.as_str(),
            outcome.writes,
            outcome.failures
        ),
        (holder.identity(), 1, 0),
        "{outcome:?}; the holder's writes: {:#?}",
        holder.writes()
    );
    assert!(e.vapb(&other).await.is_some(), "the other binding");

    // The write and the request, as the holder's Events.
    let written = format!("created binding {asked}");
    eventually(
        "the view shows the write and the request as Events",
        || async {
            let st = view.cluster_events();
            let shown = |reason: &str, note: &str| {
                st.iter().any(|ev| {
                    (
                        ev.regarding.name.as_str(),
                        ev.reason.as_str(),
                        ev.note.as_str(),
                    ) == (template.as_str(), reason, note)
                        && ev.reporter == holder.identity()
                })
            };
            shown("Written", &written) && shown("Reconciled", &summary)
        },
    )
    .await;
    let text = e.kubectl_events_for(&template);
    assert!(
        text.contains(&written) && text.contains(&summary) && text.contains("WriteFailed"),
        "kubectl events --for constrainttemplate/{template}:\n{text}"
    );
    view.stop().await;
    holder.stop().await;
    printed.revoke_reconciler(&e.client, &grant).await;
    e.sweep(&[&asked_kind, &other_kind], "refused-clean").await;
}

/// A Lease that cannot be used (its namespace does not exist) fails `run --once` quickly with
/// a message saying why, instead of waiting or claiming another copy holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_unusable_lease_is_explained() {
    let e = Env::new().await;
    let start = Instant::now();
    let out = e.cli(&[
        "run",
        "--once",
        "--lease-namespace",
        "no-such-namespace-e2e",
    ]);
    let stderr = cli::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "cannot tell: {stderr}");
    assert!(
        stderr.contains("cannot use Lease no-such-namespace-e2e/kubectl-vap")
            && stderr.contains("namespace must exist"),
        "{stderr}"
    );
    // The server's answer once, in words: not kube's `Status { … }` debug dump.
    assert!(
        stderr.contains("not found (NotFound, 404)") && !stderr.contains("Status {"),
        "{stderr}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
}

/// Fencing, with the real binary and the API server's audit log. Copy A leads, converges, and
/// is stopped (SIGSTOP) past its lease; copy B takes over; constraints are deleted and added,
/// and a binding is deleted by hand, while A sleeps. After SIGCONT, A must not send a single
/// create, update, patch or delete to anything but its Lease: its renew deadline has passed,
/// so it re-checks the Lease (held by B), drops its queue and relists. Before, A sent 13
/// writes within 22 ms, some of them binding creates for constraints already deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_a_paused_leader_writes_nothing_after_it_resumes() {
    let e = Env::audited().await;
    let kind = e.new_kind("Fence").await;
    for i in 0..6 {
        e.constrain(&kind, &format!("c{i}")).await;
    }
    let lease = e.env.unique_name("fence");
    let old = "vap-old-leader";
    let grant_name = e.env.unique_name("vap-grant");
    rbac::grant(
        &e.client,
        &Grant::install(&grant_name, old, LEASE_NS, &lease),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let log = e.env.dir().join("old-leader.log");
    let mut cmd = e.run(&lease);
    cmd.args(["--lease-duration=3s", "--as", old])
        .stderr(std::fs::File::create(&log).expect("log file"));
    let a = Served::spawn(cmd);
    for i in 0..6 {
        e.until_vapb("A converges", &bname(&kind, &format!("c{i}")), true)
            .await;
    }
    // A's writes the server received at or after `since`. By the time the server received
    // them, not by when their audit entry appeared: an entry of a write A sent before it was
    // paused can be logged a moment after the pause, and is not a write after it resumed.
    let writes_by_old = |since: chrono::DateTime<chrono::Utc>| {
        e.env
            .audit_events()
            .into_iter()
            .filter(|ev| {
                ev["impersonatedUser"]["username"] == old
                    && ev["stage"] == "ResponseComplete"
                    && ev["objectRef"]["resource"] != "leases"
                    && ev["requestReceivedTimestamp"]
                        .as_str()
                        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                        .is_some_and(|t| t >= since)
            })
            .map(|ev| {
                format!(
                    "{} {}/{} → {}",
                    ev["verb"],
                    ev["objectRef"]["resource"],
                    ev["objectRef"]["name"],
                    ev["responseStatus"]["code"]
                )
            })
            .collect::<Vec<_>>()
    };
    a.signal(libc::SIGSTOP);
    assert!(
        !writes_by_old(chrono::DateTime::<chrono::Utc>::MIN_UTC).is_empty(),
        "A wrote while it led"
    );

    // B takes over once A's lease has expired (it has seen no renewal for a whole duration).
    let tuning = crate::support::reconciler::Tuning {
        lease_duration: Duration::from_secs(3),
        ..Default::default()
    };
    let b = e.reconciler_with(&lease, opts(0), tuning).await;
    b.wait_leading(Duration::from_secs(30))
        .await
        .expect("B takes the expired lease");
    for i in 0..3 {
        let _ = e
            .constraints(&kind)
            .delete(&format!("c{i}"), &DeleteParams::default())
            .await;
    }
    for i in 6..9 {
        e.constrain(&kind, &format!("c{i}")).await;
    }
    let _ = e
        .vapbs()
        .delete(&bname(&kind, "c3"), &DeleteParams::default())
        .await;
    eventually("B converges", || async {
        e.vapb(&bname(&kind, "c0")).await.is_none()
            && e.vapb(&bname(&kind, "c3")).await.is_some()
            && e.vapb(&bname(&kind, "c8")).await.is_some()
    })
    .await;
    b.assert_idle(TIMEOUT).await;

    // SIGCONT: A wakes up with a stale queue and stale stores.
    let resumed_at = chrono::Utc::now();
    a.signal(libc::SIGCONT);
    // A is running again (it serves), has found the Lease taken, and has relisted.
    eventually("A answers again and knows it does not lead", || async {
        a.metrics().contains("kubectl_vap_leader 0")
    })
    .await;
    eventually("A has relisted", || async { a.answers("/readyz", 200) }).await;
    // Let anything A might still send arrive.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = writes_by_old(resumed_at);
    let logs = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(
        after,
        [] as [String; 0],
        "writes by the old leader after it resumed; its log:\n{logs}"
    );
    assert!(logs.contains("lost Lease"), "{logs}");
    e.assert_converged(&opts(0), "B's state stands").await;
    let _ = a.terminate();
    testenv::rbac::revoke(&e.client, &grant_name, LEASE_NS).await;
    let kinds = [kind.as_str()];
    e.clean_up_with(b, &kinds).await;
}

/// `template` with its first validation's expression set to `expression`.
pub(crate) fn with_expression(mut v: Value, expression: &str) -> Value {
    fn set(v: &mut Value, expression: &str) -> bool {
        match v {
            Value::Object(m) => {
                if let Some(Value::Array(vs)) = m.get_mut("validations")
                    && let Some(first) = vs.first_mut()
                {
                    first["expression"] = expression.into();
                    return true;
                }
                m.values_mut().any(|v| set(v, expression))
            }
            Value::Array(a) => a.iter_mut().any(|v| set(v, expression)),
            _ => false,
        }
    }
    assert!(set(&mut v, expression), "the template has validations");
    v
}

/// The successful writes of VAPs, bindings and CRDs the API server counted (its own
/// `apiserver_request_total`, dry-runs left out): what a one-shot's count must equal.
async fn writes_the_server_saw(e: &Env) -> f64 {
    use crate::support::metrics::{label, request_samples};
    let text = e
        .env
        .apiserver_metrics()
        .await
        .expect("the API server's /metrics");
    request_samples(&text)
        .into_iter()
        .filter(|(l, _)| {
            [
                "validatingadmissionpolicies",
                "validatingadmissionpolicybindings",
                "customresourcedefinitions",
            ]
            .contains(&label(l, "resource"))
                && ["POST", "PUT", "DELETE"].contains(&label(l, "verb"))
                && label(l, "code").starts_with('2')
                && label(l, "dry_run").is_empty()
        })
        .map(|(_, v)| v)
        .sum()
}

/// Counts that add up (issue 21, item 5): with the Lease free, `replay TEMPLATE` of a
/// template with 2 constraints says "replayed 2 constraints" and as many writes as the API
/// server counted (it said "replayed 0 constraints … 0 writes": asked before the kind's
/// constraints had listed, and counting only the request's own writes, after the writes of
/// taking the Lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_one_shot_counts_are_the_writes_the_server_saw() {
    let e = Env::with_default_lease_namespace().await;
    let kind = e.generating_kind("Counted", "c1").await;
    e.constrain(&kind, "c2").await;
    let template = kind.to_lowercase();
    let before = writes_the_server_saw(&e).await;
    let out = e.cli(&["replay", &template, "--binding-wait=0s"]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}\n{}", cli::stderr(&out));
    let written = writes_the_server_saw(&e).await - before;
    assert!(
        written >= 4.0,
        "the 2 constraints' VAPs and their 2 bindings at least: {written}\n{stdout}"
    );
    // Leadership is said before the writes it made (issue 21, item 9).
    assert!(
        stdout
            .lines()
            .next()
            .is_some_and(|l| l.contains("acquired the lease")),
        "{stdout}"
    );
    let last = stdout.lines().last().unwrap_or_default();
    assert_eq!(
        last,
        format!("replayed 2 constraints of template {template}: {written} writes"),
        "{stdout}"
    );
    for c in ["c1", "c2"] {
        assert!(e.vapb(&bname(&kind, c)).await.is_some(), "{stdout}");
    }
    e.sweep(&[&kind], "counted-clean").await;
}

/// Failure is failure (issue 21, item 2): a template whose expression parses but does not
/// compile. `plan` marks the VAP's create as refused with the server's message (dry-run;
/// exit 1); `check` has a write-refused error finding on it; `reconcile TEMPLATE` with the
/// Lease free exits non-zero and says "1 write refused", never "0 writes"; `kubectl events`
/// for the template shows a Warning; a leader asked by `reconcile` answers the same and the
/// command exits 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_a_refused_write_is_a_failure_everywhere() {
    let e = Env::with_default_lease_namespace().await;
    let kind = e.env.unique_kind("Refused");
    e.put_template(&with_expression(
        crate::env::template(&kind, Some(true)),
        "!variables.sharingNamespaceTypo",
    ))
    .await;
    e.constrain(&kind, "c").await;
    let template = kind.to_lowercase();
    // The default shape: the VAP refused is the constraint's own.
    let vap = ipname(&kind, "c");
    let binding = bname(&kind, "c");

    let out = e.cli(&["plan", "-o", "json", "--binding-wait=0s"]);
    assert_eq!(out.status.code(), Some(1), "{}", cli::stderr(&out));
    let plan = cli::stdout_json(&out);
    let refused: Vec<&Value> = plan["refused"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["object"]["name"] == vap.as_str())
        .collect();
    assert_eq!(refused.len(), 1, "{plan}");
    assert!(
        refused[0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("sharingNamespaceTypo")),
        "the server's message: {plan}"
    );
    let out = e.cli(&["check", "-o", "json", "--binding-wait=0s"]);
    let report = cli::stdout_json(&out);
    assert!(
        report["findings"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|f| {
                f["code"] == "write-refused"
                    && f["severity"] == "error"
                    && f["object"]["name"] == vap.as_str()
            }),
        "{report}"
    );
    // Its binding waits on that VAP: a reconcile does not create it, and check says so.
    let binding_says = |f: &&Value| f["code"] == "binding-missing";
    let missing: Vec<&Value> = report["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(binding_says)
        .filter(|f| f["object"]["name"] == binding.as_str())
        .collect();
    assert!(
        !missing.is_empty()
            && missing.iter().all(|f| f["message"]
                .as_str()
                .is_some_and(|m| m.contains(&format!("not before VAP {vap}"))
                    && !m.contains("reconcile creates it"))),
        "{report}"
    );

    let out = e.cli(&["reconcile", &template, "--binding-wait=0s"]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_ne!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        cli::stderr(&out)
    );
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        last.contains("1 write refused by the API server") && !last.contains(": 0 writes"),
        "{stdout}"
    );
    assert!(e.vap(&vap).await.is_none());
    eventually("a Warning Event regards the template", || async {
        let events = e.kubectl_events_for(&template);
        events.contains("Warning") && events.contains("WriteFailed")
    })
    .await;

    let holder = e.reconciler_on("gatekeeper-system", "kubectl-vap").await;
    holder
        .wait_leading(Duration::from_secs(30))
        .await
        .expect("holder leads");
    holder.assert_idle(TIMEOUT).await;
    let out = e.cli(&["reconcile", &template, "--binding-wait=0s"]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{stdout}\n{}",
        cli::stderr(&out)
    );
    assert!(
        stdout.contains("1 write refused by the API server"),
        "{stdout}"
    );
    // An observer elsewhere (the TUI without --reconcile) reads the refusal the holder
    // publishes with its renewals: what its detail pane notes on the VAP.
    let observer = observe(
        e.env.client_admin().await,
        "gatekeeper-system",
        "kubectl-vap",
        opts(0),
    )
    .await;
    let object = kubectl_vap::model::ObjectId::new("ValidatingAdmissionPolicy", &vap);
    eventually("the observer sees the holder's refused write", || async {
        observer.state().lease.health.as_ref().is_some_and(|h| {
            h.refused
                .iter()
                .any(|(o, why)| *o == object && why.contains("sharingNamespaceTypo"))
        })
    })
    .await;
    observer.stop().await;
    e.clean_up_with(holder, &[&kind]).await;
}

/// The Warning Events `Invalid` regarding `name` in `default`, as the API server holds them:
/// (note, series count).
async fn invalid_events(e: &Env, name: &str) -> Vec<(String, i32)> {
    use k8s_openapi::api::events::v1::Event;
    let api: kube::Api<Event> = kube::Api::namespaced(e.client.clone(), "default");
    api.list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|ev| {
            ev.reason.as_deref() == Some("Invalid")
                && ev.type_.as_deref() == Some("Warning")
                && ev.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
        .map(|ev| {
            (
                ev.note.unwrap_or_default(),
                ev.series.map_or(1, |s| s.count),
            )
        })
        .collect()
}

/// Invalid templates and constraints get a Warning Event from the leader (issue 21, item 2),
/// once per reason: a template whose CEL does not parse (template-error), a constraint with
/// Deny and Warn together (constraint-error); reconciling everything again adds none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_invalid_templates_and_constraints_are_warning_events_once() {
    let e = Env::new().await;
    let broken = e.env.unique_kind("Broken");
    e.put_template(&with_expression(
        crate::env::template(&broken, Some(true)),
        "1 +",
    ))
    .await;
    let kind = e.generating_kind("Both", "ok").await;
    let point = serde_json::json!([{ "name": "vap.k8s.io" }]);
    e.put_constraint(
        &kind,
        "both",
        serde_json::json!({
            "enforcementAction": "scoped",
            "scopedEnforcementActions": [
                { "action": "deny", "enforcementPoints": point },
                { "action": "warn", "enforcementPoints": point },
            ],
        }),
    )
    .await;
    let r = e.leader(&e.env.unique_name("invalid"), opts(0)).await;
    r.assert_idle(TIMEOUT).await;
    let template = broken.to_lowercase();
    eventually(
        "a Warning Invalid on the template and on the constraint",
        || async {
            !invalid_events(&e, &template).await.is_empty()
                && !invalid_events(&e, "both").await.is_empty()
        },
    )
    .await;
    r.reconcile_all().await;
    r.assert_idle(TIMEOUT).await;
    // Past the Events' aggregation window: whatever the reconcile would say has been said.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let on_template = invalid_events(&e, &template).await;
    assert_eq!(on_template.len(), 1, "{on_template:?}");
    assert_eq!(on_template[0].1, 1, "once per reason: {on_template:?}");
    assert!(!on_template[0].0.is_empty());
    let on_constraint = invalid_events(&e, "both").await;
    assert_eq!(on_constraint.len(), 1, "{on_constraint:?}");
    assert_eq!(on_constraint[0].1, 1, "{on_constraint:?}");
    assert!(
        e.kubectl_events_for(&template).contains("Invalid"),
        "kubectl events shows it"
    );
    e.clean_up_with(r, &[&broken, &kind]).await;
}

/// A copy that only observes (the TUI without `--reconcile`) watches the Lease: each change of
/// holder is seen as it happens, not at the next look of a poll (every 3 s, which would have
/// missed the second most of the time); and a holder that stops renewing, which sends no event
/// at all, turns unresponsive after a third of its duration and the Lease vacant after its
/// duration and the takeover grace (5 s), on a timer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_an_observer_watches_the_lease() {
    use k8s_openapi::api::coordination::v1::Lease;
    use kube::api::{Api, Patch, PatchParams, PostParams};
    let e = Env::new().await;
    let name = e.env.unique_name("watched");
    let api: Api<Lease> = Api::namespaced(e.client.clone(), LEASE_NS);
    // A holder that is no copy at all: only this test writes the Lease.
    let lease: Lease = serde_json::from_value(serde_json::json!({
        "metadata": { "name": name },
        "spec": { "holderIdentity": "ghost-0", "leaseDurationSeconds": 3 }
    }))
    .expect("a Lease");
    api.create(&PostParams::default(), &lease)
        .await
        .expect("the Lease is created");
    let view = observe(e.client.clone(), LEASE_NS, &name, opts(0)).await;
    let holder = || view.state().lease.holder.clone();
    eventually("the observer sees ghost-0", || async {
        holder().as_deref() == Some("ghost-0")
    })
    .await;
    for i in 1..=3 {
        let next = format!("ghost-{i}");
        let patch = serde_json::json!({ "spec": { "holderIdentity": next } });
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("the Lease is patched");
        let t = Instant::now();
        while holder().as_deref() != Some(next.as_str()) {
            assert!(
                t.elapsed() < Duration::from_millis(1500),
                "{next} not seen after {:?}: {:?}",
                t.elapsed(),
                holder()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // Nothing renews it from here.
    let t = Instant::now();
    eventually("the holder is unresponsive", || async {
        view.state().lease.unresponsive_until.is_some()
    })
    .await;
    let unresponsive = t.elapsed();
    eventually("the Lease is vacant", || async {
        view.state().lease.vacant
    })
    .await;
    let vacant = t.elapsed();
    assert!(
        unresponsive < Duration::from_millis(2500),
        "unresponsive after {unresponsive:?}"
    );
    assert!(
        (Duration::from_secs(6)..Duration::from_secs(10)).contains(&vacant),
        "vacant after {vacant:?}"
    );
    assert!(view.state().lease.holder.is_some(), "still named");
    view.stop().await;
}

/// A new copy does not misread a dead leader (issue 28, item 9): the Lease's holder stopped
/// renewing 50 s ago by its record; `run` says so and when it takes over ("held by X, not
/// renewed for 50 s by its record; taking over in N s unless it renews") instead of "that copy
/// writes", then takes over within the record's duration, by its own clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_a_standby_says_the_holder_stopped_renewing() {
    use k8s_openapi::api::coordination::v1::Lease;
    use kube::api::{Api, PostParams};
    use std::io::BufRead;
    let e = Env::new().await;
    let name = e.env.unique_name("dead");
    let renewed = chrono::Utc::now() - chrono::Duration::seconds(50);
    let stamp = renewed.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string();
    let lease: Lease = serde_json::from_value(serde_json::json!({
        "metadata": { "name": name },
        "spec": { "holderIdentity": "vm-dead-0", "leaseDurationSeconds": 6,
                  "acquireTime": stamp, "renewTime": stamp }
    }))
    .expect("a Lease");
    Api::<Lease>::namespaced(e.client.clone(), LEASE_NS)
        .create(&PostParams::default(), &lease)
        .await
        .expect("the dead holder's Lease");
    let mut child = e
        .run(&name)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("run");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut lines = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline && !lines.iter().any(|l: &String| l.contains("acquired Lease"))
    {
        if let Ok(l) = rx.recv_timeout(Duration::from_millis(200)) {
            lines.push(l);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let all = lines.join("\n");
    let said = lines
        .iter()
        .find(|l| l.contains("is held by vm-dead-0"))
        .unwrap_or_else(|| panic!("the standby names the holder:\n{all}"));
    assert!(!said.contains("that copy writes"), "{said}");
    let ago: i64 = said
        .split("not renewed for ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("how long ago, by the record: {said}"));
    assert!((50..60).contains(&ago), "{said}");
    let takeover: u64 = said
        .split("taking over in ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("when it takes over: {said}"));
    assert!(
        takeover <= 6 && said.ends_with("s unless it renews"),
        "{said}"
    );
    assert!(
        all.contains("acquired Lease"),
        "it takes over within the record's duration:\n{all}"
    );
}

/// A typo fails (issue 28, item 2): `reconcile nosuchtemplate` exits 2 saying the template is
/// not found — with the Lease free (the command leads briefly) and when a holder is asked —
/// and no Kubernetes Event claims it was reconciled (before: exit 0, "reconciled template
/// nosuchtemplate and 0 constraints: 0 writes", and an Event saying so). `audit` of a name
/// that does not exist exits 2 too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_a_name_that_does_not_exist_is_not_found() {
    let e = Env::with_default_lease_namespace().await;
    let typo = e.env.unique_name("nosuchtemplate");
    let not_found = |out: &std::process::Output, how: &str| {
        let err = cli::stderr(out);
        assert_eq!(out.status.code(), Some(2), "{how}: {err}");
        assert!(
            err.contains(&format!("ConstraintTemplate {typo} not found")),
            "{how}: {err}"
        );
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("reconciled template"),
            "{how}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    };
    for cmd in ["reconcile", "replay"] {
        let out = e.cli(&[cmd, &typo, "--binding-wait=0s"]);
        not_found(&out, &format!("{cmd} with the Lease free"));
    }
    let holder = e.reconciler_on("gatekeeper-system", "kubectl-vap").await;
    holder
        .wait_leading(Duration::from_secs(30))
        .await
        .expect("holder leads");
    holder.assert_idle(TIMEOUT).await;
    let out = e.cli(&["reconcile", &typo]);
    not_found(&out, "reconcile asking the holder");
    // A name one letter short of a template's: the holder says which one was meant (issue 43).
    let kind = e.generating_kind("Meant", "c").await;
    let meant = kind.to_lowercase();
    let short = &meant[..meant.len() - 1];
    let out = e.cli(&["reconcile", short]);
    let err = cli::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "ConstraintTemplate {short} not found (did you mean {meant:?}?)"
        )),
        "{err}"
    );
    holder.stop().await;
    e.sweep(&[&kind], "meant-clean").await;
    let events = e.kubectl_events_for(&typo);
    assert!(
        !events.contains("Reconciled") && !events.contains("Replayed"),
        "no Event for a template that does not exist: {events}"
    );
    let out = e.cli(&["audit", &typo]);
    assert_eq!(out.status.code(), Some(2), "{}", cli::stderr(&out));
}

/// One count everywhere (issue 28, item 3): with the Lease free, `reconcile TEMPLATE` after its
/// binding was deleted by hand writes it back; the last line, the copy's own line for the
/// request and the template's Kubernetes Event all say "1 write" (before: the request's line
/// and the Event said "0 writes" — taking the Lease had already written it — while the last
/// line said "1 write"). The same for `reconcile --all`, whose Event is on the Lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_a_one_shot_says_one_count_everywhere() {
    let e = Env::with_default_lease_namespace().await;
    let kind = e.generating_kind("OneCount", "c").await;
    let template = kind.to_lowercase();
    // Converged by the same command first, so the second writes only the binding.
    let out = e.cli(&["reconcile", &template, "--binding-wait=0s"]);
    assert_eq!(out.status.code(), Some(0), "{}", cli::stderr(&out));
    e.vapbs()
        .delete(&bname(&kind, "c"), &DeleteParams::default())
        .await
        .expect("delete the binding by hand");
    let out = e.cli(&["reconcile", &template, "--binding-wait=0s"]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        cli::stderr(&out)
    );
    let summary = format!("reconciled template {template} and 1 constraint: 1 write");
    assert_eq!(stdout.lines().last(), Some(summary.as_str()), "{stdout}");
    assert!(!stdout.contains(": 0 writes"), "{stdout}");
    assert!(e.vapb(&bname(&kind, "c")).await.is_some(), "{stdout}");
    let events = e.kubectl_events_for(&template);
    assert!(
        events.contains(&summary)
            && !events.contains(&format!("{template} and 1 constraint: 0 writes")),
        "the Event says what the command said: {events}"
    );
    e.vapbs()
        .delete(&bname(&kind, "c"), &DeleteParams::default())
        .await
        .expect("delete the binding by hand");
    let out = e.cli(&["reconcile", "--all", "--binding-wait=0s"]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        cli::stderr(&out)
    );
    let last = stdout.lines().last().unwrap_or_default().to_string();
    assert!(
        last.starts_with("reconciled everything (") && !last.ends_with(": 0 writes"),
        "{stdout}"
    );
    let lease_events = e.kubectl_events("gatekeeper-system", "lease/kubectl-vap");
    assert!(lease_events.contains(&last), "{last} in\n{lease_events}");
    e.sweep(&[&kind], "onecount-clean").await;
}

/// The requests ConfigMap deleted while a copy leads comes back (issue 42, item 8): the
/// holder re-creates it when its watch sees it gone, and the one-shot `replay` then reaches
/// the holder. Before: it was created only on gaining the Lease, so `replay` and `reconcile`
/// failed with "no copy serves requests" for as long as the copy led, `/readyz` 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_the_requests_configmap_comes_back_while_a_copy_leads() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let e = Env::new().await;
    let kind = e.generating_kind("ReqCm", "c").await;
    let lease = e.env.unique_name("requests-cm");
    let holder = e.leader(&lease, opts(0)).await;
    holder.assert_idle(TIMEOUT).await;
    let configmaps: kube::Api<ConfigMap> = kube::Api::namespaced(e.client.clone(), LEASE_NS);
    let name = kubectl_vap::controller::requests_configmap(&lease);
    eventually("the holder created the requests ConfigMap", || async {
        matches!(configmaps.get_opt(&name).await, Ok(Some(_)))
    })
    .await;
    configmaps
        .delete(&name, &DeleteParams::default())
        .await
        .expect("delete the requests ConfigMap");
    crate::support::poll::eventually(
        "the holder re-creates the requests ConfigMap",
        Duration::from_secs(10),
        || async { matches!(configmaps.get_opt(&name).await, Ok(Some(_))) },
    )
    .await;
    let template = kind.to_lowercase();
    let out = e.cli(&[
        "replay",
        &template,
        "--lease-namespace",
        LEASE_NS,
        "--lease-name",
        &lease,
        "--binding-wait=0s",
    ]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), cli::stderr(&out));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.ends_with(&format!(" (by {})\n", holder.identity())),
        "the holder answered: {stdout}\n{stderr}"
    );
    e.clean_up_with(holder, &[&kind]).await;
}

/// A Lease left by a stranger with `leaseDurationSeconds: 2147483647` (issue 42, item 11).
fn stranger_lease(name: &str, renewed_secs_ago: i64) -> k8s_openapi::api::coordination::v1::Lease {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let renewed =
        k8s_openapi::jiff::Timestamp::from_second(now - renewed_secs_ago).expect("a timestamp");
    serde_json::from_value(serde_json::json!({
        "metadata": { "name": name },
        "spec": {
            "holderIdentity": "stranger-e2e",
            "leaseDurationSeconds": i32::MAX,
            "acquireTime": MicroTime(renewed),
            "renewTime": MicroTime(renewed),
        }
    }))
    .expect("a Lease")
}

/// A Lease duration beyond sense (issue 42, item 11): a record held by a stranger that says
/// `leaseDurationSeconds: 2147483647` is honoured for an hour at most
/// (`LONGEST_LEASE_DURATION`, tuned to 6 s here): renewed two hours ago, a copy takes it at
/// once; renewed just now, a copy takes it once it has seen it unchanged for the bound, not
/// before. Before: neither copy ever led (the record blocked every copy for 68 years).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_a_lease_duration_beyond_sense_is_taken_over() {
    use k8s_openapi::api::coordination::v1::Lease;
    let e = Env::new().await;
    let leases: kube::Api<Lease> = kube::Api::namespaced(e.client.clone(), LEASE_NS);
    let pp = kube::api::PostParams::default();
    // Renewed two hours ago: expired now, whatever it says.
    let old = e.env.unique_name("beyond-old");
    leases
        .create(&pp, &stranger_lease(&old, 7200))
        .await
        .expect("the stranger's Lease");
    let r = e.reconciler(&old, opts(0)).await;
    r.wait_leading(Duration::from_secs(20))
        .await
        .expect("a record renewed longer ago than the bound is taken over at once");
    r.stop().await;
    // Renewed now: taken over once seen unchanged for the (tuned) bound.
    let fresh = e.env.unique_name("beyond-fresh");
    leases
        .create(&pp, &stranger_lease(&fresh, 0))
        .await
        .expect("the stranger's Lease");
    let tuning = crate::support::reconciler::Tuning {
        lease_duration: Duration::from_secs(3),
        longest_lease_duration: Duration::from_secs(6),
        ..Default::default()
    };
    let started = Instant::now();
    let r = e.reconciler_with(&fresh, opts(0), tuning).await;
    r.wait_leading(Duration::from_secs(30))
        .await
        .expect("a fresh record beyond sense is taken over after the bound");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(5),
        "not before the bound: led after {took:?}"
    );
    r.stop().await;
}
