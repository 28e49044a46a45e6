//! kubectl-vap: Gatekeeper ConstraintTemplates as ValidatingAdmissionPolicies.
//!
//! Layout: `model` (typed views of what we read), `core` (pure decisions, generation,
//! analysis), `load` (files → snapshot), `cli` (commands and output).

pub mod admission;
pub mod cli;
pub mod core;
pub mod kube;
pub mod load;
pub mod logging;
pub mod model;
pub mod reconciler;
pub mod snapshot;
pub mod tui;
