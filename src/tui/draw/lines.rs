//! Text laid out in columns, for any pane: a line word-wrapped (`wrap_line`, `wrap_lines`)
//! or cut with `↪` continuations (`doc_lines`), shortened with `…` (`shorten`), and a line of
//! parts that drops the least important first (`fit`). Pure: lines in, lines out.

use ratatui::style::Style;
use ratatui::text::{Line, Span};

/// Parts of a line with their importance (0 first). What does not fit is dropped whole,
/// least important first, so the line never ends in the middle of a field.
pub type Part = (u8, Vec<Span<'static>>);

pub fn fit(parts: Vec<Part>, width: u16, sep: &Span<'static>) -> Line<'static> {
    let w = |p: &Part| p.1.iter().map(Span::width).sum::<usize>();
    let sep_w = sep.width();
    let mut keep: Vec<bool> = vec![true; parts.len()];
    let total = |keep: &[bool]| -> usize {
        let shown: Vec<usize> = parts
            .iter()
            .zip(keep)
            .filter(|(_, k)| **k)
            .map(|(p, _)| w(p))
            .collect();
        shown.iter().sum::<usize>() + sep_w * shown.len().saturating_sub(1)
    };
    while total(&keep) > usize::from(width) {
        // The least important shown part; among equals, the rightmost.
        let Some(drop) = parts
            .iter()
            .enumerate()
            .filter(|(i, p)| keep[*i] && p.0 > 0)
            .max_by_key(|(i, p)| (p.0, *i))
            .map(|(i, _)| i)
        else {
            break;
        };
        keep[drop] = false;
    }
    let mut spans = Vec::new();
    for (p, _) in parts.into_iter().zip(&keep).filter(|(_, k)| **k) {
        if !spans.is_empty() {
            spans.push(sep.clone());
        }
        spans.extend(p.1);
    }
    Line::from(spans)
}

/// `s` in at most `max` columns, with `…` where it was cut.
pub fn shorten(s: &str, max: usize) -> String {
    if Span::raw(s).width() <= max {
        return s.to_string();
    }
    let mut out = String::new();
    let mut used = 1;
    for ch in s.chars() {
        let w = char_width(ch);
        if used + w > max {
            break;
        }
        out.push(ch);
        used += w;
    }
    out.push('…');
    out
}

/// The columns a character takes on screen.
fn char_width(ch: char) -> usize {
    let mut buf = [0u8; 4];
    Span::raw(&*ch.encode_utf8(&mut buf)).width()
}

/// Where a wrapped line's continuation rows start: under the text after its first span
/// (the time of a log line, the key of a help line, the label of a detail field), else
/// under its own indentation (`wrap_line` drops a hang of more than half the width).
fn hang_of(line: &Line<'_>) -> usize {
    match line.spans.as_slice() {
        [first, _, ..] => first.width(),
        _ => {
            let text: String = line.spans.iter().map(|s| s.content.as_ref()).collect();
            text.chars().take_while(|c| *c == ' ').count()
        }
    }
}

/// One line word-wrapped to `width` columns: broken after a space where it can, else after a
/// `/` (`Kind/name` moves its name down whole), inside a word only where it must (a name
/// longer than a row, cut after a `-`, `.` or `_` when it has one), each continuation row
/// indented by `hang` columns. Styles are kept cell by cell. Prose (logs, help, details) reads better wrapped
/// than cut or scrolled sideways: nothing is hidden and no key is needed to see it.
pub fn wrap_line(line: &Line<'static>, width: usize, hang: usize) -> Vec<Line<'static>> {
    if width == 0 || line.width() <= width {
        return vec![line.clone()];
    }
    let hang = if hang * 2 > width { 0 } else { hang };
    let mut rows: Vec<Vec<(char, Style)>> = Vec::new();
    let mut row: Vec<(char, Style)> = Vec::new();
    let mut used = 0;
    // Cells in `row` after its last space (or `/`): where a break moves a word to the next
    // row; after its last `-`, `.` or `_`: where a word too long for a row is cut.
    let mut word_from: Option<usize> = None;
    let sep = |c: char| matches!(c, '-' | '.' | '_' | '/');
    let after_sep = |row: &[(char, Style)]| row.iter().rposition(|(c, _)| sep(*c)).map(|i| i + 1);
    let mut limit = width;
    for span in &line.spans {
        let style = line.style.patch(span.style);
        for ch in span.content.chars() {
            let w = char_width(ch);
            if ch == ' ' && row.is_empty() && !rows.is_empty() {
                continue; // a continuation row does not start with the space it broke at
            }
            if used + w > limit && !row.is_empty() {
                // At a space the row breaks right here; inside a word, after the row's last
                // space (the word moves down whole) unless only indentation is before it.
                let indent_only = |at: usize| row[..at].iter().all(|(c, _)| *c == ' ');
                let breaks = |at: &usize| *at < row.len() && !indent_only(*at);
                let at = match word_from {
                    // The word starts right here: the row breaks before it.
                    Some(at) if at == row.len() => None,
                    Some(at) if breaks(&at) => Some(at),
                    _ => after_sep(&row).filter(breaks),
                };
                let mut carried = match at {
                    _ if ch == ' ' => Vec::new(),
                    Some(at) => row.split_off(at),
                    None => Vec::new(),
                };
                while row.last().is_some_and(|(c, _)| *c == ' ') {
                    row.pop();
                }
                rows.push(std::mem::take(&mut row));
                limit = width - hang;
                word_from = None;
                // A word longer than a continuation row is cut into rows of its own.
                loop {
                    let mut fit = 0;
                    let mut cut = carried.len();
                    for (i, (c, _)) in carried.iter().enumerate() {
                        if fit + char_width(*c) > limit {
                            cut = i;
                            break;
                        }
                        fit += char_width(*c);
                    }
                    if cut == carried.len() {
                        used = fit;
                        break;
                    }
                    // After the name's last separator that fits, if it has one.
                    if let Some(at) = after_sep(&carried[..cut]).filter(|at| *at > 1) {
                        cut = at;
                    }
                    let rest = carried.split_off(cut.max(1));
                    rows.push(std::mem::replace(&mut carried, rest));
                }
                row = carried;
                if ch == ' ' {
                    continue;
                }
                if used + w > limit && !row.is_empty() {
                    rows.push(std::mem::take(&mut row));
                    used = 0;
                }
            }
            row.push((ch, style));
            used += w;
            if ch == ' ' || ch == '/' {
                word_from = Some(row.len());
            }
        }
    }
    rows.push(row);
    rows.into_iter()
        .enumerate()
        .map(|(i, cells)| {
            let mut spans: Vec<Span<'static>> = Vec::new();
            if i > 0 && hang > 0 {
                spans.push(Span::raw(" ".repeat(hang)));
            }
            let mut text = String::new();
            let mut style: Option<Style> = None;
            for (c, st) in cells {
                if style.is_some_and(|s| s != st) {
                    spans.push(Span::styled(
                        std::mem::take(&mut text),
                        style.unwrap_or_default(),
                    ));
                }
                style = Some(st);
                text.push(c);
            }
            if !text.is_empty() {
                spans.push(Span::styled(text, style.unwrap_or_default()));
            }
            Line::from(spans)
        })
        .collect()
}

/// Lines wrapped to `width`, each with the hang its shape suggests ([`hang_of`]).
pub fn wrap_lines(lines: &[Line<'static>], width: usize) -> Vec<Line<'static>> {
    lines
        .iter()
        .flat_map(|l| wrap_line(l, width, hang_of(l)))
        .collect()
}

/// A document's lines as shown: as they are, or wrapped to `width` columns with a `↪` at the
/// start of each continuation (YAML and CEL keep their meaning when cut into rows).
pub fn doc_lines(lines: &[Line<'static>], width: usize, wrap: bool) -> Vec<Line<'static>> {
    if !wrap || width < 8 {
        return lines.to_vec();
    }
    let mut out = Vec::with_capacity(lines.len());
    for line in lines {
        if line.width() <= width {
            out.push(line.clone());
            continue;
        }
        let mut row: Vec<Span<'static>> = Vec::new();
        let mut used = 0;
        let mut limit = width;
        for span in &line.spans {
            let mut chunk = String::new();
            for ch in span.content.chars() {
                let w = char_width(ch);
                if used + w > limit {
                    row.push(Span::styled(std::mem::take(&mut chunk), span.style));
                    out.push(Line::from(std::mem::take(&mut row)));
                    row.push(Span::styled("↪ ", crate::tui::say::glyphs::dim()));
                    used = 0;
                    limit = width - 2;
                }
                chunk.push(ch);
                used += w;
            }
            row.push(Span::styled(chunk, span.style));
        }
        out.push(Line::from(row));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::style::Color;

    fn text(rows: &[Line<'_>]) -> Vec<String> {
        rows.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn wrapping_breaks_between_words_and_loses_nothing() {
        let line = Line::from(vec![
            Span::raw("12:00:00 "),
            Span::styled(
                "test Pod default/a: denied by binding x → constraint y: needs label owner",
                Style::new().fg(Color::Red),
            ),
        ]);
        let rows = wrap_line(&line, 30, 9);
        assert_eq!(
            text(&rows),
            [
                "12:00:00 test Pod default/a:",
                "         denied by binding x →",
                "         constraint y: needs",
                "         label owner",
            ]
        );
        assert!(rows.iter().all(|r| r.width() <= 30));
        // Every word is there, in order, with its style.
        let words: Vec<String> = rows
            .iter()
            .flat_map(|r| {
                r.to_string()
                    .split_whitespace()
                    .map(String::from)
                    .collect::<Vec<_>>()
            })
            .collect();
        let want: Vec<String> = line
            .to_string()
            .split_whitespace()
            .map(String::from)
            .collect();
        assert_eq!(words, want);
        let last = rows.last().and_then(|r| r.spans.last()).map(|s| s.style.fg);
        assert_eq!(last, Some(Some(Color::Red)));
    }

    #[test]
    fn wrapping_cuts_a_word_longer_than_a_row_and_keeps_short_lines() {
        let line = Line::raw("  --default-create-vap-for-templates=true now");
        assert_eq!(
            text(&wrap_line(&line, 20, 2)),
            ["  --default-create-", "  vap-for-", "  templates=true now"]
        );
        let short = Line::raw("fits");
        assert_eq!(wrap_line(&short, 20, 2), vec![short]);
        // A word moved down to a narrower continuation row is cut to fit it.
        let field = Line::from(vec![
            Span::raw("object    "),
            Span::raw("admissionregistration.k8s.io/v1 Kind/name"),
        ]);
        let rows = wrap_line(&field, 38, 10);
        assert_eq!(
            text(&rows),
            [
                "object",
                "          admissionregistration.k8s.io",
                "          /v1 Kind/name"
            ]
        );
        assert!(rows.iter().all(|r| r.width() <= 38), "{:?}", text(&rows));
        // A name is not split mid-word: `Kind/name` breaks after its `/`, and a name longer
        // than a row after its last `-` that fits (the detail pane split them anywhere).
        let field = Line::from(vec![
            Span::raw("object    "),
            Span::raw("v1 ValidatingAdmissionPolicy/gatekeeper-k8sallowedrepos"),
        ]);
        assert_eq!(
            text(&wrap_line(&field, 48, 10)),
            [
                "object    v1 ValidatingAdmissionPolicy/",
                "          gatekeeper-k8sallowedrepos"
            ]
        );
        let long = Line::raw("  create binding/gatekeeper-k8sallowedrepos-payments-ns-owner now");
        assert_eq!(
            text(&wrap_line(&long, 30, 2)),
            [
                "  create binding/",
                "  gatekeeper-k8sallowedrepos-",
                "  payments-ns-owner now"
            ]
        );
        // A hang wider than half the row is dropped rather than leave no room.
        assert_eq!(
            text(&wrap_line(&Line::raw("aaaa bbbb"), 6, 5)),
            ["aaaa", "bbbb"]
        );
    }
}
