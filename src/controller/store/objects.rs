//! What the controller reads off a watched object, the same for the stores and the watches:
//! the keys an event on it concerns (through its controller owners) and a CRD's state.

use crate::cluster::apply::FIELD_MANAGER;
use crate::controller::reconcile::keys::Key;
use crate::core::desired::CrdState;
use crate::core::ownership::is_controller_in;
use crate::model::{CONSTRAINTS_GROUP, TEMPLATES_GROUP};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    ManagedFieldsEntry, ObjectMeta, OwnerReference,
};
use kube::api::DynamicObject;

/// A Kubernetes time (k8s-openapi's jiff) as the controller's (chrono); `None` beyond chrono's
/// range.
pub fn chrono_of(t: k8s_openapi::jiff::Timestamp) -> Option<chrono::DateTime<chrono::Utc>> {
    // jiff's fraction is signed like its seconds (negative before 1970), chrono's never.
    let nanos = chrono::TimeDelta::nanoseconds(t.subsec_nanosecond().into());
    chrono::DateTime::from_timestamp(t.as_second(), 0)?.checked_add_signed(nanos)
}

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

/// The keys an event on a VAP concerns: its controller template, or its controller
/// constraint (the inline shape's VAP of one constraint), and the template its name belongs
/// to (so a foreign VAP going away lets the template write its own).
pub fn policy_keys(p: &DynamicObject) -> Vec<Key> {
    let mut keys: Vec<Key> = controllers_in(&p.metadata, TEMPLATES_GROUP)
        .map(|r| Key::Template(r.name.clone()))
        .chain(binding_keys(p))
        .collect();
    let name = p.metadata.name.as_deref().unwrap_or_default();
    if let Some(t) = name
        .strip_prefix("gatekeeper-")
        .filter(|t| !t.contains('.'))
        && !keys.contains(&Key::Template(t.into()))
    {
        keys.push(Key::Template(t.into()));
    }
    keys
}

/// The keys an event on a VAPB concerns: its controller constraint.
pub fn binding_keys(b: &DynamicObject) -> Vec<Key> {
    controllers_in(&b.metadata, CONSTRAINTS_GROUP)
        .map(|r| Key::constraint(&r.kind, &r.name))
        .collect()
}

/// Whether `crd` is the constraint CRD of `kind`.
pub fn is_constraint_crd(crd: &CustomResourceDefinition, kind: &str) -> bool {
    crd.spec.group == CONSTRAINTS_GROUP && crd.spec.names.kind == kind
}

pub fn established(crd: &CustomResourceDefinition) -> bool {
    crd_state(crd) != CrdState::NotEstablished
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
            CrdState::Established(c.last_transition_time.as_ref().and_then(|t| chrono_of(t.0)))
        }
        _ => CrdState::NotEstablished,
    }
}

/// Keeps of `meta.managedFields` only the newest entry that changed the object itself (a status
/// subresource's writer — the API server's type checker on a VAP — changed nothing this copy
/// writes), without its fields: the writer [`last_writer`] reads, to tell another writer
/// undoing ours (`core::contest`). Times have one-second granularity and the server orders
/// equal times by manager name, so of two writers in the same second another is taken over
/// this copy: in a write war both write every second, and the name must not decide.
pub fn keep_last_writer(meta: &mut ObjectMeta) {
    let ours = |e: &ManagedFieldsEntry| e.manager.as_deref() == Some(FIELD_MANAGER);
    let newest = meta
        .managed_fields
        .take()
        .into_iter()
        .flatten()
        .filter(|e| e.subresource.as_deref().unwrap_or("").is_empty())
        .max_by_key(|e| (e.time.as_ref().map(|t| t.0), !ours(e)));
    meta.managed_fields = newest.map(|e| {
        vec![ManagedFieldsEntry {
            fields_v1: None,
            ..e
        }]
    });
}

/// The field manager that last changed an object kept by a store ([`keep_last_writer`]).
pub fn last_writer(meta: &ObjectMeta) -> Option<&str> {
    meta.managed_fields.as_ref()?.first()?.manager.as_deref()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    #[test]
    fn a_kubernetes_time_is_the_same_instant_in_chrono() {
        // Before 1970 jiff's fraction is negative, chrono's is not: still the same instant.
        for (jiff, chrono) in [
            ((1_700_000_000, 123_456_000), (1_700_000_000, 123_456_000)),
            ((-1, -250_000_000), (-2, 750_000_000)),
        ] {
            let c = chrono_of(Timestamp::new(jiff.0, jiff.1).expect("in range")).expect("in range");
            assert_eq!((c.timestamp(), c.timestamp_subsec_nanos()), chrono);
        }
    }
}
