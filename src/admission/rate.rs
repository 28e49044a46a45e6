//! A token bucket for `--qps`/`--burst`, as client-go's rate limiter behaves: `burst` requests
//! may go at once, then `qps` per second. Shared by every task of a command.

use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl TokenBucket {
    /// `qps` ≤ 0 means unlimited.
    pub fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        TokenBucket {
            qps,
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    /// How long to wait before the next request may go; takes its token (possibly in
    /// advance, so concurrent callers queue up fairly instead of all waking at once).
    fn reserve(&self) -> Duration {
        if self.qps <= 0.0 {
            return Duration::ZERO;
        }
        // A poisoned lock only means another task panicked mid-update: the numbers are fine.
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let (tokens, at) = *st;
        let tokens = (tokens + now.saturating_duration_since(at).as_secs_f64() * self.qps)
            .min(self.burst)
            - 1.0;
        *st = (tokens, now);
        if tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-tokens / self.qps)
        }
    }

    pub async fn acquire(&self) {
        let wait = self.reserve();
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Paused tokio time: the bucket is judged by the virtual clock, not by the machine's speed.
    #[tokio::test(start_paused = true)]
    async fn burst_then_qps() {
        let b = TokenBucket::new(10.0, 5);
        let start = Instant::now();
        for _ in 0..5 {
            b.acquire().await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO, "the burst goes at once");
        for _ in 0..10 {
            b.acquire().await;
        }
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(999) && took <= Duration::from_millis(1001),
            "10 more at 10 qps take a second of virtual time: {took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn unlimited_never_waits() {
        let b = TokenBucket::new(0.0, 1);
        let start = Instant::now();
        for _ in 0..1000 {
            b.acquire().await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
}
