//! A snapshot of everything the analysis reads: loaded from files or copied from the live stores.

use crate::model::{Binding, Constraint, ConstraintTemplate, CrdInfo, PodStatus, Policy};
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub templates: Vec<ConstraintTemplate>,
    pub constraints: Vec<Constraint>,
    /// Constraint CRDs only (group `constraints.gatekeeper.sh`).
    pub crds: Vec<CrdInfo>,
    pub policies: Vec<Policy>,
    pub bindings: Vec<Binding>,
    pub pod_statuses: Vec<PodStatus>,
    /// Objects of other kinds: counted, not used (`kind` → count).
    pub ignored: BTreeMap<String, usize>,
    /// When the snapshot was taken: the clock that `--binding-wait` is measured against.
    pub now: Option<DateTime<Utc>>,
}

impl Snapshot {
    pub fn object_count(&self) -> usize {
        self.templates.len()
            + self.constraints.len()
            + self.crds.len()
            + self.policies.len()
            + self.bindings.len()
            + self.pod_statuses.len()
    }
}
