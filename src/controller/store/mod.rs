//! What a copy has read of the cluster: the reflector stores the live reconcilers read, with
//! what is listed and watched and the read-your-writes overlay (`stores`), and what is read
//! off a watched object (`objects`: the keys an event on it concerns, a CRD's state, a
//! Kubernetes time).

pub mod objects;
pub mod stores;
