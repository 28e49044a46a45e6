//! Property tests: the loader and the analysis never panic, whatever they are given, and every
//! loader error names a file and a line.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

use kubectl_vap::core::analyze;
use kubectl_vap::load::cel::default_options;
use kubectl_vap::load::files::load_text;
use kubectl_vap::snapshot::Snapshot;
use proptest::prelude::*;
use serde_json::{Value, json};

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(|n| json!(n)),
        "[a-zA-Z*:._/ -]{0,12}".prop_map(Value::String),
        prop_oneof![
            Just("deny"),
            Just("warn"),
            Just("dryrun"),
            Just("scoped"),
            Just("vap.k8s.io"),
            Just("*"),
            Just("Fail"),
            Just("K8sX")
        ]
        .prop_map(|s| json!(s)),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("spec".to_string()),
                    Just("match".to_string()),
                    Just("kinds".to_string()),
                    Just("targets".to_string()),
                    Just("code".to_string()),
                    Just("source".to_string()),
                    Just("validations".to_string()),
                    Just("enforcementAction".to_string()),
                    Just("scopedEnforcementActions".to_string()),
                    Just("enforcementPoints".to_string()),
                    Just("generateVAP".to_string()),
                    Just("labelSelector".to_string()),
                    Just("metadata".to_string()),
                    Just("ownerReferences".to_string()),
                    "[a-z]{1,6}"
                ],
                inner,
                0..5
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn arb_object() -> impl Strategy<Value = Value> {
    let kinds = prop_oneof![
        Just(("templates.gatekeeper.sh/v1", "ConstraintTemplate")),
        Just(("constraints.gatekeeper.sh/v1beta1", "K8sX")),
        Just((
            "admissionregistration.k8s.io/v1",
            "ValidatingAdmissionPolicy"
        )),
        Just((
            "admissionregistration.k8s.io/v1beta1",
            "ValidatingAdmissionPolicyBinding"
        )),
        Just(("apiextensions.k8s.io/v1", "CustomResourceDefinition")),
        Just(("v1", "List")),
    ];
    (kinds, "[a-z0-9-]{1,300}", arb_json(), arb_json()).prop_map(
        |((api, kind), name, spec, extra)| {
            let mut o =
                json!({"apiVersion": api, "kind": kind, "metadata": {"name": name}, "spec": spec});
            if let Value::Object(m) = extra {
                for (k, v) in m {
                    o[k] = v;
                }
            }
            o
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn the_loader_never_panics_and_errors_name_file_and_line(text in ".{0,400}") {
        let mut s = Snapshot::default();
        if let Err(e) = load_text(&mut s, "fuzz.yaml", &text) {
            let msg = e.to_string();
            prop_assert!(msg.starts_with("fuzz.yaml:"), "{}", msg);
        }
    }

    #[test]
    fn yaml_shaped_noise_never_panics(lines in prop::collection::vec("( {0,4})(-|[a-z]{1,5}:|---|\\[|\\{|\"|'|#)?[ a-z0-9:{}\\[\\],*-]{0,20}", 0..30)) {
        let mut s = Snapshot::default();
        let _ = load_text(&mut s, "noise.yaml", &lines.join("\n"));
    }

    #[test]
    fn the_analysis_never_panics(objects in prop::collection::vec(arb_object(), 0..12)) {
        let mut s = Snapshot { now: Some(chrono::Utc::now()), ..Snapshot::default() };
        for o in objects {
            let _ = s.insert(o, Default::default());
        }
        let a = analyze(&s, &default_options());
        // Every finding the analysis reports is attached to the tree, and every plan entry
        // names an object.
        let attached: usize = a.tree.iter().flat_map(|n| n.walk()).map(|n| n.findings.len()).sum();
        prop_assert_eq!(attached, a.findings.len());
        for w in &a.plan {
            prop_assert!(!w.object.name.is_empty());
        }
    }
}
