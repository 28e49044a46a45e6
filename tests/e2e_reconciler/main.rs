//! Tier 3: the reconciler against a real kube-apiserver + etcd (`testenv`): one test binary
//! (one shared API server), its tests grouped by topic:
//!
//! - `generation`: what is written for templates and constraints (flags, enforcement actions,
//!   the binding wait, a policy the server refuses), one write per change.
//! - `repair`: drift, foreign and legacy objects, deleted CRDs, the #3287 race and a storm,
//!   restarts on a converged cluster.
//! - `lease`: two copies and one writer, hand-over, the one-shot commands and the Lease,
//!   fencing of a paused leader.
//! - `gatekeeper`: beside Gatekeeper's own generator, and taking over its objects.
//! - `rbac`: least privilege, and no writes without the knowledge to write.
//! - `outage`: API server restarts, watch gaps, an outage's log.
//! - `cli`: the real binary's `run --once` then real admission, `/metrics`, `check` and `plan`.
//! - `fence`: issue 31 through a fault-injecting proxy (`testenv::proxy`): a throttled write
//!   after the Lease was lost, a renewal nobody answers, a hostile operator on the requests
//!   channel, a constraint nested too deep to decode, the User-Agent in the audit log.
//! - `operator`: `run` as an operator reads it: a missing right said once (exit 2 in the
//!   foreground, unready when told to wait), a template turned invalid and valid, once each.
//! - `rest`: the real binary's `run` left running: no CPU at rest, a dead task noticed.
//!
//! Every reconciler watches the whole cluster, so the tests of this binary run one at a time
//! (an `env::Env` holds the lock), each with its own kinds and its own Lease, and each removes what it
//! created. The pure analysis is the oracle: at quiescence `analyze(list_snapshot())` plans
//! nothing. `env.rs` holds the fixture; reconcilers are reached through `support::reconciler`.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]
// The serializing guard is held for a whole test on purpose; each test has its own runtime,
// so the lock is never contended within one runtime.
#![allow(clippy::await_holding_lock)]

#[path = "../support/mod.rs"]
mod support;

mod cli;
mod env;
mod fence;
mod gatekeeper;
mod generation;
mod lease;
mod operator;
mod outage;
mod rbac;
mod repair;
mod rest;
