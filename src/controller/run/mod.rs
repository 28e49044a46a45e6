//! A running copy: start-up as named phases (`start`), the door `Controller` (`handle`), the
//! `Writer` a worker writes one key's reconcile through and the one observer of each write
//! (`writer`), the live workers (`workers`), and the published state and `/readyz`
//! (`publish`).

pub mod handle;
pub mod publish;
pub mod start;
pub mod workers;
pub mod writer;
