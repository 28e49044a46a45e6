//! Printing reports: table for people, JSON and YAML as contracts for scripts.

use super::args::Format;
use serde::Serialize;

/// JSON (pretty) or YAML; `None` for table and wide, which each command prints its own way.
pub fn structured<T: Serialize>(value: &T, format: Format) -> anyhow::Result<Option<String>> {
    Ok(match format {
        Format::Json => Some(serde_json::to_string_pretty(value)? + "\n"),
        Format::Yaml => Some(serde_norway::to_string(value)?),
        Format::Table | Format::Wide => None,
    })
}

/// Pads columns to the widest cell; the last column is not padded.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let cols = header.len();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate().take(cols) {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                l.push_str(c);
            } else {
                l.push_str(c);
                l.push_str(&" ".repeat(widths[i] - c.chars().count() + 2));
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(header.to_vec());
    for r in rows {
        line(r.iter().map(String::as_str).collect());
    }
    out
}
