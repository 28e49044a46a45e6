//! kubectl-vap's pure core, a crate of its own so that the compiler guards its purity: its
//! dependencies hold no runtime, client, lock or system call (no tokio, kube client,
//! parking_lot, libc, anyhow). What it computes depends on its arguments alone; the edges (the
//! `kubectl-vap` crate) pass in what it needs from the world: the clock as
//! [`snapshot::Snapshot::now`], the CEL checker as [`core::Options::cel`].
//!
//! Bottom to top (docs/architecture.md; `tests/layering.rs` checks the imports and what the
//! compiler cannot: no thread, file, environment, clock, print or mutable static):
//!
//! - [`model`]: typed views of what we read (templates, constraints, policies, bindings, CRDs).
//! - [`text`]: terminal-safe text (open to all).
//! - [`snapshot`]: everything read, in one value, plus the clock.
//! - [`core`]: the pure decisions: generation, analysis, plan, findings, tree, matching.
#![forbid(unsafe_code)]

pub mod core;
pub mod model;
pub mod snapshot;
pub mod text;
