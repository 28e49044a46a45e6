//! What a copy knows of itself and publishes: the published types (`state`: `LiveState`, what
//! happened on the feed, the Lease as every copy sees it), one lock over what it knows now
//! (`status`: the feed, the newest reconcile actions, access errors, write permission, synced,
//! failed writes), and whether it leads and until when it may write (`fence`).

pub mod fence;
pub mod state;
pub mod status;
