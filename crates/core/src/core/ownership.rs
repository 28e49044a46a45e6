//! Who controls an observed object. Decided by the controller ownerReference, never by name:
//! an object with our name and another controller is foreign and never modified.

use crate::model::meta::{Meta, group_of};
use crate::model::{CONSTRAINTS_GROUP, OwnerRef, TEMPLATES_GROUP};

/// An owner as we know it: group, kind, name and (if known) uid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerId<'a> {
    pub group: &'a str,
    pub kind: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
}

impl<'a> OwnerId<'a> {
    pub fn template(name: &'a str, uid: &'a str) -> Self {
        OwnerId {
            group: TEMPLATES_GROUP,
            kind: "ConstraintTemplate",
            name,
            uid,
        }
    }
    pub fn constraint(kind: &'a str, name: &'a str, uid: &'a str) -> Self {
        OwnerId {
            group: CONSTRAINTS_GROUP,
            kind,
            name,
            uid,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// The controller is this owner (same group, kind, name; same uid where both have one).
    Owner,
    /// The controller is this owner's identity but an earlier incarnation (other uid): the owner
    /// was deleted and recreated. Ours to fix: the ownerReference is rewritten.
    StaleOwner,
    /// Something else controls it, or nothing does.
    Other(String),
}

pub fn control(meta: &Meta, owner: &OwnerId<'_>) -> Control {
    let Some(c) = meta.controller() else {
        return Control::Other("it has no controller ownerReference".into());
    };
    if !same_identity(c, owner) {
        return Control::Other(format!(
            "its controller is {} {} ({})",
            c.kind, c.name, c.api_version
        ));
    }
    if c.uid.is_empty() || owner.uid.is_empty() || c.uid == owner.uid {
        Control::Owner
    } else {
        Control::StaleOwner
    }
}

fn same_identity(c: &OwnerRef, owner: &OwnerId<'_>) -> bool {
    c.group() == owner.group && c.kind == owner.kind && c.name == owner.name
}

/// Whether an ownerReference — its `apiVersion` and `controller` flag, however it was read —
/// is the controller of its object and in API group `group`. The one spelling of the rule
/// for raw references (the live stores' objects, our own writes' JSON).
pub fn is_controller_in(api_version: &str, controller: Option<bool>, group: &str) -> bool {
    controller == Some(true) && group_of(api_version) == group
}

/// The Gatekeeper object (template or constraint) that controls `meta`, if any.
pub fn gatekeeper_controller(meta: &Meta) -> Option<&OwnerRef> {
    meta.controller().filter(|c| {
        [TEMPLATES_GROUP, CONSTRAINTS_GROUP]
            .iter()
            .any(|g| is_controller_in(&c.api_version, c.controller, g))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reference_controls_only_with_the_flag_and_in_its_own_group() {
        let v1beta1 = "constraints.gatekeeper.sh/v1beta1";
        assert!(is_controller_in(v1beta1, Some(true), CONSTRAINTS_GROUP));
        assert!(!is_controller_in(v1beta1, Some(false), CONSTRAINTS_GROUP));
        assert!(!is_controller_in(v1beta1, None, CONSTRAINTS_GROUP));
        assert!(!is_controller_in(v1beta1, Some(true), TEMPLATES_GROUP));
        // A group that merely starts like ours is another group.
        assert!(!is_controller_in(
            "constraints.gatekeeper.sh.example.com/v1",
            Some(true),
            CONSTRAINTS_GROUP
        ));
    }
}
