//! The fence for writes: whether this copy leads, and until when it may write. A renewal of
//! the Lease sent at `t` lets this copy write until `t + renew_deadline` on a monotonic clock
//! that counts through a suspend (lease.rs tells the election that sets it).

use parking_lot::Mutex;
use std::time::Duration;
use tokio::sync::watch;

/// Whether this copy leads: the fence for writes, the flag for views and waits.
#[derive(Debug, Default)]
pub struct Leadership {
    pub fence: Fence,
    /// A watch, not a `Notify`: a change between a look and the wait that follows it is not
    /// missed.
    leading: watch::Sender<bool>,
}

impl Leadership {
    /// This copy holds the lease (for views and metrics; writes check the fence).
    pub fn is_leading(&self) -> bool {
        *self.leading.borrow()
    }

    /// Records whether this copy leads; returns what it was.
    pub fn set_leading(&self, on: bool) -> bool {
        let mut was = on;
        self.leading.send_if_modified(|l| {
            was = std::mem::replace(l, on);
            was != on
        });
        was
    }

    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.leading.subscribe()
    }
}

/// Default lease duration (seconds): a crashed holder is replaced after at most this long.
pub const LEASE_DURATION: u64 = 15;

/// The longest duration a holder's Lease is honoured for, whatever its
/// `leaseDurationSeconds` says: a record left with `2147483647` (68 years) would otherwise
/// keep every copy standing by for good while `/readyz` says 200. No copy of ours writes more
/// than its own duration (15 s by default); client-go's electors use seconds to minutes; an
/// hour is far above any of them, so a live holder is never taken over early by it, yet a
/// forgotten record ends within the hour. (A copy of ours started with a longer duration
/// honours its own: [`Timing::new`].)
pub const LONGEST_LEASE_DURATION: Duration = Duration::from_secs(3600);

/// The timings derived from the lease duration (client-go's 15 s / 10 s / 2 s, scaled).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub duration: Duration,
    /// The longest duration another holder's Lease is honoured for
    /// ([`LONGEST_LEASE_DURATION`] unless tuned; never less than `duration`).
    pub longest: Duration,
    /// Writes stop this long after a renewal was sent, unless another renewal succeeded.
    pub renew_deadline: Duration,
    /// How often the holder renews and a follower looks.
    pub retry: Duration,
}

impl Timing {
    pub fn new(duration: Duration) -> Timing {
        // At least 1 s: the Lease stores whole seconds.
        let duration = duration.max(Duration::from_secs(1));
        Timing {
            duration,
            longest: LONGEST_LEASE_DURATION.max(duration),
            renew_deadline: duration * 2 / 3,
            retry: (duration / 7).max(Duration::from_millis(100)),
        }
    }

    /// These timings honouring another holder's duration up to `longest` (tests: a short
    /// bound), never less than this copy's own duration.
    pub fn with_longest(self, longest: Duration) -> Timing {
        Timing {
            longest: longest.max(self.duration),
            ..self
        }
    }
}

/// A monotonic clock that counts while the machine is suspended (Linux `CLOCK_BOOTTIME`): a
/// laptop that slept must not wake up believing its deadline is ahead.
///
/// One clock for the life of the process, chosen when it is built, not at run time: a deadline
/// taken on one clock and compared on another would compare two epochs (`CLOCK_BOOTTIME`
/// counts from boot, [`std::time::Instant`] from an origin of its own). On Linux it is
/// `CLOCK_BOOTTIME` through rustix, whose `clock_gettime` cannot fail for a clock the kernel
/// always has (since 2.6.39) and needs no `unsafe` here; elsewhere std has no clock that counts
/// a suspend, and it is the time since the first call on `Instant`.
#[cfg(target_os = "linux")]
pub fn mono_now() -> Duration {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    match (u64::try_from(ts.tv_sec), u32::try_from(ts.tv_nsec)) {
        (Ok(secs), Ok(nanos)) => Duration::new(secs, nanos),
        // Never negative since boot; should it be, the time reads as the end of time: every
        // deadline has passed, and the fence fails closed.
        _ => Duration::MAX,
    }
}

/// See the Linux [`mono_now`]: here, the time since the first call, on std's monotonic clock.
#[cfg(not(target_os = "linux"))]
pub fn mono_now() -> Duration {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed()
}

/// Whether this copy may write now: a deadline on [`mono_now`], cleared when leadership is lost.
#[derive(Debug, Default)]
pub struct Fence {
    deadline: Mutex<Option<Duration>>,
}

impl Fence {
    pub fn may_write(&self) -> bool {
        self.deadline.lock().is_some_and(|d| mono_now() < d)
    }

    /// How long writes may still be sent: `None` when they may not be now. A write's answer
    /// is awaited no longer than this (writer.rs), so no write of this copy is still waiting
    /// for its answer once the fence has closed.
    pub fn remaining(&self) -> Option<Duration> {
        let now = mono_now();
        self.deadline
            .lock()
            .filter(|d| now < *d)
            .map(|d| d.saturating_sub(now))
    }

    pub fn renewed(&self, sent: Duration, timing: &Timing) {
        *self.deadline.lock() = Some(sent.saturating_add(timing.renew_deadline));
    }

    /// Set, and passed: leadership is no longer confirmed.
    pub fn expired(&self) -> bool {
        self.deadline.lock().is_some_and(|d| mono_now() >= d)
    }

    /// No more writes; returns whether there was a deadline.
    pub fn revoke(&self) -> bool {
        self.deadline.lock().take().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Another holder's duration is honoured up to an hour, or up to a tuned bound, never
    /// below this copy's own duration.
    #[test]
    fn the_longest_honoured_duration_is_bounded_and_never_below_our_own() {
        let t = Timing::new(Duration::from_secs(15));
        assert_eq!(t.longest, LONGEST_LEASE_DURATION);
        assert_eq!(
            t.with_longest(Duration::from_secs(6)).longest,
            Duration::from_secs(15)
        );
        let short = Timing::new(Duration::from_secs(3)).with_longest(Duration::from_secs(6));
        assert_eq!(short.longest, Duration::from_secs(6));
        let long = Timing::new(Duration::from_secs(7200));
        assert_eq!(long.longest, Duration::from_secs(7200));
    }

    /// `commands::serve` and `Controller::leading` look, then wait: leadership gained in
    /// between must still wake them (a `Notify` that had no waiter yet dropped it, and the
    /// leader then served no request until the next change of leadership).
    #[test]
    fn a_change_between_a_look_and_a_wait_is_seen() {
        let l = Leadership::default();
        let mut rx = l.subscribe();
        assert!(!*rx.borrow_and_update());
        assert!(!l.set_leading(true), "it was not leading");
        assert!(
            rx.has_changed().expect("open"),
            "the wait that follows sees it"
        );
        assert!(*rx.borrow_and_update() && l.is_leading());
        assert!(l.set_leading(true), "already leading");
        assert!(!rx.has_changed().expect("open"), "no change, no wake-up");
    }

    /// The time is read on one clock for the life of the process, and a renewal read at "the
    /// end of time" (a clock that failed) closes the fence rather than overflowing.
    #[test]
    fn one_clock_and_no_overflow_at_the_end_of_time() {
        let (a, b) = (mono_now(), mono_now());
        assert!(b >= a, "monotonic: {a:?} then {b:?}");
        let fence = Fence::default();
        fence.renewed(Duration::MAX, &Timing::new(Duration::from_secs(15)));
        assert!(
            fence
                .remaining()
                .is_some_and(|r| r > Duration::from_secs(1 << 40)),
            "a deadline at the end of time, not an overflow"
        );
        fence.renewed(mono_now(), &Timing::new(Duration::from_secs(15)));
        assert!(fence.may_write());
    }

    /// The fence's clock moves with time: a deadline a moment ahead has passed once that
    /// moment has (a clock that stood still would keep the fence open for good). Only lower
    /// bounds are asserted: a sleep lasts at least what it is asked for.
    #[test]
    fn the_deadline_passes_as_time_goes_by() {
        let timing = Timing::new(Duration::from_secs(15));
        let fence = Fence::default();
        let sent = mono_now();
        let moment = Duration::from_millis(50);
        fence.renewed(sent.saturating_sub(timing.renew_deadline) + moment, &timing);
        std::thread::sleep(2 * moment);
        assert!(mono_now() >= sent + 2 * moment, "the clock moved on");
        assert!(
            !fence.may_write() && fence.expired(),
            "the deadline has passed"
        );
    }

    #[test]
    fn the_fence_closes_at_the_deadline_and_stays_closed_once_revoked() {
        let timing = Timing::new(Duration::from_secs(15));
        assert_eq!(timing.renew_deadline, Duration::from_secs(10));
        assert!(timing.renew_deadline < timing.duration);
        let fence = Fence::default();
        assert!(!fence.may_write(), "never renewed");
        fence.renewed(mono_now(), &timing);
        assert!(fence.may_write() && !fence.expired());
        let left = fence.remaining().expect("open");
        assert!(left <= timing.renew_deadline && left > timing.renew_deadline / 2);
        // A renewal sent long ago (as after a pause) confirms nothing now.
        fence.renewed(mono_now().saturating_sub(timing.renew_deadline), &timing);
        assert!(!fence.may_write() && fence.expired());
        assert_eq!(fence.remaining(), None, "closed: nothing may be sent");
        assert!(fence.revoke());
        assert!(!fence.may_write() && !fence.expired() && !fence.revoke());
    }
}
