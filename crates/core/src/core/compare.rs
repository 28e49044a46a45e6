//! Desired against observed, for each kind we write: ownership first (never by name), then the
//! normalized spec difference, so steady state compares equal and sends nothing (I4).

use super::crd;
use super::normalize;
use super::ownership::{Control, OwnerId, control};
use crate::model::{Binding, CrdInfo, Policy, meta::Meta};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};

/// How an observed object compares with the desired one.
#[derive(Debug, Clone, PartialEq)]
pub enum Comparison {
    InSync,
    /// Differs in these fields (or its ownerReference / label): one update fixes it.
    OutOfSync(Vec<&'static str>),
    Foreign(String),
}

/// The comparison all kinds share: ownership first, then the spec difference (`spec_diff`
/// gets whether the object carries our label), plus a stale owner reference.
fn compare(
    meta: &Meta,
    owner: &OwnerId<'_>,
    spec_diff: impl FnOnce(bool) -> Vec<&'static str>,
) -> Comparison {
    let ctl = control(meta, owner);
    if let Control::Other(why) = ctl {
        return Comparison::Foreign(why);
    }
    let mut diff = spec_diff(meta.managed_by_us());
    if ctl == Control::StaleOwner {
        diff.push("metadata.ownerReferences");
    }
    if diff.is_empty() {
        Comparison::InSync
    } else {
        Comparison::OutOfSync(diff)
    }
}

pub fn compare_policy(
    desired: &ValidatingAdmissionPolicy,
    observed: &Policy,
    owner: &OwnerId<'_>,
) -> Comparison {
    compare(&observed.meta, owner, |ours| {
        let d = normalize::policy_spec(desired.spec.clone());
        let o = normalize::policy_spec(observed.object.spec.clone());
        if ours {
            normalize::policy_diff(&d, &o)
        } else {
            normalize::policy_diff_semantic(&d, &o)
        }
    })
}

/// A constraint CRD against the one its template defines. A CRD without a controller is
/// adopted as Gatekeeper adopts it: without a write when it is already what the template
/// defines, with one update (spec and controller reference) when it is not.
pub fn compare_crd(
    desired: &serde_json::Value,
    observed: &CrdInfo,
    owner: &OwnerId<'_>,
) -> Comparison {
    if observed.meta.controller().is_none() {
        let mut diff = crd::spec_diff(&desired["spec"], &observed.spec, true);
        if !diff.is_empty() {
            diff.push("metadata.ownerReferences");
            return Comparison::OutOfSync(diff);
        }
        return Comparison::InSync;
    }
    compare(&observed.meta, owner, |ours| {
        crd::spec_diff(&desired["spec"], &observed.spec, !ours)
    })
}

pub fn compare_binding(
    desired: &ValidatingAdmissionPolicyBinding,
    observed: &Binding,
    owner: &OwnerId<'_>,
) -> Comparison {
    compare(&observed.meta, owner, |ours| {
        let d = normalize::binding_spec(desired.spec.clone());
        let o = normalize::binding_spec(observed.object.spec.clone());
        normalize::binding_diff(&d, &o, !ours)
    })
}
