//! A decision: the key a worker takes (`keys`), the world the reconcilers read and write
//! through (`world`: the store traits, `Read`, the `Writer` and what came of a write), the
//! opinion cache (`cache`), the queue (`queue`), the two reconcilers and their `Outcome`
//! (`reconcilers`), and one worker's step (`worker::process`), which the tier-2 tests run on
//! an in-memory world. Nothing here talks to the cluster: the live world is `store::Stores`
//! and `run::writer::Live`.

pub mod cache;
pub mod keys;
pub mod queue;
pub mod reconcilers;
pub mod worker;
pub mod world;
