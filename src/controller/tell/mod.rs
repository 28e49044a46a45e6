//! What a copy tells people: Kubernetes Events, sent and read back (`events`), metrics and the
//! `/metrics`, `/healthz`, `/readyz` server (`metrics`), and runs of failures told without
//! flooding (`outage`).

pub mod events;
pub mod metrics;
pub mod outage;
