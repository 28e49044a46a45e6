//! kubectl-vap: Gatekeeper ConstraintTemplates as ValidatingAdmissionPolicies.
//!
//! Layout: see docs/architecture.md. `model` (typed views of what we read), `core` (pure decisions,
//! analysis), `load` (files → snapshot), `cli` (commands and output).

pub mod admission;
pub mod cli;
pub mod cluster;
pub mod controller;
pub mod core;
pub mod load;
pub mod logging;
pub mod model;
pub mod snapshot;
pub mod tui;
