//! One way from objects read off the API server to a [`Snapshot`]: `check`/`plan` (one
//! listing, [`super::list`]) and the controller (its watch stores) both assemble theirs here,
//! so the TUI on a live cluster and `check` see the same things (Gatekeeper's pod statuses
//! included).

use super::access::{AccessError, unreadable};
use crate::core::crd::CRD_KIND;
use crate::model::{CONSTRAINTS_GROUP, Source};
use crate::snapshot::Snapshot;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::DynamicObject;
use kube::core::ApiResource;
use std::collections::BTreeSet;

/// An object as JSON with its type set (list and watch items may lack it).
pub fn dyn_to_value(obj: &DynamicObject, ar: &ApiResource) -> serde_json::Value {
    let mut v = serde_json::to_value(obj).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert("apiVersion".into(), ar.api_version.clone().into());
        o.insert("kind".into(), ar.kind.clone().into());
    }
    v
}

/// A CRD as JSON with its type set.
pub fn crd_to_value(crd: &CustomResourceDefinition) -> serde_json::Value {
    let mut v = serde_json::to_value(crd).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert("apiVersion".into(), "apiextensions.k8s.io/v1".into());
        o.insert("kind".into(), CRD_KIND.into());
    }
    v
}

/// Builds a snapshot object by object.
pub struct Assembly {
    snap: Snapshot,
    /// Log a skipped object as a warning (a one-off listing) or only at debug level (a
    /// snapshot rebuilt on every change would repeat it).
    warn: bool,
}

impl Default for Assembly {
    fn default() -> Self {
        Self::new()
    }
}

impl Assembly {
    pub fn new() -> Self {
        Assembly {
            snap: Snapshot::default(),
            warn: true,
        }
    }

    /// An assembly that is rebuilt often: skipped objects are logged at debug level.
    pub fn quiet() -> Self {
        Assembly {
            warn: false,
            ..Self::new()
        }
    }

    /// Any object (template, constraint, VAP, binding, pod status) of resource `ar`.
    pub fn object(&mut self, obj: &DynamicObject, ar: &ApiResource) {
        self.value(dyn_to_value(obj, ar));
    }

    /// A CRD: only constraint CRDs are part of the analysis.
    pub fn crd(&mut self, crd: &CustomResourceDefinition) {
        if crd.spec.group == CONSTRAINTS_GROUP {
            self.value(crd_to_value(crd));
        }
    }

    pub fn value(&mut self, raw: serde_json::Value) {
        if let Err(e) = self.snap.insert(raw, Source::default()) {
            if self.warn {
                tracing::warn!("skipping an unreadable object: {e}");
            } else {
                tracing::debug!("skipping an unreadable object: {e}");
            }
        }
    }

    /// The snapshot at the current time. `errors` are what could not be read; `unknown` the
    /// stores that prove nothing for another reason (still listing, relisting).
    pub fn finish(
        mut self,
        errors: &[AccessError],
        unknown: impl IntoIterator<Item = String>,
    ) -> Snapshot {
        self.snap.now = Some(chrono::Utc::now());
        self.snap.crds_listed = true;
        let mut unreadable: BTreeSet<String> = unreadable(errors);
        unreadable.extend(unknown);
        self.snap.unreadable = unreadable;
        self.snap
    }
}
