//! Where the UI's data comes from: the `Source` trait, files read offline, deadlines
//! (`source`); and the live reconciler: its published `LiveState` as `Data` (`from_live`) and
//! the adapter that runs it on the UI's runtime (`live_source`).

pub mod from_live;
pub mod live_source;
pub mod source;
