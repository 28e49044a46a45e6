//! What a copy tells people: Kubernetes Events, sent and read back (`events`), metrics and the
//! `/metrics`, `/healthz`, `/readyz` server (`metrics`), runs of failures told without
//! flooding (`outage`), what was decided, where Gatekeeper's users look (`pod_status`), and
//! each write's log line, counted when one object is written again and again (`write_log`).

pub mod events;
pub mod metrics;
pub mod outage;
pub mod pod_status;
pub mod write_log;
