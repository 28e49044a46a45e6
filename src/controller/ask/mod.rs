//! A request to the leader (replay, reconcile): its keys tracked until each is reconciled and
//! its outcome summarised (`requests`), and the requests channel between a copy and the lease
//! holder (`channel`: the entry an asker writes into the requests ConfigMap, the holder's
//! desk, the answers published in the Lease, `ask`). Serving them is `lead::commands`.

pub mod channel;
pub mod requests;
