//! How each node state and severity looks: one table for the tree, the help screen and
//! docs/tui.md. Glyphs and names come from `core::tree::State` itself.

use crate::core::Severity;
use crate::core::tree::State;
use ratatui::style::{Color, Modifier, Style};

/// Every state, in the order help lists them, with its colour and meaning.
pub static STATES: &[(State, Color, &str)] = &[
    (State::Generate, Color::Green, "template: generates a VAP"),
    (
        State::NoVap,
        Color::DarkGray,
        "template: no VAP wanted (generateVAP false, Rego only, flags); constraint: no binding wanted",
    ),
    (
        State::Error,
        Color::Red,
        "cannot be handled as written (template, constraint, or its binding name is taken)",
    ),
    (
        State::InSync,
        Color::Green,
        "exists and equals the desired object",
    ),
    (State::Missing, Color::Red, "should exist and does not"),
    (
        State::OutOfSync,
        Color::Yellow,
        "exists but differs from the desired object",
    ),
    (
        State::Dangling,
        Color::Magenta,
        "exists but should not (owner gone, no longer generating)",
    ),
    (
        State::Foreign,
        Color::LightRed,
        "our name, another controller: left alone",
    ),
    (
        State::Waiting,
        Color::Cyan,
        "binding waits for its constraint CRD (--binding-wait)",
    ),
    (State::NotBound, Color::DarkGray, "no binding wanted"),
    (
        State::Orphan,
        Color::Blue,
        "constraint whose kind has no template",
    ),
    (State::Group, Color::White, "a group (the orphans branch)"),
    (
        State::Unknown,
        Color::Red,
        "its resource cannot be read (403, not served): existence not known",
    ),
];

pub fn color(state: State) -> Color {
    STATES
        .iter()
        .find(|(s, _, _)| *s == state)
        .map(|(_, c, _)| *c)
        .unwrap_or(Color::White)
}

pub fn style(state: State) -> Style {
    let s = Style::new().fg(color(state));
    if state.is_fault() {
        s.add_modifier(Modifier::BOLD)
    } else {
        s
    }
}

pub fn severity_style(sev: Severity) -> Style {
    match sev {
        Severity::Error => Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        Severity::Warning => Style::new().fg(Color::Yellow),
        Severity::Info => Style::new().fg(Color::Cyan),
    }
}

pub fn severity_glyph(sev: Severity) -> &'static str {
    match sev {
        Severity::Error => "✖",
        Severity::Warning => "⚠",
        Severity::Info => "ℹ",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_has_a_row() {
        use State::*;
        for s in [
            Generate, NoVap, Error, InSync, Missing, OutOfSync, Dangling, Foreign, Waiting,
            NotBound, Orphan, Group,
        ] {
            assert!(STATES.iter().any(|(x, _, _)| *x == s), "{s:?}");
        }
    }
}
