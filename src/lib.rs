//! kubectl-vap: Gatekeeper ConstraintTemplates as ValidatingAdmissionPolicies.
//!
//! Layout and the dependency rules (checked by `tests/layering.rs`): docs/architecture.md.
//! `model`, `snapshot` and `core` (and the pure half of `text`) are the crate `kubectl-vap-core`
//! (crates/core), re-exported here under the same paths.
//! Bottom to top, in the order of `RULES` there, each module imports only those above it in
//! this list (not necessarily all of them):
//!
//! - [`model`]: typed views of what we read (templates, constraints, policies, bindings, CRDs).
//! - [`text`]: text for people: an error chain in one line, terminal-safe strings (open to all).
//! - [`logging`]: process-wide log subscribers (used by `cli` and `tui` only).
//! - [`snapshot`]: everything read, in one value, plus the clock.
//! - [`core`]: the pure decisions: generation, analysis, plan, findings, tree, matching.
//! - [`load`]: files, folders and stdin → a snapshot.
//! - [`cluster`]: the API server edge: connection options, client, discovery, listing, apply.
//! - [`admission`]: `test` and `audit`: server-side dry-runs read back into verdicts.
//! - [`controller`]: the live reconciler: watches, stores, the two reconcilers, lease, metrics.
//! - [`tui`]: the terminal UI over a data source (files or the live controller).
//! - [`cli`]: clap arguments and command handlers; only `main.rs` imports it.
#![forbid(unsafe_code)]

pub mod admission;
pub mod cli;
pub mod cluster;
pub mod controller;
pub mod load;
pub mod logging;
pub mod text;
pub mod tui;

// The pure core is its own crate (crates/core), so the compiler keeps tokio, kube's client,
// locks and system calls out of it; its modules keep their paths here (`crate::core::…`).
pub use kubectl_vap_core::{core, model, snapshot};
