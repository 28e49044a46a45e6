//! The one way the crate follows objects it does not keep stores of (the Lease, Events, the
//! requests ConfigMap, Gatekeeper's Config and pod statuses): kube-runtime's watcher (a list,
//! then a watch; a relist after a gap), retried with its default backoff, so a watch the
//! server refuses is retried calmly and never in a tight loop. Every failure is logged at
//! debug level, naming what was watched, and yielded for a caller that says more (an access
//! error, a view's state); none ends the stream. The reconciler's own stores have a reflector of
//! their own (controller/watch/watches.rs): they need to know when a list is *watched*, which the
//! watcher cannot say.

use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use kube::Resource;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde::de::DeserializeOwned;
use std::fmt::Debug;

/// What a watch yields: a change, or why it failed this time (it goes on).
pub type Changes<K> = BoxStream<'static, Result<Event<K>, watcher::Error>>;

/// Every change of the objects `api` and `config` select; `what` names them in the log.
pub fn changes<K>(api: Api<K>, config: watcher::Config, what: impl Into<String>) -> Changes<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    retried_and_logged(watcher::watcher(api, config), what.into())
}

/// The object `name` as it changes: `Some` as it is now, `None` while it does not exist
/// (kube-runtime's `watch_object`, with the backoff and the log of [`changes`]); `what` names
/// it in the log.
pub fn object<K>(
    api: Api<K>,
    name: &str,
    what: impl Into<String>,
) -> BoxStream<'static, Result<Option<K>, watcher::Error>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    retried_and_logged(watcher::watch_object(api, name), what.into())
}

/// kube-runtime's default backoff, and one debug line per failure naming `what`.
fn retried_and_logged<T: Send + 'static>(
    stream: impl futures::Stream<Item = Result<T, watcher::Error>> + Send + 'static,
    what: String,
) -> BoxStream<'static, Result<T, watcher::Error>> {
    stream
        .default_backoff()
        .inspect_err(move |e| tracing::debug!("watching {what}: {}", describe(e)))
        .boxed()
}

/// The HTTP status of a failed watch; `None` when the server did not answer at all.
pub fn status(e: &watcher::Error) -> Option<u16> {
    match e {
        watcher::Error::InitialListFailed(k)
        | watcher::Error::WatchStartFailed(k)
        | watcher::Error::WatchFailed(k) => super::status_code(k),
        watcher::Error::WatchError(s) => Some(s.code),
        watcher::Error::NoResourceVersion => None,
    }
}

/// A failed watch for people: the API server's words, without kube's debug dump.
pub fn describe(e: &watcher::Error) -> String {
    match e {
        watcher::Error::InitialListFailed(k)
        | watcher::Error::WatchStartFailed(k)
        | watcher::Error::WatchFailed(k) => super::describe(k),
        _ => crate::text::error_text(e),
    }
}
