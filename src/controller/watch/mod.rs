//! The tasks that keep a copy's stores current: the watches that fill them, every event
//! mapped to its keys (`watches`), what the API server serves (`discovery`), whether
//! Gatekeeper's own generator runs (`gatekeeper`), and Gatekeeper's Config and validating
//! webhook (`gatekeeper_config`); [`resync::Resync`], everything enqueued again, which they
//! and the tasks above ask for. Each task takes a context of the parts it touches, defined
//! beside it.

pub mod discovery;
pub mod gatekeeper;
pub mod gatekeeper_config;
pub mod resync;
pub mod watches;
