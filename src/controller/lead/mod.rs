//! Leading: the election on the Lease that sets the write fence, the renewals that carry the
//! answers to requests, and a copy that does not compete watching the holder (`lease`); and
//! requests as this copy handles them, here when it leads, through the holder otherwise, with
//! the holder's side of the requests channel (`commands`); whether this copy may lead at all
//! (`rights`).

pub mod commands;
pub mod lease;
pub mod rights;
