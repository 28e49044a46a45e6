//! Runs of failures, told without flooding. During an outage every watch, the Lease renewal
//! and every write fail on each retry; logged per source and per retry, a 10 s outage printed
//! 2,300 lines. An [`Episode`] decides what to say instead: the first failure at once, then at
//! most one summary every [`SUMMARY_EVERY`] with the time and the count, then one line when a
//! request passes again. Its two users, [`Outage`] and [`WriteFailures`], word it. Failures
//! with a status (403, 5xx) are the server's answer about one resource and are logged by
//! their source.

use parking_lot::Mutex;
use std::time::{Duration, Instant};

/// At most one summary line this often while failures go on.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(10);

/// One run of failures at a time: from the first failure to the next success.
#[derive(Default)]
pub struct Episode(Mutex<State>);

#[derive(Default)]
struct State {
    since: Option<Instant>,
    last_line: Option<Instant>,
    /// Failures in this run, the first included.
    failures: u64,
    /// Failures since the last line that said something.
    unlogged: u64,
    /// The latest failure, for views.
    latest: String,
}

/// What one report should say (decided apart from the clock and the logger, for the unit
/// tests; the caller words it).
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// The first failure of a run.
    First,
    /// A summary: the run's length, its failures, and how many of them were not told.
    Summary {
        secs: u64,
        failures: u64,
        unlogged: u64,
    },
    /// The run is over.
    Recovered { secs: u64, failures: u64 },
    /// Nothing to say now.
    Quiet,
}

impl Episode {
    /// A failure (`latest`: what it was) at `now`; what to say about it.
    pub fn failed(&self, now: Instant, latest: String) -> Line {
        let mut st = self.0.lock();
        st.failures += 1;
        st.latest = latest;
        let Some(since) = st.since else {
            st.since = Some(now);
            st.last_line = Some(now);
            return Line::First;
        };
        if st.last_line.is_none_or(|t| now - t >= SUMMARY_EVERY) {
            st.last_line = Some(now);
            Line::Summary {
                secs: (now - since).as_secs(),
                failures: st.failures,
                unlogged: std::mem::take(&mut st.unlogged),
            }
        } else {
            st.unlogged += 1;
            Line::Quiet
        }
    }

    pub fn passed(&self, now: Instant) -> Line {
        let mut st = self.0.lock();
        match st.since.take() {
            Some(since) => {
                let line = Line::Recovered {
                    secs: (now - since).as_secs(),
                    failures: st.failures,
                };
                *st = State::default();
                line
            }
            None => Line::Quiet,
        }
    }
}

/// The copy's one account of an API server that does not answer (requests that got no HTTP
/// status at all: connection refused or reset, timeout).
#[derive(Default)]
pub struct Outage(Episode);

impl Outage {
    /// A request of `source` got no answer (`message`: why).
    pub fn failed(&self, source: &str, message: &str) {
        let latest = format!("{source}: {message}");
        match self.0.failed(Instant::now(), latest) {
            Line::First => tracing::warn!(
                "API server unreachable ({source}: {message}); retrying, with one summary every {}s until it answers",
                SUMMARY_EVERY.as_secs()
            ),
            Line::Summary { secs, failures, .. } => tracing::warn!(
                "API server unreachable for {secs}s, {failures} retries (latest: {source}: {message})"
            ),
            _ => tracing::debug!("{source}: {message}"),
        }
    }

    /// A request was answered (whatever the answer): the server is reachable.
    pub fn reachable(&self) {
        if let Line::Recovered { secs, failures } = self.0.passed(Instant::now()) {
            tracing::info!("API server reachable again after {secs}s, {failures} retries");
        }
    }

    /// Since when the API server has not answered (how long ago), and the latest failure.
    pub fn unreachable(&self) -> Option<(Duration, String)> {
        let st = self.0.0.lock();
        st.since.map(|s| (s.elapsed(), st.latest.clone()))
    }
}

/// The writer's failed writes that will be retried, logged as an [`Episode`].
#[derive(Default)]
pub struct WriteFailures(Episode);

impl WriteFailures {
    pub fn failed(&self, label: &str, object: &str, msg: &str) {
        match self.0.failed(Instant::now(), format!("{object}: {msg}")) {
            Line::First | Line::Summary { unlogged: 0, .. } => {
                tracing::warn!(object, reason = label, "{msg}; retried with backoff")
            }
            Line::Summary {
                secs,
                failures,
                unlogged,
            } => tracing::warn!(
                object,
                reason = label,
                "writes failing for {secs}s, {failures} failure(s), {unlogged} not logged; latest: {msg}"
            ),
            _ => tracing::debug!(object, reason = label, "{msg}"),
        }
    }

    pub fn succeeded(&self) {
        if let Line::Recovered { secs, failures } = self.0.passed(Instant::now()) {
            tracing::info!("writes pass again after {secs}s and {failures} failure(s)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_failures_is_one_line_a_summary_per_interval_and_one_line_after() {
        let outage = Outage::default();
        let o = &outage.0;
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let fail = |ms| o.failed(at(ms), format!("failure at {ms} ms"));
        assert_eq!(o.passed(at(0)), Line::Quiet, "no outage, nothing to say");
        assert_eq!(fail(0), Line::First);
        // 2,000 retries within the interval: silent.
        for i in 1..2000 {
            assert_eq!(fail(i * 4), Line::Quiet);
        }
        assert_eq!(
            fail(10_000),
            Line::Summary {
                secs: 10,
                failures: 2001,
                unlogged: 1999
            }
        );
        assert_eq!(fail(12_000), Line::Quiet);
        assert_eq!(
            outage.unreachable().map(|(_, latest)| latest).as_deref(),
            Some("failure at 12000 ms")
        );
        assert_eq!(
            o.passed(at(13_000)),
            Line::Recovered {
                secs: 13,
                failures: 2002
            }
        );
        assert_eq!(o.passed(at(13_001)), Line::Quiet);
        assert!(outage.unreachable().is_none());
        // The next outage starts afresh.
        assert_eq!(fail(20_000), Line::First);
    }
}
