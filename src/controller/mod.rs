//! The shared-cache reconciler of gatekeeper#3287 (docs/reconciler.md) behind one door:
//! [`Controller`], which [`launch`] returns; nothing outside reaches its stores, queue or locks.
//! The public modules are for the tier-2 tests, which run the same logic on an in-memory world;
//! [`gatekeeper`] for the message that says how to switch Gatekeeper's generator off. Every
//! module, and the layers they form (`tests/layering.rs`): docs/architecture.md.
//!
//! Its folders, bottom up: each file imports only files of its own folder or of one before it
//! (`tests/layering.rs`, `FOLDERS`):
//! - `tasks.rs`: the supervisor every task of a copy starts through;
//! - `reconcile/`: a decision: keys, the world the reconcilers see, the opinion cache, the
//!   queue, the two reconcilers, one worker's step;
//! - `store/`: what a copy has read of the cluster (the reflector stores);
//! - `view/`: what a copy knows of itself and publishes (state, status, the write fence);
//! - `tell/`: what it tells people (Events, metrics, runs of failures);
//! - `error.rs`: [`Error`], [`RequestError`];
//! - `ask/`: a request to the leader (tracked, and the requests channel);
//! - `watch/`: the tasks that keep the stores current;
//! - `lead/`: the election on the Lease, and the requests the leader serves;
//! - `run/`: start-up, the door [`Controller`], the writer, the live workers, publishing.
//!
//! Each task takes a context of the parts it touches (`WatchContext`, `LeaseContext`, …),
//! defined beside the task; start-up (`run/start.rs`) alone holds every part, and builds them.

mod ask;
mod error;
mod lead;
mod reconcile;
mod run;
mod store;
mod tasks;
mod tell;
mod view;
mod watch;

// The modules named from outside (the tier-2 tests, the TUI, the CLI), at their paths.
pub use reconcile::{cache, keys, queue, reconcilers, worker, world};
pub use run::handle;
pub use view::state;
pub use watch::gatekeeper;

/// Asks the lease holder to handle a command, as a copy that does not lead does.
pub use ask::channel::ask as ask_holder;
pub use ask::channel::configmap_name as requests_configmap;
pub use error::{Error, RequestError};
pub use lead::lease::{LEASES, default_identity, read_lease};
pub use lead::rights::{ASK_AGAIN as RIGHTS_ASKED_AGAIN, RIGHTS};
pub use reconcile::keys::Scope;
pub use run::handle::{Controller, Convergence, NotLeading};
pub use run::start::{
    Config, DEFAULT_LEASE_NAME, DEFAULT_LEASE_NAMESPACE, DEFAULT_WORKERS, Mode, Tuning, launch,
};
pub use tell::events::EVENTS_RESOURCE;
pub use view::state::{
    AccessError, AccessErrorKind, ClusterEvent, Command, Connection, EventReason, EventResult,
    EventVerb, FailedWrite, Happened, LeaderHealth, LeaseChange, LeaseInfo, LeaseRefused,
    LeaseTurn, LiveState, ReconcileEvent, RequestOutcome, WriteError,
};
