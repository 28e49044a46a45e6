//! The IO edge towards the API server: building a client from kubectl's connection flags,
//! discovering the served VAP API, listing a live [`Snapshot`](crate::snapshot::Snapshot), and
//! applying a [`PlannedWrite`](crate::core::PlannedWrite) with preconditions.

pub mod access;
pub mod apply;
pub mod assemble;
pub mod client;
pub mod deadline;
pub mod decode;
pub mod discovery;
pub mod list;
pub mod watch;

pub use apply::{Applied, apply_write};
pub use client::{client_from, config_from};
pub use discovery::{AdmissionApi, NoVapV1, discover_admission_api};
pub use list::list_snapshot;

/// Errors at the IO edge. Each carries what was being done.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error("loading the kubeconfig: {0}")]
    Config(#[source] ConfigError),
    /// `--context NAME` that the kubeconfig does not have: kubectl's words, and the fix.
    #[error("context {name:?} does not exist{hint}")]
    NoContext { name: String, hint: String },
    #[error(
        "the in-cluster configuration is not available: {0} (--in-cluster is for a pod with a service account; elsewhere use --kubeconfig/--context)"
    )]
    InCluster(#[source] kube::config::InClusterError),
    /// The API server refuses groups without a user to impersonate: said before asking it.
    #[error("--as-group needs --as")]
    GroupWithoutUser,
    /// The command name made a header no HTTP request can carry (a bug, not the user's).
    #[error("the User-Agent {0:?} is not a valid header value")]
    UserAgent(String),
    #[error("creating the Kubernetes client: {0}")]
    Client(#[source] Box<kube::Error>),
    #[error("{what}: {}", describe(source))]
    Request {
        what: String,
        #[source]
        source: Box<kube::Error>,
    },
    /// No ValidatingAdmissionPolicy v1: the one message for every command and the TUI.
    #[error("{0}")]
    NoVapV1(discovery::NoVapV1),
    /// 401/403: the server's answer says what is missing.
    #[error("{what}: forbidden: {}", describe(source))]
    Forbidden {
        what: String,
        #[source]
        source: Box<kube::Error>,
    },
}

/// What was wrong with the kubeconfig (kube's error, and the file it came from).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The path once: kube's own message names it again (`failed to read kubeconfig from
    /// '"PATH"'`), so a file that cannot be read says only the OS's reason.
    #[error("{}: {}", path.display(), read_reason(cause))]
    Read {
        path: std::path::PathBuf,
        cause: kube::config::KubeconfigError,
    },
    /// No --kubeconfig or KUBECONFIG, and the default one could not be read.
    #[error("{0} (set --kubeconfig or KUBECONFIG, or create ~/.kube/config)")]
    Default(#[source] kube::config::KubeconfigError),
    /// The files would not merge, or the context, cluster or user asked for is not there.
    #[error("{0}")]
    Kubeconfig(#[source] kube::config::KubeconfigError),
    #[error("--kubeconfig is empty")]
    Empty,
    /// kubectl refuses the two together: a CA to verify with, and no verification.
    #[error(
        "--certificate-authority and --insecure-skip-tls-verify together: verify with the CA, or do not verify"
    )]
    InsecureWithCa,
}

/// Why a kubeconfig file could not be used, without its path (said by [`ConfigError::Read`]).
fn read_reason(e: &kube::config::KubeconfigError) -> String {
    match e {
        kube::config::KubeconfigError::ReadConfig(io, _) => io.to_string(),
        other => other.to_string(),
    }
}

impl KubeError {
    pub fn request(what: impl Into<String>, source: kube::Error) -> Self {
        let what = what.into();
        if matches!(status_code(&source), Some(401 | 403)) {
            return KubeError::Forbidden {
                what,
                source: Box::new(source),
            };
        }
        KubeError::Request {
            what,
            source: Box::new(source),
        }
    }
}

/// A kube error for people: the API server's words ([`crate::text::kube_error_text`]).
pub fn describe(e: &kube::Error) -> String {
    crate::text::kube_error_text(e)
}

/// Whether `e` means the API server did not answer (connection refused or reset, no answer
/// within the request's bound, a stream cut): an outage, not an answer. An error without an
/// HTTP status is not always one: an answer that could not be decoded, or a request that
/// could not be built or authenticated, is a problem of its own, and retrying the connection
/// will not fix it.
pub fn unanswered(e: &kube::Error) -> bool {
    matches!(
        e,
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_)
    )
}

/// The HTTP status code of an API error, if the error is one.
pub fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_api_error_is_said_once_without_a_debug_dump() {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": 404, "reason": "NotFound",
            "message": "namespaces \"gatekeeper-system\" not found"
        }))
        .expect("status");
        let e = kube::Error::Api(Box::new(status));
        let text = describe(&e);
        assert_eq!(
            text,
            "namespaces \"gatekeeper-system\" not found (NotFound, 404)"
        );
        // What kube prints says the message twice, the second time as `Status { … }`.
        assert!(e.to_string().contains("Status {"), "{e}");
        let wrapped = KubeError::request("reading Lease gatekeeper-system/kubectl-vap", e);
        assert!(!wrapped.to_string().contains("Status {"), "{wrapped}");
    }

    /// A refusal keeps the server's answer; it is said once, with its reason and code.
    #[test]
    fn a_forbidden_request_says_the_servers_words_once() {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": 403, "reason": "Forbidden",
            "message": "customresourcedefinitions.apiextensions.k8s.io is forbidden: User \"u\" cannot list resource \"customresourcedefinitions\""
        }))
        .expect("status");
        let e = KubeError::request(
            "listing CustomResourceDefinitions",
            kube::Error::Api(Box::new(status)),
        );
        assert!(
            matches!(&e, KubeError::Forbidden { source, .. } if status_code(source) == Some(403))
        );
        let said = "listing CustomResourceDefinitions: forbidden: customresourcedefinitions.apiextensions.k8s.io is forbidden: User \"u\" cannot list resource \"customresourcedefinitions\" (Forbidden, 403)";
        assert_eq!(e.to_string(), said);
        assert_eq!(crate::text::error_text(&e), said);
    }
}
