//! What the controller reads off a watched object, the same for the stores and the watches:
//! the keys an event on it concerns (through its controller owners) and a CRD's state.

use super::keys::Key;
use crate::core::desired::CrdState;
use crate::core::ownership::is_controller_in;
use crate::model::{CONSTRAINTS_GROUP, TEMPLATES_GROUP};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::DynamicObject;

/// The controller ownerReferences of `meta` in API group `group` (`core::ownership`'s rule).
pub fn controllers_in<'a>(
    meta: &'a ObjectMeta,
    group: &'a str,
) -> impl Iterator<Item = &'a OwnerReference> + 'a {
    meta.owner_references
        .iter()
        .flatten()
        .filter(move |r| is_controller_in(&r.api_version, r.controller, group))
}

/// The keys an event on a VAP concerns: its controller template, and the template its name
/// belongs to (so a foreign VAP going away lets the template write its own).
pub fn policy_keys(p: &DynamicObject) -> Vec<Key> {
    let mut keys: Vec<Key> = controllers_in(&p.metadata, TEMPLATES_GROUP)
        .map(|r| Key::Template(r.name.clone()))
        .collect();
    if let Some(t) = p
        .metadata
        .name
        .as_deref()
        .and_then(|n| n.strip_prefix("gatekeeper-"))
        && !keys.contains(&Key::Template(t.to_string()))
    {
        keys.push(Key::Template(t.to_string()));
    }
    keys
}

/// The keys an event on a VAPB concerns: its controller constraint.
pub fn binding_keys(b: &DynamicObject) -> Vec<Key> {
    controllers_in(&b.metadata, CONSTRAINTS_GROUP)
        .map(|r| Key::constraint(&r.kind, &r.name))
        .collect()
}

/// Whether a CRD serves its kind, and since when (the `Established` condition's transition).
pub fn crd_state(crd: &CustomResourceDefinition) -> CrdState {
    let condition = crd
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Established"));
    match condition {
        Some(c) if c.status == "True" => {
            CrdState::Established(c.last_transition_time.as_ref().and_then(|t| {
                chrono::DateTime::from_timestamp(t.0.as_second(), t.0.subsec_nanosecond() as u32)
            }))
        }
        _ => CrdState::NotEstablished,
    }
}
