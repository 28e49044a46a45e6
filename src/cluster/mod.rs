//! The IO edge towards the API server: building a client from kubectl's connection flags,
//! discovering the served VAP API, listing a live [`Snapshot`](crate::snapshot::Snapshot), and
//! applying a [`PlannedWrite`](crate::core::PlannedWrite) with preconditions.

pub mod access;
pub mod apply;
pub mod assemble;
pub mod client;
pub mod discovery;
pub mod list;

pub use apply::{Applied, apply_write};
pub use client::{client_from, config_from};
pub use discovery::{AdmissionApi, discover_admission_api};
pub use list::list_snapshot;

/// Errors at the IO edge. Each carries what was being done.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error("loading the kubeconfig: {0}")]
    Config(String),
    #[error(
        "the in-cluster configuration is not available: {0} (--in-cluster is for a pod with a service account; elsewhere use --kubeconfig/--context)"
    )]
    InCluster(String),
    #[error("creating the Kubernetes client: {0}")]
    Client(#[source] Box<kube::Error>),
    #[error("{what}: {source}")]
    Request {
        what: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error(
        "the API server serves no ValidatingAdmissionPolicy API (admissionregistration.k8s.io v1 or v1beta1); VAP needs Kubernetes >= 1.30 (or 1.28/1.29 with the feature gate and runtime config)"
    )]
    VapApiMissing,
    #[error("{what}: forbidden: {message}")]
    Forbidden { what: String, message: String },
}

impl KubeError {
    pub fn request(what: impl Into<String>, source: kube::Error) -> Self {
        let what = what.into();
        if let kube::Error::Api(status) = &source
            && (status.code == 403 || status.code == 401)
        {
            return KubeError::Forbidden {
                what,
                message: status.message.clone(),
            };
        }
        KubeError::Request {
            what,
            source: Box::new(source),
        }
    }
}

/// The HTTP status code of an API error, if the error is one.
pub fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}
