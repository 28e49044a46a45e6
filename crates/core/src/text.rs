//! Text for people, pure and shared by every layer: [`printable`] makes text safe for a
//! terminal. (An error chain in one line is the main crate's `text::error_text`: it reads
//! kube's errors.)
//!
//! What came from the input (names, messages, file names) may hold
//! escape sequences (ESC, OSC, CSI), which a terminal would obey — retitle the window, clear
//! the screen, hide a line. Tables and error lines print them escaped instead. JSON and YAML
//! output is data for programs and stays exact: escaping there is the serializer's job.

use std::borrow::Cow;
use std::fmt::Write;

/// Whether `c` is printed escaped: C0 controls but tab (newline too: one cell, one line), DEL,
/// C1 controls (`\u{9b}` is CSI on some terminals), and the bidirectional overrides and
/// isolates that reorder what is shown ("Trojan Source").
fn unsafe_char(c: char) -> bool {
    (c.is_control() && c != '\t')
        || matches!(c, '\u{200E}' | '\u{200F}' | '\u{061C}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// `s` with every unsafe character escaped: `\n`, `\r`, `\x1b` (C0 and DEL), `\u{9b}` (others).
/// Backslashes are left as they are, so the escapes are readable, not reversible.
pub fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(unsafe_char) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if unsafe_char(c) && (c as u32) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if unsafe_char(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// [`printable`] line by line: the newlines of a multi-line text stay.
pub fn printable_lines(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| c != '\n' && unsafe_char(c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for (i, line) in s.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&printable(line));
    }
    Cow::Owned(out)
}

/// `n` and the noun in its number: "1 error", "2 errors".
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_what_a_terminal_would_obey() {
        assert_eq!(
            printable("evil\u{1b}]0;owned\u{7}\u{1b}[2J\u{9b}31m\u{202e}x\ty\nz\u{7f}"),
            "evil\\x1b]0;owned\\x07\\x1b[2J\\u{9b}31m\\u{202e}x\ty\\nz\\x7f"
        );
        assert!(matches!(printable("plain ✓ ünïcode"), Cow::Borrowed(_)));
        assert_eq!(printable_lines("a\u{1b}\nb\n"), "a\\x1b\nb\n");
    }
}
