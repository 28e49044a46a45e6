//! A token bucket for `--qps`/`--burst`, as client-go's rate limiter behaves: `burst` requests
//! may go at once, then `qps` per second. Shared by every task of a command.

use parking_lot::Mutex;
use std::time::Duration;
use std::time::Instant;

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
    fn reserve(&self, now: Instant) -> Duration {
        if self.qps <= 0.0 {
            return Duration::ZERO;
        }
        // A poisoned lock only means another task panicked mid-update: the numbers are fine.
        let mut st = self.state.lock();
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
        let wait = self.reserve(Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The clock is passed in: the bucket is judged on given instants, not the machine's speed.
    #[test]
    fn burst_then_qps() {
        let b = TokenBucket::new(10.0, 5);
        let t0 = Instant::now();
        for _ in 0..5 {
            assert_eq!(b.reserve(t0), Duration::ZERO, "the burst goes at once");
        }
        // The 6th and 7th wait 1 and 2 tokens' time at 10 qps.
        assert_eq!(b.reserve(t0).as_millis(), 100);
        assert_eq!(b.reserve(t0).as_millis(), 200);
        // A second later, 10 tokens came back: the 2 owed are paid, 8 remain.
        let t1 = t0 + Duration::from_secs(1);
        for _ in 0..5 {
            assert_eq!(b.reserve(t1), Duration::ZERO);
        }
        // Never more than the burst saved up, however long the pause.
        let t2 = t1 + Duration::from_secs(3600);
        for _ in 0..5 {
            assert_eq!(b.reserve(t2), Duration::ZERO);
        }
        assert!(b.reserve(t2) > Duration::ZERO);
    }

    #[test]
    fn unlimited_never_waits() {
        let b = TokenBucket::new(0.0, 1);
        let t0 = Instant::now();
        for _ in 0..1000 {
            assert_eq!(b.reserve(t0), Duration::ZERO);
        }
    }
}
