//! The one fixture module of the test binaries and the benchmarks (tests: `mod support;`, or
//! `#[path = "../support/mod.rs"] mod support;` from a test folder; benches:
//! `#[path = "../tests/support/mod.rs"] mod support;`). What starts or signals processes
//! (kube-apiserver, etcd, kube-controller-manager, Gatekeeper) is in `crates/testenv`; what
//! knows kubectl-vap is here:
//!
//! - [`objects`]: ConstraintTemplates, constraints and snapshots as JSON, the names of what is
//!   generated for them, and what kubectl-vap generates for them (offline).
//! - [`cluster`]: creating and reading those objects on a test API server.
//! - [`rbac`]: grants to a (non-admin or impersonated) user, from `install --print`'s rules.
//! - [`library`]: the library-style samples (`tests/fixtures/library`).
//! - [`metrics`]: reading Prometheus text (the API server's `apiserver_request_total`, our
//!   `/metrics`).
//! - [`poll`]: waiting until something holds.
//! - [`reconciler`]: the one door to a reconciler running in the test process.
//! - [`cli`]: the `kubectl-vap` binary as a child process.
//! - [`bench`]: the benchmarks' knobs and runtime.
//! - [`tmux`]: a real terminal (tmux) for the TUI tests.
//! - [`tui`]: the TUI tests' snapshot (`tests/fixtures/tui/snapshot.yaml` plus generated
//!   objects).
//! - [`image`]: the container image's facts (image config, Dockerfile, `install --print`).
#![allow(dead_code)]

pub mod bench;
pub mod cli;
pub mod cluster;
pub mod image;
pub mod library;
pub mod metrics;
pub mod objects;
pub mod poll;
pub mod rbac;
pub mod reconciler;
pub mod tmux;
pub mod tui;
