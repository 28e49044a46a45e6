//! Drawing: a pure function of the state (the tree widget keeps its scroll offset in the
//! state, which is why it takes `&mut`). Nothing here computes analysis or reads IO.

use super::action::Level;
use super::app::App;
use super::data::{Data, Origin};
use super::detail;
use super::keymap::{Screen, keys_label};
use super::states::{self, STATES};
use crate::core::{Code, Severity};
use ratatui::Frame;
use ratatui::layout::{Constraint, Direction, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span, Text};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Wrap};
use tui_tree_widget::Tree;

fn dim() -> Style {
    Style::new().fg(Color::DarkGray)
}
fn bold() -> Style {
    Style::new().add_modifier(Modifier::BOLD)
}

pub fn draw(frame: &mut Frame, app: &mut App) {
    let area = frame.area();
    let access_rows = app
        .data
        .as_ref()
        .map_or(0, |d| d.info.access_errors.len() as u16);
    let show_events = area.height >= 24;
    let rows = Layout::vertical([
        Constraint::Length(2),
        Constraint::Length(access_rows),
        Constraint::Min(3),
        Constraint::Length(if show_events { 6 } else { 0 }),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .split(area);
    draw_header(frame, app, rows[0]);
    if access_rows > 0 {
        draw_access_errors(frame, app, rows[1]);
    }
    match app.screen {
        Screen::Main => draw_main(frame, app, rows[2]),
        Screen::Doc => draw_doc(frame, app, rows[2]),
        Screen::Help => draw_help(frame, app, rows[2]),
    }
    if show_events {
        draw_events(frame, app, rows[3]);
    }
    draw_status(frame, app, rows[4]);
    draw_hints(frame, app, rows[5]);
    if app.confirm.is_some() {
        draw_confirm(frame, app, area);
    }
}

pub fn mode_label(app: &App, data: Option<&Data>) -> String {
    let origin = match data.map(|d| (&d.origin, d.info.leading)) {
        None => "loading",
        Some((Origin::Offline { .. }, _)) => "offline snapshot",
        Some((
            Origin::Live {
                reconciling: true, ..
            },
            true,
        )) => "reconciling",
        Some((
            Origin::Live {
                reconciling: true, ..
            },
            false,
        )) => "observing (standby)",
        Some((Origin::Live { .. }, _)) => "observing",
    };
    if app.keymap.readonly() {
        format!("read-only · {origin}")
    } else {
        origin.to_string()
    }
}

fn draw_header(frame: &mut Frame, app: &App, area: Rect) {
    let data = app.data.as_deref();
    let sep = Span::styled(" │ ", dim());
    let unknown = || "–".to_string();
    let mut l1 = vec![Span::styled(" kubectl-vap", bold().fg(Color::Cyan))];
    let info = data.map(|d| &d.info);
    let items = [
        (
            "context",
            info.map(|i| i.context.clone()).unwrap_or_else(unknown),
        ),
        (
            "server",
            info.and_then(|i| i.server_version.clone())
                .unwrap_or_else(unknown),
        ),
        (
            "VAP API",
            info.and_then(|i| i.vap_api.as_deref())
                .map(|v| {
                    v.trim_start_matches("admissionregistration.k8s.io/")
                        .to_string()
                })
                .unwrap_or_else(unknown),
        ),
        (
            "lease",
            info.and_then(|i| i.lease_holder.clone())
                .unwrap_or_else(unknown),
        ),
        ("mode", mode_label(app, data)),
    ];
    for (k, v) in items {
        l1.push(sep.clone());
        l1.push(Span::styled(format!("{k}: "), dim()));
        l1.push(Span::raw(v));
    }
    let mut l2 = vec![Span::raw(" ")];
    if let Some(d) = data {
        let s = &d.summary;
        for (n, sev, word) in [
            (s.errors, Severity::Error, "errors"),
            (s.warnings, Severity::Warning, "warnings"),
            (s.infos, Severity::Info, "infos"),
        ] {
            let style = if n > 0 {
                states::severity_style(sev)
            } else {
                dim()
            };
            l2.push(Span::styled(
                format!("{} {n} {word}  ", states::severity_glyph(sev)),
                style,
            ));
        }
        l2.push(sep.clone());
        let snap = &d.snapshot;
        l2.push(Span::raw(format!(
            "{} templates, {} constraints, {} VAPs, {} bindings",
            snap.templates.len(),
            snap.constraints.len(),
            snap.policies.len(),
            snap.bindings.len()
        )));
        l2.push(sep.clone());
        l2.push(Span::raw(format!(
            "{} planned writes",
            d.analysis.plan.len()
        )));
    }
    if data.is_some_and(|d| d.info.syncing) {
        l2.push(sep.clone());
        l2.push(Span::styled(
            "syncing: the tree may be partial",
            Style::new().fg(Color::Yellow),
        ));
    }
    if app.filter.faults_only {
        l2.push(sep.clone());
        l2.push(Span::styled("faults only", Style::new().fg(Color::Yellow)));
    }
    if !app.filter.text.is_empty() {
        l2.push(sep);
        l2.push(Span::styled(
            format!("filter: {}", app.filter.text),
            Style::new().fg(Color::Yellow),
        ));
    }
    frame.render_widget(Paragraph::new(vec![Line::from(l1), Line::from(l2)]), area);
}

fn draw_access_errors(frame: &mut Frame, app: &App, area: Rect) {
    let Some(d) = &app.data else { return };
    let lines: Vec<Line> = d
        .info
        .access_errors
        .iter()
        .map(|e| {
            Line::from(vec![
                Span::styled(
                    format!(" ⊘ {}: {}", e.kind.as_str(), e.resource),
                    Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
                ),
                Span::raw(format!(" — {}", e.message)),
            ])
        })
        .collect();
    frame.render_widget(Paragraph::new(lines), area);
}

fn draw_main(frame: &mut Frame, app: &mut App, area: Rect) {
    let direction = if area.width >= 100 {
        Direction::Horizontal
    } else {
        Direction::Vertical
    };
    let parts = Layout::default()
        .direction(direction)
        .constraints([Constraint::Percentage(55), Constraint::Percentage(45)])
        .split(area);
    draw_tree(frame, app, parts[0]);
    draw_detail(frame, app, parts[1]);
}

fn draw_tree(frame: &mut Frame, app: &mut App, area: Rect) {
    let title = if app.filter.is_active() {
        format!(" Tree ({} of {}) ", app.tree.shown, app.tree.total)
    } else {
        format!(" Tree ({}) ", app.tree.total)
    };
    let block = Block::default().borders(Borders::ALL).title(title);
    let Some(data) = app.data.clone() else {
        frame.render_widget(Paragraph::new("loading…").style(dim()).block(block), area);
        return;
    };
    if app.tree.items.is_empty() {
        let mut lines = Vec::new();
        if app.filter.is_active() {
            lines.push(Line::raw("nothing matches the filter (esc clears it)"));
        } else if !data.info.access_errors.is_empty() {
            lines.push(Line::styled(
                "nothing can be shown: the cluster refused or lacks what the tree is made of",
                Style::new().fg(Color::Red),
            ));
            for e in &data.info.access_errors {
                lines.push(Line::raw(format!(
                    "• {} {}: {}",
                    e.resource,
                    e.kind.as_str(),
                    e.message
                )));
            }
        } else {
            lines.push(Line::raw(
                "no ConstraintTemplates, constraints, VAPs or bindings found",
            ));
        }
        frame.render_widget(
            Paragraph::new(lines)
                .wrap(Wrap { trim: false })
                .block(block),
            area,
        );
        return;
    }
    match Tree::new(&app.tree.items) {
        Ok(tree) => {
            let tree = tree
                .block(block)
                .highlight_style(
                    Style::new()
                        .bg(Color::DarkGray)
                        .add_modifier(Modifier::BOLD),
                )
                .highlight_symbol("› ");
            frame.render_stateful_widget(tree, area, &mut app.tree.state);
        }
        Err(e) => frame.render_widget(Paragraph::new(e.to_string()).block(block), area),
    }
}

fn draw_detail(frame: &mut Frame, app: &App, area: Rect) {
    let block = Block::default().borders(Borders::ALL).title(" Detail ");
    let lines = match (&app.data, app.selected_node()) {
        (Some(d), Some(n)) => [
            detail::summary(d, n),
            detail::violations(&app.violations, d, n),
        ]
        .concat(),
        _ => vec![Line::styled("nothing selected", dim())],
    };
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(block),
        area,
    );
}

fn draw_doc(frame: &mut Frame, app: &App, area: Rect) {
    let Some(doc) = &app.doc else { return };
    let block = Block::default()
        .borders(Borders::ALL)
        .title(format!(" {} ", doc.title))
        .title_bottom(Line::styled(
            format!(" line {}/{} ", doc.scroll + 1, doc.lines.len()),
            dim(),
        ));
    let inner = block.inner(area);
    let shown: Vec<Line> = doc
        .lines
        .iter()
        .skip(doc.scroll)
        .take(usize::from(inner.height))
        .cloned()
        .collect();
    frame.render_widget(Paragraph::new(shown).block(block), area);
}

/// The help screen: the keymap table, the states table, the findings table.
pub fn help_lines(app: &App) -> Vec<Line<'static>> {
    let mut out = vec![Line::styled("Keys", bold())];
    for e in app.keymap.entries() {
        let mut spans = vec![
            Span::styled(
                format!("  {:<12}", keys_label(e.keys)),
                Style::new().fg(Color::Cyan),
            ),
            Span::raw(e.help),
        ];
        if e.write {
            spans.push(Span::styled("  (write)", Style::new().fg(Color::Yellow)));
        }
        out.push(Line::from(spans));
    }
    if app.keymap.readonly() {
        out.push(Line::styled(
            "  read-only (--readonly): replay and reconcile are off",
            dim(),
        ));
    }
    out.push(Line::default());
    out.push(Line::styled("States", bold()));
    for (s, color, meaning) in STATES {
        out.push(Line::from(vec![
            Span::styled(
                format!("  {} {:<12}", s.glyph(), s.as_str()),
                Style::new().fg(*color),
            ),
            Span::raw(*meaning),
        ]));
    }
    out.push(Line::default());
    out.push(Line::styled("Findings", bold()));
    for c in Code::ALL {
        out.push(Line::from(vec![
            Span::styled(
                format!(
                    "  {} {:<20}",
                    states::severity_glyph(c.severity()),
                    c.as_str()
                ),
                states::severity_style(c.severity()),
            ),
            Span::raw(c.title()),
        ]));
    }
    out
}

fn draw_help(frame: &mut Frame, app: &App, area: Rect) {
    let lines: Vec<Line> = help_lines(app).into_iter().skip(app.help_scroll).collect();
    let block = Block::default()
        .borders(Borders::ALL)
        .title(" Help (esc or ? to close) ");
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

fn draw_events(frame: &mut Frame, app: &App, area: Rect) {
    let block = Block::default().borders(Borders::ALL).title(" Events ");
    let rows = usize::from(area.height.saturating_sub(2));
    let skip = app.log.len().saturating_sub(rows);
    let lines: Vec<Line> = app
        .log
        .iter()
        .skip(skip)
        .map(|e| {
            let style = if e.error {
                Style::new().fg(Color::Red)
            } else {
                Style::new()
            };
            Line::from(vec![
                Span::styled(format!("{} ", e.time), dim()),
                Span::styled(e.text.clone(), style),
            ])
        })
        .collect();
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

fn draw_status(frame: &mut Frame, app: &App, area: Rect) {
    let line = if let Some(path) = &app.test_path {
        Line::from(vec![
            Span::styled(" test file: ", Style::new().fg(Color::Yellow)),
            Span::raw(path.clone()),
            Span::styled("█", Style::new().fg(Color::Yellow)),
            Span::styled("  (enter dry-runs its objects, esc cancels)", dim()),
        ])
    } else if app.editing_filter {
        Line::from(vec![
            Span::styled(" /", Style::new().fg(Color::Yellow)),
            Span::raw(app.filter.text.clone()),
            Span::styled("█", Style::new().fg(Color::Yellow)),
            Span::styled("  (name or state; enter keeps, esc clears)", dim()),
        ])
    } else if let Some(f) = &app.flash {
        let style = match f.level {
            Level::Info => Style::new().fg(Color::Green),
            Level::Warn => Style::new().fg(Color::Yellow),
            Level::Error => Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        };
        Line::styled(format!(" {}", f.text), style)
    } else {
        Line::default()
    };
    frame.render_widget(Paragraph::new(line), area);
}

fn draw_hints(frame: &mut Frame, app: &App, area: Rect) {
    let mut spans = vec![Span::raw(" ")];
    for (keys, word) in app.keymap.hints(app.screen) {
        spans.push(Span::styled(
            keys,
            Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD),
        ));
        spans.push(Span::raw(format!(" {word}  ")));
    }
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}

fn draw_confirm(frame: &mut Frame, app: &App, area: Rect) {
    let Some(cmd) = &app.confirm else { return };
    let w = area.width.min(70);
    let h = 6;
    let rect = Rect {
        x: area.x + (area.width.saturating_sub(w)) / 2,
        y: area.y + (area.height.saturating_sub(h)) / 2,
        width: w,
        height: h.min(area.height),
    };
    let text = Text::from(vec![
        Line::styled(cmd.prompt(), bold()),
        Line::styled(format!("same as `{}`", cmd.cli()), dim()),
        Line::default(),
        Line::from(vec![
            Span::styled(
                "y",
                Style::new().fg(Color::Green).add_modifier(Modifier::BOLD),
            ),
            Span::raw(" yes   "),
            Span::styled(
                "n",
                Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
            ),
            Span::raw(" no"),
        ]),
    ]);
    frame.render_widget(Clear, rect);
    frame.render_widget(
        Paragraph::new(text).wrap(Wrap { trim: false }).block(
            Block::default()
                .borders(Borders::ALL)
                .title(" Confirm ")
                .border_style(Style::new().fg(Color::Yellow)),
        ),
        rect,
    );
}
