//! Waiting until something holds. Everything the API server (and a reconciler) learns through
//! informers arrives a moment after the write: poll, never assume.

use std::future::Future;
use std::time::Duration;

pub use testenv::poll::within;

/// How often [`eventually`] and [`eventually_some`] look.
pub const EVERY: Duration = Duration::from_millis(200);

/// Waits until `probe` holds, polling every 200 ms; fails the test after `timeout`, naming
/// `what`.
pub async fn eventually<F, Fut>(what: &str, timeout: Duration, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    eventually_some(what, timeout, || {
        let p = probe();
        async move { p.await.then_some(()) }
    })
    .await
}

/// Waits until `probe` gives `Some`, polling every 200 ms, and returns what it gave; fails the
/// test after `timeout`, naming `what`.
pub async fn eventually_some<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    within(timeout, EVERY, || {
        let p = probe();
        async move { p.await.ok_or(()) }
    })
    .await
    .unwrap_or_else(|()| panic!("{what}: not within {timeout:?}"))
}
