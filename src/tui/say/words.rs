//! How the UI words numbers and durations: below every file that says "3 objects" or "5m"
//! (the view, the detail pane, the audit results, what `update` logs and compares).

/// `n` and the noun for it: `1 error`, `2 errors`, `0 errors`.
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A duration as the header says it: `42s`, `5m`, `3h`, `2d` (never negative).
pub fn age(d: chrono::Duration) -> String {
    let s = d.num_seconds().max(0);
    match s {
        0..120 => format!("{s}s"),
        120..7200 => format!("{}m", s / 60),
        7200..172_800 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// Seconds until `t`, rounded up (a countdown never says 0 before it is over).
pub fn seconds_until(t: chrono::DateTime<chrono::Utc>, now: chrono::DateTime<chrono::Utc>) -> i64 {
    let ms = (t - now).num_milliseconds().max(0);
    (ms + 999) / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_agree_with_their_number() {
        assert_eq!(count(1, "error", "errors"), "1 error");
        assert_eq!(count(0, "error", "errors"), "0 errors");
        assert_eq!(
            count(2, "planned write", "planned writes"),
            "2 planned writes"
        );
    }
}
