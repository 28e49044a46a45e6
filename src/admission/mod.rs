//! Admission debugging against the real API server: `test` (a manifest dry-run through the
//! admission chain) and `audit` (a no-op dry-run update of every existing object a constraint
//! selects). The server decides; the pure core reads its replies (`core::verdict`) and says
//! which bindings select an object (`core::matching`). Nothing here writes: every mutating
//! request carries `dryRun=All`.

pub mod audit;
pub mod dryrun;
pub mod objects;
pub mod rate;
pub mod session;
pub mod test;

pub use session::{audit_on_snapshot, audit_quietly, test_on_snapshot, test_quietly};

/// Errors of the admission commands. Each says what was being done.
#[derive(Debug, thiserror::Error)]
pub enum AdmissionError {
    #[error("{what}: {source}")]
    Request {
        what: String,
        #[source]
        source: Box<kube::Error>,
    },
    /// The API server answered no: its message, reason and code
    /// ([`crate::cluster::describe`]), not kube's debug dump of the Status.
    #[error("{what}: {message}")]
    Refused { what: String, message: String },
    /// `audit`'s target names a template none of whose constraints exist.
    #[error("template {0} has no constraints to audit")]
    NoConstraints(String),
    /// `audit`'s target names no template and no constraint.
    #[error("no template or constraint named {0}")]
    NothingNamed(String),
    /// An object could not be made a request body (a bug, not the input).
    #[error("encoding {what}: {source}")]
    Encode {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    /// The dry-run request could not be built (e.g. a name no URL can hold).
    #[error("{what}: {source}")]
    Build {
        what: &'static str,
        #[source]
        source: kube::core::request::Error,
    },
}

impl AdmissionError {
    pub fn request(what: impl Into<String>, source: kube::Error) -> Self {
        match source {
            kube::Error::Api(_) => AdmissionError::Refused {
                what: what.into(),
                message: crate::cluster::describe(&source),
            },
            source => AdmissionError::Request {
                what: what.into(),
                source: Box::new(source),
            },
        }
    }
}
