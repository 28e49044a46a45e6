//! What a failed read of a resource means for the user: forbidden, not served, or anything
//! else (retried). Shared by the one-off listing of `check`/`plan` and the controller's watches.

/// A resource the reconciler cannot read or watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessError {
    /// e.g. `constrainttemplates.templates.gatekeeper.sh`, `validatingadmissionpolicies.admissionregistration.k8s.io`.
    pub resource: String,
    pub kind: AccessErrorKind,
    /// What happened and what fixes it.
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessErrorKind {
    /// 401/403: the user lacks a right.
    Forbidden,
    /// The resource is not served (CRD not installed, API disabled).
    NotServed,
    /// Anything else (network, timeouts): retried.
    Other,
}

impl AccessError {
    /// What a failed read of `resource` means for the user, from the HTTP status (if any) and
    /// the error text for anything else. `verb` says what was being done ("reading", "watching").
    pub fn from_status(
        resource: &str,
        status: Option<u16>,
        verb: &str,
        error: &dyn std::fmt::Display,
    ) -> Self {
        let resource = resource.to_string();
        match status {
            Some(401 | 403) => AccessError {
                message: format!(
                    "forbidden: cannot list/watch {resource}; grant it with a ClusterRole from `kubectl vap install --print` (kubectl-vap to reconcile, kubectl-vap-operator to look; `kubectl vap help rbac`)"
                ),
                resource,
                kind: AccessErrorKind::Forbidden,
            },
            Some(404) => AccessError {
                message: format!("{resource} is not served (CRD not installed or API disabled)"),
                resource,
                kind: AccessErrorKind::NotServed,
            },
            _ => AccessError {
                message: format!("{verb} {resource}: {error}"),
                resource,
                kind: AccessErrorKind::Other,
            },
        }
    }
}

impl AccessErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AccessErrorKind::Forbidden => "forbidden",
            AccessErrorKind::NotServed => "not-served",
            AccessErrorKind::Other => "error",
        }
    }
}

/// Resources whose stores prove nothing (forbidden or not served), for `Snapshot::unreadable`.
pub fn unreadable<'a>(
    errors: impl IntoIterator<Item = &'a AccessError>,
) -> std::collections::BTreeSet<String> {
    errors
        .into_iter()
        .filter(|e| e.kind != AccessErrorKind::Other)
        .map(|e| e.resource.clone())
        .collect()
}
