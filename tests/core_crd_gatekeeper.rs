//! The constraint CRD kubectl-vap builds equals, to the byte after the server's own
//! normalization, the one a real Gatekeeper v3.23.1 created for the same template on the
//! project's kube-apiserver (`tests/fixtures/gatekeeper-observed/`, recorded by
//! `crates/testenv/tests/gatekeeper.rs`). Descriptions included: otherwise each controller
//! would rewrite the other's CRDs on taking over.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

use kubectl_vap::core::crd::{desired_crd, spec_diff};
use kubectl_vap::model::{ConstraintTemplate, Source};
use serde_json::Value;

fn read(name: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/gatekeeper-observed/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn check(name: &str) {
    let template =
        ConstraintTemplate::from_value(read(&format!("template-{name}.yaml")), Source::default());
    let kind = template.kind.clone().expect("kind");
    let ours = desired_crd(&template, &kind).expect("our CRD");
    let theirs = read(&format!("crd-{name}.yaml"));
    assert_eq!(ours["metadata"]["name"], theirs["metadata"]["name"]);
    let diff = spec_diff(&ours["spec"], &theirs["spec"], false);
    assert!(
        diff.is_empty(),
        "{name}: our CRD differs from Gatekeeper's in {diff:?}\nours:   {}\ntheirs: {}",
        ours["spec"],
        theirs["spec"]
    );
    assert_eq!(
        theirs["metadata"]["labels"]["gatekeeper.sh/constraint"],
        "yes"
    );
    assert_eq!(
        ours["metadata"]["ownerReferences"][0]["apiVersion"],
        theirs["metadata"]["ownerReferences"][0]["apiVersion"]
    );
}

#[test]
fn cel_template_with_nested_parameters() {
    check("k8sobservedcel");
}

#[test]
fn template_without_a_schema() {
    check("k8sobservednoschema");
}

#[test]
fn rego_template_with_legacy_schema() {
    check("k8sobservedregolegacy");
}

#[test]
fn rego_template_with_a_structural_schema() {
    check("k8sobservedregostructural");
}
