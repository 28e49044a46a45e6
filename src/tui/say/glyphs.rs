//! The TUI's two vocabularies, kept apart so a glyph or a colour never means two things:
//! **states** (what a node is: one glyph and one colour each) and **severities** (how bad a
//! finding is: ✖ ⚠ ℹ, used nowhere else). One table for the tree, the detail pane, the help
//! screen and docs/tui.md. Names come from `core::tree::State`.

use crate::core::Severity;
use crate::core::tree::State;
use ratatui::style::{Color, Modifier, Style};

/// One state's look.
pub struct Look {
    pub state: State,
    pub glyph: &'static str,
    pub color: Color,
    pub meaning: &'static str,
}

const fn look(state: State, glyph: &'static str, color: Color, meaning: &'static str) -> Look {
    Look {
        state,
        glyph,
        color,
        meaning,
    }
}

/// Every state, in the order help lists them. Colours say how urgent: red broken, yellow
/// differs (will be written, or is left alone), green as wanted, cyan waiting, grey nothing
/// wanted, blue and magenta not ours to judge. No glyph is a severity glyph.
pub static STATES: &[Look] = &[
    look(
        State::Generate,
        "●",
        Color::Green,
        "template: generates a VAP",
    ),
    look(
        State::NoVap,
        "○",
        Color::DarkGray,
        "template: no VAP wanted (generateVAP false, Rego only, flags)",
    ),
    look(
        State::Error,
        "!",
        Color::Red,
        "cannot be handled as written (template, constraint, or its binding name is taken)",
    ),
    look(
        State::InSync,
        "✔",
        Color::Green,
        "exists and equals the desired object",
    ),
    look(State::Missing, "∅", Color::Red, "should exist and does not"),
    look(
        State::OutOfSync,
        "≠",
        Color::Yellow,
        "exists but differs from the desired object",
    ),
    look(
        State::Dangling,
        "†",
        Color::Yellow,
        "exists but should not (owner gone, no longer generating): will be deleted",
    ),
    look(
        State::Foreign,
        "⊘",
        Color::Yellow,
        "our name, another controller: left alone",
    ),
    look(
        State::Waiting,
        "…",
        Color::Cyan,
        "binding waits for its constraint CRD (--binding-wait)",
    ),
    look(State::NotBound, "·", Color::DarkGray, "no binding wanted"),
    look(
        State::Orphan,
        "?",
        Color::Blue,
        "constraint whose kind has no template",
    ),
    look(
        State::Group,
        "▸",
        Color::White,
        "a group (the orphans branch)",
    ),
    look(
        State::Unknown,
        "◌",
        Color::Magenta,
        "its resource cannot be read (403, not served): existence not known",
    ),
];

/// Every severity with its glyph, in the order the header counts them.
pub static SEVERITIES: &[(Severity, &str, &str)] = &[
    (Severity::Error, "✖", "the object cannot work as written"),
    (Severity::Warning, "⚠", "works, but not as Gatekeeper would"),
    (Severity::Info, "ℹ", "worth knowing"),
];

fn look_of(state: State) -> Option<&'static Look> {
    STATES.iter().find(|l| l.state == state)
}

pub fn glyph(state: State) -> &'static str {
    look_of(state).map_or("·", |l| l.glyph)
}

pub fn color(state: State) -> Color {
    look_of(state).map_or(Color::White, |l| l.color)
}

pub fn style(state: State) -> Style {
    let s = Style::new().fg(color(state));
    if state.is_fault() {
        s.add_modifier(Modifier::BOLD)
    } else {
        s
    }
}

/// How bad a state is, for "the worst below" on collapsed rows and the state sort: 0 is fine.
pub fn rank(state: State) -> u8 {
    match state {
        State::Error => 6,
        State::Missing => 5,
        State::OutOfSync | State::Dangling => 4,
        State::Foreign => 3,
        State::Unknown => 2,
        State::Waiting | State::Orphan => 1,
        State::Generate | State::NoVap | State::InSync | State::NotBound | State::Group => 0,
    }
}

pub fn severity_style(sev: Severity) -> Style {
    match sev {
        Severity::Error => alarm(),
        Severity::Warning => warn(),
        Severity::Info => Style::new().fg(Color::Cyan),
    }
}

pub fn severity_glyph(sev: Severity) -> &'static str {
    SEVERITIES
        .iter()
        .find(|(s, _, _)| *s == sev)
        .map_or("·", |(_, g, _)| g)
}

/// The selected row: one background under every cell, with one foreground that contrasts
/// with it in 16 and 256 colours (a grey background under grey reasons was unreadable).
pub fn selection_style() -> Style {
    Style::new()
        .fg(Color::Black)
        .bg(Color::Cyan)
        .add_modifier(Modifier::BOLD)
}

/// Labels and what is secondary (field names, times, hints).
pub fn dim() -> Style {
    Style::new().fg(Color::DarkGray)
}

/// Titles and headings.
pub fn bold() -> Style {
    Style::new().add_modifier(Modifier::BOLD)
}

/// What is wrong now and stops the work: red, bold.
pub fn alarm() -> Style {
    Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)
}

/// What deserves a look: yellow.
pub fn warn() -> Style {
    Style::new().fg(Color::Yellow)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_has_a_row() {
        use State::*;
        for s in [
            Generate, NoVap, Error, InSync, Missing, OutOfSync, Dangling, Foreign, Waiting,
            NotBound, Orphan, Group, Unknown,
        ] {
            assert!(STATES.iter().any(|l| l.state == s), "{s:?}");
        }
    }

    #[test]
    fn states_and_severities_share_no_glyph() {
        for l in STATES {
            assert!(
                SEVERITIES.iter().all(|(_, g, _)| *g != l.glyph),
                "{:?} uses the severity glyph {}",
                l.state,
                l.glyph
            );
        }
    }
}
