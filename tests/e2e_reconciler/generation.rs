//! What is written for templates and constraints: generateVAP and the default flags, each
//! enforcement action, the binding wait, and a policy the server refuses; one write per change.

use crate::env::{Env, TIMEOUT, eventually, opts, opts_shaped, template};
use crate::support::objects::{
    binding_name as bname, inline_policy_name as ipname, policy_name as pname,
};
use kube::api::DeleteParams;
use kubectl_vap::core::{Options, PolicyShape};
use serde_json::json;
use std::time::{Duration, Instant};

/// generateVAP on/off/unset; deny/warn/dryrun/scoped with and without vap.k8s.io; then
/// enforcement change, constraint delete, template off and template delete — with the
/// analysis of the live cluster as the oracle after each step, and one write per change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_generation_flows_default_flags() {
    let e = Env::new().await;
    let on = e.env.unique_kind("On");
    let off = e.env.unique_kind("Off");
    let unset = e.env.unique_kind("Unset");
    e.put_template(&template(&on, Some(true))).await;
    e.put_template(&template(&off, Some(false))).await;
    e.put_template(&template(&unset, None)).await;
    let labels = json!({ "labels": ["owner"] });
    let action = |a: &str| json!({ "enforcementAction": a, "parameters": labels });
    for kind in [&on, &off, &unset] {
        e.put_constraint(kind, "deny", action("deny")).await;
    }
    e.put_constraint(&on, "warn", action("warn")).await;
    e.put_constraint(&on, "dryrun", action("dryrun")).await;
    e.put_constraint(&on, "scoped", json!({ "enforcementAction": "scoped", "parameters": labels,
        "scopedEnforcementActions": [{ "action": "warn", "enforcementPoints": [{ "name": "vap.k8s.io" }, { "name": "validation.gatekeeper.sh" }] }] })).await;
    e.put_constraint(&on, "notvap", json!({ "enforcementAction": "scoped", "parameters": labels,
        "scopedEnforcementActions": [{ "action": "deny", "enforcementPoints": [{ "name": "validation.gatekeeper.sh" }] }] })).await;

    let o = opts(0);
    let r = e.leader(&e.env.unique_name("flows"), o.clone()).await;
    r.assert_idle(TIMEOUT).await;
    e.assert_converged(&o, "initial").await;
    // The default shape: a VAP per bound constraint, none of the template's own.
    assert_eq!(
        e.vaps_of(&on).await,
        ["deny", "dryrun", "scoped", "warn"].map(|c| ipname(&on, c)),
        "one VAP per bound constraint (not notvap's)"
    );
    assert_eq!(
        e.vaps_of(&unset).await,
        [ipname(&unset, "deny")],
        "unset + default flag true"
    );
    assert!(e.vaps_of(&off).await.is_empty());
    for (c, want) in [
        ("deny", "Deny"),
        ("warn", "Warn"),
        ("dryrun", "Audit"),
        ("scoped", "Warn"),
    ] {
        assert_eq!(
            e.actions(&bname(&on, c)).await,
            Some(vec![want.into()]),
            "{c}"
        );
    }
    assert!(e.vapb(&bname(&on, "notvap")).await.is_none());
    assert!(e.vapb(&bname(&off, "deny")).await.is_none());
    assert!(e.vapb(&bname(&unset, "deny")).await.is_some());
    let vap = e.vap(&ipname(&on, "deny")).await.expect("vap");
    let owner = &vap.metadata.owner_references.expect("owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        (on.as_str(), "deny", Some(true)),
        "an inline VAP is controlled by its constraint"
    );

    // I4: a full resync sends nothing.
    let w0 = r.writes_total();
    r.reconcile_all().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    r.assert_idle(TIMEOUT).await;
    assert_eq!(r.writes_total(), w0, "I4: steady state writes nothing");

    // One change, one write: deny → warn.
    e.put_constraint(&on, "deny", action("warn")).await;
    e.until_actions("binding updated to Warn", &bname(&on, "deny"), &["Warn"])
        .await;
    r.assert_idle(TIMEOUT).await;
    assert_eq!(r.writes_total(), w0 + 1, "one change = one write");
    e.assert_converged(&o, "after deny→warn").await;

    // Constraint deleted → its binding goes (no GC here).
    e.constraints(&on)
        .delete("dryrun", &DeleteParams::default())
        .await
        .expect("delete");
    e.until_vapb(
        "binding of a deleted constraint removed",
        &bname(&on, "dryrun"),
        false,
    )
    .await;
    e.until_vap(
        "VAP of a deleted constraint removed",
        &ipname(&on, "dryrun"),
        false,
    )
    .await;

    // Template off → bindings first, then the VAP.
    e.put_template(&template(&on, Some(false))).await;
    for c in ["deny", "warn", "scoped"] {
        e.until_vap(
            "VAPs removed after generateVAP: false",
            &ipname(&on, c),
            false,
        )
        .await;
    }
    assert!(e.vaps_of(&on).await.is_empty());
    assert!(e.vapb(&bname(&on, "warn")).await.is_none());
    r.assert_idle(TIMEOUT).await;
    e.assert_converged(&o, "after off").await;

    // Template deleted → its VAP and bindings go.
    e.templates()
        .delete(&unset.to_lowercase(), &DeleteParams::default())
        .await
        .expect("delete template");
    e.until_vap(
        "VAP of a deleted template removed",
        &ipname(&unset, "deny"),
        false,
    )
    .await;
    assert!(e.vaps_of(&unset).await.is_empty());
    assert!(e.vapb(&bname(&unset, "deny")).await.is_none());
    e.clean_up_with(r, &[&on, &off, &unset]).await;
}

/// The two default-create flags off: unset templates do not generate, deny/warn/dryrun
/// constraints are not bound, scoped vap.k8s.io ones are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_generation_flows_flags_off() {
    let e = Env::new().await;
    let on = e.env.unique_kind("FOn");
    let unset = e.env.unique_kind("FUnset");
    e.put_template(&template(&on, Some(true))).await;
    e.put_template(&template(&unset, None)).await;
    let labels = json!({ "labels": ["owner"] });
    e.put_constraint(
        &on,
        "deny",
        json!({ "enforcementAction": "deny", "parameters": labels }),
    )
    .await;
    e.put_constraint(&on, "scoped", json!({ "enforcementAction": "scoped", "parameters": labels,
        "scopedEnforcementActions": [{ "action": "dryrun", "enforcementPoints": [{ "name": "*" }] }] })).await;
    e.put_constraint(&unset, "scoped", json!({ "enforcementAction": "scoped", "parameters": labels,
        "scopedEnforcementActions": [{ "action": "deny", "enforcementPoints": [{ "name": "vap.k8s.io" }] }] })).await;
    let o = Options {
        default_create_vap_for_templates: false,
        default_create_vap_binding_for_constraints: false,
        ..opts(0)
    };
    let r = e.leader(&e.env.unique_name("flags"), o.clone()).await;
    r.assert_idle(TIMEOUT).await;
    e.assert_converged(&o, "flags off").await;
    assert_eq!(
        e.vaps_of(&on).await,
        [ipname(&on, "scoped")],
        "the bound constraint's VAP only"
    );
    assert!(e.vaps_of(&unset).await.is_empty(), "unset + flag false");
    assert!(
        e.vapb(&bname(&on, "deny")).await.is_none(),
        "deny + binding flag false"
    );
    assert_eq!(
        e.actions(&bname(&on, "scoped")).await,
        Some(vec!["Audit".into()])
    );
    assert!(
        e.vapb(&bname(&unset, "scoped")).await.is_none(),
        "no VAP, no binding"
    );
    e.clean_up_with(r, &[&on, &unset]).await;
}

/// `--binding-wait`: the first binding of a kind waits for the CRD's Established time + wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_binding_waits_for_the_crd() {
    let e = Env::new().await;
    // Narrowed: the wait is for the API server to discover the kind a paramKind names; an
    // inline VAP names none, so the default binds at once (core::desired).
    let o = opts_shaped(6, PolicyShape::Narrowed);
    let r = e.leader(&e.env.unique_name("wait"), o.clone()).await;
    let kind = e.env.unique_kind("Wait");
    let start = Instant::now();
    e.put_template(&template(&kind, Some(true))).await;
    e.put_constraint(&kind, "c", json!({ "parameters": { "labels": ["a"] } }))
        .await;
    e.until_vap("VAP written at once", &pname(&kind), true)
        .await;
    assert!(
        e.vapb(&bname(&kind, "c")).await.is_none(),
        "no binding within the wait"
    );
    e.until_vapb("binding after the wait", &bname(&kind, "c"), true)
        .await;
    // lastTransitionTime has a 1 s resolution.
    assert!(
        start.elapsed() >= Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    e.clean_up_with(r, &[&kind]).await;
}

/// A template whose CEL parses (so the offline check lets it through and `run` plans the VAP)
/// but that the API server refuses (422: a type error): the create is sent once, reported with
/// the server's message, and not sent again until the template changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_an_invalid_policy_is_sent_once_until_its_template_changes() {
    let e = Env::new().await;
    let kind = e.env.unique_kind("Invalid");
    let with_expression = |expr: &str| {
        let mut t = template(&kind, Some(true));
        t["spec"]["targets"][0]["code"][0]["source"]["validations"][0]["expression"] = json!(expr);
        t
    };
    // Parses; the server's type checker refuses it: no '+' for (string, int).
    let bad = "'a' + 1 == 2";
    assert_eq!(
        kubectl_vap::load::cel_syntax::parse(bad),
        Ok(()),
        "the offline check accepts it (else nothing would be sent)"
    );
    e.put_template(&with_expression(bad)).await;
    e.constrain(&kind, "c").await;
    let r = e.leader(&e.env.unique_name("invalid"), opts(0)).await;
    let policy = ipname(&kind, "c");
    eventually("the refused create is reported", || async {
        r.write_errors("invalid") >= 1
    })
    .await;
    // Longer than the first five steps of the retry backoff (0.1 + 0.2 + 0.4 + 0.8 + 1.6 s):
    // a copy that retried a 422 would have sent it again several times by now.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let refused = r.refused_creates(&policy);
    assert_eq!(
        (r.write_errors("invalid"), refused.len()),
        (1, 1),
        "one attempt, not retried: {refused:#?}"
    );
    assert!(
        refused[0].contains("no matching overload") || refused[0].contains("Invalid value"),
        "the server's message is reported: {}",
        refused[0]
    );
    assert!(e.vap(&policy).await.is_none());
    assert!(
        e.vapb(&bname(&kind, "c")).await.is_none(),
        "I1: no binding without its VAP"
    );

    // An edit of the template (still invalid) is a new attempt: exactly one more.
    e.put_template(&with_expression("'b' + 1 == 2")).await;
    eventually("the edited template is tried again", || async {
        r.write_errors("invalid") >= 2
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(r.write_errors("invalid"), 2);
    // Fixed: the VAP, then the binding.
    e.put_template(&template(&kind, Some(true))).await;
    eventually("the fixed template gets its VAP and binding", || async {
        e.vap(&policy).await.is_some() && e.vapb(&bname(&kind, "c")).await.is_some()
    })
    .await;
    assert_eq!(r.write_errors("invalid"), 2);
    e.clean_up_with(r, &[&kind]).await;
}
