//! Waiting until something holds: what a test environment learns through informers (RBAC
//! grants, CRDs, policies) arrives a moment after the write. `tests/support/poll.rs` builds the
//! test-failing forms on this.

use std::future::Future;
use std::time::{Duration, Instant};

/// Calls `probe` every `every` until it returns `Ok`, and returns that; once `timeout` has
/// passed, the last `Err` instead (for the caller to say what it saw).
pub async fn within<T, E, F, Fut>(timeout: Duration, every: Duration, mut probe: F) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let start = Instant::now();
    loop {
        match probe().await {
            Ok(v) => return Ok(v),
            Err(e) if start.elapsed() >= timeout => return Err(e),
            Err(_) => tokio::time::sleep(every).await,
        }
    }
}
