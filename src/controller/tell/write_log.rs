//! The log line of each write, kept readable under churn: an object written again and again
//! (a field another controller keeps changing, a constraint edited in a loop) is said in full
//! for its first [`SAID`] writes within [`WINDOW`], then counted, and the count said once when
//! the window ends (`update ValidatingAdmissionPolicy/x: 40 more writes in the last 60s; the
//! latest: …`), so one busy object cannot drown every other line.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// How long the writes of one object are counted together.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Writes of one object said in full within a window; the rest are counted.
pub const SAID: u32 = 3;

/// The writes of one object since its window started.
struct Window {
    started: Instant,
    writes: u32,
    /// The line of the latest write not said in full.
    latest: Option<String>,
}

impl Window {
    /// The count of the writes not said in full, once the window is over.
    fn summary(&self) -> Option<String> {
        let latest = self.latest.as_ref()?;
        let more = self.writes - SAID;
        Some(format!(
            "{more} more {} of the same object in the last {}s; the latest: {latest}",
            if more == 1 { "write" } else { "writes" },
            WINDOW.as_secs()
        ))
    }
}

/// The windows of the objects written lately (at most one per object written in the last
/// [`WINDOW`]: the sweep drops the others).
#[derive(Default)]
pub struct WriteLog(Mutex<HashMap<String, Window>>);

impl WriteLog {
    /// A write of `object`, said as `line`: logged at info, or counted.
    pub fn written(&self, object: &str, line: String) {
        for said in self.note(object, line, Instant::now()) {
            tracing::info!("{said}");
        }
    }

    /// The summaries of windows that are over, logged at info (called every second or so).
    pub fn sweep(&self) {
        for said in self.ended(Instant::now()) {
            tracing::info!("{said}");
        }
    }

    /// What to log for a write of `object` at `now`: its line, the summary of the window it
    /// closes and then its line, or nothing (counted).
    fn note(&self, object: &str, line: String, now: Instant) -> Vec<String> {
        let Ok(mut windows) = self.0.lock() else {
            return vec![line];
        };
        let mut said = Vec::new();
        let window = windows.entry(object.to_string()).or_insert(Window {
            started: now,
            writes: 0,
            latest: None,
        });
        if now.duration_since(window.started) >= WINDOW {
            said.extend(window.summary());
            *window = Window {
                started: now,
                writes: 0,
                latest: None,
            };
        }
        window.writes += 1;
        if window.writes <= SAID {
            said.push(line);
        } else {
            window.latest = Some(line);
        }
        said
    }

    /// The summaries of the windows over at `now`; those windows forgotten.
    fn ended(&self, now: Instant) -> Vec<String> {
        let Ok(mut windows) = self.0.lock() else {
            return Vec::new();
        };
        let mut said = Vec::new();
        windows.retain(|_, w| {
            let over = now.duration_since(w.started) >= WINDOW;
            if over {
                said.extend(w.summary());
            }
            !over
        });
        said.sort();
        said
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three writes of one object said in full, the rest counted and said once when the
    /// window is over; other objects unaffected; a quiet object is forgotten.
    #[tokio::test(start_paused = true)]
    async fn an_object_written_again_and_again_is_counted() {
        let log = WriteLog::default();
        let start = Instant::now();
        let line = |i: u32| format!("update VAP/x: change {i}");
        let mut said = Vec::new();
        for i in 1..=10 {
            said.extend(log.note("VAP/x", line(i), start));
        }
        assert_eq!(said, vec![line(1), line(2), line(3)]);
        assert_eq!(
            log.note("VAP/y", "create VAP/y".into(), start),
            vec!["create VAP/y"]
        );
        assert!(log.ended(start + WINDOW / 2).is_empty(), "not over yet");
        let over = log.ended(start + WINDOW);
        assert_eq!(
            over,
            vec![
                "7 more writes of the same object in the last 60s; the latest: update VAP/x: change 10"
            ]
        );
        assert!(
            log.ended(start + WINDOW * 2).is_empty(),
            "said once, then forgotten"
        );
        // A window closed by the object's next write: its count, then the write, in full.
        let later = start + WINDOW * 3;
        for i in 1..=4 {
            log.note("VAP/z", line(i), later);
        }
        let next = log.note("VAP/z", line(5), later + WINDOW);
        assert_eq!(next.len(), 2, "{next:?}");
        assert!(
            next[0].starts_with("1 more write of the same object"),
            "{next:?}"
        );
        assert_eq!(next[1], line(5));
    }
}
