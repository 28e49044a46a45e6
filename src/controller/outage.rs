//! One account of "the API server does not answer" for the whole copy. During an outage every
//! watch, the Lease renewal and every write fail on each retry; logged per source and per
//! retry, a 10 s outage printed 2,300 lines. Requests that got no answer at all (connection
//! refused or reset, timeout: no HTTP status) report here instead: the first failure is logged
//! at once, then at most one summary every [`SUMMARY_EVERY`] with the time and the number of
//! retries, then one line when a request is answered again. Failures with a status (403, 5xx)
//! are the server's answer about one resource and are logged by their source.

use parking_lot::Mutex;
use std::time::{Duration, Instant};

/// At most one summary line this often while the API server does not answer.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(10);

#[derive(Default)]
pub struct Outage(Mutex<State>);

#[derive(Default)]
struct State {
    since: Option<Instant>,
    last_line: Option<Instant>,
    retries: u64,
    /// The latest failure, for views.
    latest: String,
}

/// What one report logs (decided apart from the clock and the logger, for the unit tests).
#[derive(Debug, PartialEq, Eq)]
enum Line {
    First,
    Summary { secs: u64, retries: u64 },
    Recovered { secs: u64, retries: u64 },
    Quiet,
}

impl Outage {
    /// A request of `source` got no answer (`message`: why).
    pub fn failed(&self, source: &str, message: &str) {
        self.0.lock().latest = format!("{source}: {message}");
        match self.failed_at(Instant::now()) {
            Line::First => tracing::warn!(
                "API server unreachable ({source}: {message}); retrying, with one summary every {}s until it answers",
                SUMMARY_EVERY.as_secs()
            ),
            Line::Summary { secs, retries } => tracing::warn!(
                "API server unreachable for {secs}s, {retries} retries (latest: {source}: {message})"
            ),
            _ => tracing::debug!("{source}: {message}"),
        }
    }

    /// A request was answered (whatever the answer): the server is reachable.
    pub fn reachable(&self) {
        if let Line::Recovered { secs, retries } = self.reachable_at(Instant::now()) {
            tracing::info!("API server reachable again after {secs}s, {retries} retries");
        }
    }

    /// Since when the API server has not answered (how long ago), and the latest failure.
    pub fn unreachable(&self) -> Option<(Duration, String)> {
        let st = self.0.lock();
        st.since.map(|s| (s.elapsed(), st.latest.clone()))
    }

    fn failed_at(&self, now: Instant) -> Line {
        let mut st = self.0.lock();
        st.retries += 1;
        let Some(since) = st.since else {
            st.since = Some(now);
            st.last_line = Some(now);
            return Line::First;
        };
        if st.last_line.is_none_or(|t| now - t >= SUMMARY_EVERY) {
            st.last_line = Some(now);
            Line::Summary {
                secs: (now - since).as_secs(),
                retries: st.retries,
            }
        } else {
            Line::Quiet
        }
    }

    fn reachable_at(&self, now: Instant) -> Line {
        let mut st = self.0.lock();
        match st.since.take() {
            Some(since) => {
                let line = Line::Recovered {
                    secs: (now - since).as_secs(),
                    retries: st.retries,
                };
                *st = State::default();
                line
            }
            None => Line::Quiet,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_is_one_line_a_summary_per_interval_and_one_line_after() {
        let o = Outage::default();
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert_eq!(
            o.reachable_at(at(0)),
            Line::Quiet,
            "no outage, nothing to say"
        );
        assert_eq!(o.failed_at(at(0)), Line::First);
        // 2,000 retries within the interval: silent.
        for i in 1..2000 {
            assert_eq!(o.failed_at(at(i * 4)), Line::Quiet);
        }
        assert_eq!(
            o.failed_at(at(10_000)),
            Line::Summary {
                secs: 10,
                retries: 2001
            }
        );
        assert_eq!(o.failed_at(at(12_000)), Line::Quiet);
        assert_eq!(
            o.reachable_at(at(13_000)),
            Line::Recovered {
                secs: 13,
                retries: 2002
            }
        );
        assert_eq!(o.reachable_at(at(13_001)), Line::Quiet);
        // The next outage starts afresh.
        assert_eq!(o.failed_at(at(20_000)), Line::First);
    }
}
