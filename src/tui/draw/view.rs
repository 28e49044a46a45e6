//! Drawing: a function of the state. It takes `&mut` for what drawing measures: the tree
//! widget keeps its scroll offset in the state, and the frame notes the rows each scrolled
//! pane shows and holds (`App::drawn`, `App::page`), keeping the scroll in bounds, so
//! `update` bounds scrolling by what is shown without computing a layout. Nothing here
//! computes analysis or reads IO.

use super::lines::{Part, doc_lines, fit, shorten, wrap_line, wrap_lines};
use crate::controller::AccessErrorKind;
use crate::core::{Code, Severity};
use crate::tui::model::action::{Level, WriteCommand};
use crate::tui::model::app::{App, Extent, Mode};
use crate::tui::model::data::{Data, Origin, access_label, clock, is_tree_resource, leader_name};
use crate::tui::model::detail;
use crate::tui::model::keymap::{self, Screen, keys_label};
use crate::tui::model::tree_view::SortBy;
use crate::tui::say::glyphs::{self, SEVERITIES, STATES, alarm, bold, dim, warn};
use crate::tui::say::words::{age, count, seconds_until};
use ratatui::Frame;
use ratatui::layout::{Constraint, Direction, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span, Text};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Wrap};
use tui_tree_widget::Tree;

/// Rows at or above which the event pane sits under the tree; below, the status line shows
/// the newest event and `e` opens the log.
pub const EVENTS_MIN_HEIGHT: u16 = 30;

/// Where everything goes on a screen of a given size.
pub struct Areas {
    pub header: Rect,
    /// One line per alert: the connection, a vacant Lease, Gatekeeper's generator, each
    /// unreadable resource.
    pub access: Rect,
    /// The tree and detail, or the full-screen document, help or event log.
    pub main: Rect,
    pub events: Rect,
    pub status: Rect,
    pub hints: Rect,
}

pub fn areas(area: Rect, app: &App) -> Areas {
    let alert_rows = u16::try_from(alerts(app).len())
        .unwrap_or(u16::MAX)
        .min(area.height / 4);
    let show_events = area.height >= EVENTS_MIN_HEIGHT && app.screen != Screen::Events;
    let rows = Layout::vertical([
        Constraint::Length(2),
        Constraint::Length(alert_rows),
        Constraint::Min(3),
        Constraint::Length(if show_events { 7 } else { 0 }),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .split(area);
    Areas {
        header: rows[0],
        access: rows[1],
        main: rows[2],
        events: rows[3],
        status: rows[4],
        hints: rows[5],
    }
}

/// Columns the detail pane keeps beside the tree: a third of the screen, at least 40 (its
/// lines wrap, so it reads at that width; the tree's rows are cut instead).
fn detail_min(width: u16) -> u16 {
    (width / 3).max(40)
}

/// The tree pane and, when there is room, the detail pane: side by side from 100 columns,
/// else the tree on top with most of the rows. Side by side, the tree gets the width its
/// widest row needs (`tree_wants`: borders included), between two fifths of the screen and
/// what leaves the detail pane [`detail_min`]; a fixed share cut the tree's reasons while
/// the detail pane stood half empty.
fn split_main(main: Rect, tree_wants: u16) -> (Rect, Option<Rect>) {
    if main.width >= 100 {
        let tree = tree_wants.clamp(main.width * 2 / 5, main.width - detail_min(main.width));
        let p = Layout::horizontal([Constraint::Length(tree), Constraint::Min(0)]).split(main);
        return (p[0], Some(p[1]));
    }
    if main.height < 10 {
        return (main, None);
    }
    let detail = (main.height * 2 / 5).max(4);
    let p = Layout::default()
        .direction(Direction::Vertical)
        .constraints([Constraint::Min(3), Constraint::Length(detail)])
        .split(main);
    (p[0], Some(p[1]))
}

pub fn draw(frame: &mut Frame, app: &mut App) {
    let area = frame.area();
    let a = areas(area, app);
    draw_header(frame, app, a.header);
    if a.access.height > 0 {
        frame.render_widget(Paragraph::new(alerts(app)), a.access);
    }
    match app.screen {
        Screen::Main => draw_main(frame, app, a.main),
        Screen::Doc => draw_doc(frame, app, a.main),
        Screen::Help => draw_help(frame, app, a.main),
        Screen::Events => draw_events(frame, app, a.main, true),
    }
    if a.events.height > 0 {
        draw_events(frame, app, a.events, false);
    }
    draw_status(frame, app, a.status, a.events.height == 0);
    draw_hints(frame, app, a.hints);
    match &app.mode {
        Mode::Confirm(cmd) => draw_confirm(frame, app, cmd, area),
        Mode::Picker(p) => draw_picker(frame, p, area),
        Mode::Normal | Mode::Prompt(_) => {}
    }
}

pub fn mode_label(app: &App, data: Option<&Data>) -> String {
    let readonly = app.keymap.readonly();
    let origin = match data.map(|d| (&d.origin, d.live.lease.leading)) {
        None => "loading",
        Some((Origin::Offline { .. }, _)) => "offline snapshot",
        Some((Origin::Live { reconciling, .. }, leading)) => match (reconciling, leading) {
            (true, true) => "reconciling",
            // Replay and reconcile go to the lease holder, wherever it runs.
            (true, false) => "standby (asks the leader)",
            (false, _) if readonly => "observing",
            (false, _) => "observing (asks the leader)",
        },
    };
    if readonly {
        format!("read-only · {origin}")
    } else {
        origin.to_string()
    }
}

/// The reconciler's leader (who, since when) and its health (queue, last sync), as header
/// fields: live only. While the API server does not answer, the leader last seen, as of
/// then: who leads now is not known (never "none": the leader may well be alive).
fn leader_fields(app: &App, data: &Data) -> Vec<Part> {
    let l = &data.live.lease;
    let now = app.now();
    let ago = |t: Option<chrono::DateTime<chrono::Utc>>| t.zip(now).map(|(t, now)| age(now - t));
    let mut out = Vec::new();
    if let Some(why) = &l.unreadable {
        // Unknown is not "nobody": the access line below says what is missing.
        let unknown = format!("unknown (Lease unreadable: {why})");
        out.push((2, styled_field("leader", unknown, warn())));
        return out;
    }
    if let Some((since, _)) = data.unreachable() {
        let who = leader_name(l).filter(|_| !l.vacant);
        let last = format!(
            "{} as of {}",
            who.as_deref().unwrap_or("unknown"),
            clock(since)
        );
        out.push((2, styled_field("leader", last, dim())));
        out.extend(settings_field(data));
        return out;
    }
    if l.vacant {
        // The alert line below says why; the field keeps its place.
        out.push((2, styled_field("leader", "none", alarm())));
        out.extend(settings_field(data));
        return out;
    }
    // A leader that stopped renewing does not lead "for" longer and longer: its age stops
    // (the alert line below says when its Lease expires).
    let unresponsive = l.unresponsive_until.is_some();
    let who = match (leader_name(l), ago(l.since)) {
        (Some(name), _) if unresponsive => format!("{name} (unresponsive)"),
        (Some(name), Some(age)) => format!("{name} for {age}"),
        (Some(name), None) => name,
        (None, _) => "–".to_string(),
    };
    out.push((2, header_field("leader", who)));
    // An empty queue is a leader in sync now, not one whose last sync grows stale.
    let health = match (data.leader_queue(), ago(data.leader_last_sync())) {
        (Some(0), _) if !unresponsive => Some("queue 0 (idle)".to_string()),
        (Some(q), Some(synced)) => Some(format!("queue {q}, synced {synced} ago")),
        (Some(q), None) => Some(format!("queue {q}")),
        (None, Some(synced)) => Some(format!("synced {synced} ago")),
        (None, None) => None,
    };
    if let Some(h) = health {
        out.push((3, vec![Span::raw(h)]));
    }
    out.extend(settings_field(data));
    out
}

/// Whose generation settings the tree is judged by: `settings: leader's` (yellow when a
/// local flag differs; the alert lines name them), or `settings: local flags`.
fn settings_field(data: &Data) -> Option<Part> {
    use crate::core::settings::Judged;
    let (value, style) = match data.settings.as_ref()? {
        Judged::Leader { differences, .. } if !differences.is_empty() => ("leader's", warn()),
        Judged::Leader { .. } => ("leader's", Style::new()),
        Judged::Local { .. } => ("local flags", Style::new()),
    };
    // As important as who leads: it says what every state in the tree is judged by.
    Some((2, styled_field("settings", value, style)))
}

/// The lines under the header, most urgent first: whether the API server answers, whether
/// any copy reconciles, Gatekeeper's generator, what cannot be read. While the API server
/// does not answer, nothing is said about the Lease: what this copy last saw of it is not
/// news about the leader.
pub fn alerts(app: &App) -> Vec<Line<'static>> {
    let Some(d) = app.data.as_deref() else {
        return Vec::new();
    };
    let lease = &d.live.lease;
    let mut out = Vec::new();
    if let Some(line) = link_line(app) {
        out.push(line);
    }
    let unreachable = d.unreachable().is_some();
    if let (Some(until), false, false) = (lease.unresponsive_until, lease.vacant, unreachable) {
        // Held but not renewed: a standby takes over at expiry; "no copy reconciles" only
        // once nobody did. Once expired, how long ago (not "in 0s" until a standby shows).
        let who = leader_name(lease).unwrap_or_else(|| "the leader".into());
        // Once expired, what comes next is a standby's takeover, not the expiry: "expired 0s
        // ago, then a standby takes over" read as if the takeover were past too.
        let next = match app.now() {
            Some(now) if until <= now => format!(
                "expired {} ago; a standby takes over if one runs",
                age(now - until)
            ),
            Some(now) => format!(
                "expires in {}s, then a standby takes over if one runs",
                seconds_until(until, now)
            ),
            None => "expires, then a standby takes over if one runs".to_string(),
        };
        out.push(Line::styled(
            format!(
                " ⚠ leader {who} unresponsive; its Lease {} {next}",
                lease.lease
            ),
            warn(),
        ));
    }
    if lease.vacant && !unreachable {
        let who = match &lease.holder {
            Some(h) => format!("{h} stopped renewing"),
            None => "nobody holds".to_string(),
        };
        out.push(Line::from(vec![
            Span::styled(
                format!(" ✖ no copy reconciles: {who} Lease {}", lease.lease),
                alarm(),
            ),
            Span::raw(" — deploy one: `kubectl vap install --print | kubectl apply -f -`"),
        ]));
    }
    if let Some(crate::core::settings::Judged::Leader { differences, .. }) = &d.settings {
        for d in differences {
            out.push(Line::styled(format!(" ⚠ {d}"), warn()));
        }
    }
    let reconciling = matches!(
        d.origin,
        Origin::Live {
            reconciling: true,
            ..
        }
    );
    if let Some(seen) = d
        .live
        .gatekeeper_generator
        .as_ref()
        .filter(|_| reconciling && !d.live.writes_enabled)
    {
        out.push(Line::styled(
            format!(
                " ⚠ Gatekeeper's own VAP generator looks active ({seen}): this copy does not write; turn it off, or use `kubectl vap run --take-over`"
            ),
            warn(),
        ));
    }
    // While the API server does not answer, the outage line above says it once: each watch's
    // failure to connect would repeat it per resource (7 of 24 rows at 80×24). What is
    // forbidden or not served stays: it is no outage.
    let outage = d.unreachable().is_some();
    let errors = d.live.access_errors.iter();
    for e in errors.filter(|e| !(outage && e.kind == AccessErrorKind::Other)) {
        out.push(Line::from(vec![
            Span::styled(format!(" ⊘ {}: {}", access_label(e), e.resource), alarm()),
            Span::raw(format!(" — {}", e.message)),
        ]));
    }
    out
}

/// Whether the live view is connecting, or its API server stopped answering.
fn link_line(app: &App) -> Option<Line<'static>> {
    let d = app.data.as_deref()?;
    let context = &d.context;
    let now = app.now();
    if let Some((since, message)) = d.unreachable() {
        let how_long = now.map_or(String::new(), |now| format!(" ({})", age(now - since)));
        return Some(Line::from(vec![
            Span::styled(
                format!(
                    " ✖ API server unreachable since {}{how_long}: {message}",
                    clock(since)
                ),
                alarm(),
            ),
            // The controller retries its watches; the tree is what was seen last.
            Span::raw(" — retrying"),
        ]));
    }
    let c = d.connecting.as_ref()?;
    Some(match (c.retry_at, &c.message) {
        (Some(at), message) => {
            let next = now.map_or(String::new(), |now| {
                format!(", next in {}s", seconds_until(at, now))
            });
            Line::styled(
                format!(
                    " ⟳ connecting to {context} (attempt {}{next}): {}",
                    c.attempt,
                    message.as_deref().unwrap_or("no answer")
                ),
                alarm(),
            )
        }
        (None, Some(why)) => Line::styled(
            format!(
                " ⟳ connecting to {context} (attempt {}; before: {why})",
                c.attempt
            ),
            warn(),
        ),
        (None, None) => Line::styled(
            format!(" ⟳ connecting to {context}: listing and watching…"),
            Style::new().fg(Color::Cyan),
        ),
    })
}

fn header_field(name: &str, value: String) -> Vec<Span<'static>> {
    styled_field(name, value, Style::new())
}

/// A header field, `name: value`, its value in `style`.
fn styled_field(name: &str, value: impl Into<String>, style: Style) -> Vec<Span<'static>> {
    vec![
        Span::styled(format!("{name}: "), dim()),
        Span::styled(value.into(), style),
    ]
}

/// The second header line's counts: findings by severity, planned writes, objects — or, where
/// counts would be untrue, what stands in their place: nothing yet while connecting; the
/// outage while the API server does not answer (the tree is the state seen before it); what
/// cannot be read when the tree is made of something unreadable (zero errors and zero
/// planned writes over a cluster not read is no news of health; what was read is counted as
/// such).
fn counts(d: &Data) -> Vec<Part> {
    if d.connecting.is_some() {
        return Vec::new();
    }
    if let Some((since, _)) = d.unreachable() {
        let text = format!(
            " ⊘ stale since {}: the tree and its counts are as the API server last showed them",
            clock(since)
        );
        return vec![(0, vec![Span::styled(text, alarm())])];
    }
    let unread: Vec<&str> = d
        .live
        .access_errors
        .iter()
        .filter(|e| is_tree_resource(e))
        .map(|e| e.resource.split('.').next().unwrap_or(&e.resource))
        .collect();
    if !unread.is_empty() && d.snapshot.object_count() == 0 {
        let text = format!(
            " ⊘ nothing could be read ({}: below), so nothing is counted",
            unread.join(", ")
        );
        return vec![(0, vec![Span::styled(text, alarm())])];
    }
    let s = &d.summary;
    let mut counts = vec![Span::raw(" ")];
    for (n, sev, one, many) in [
        (s.errors, Severity::Error, "error", "errors"),
        (s.warnings, Severity::Warning, "warning", "warnings"),
        (s.infos, Severity::Info, "info", "infos"),
    ] {
        let style = if n > 0 {
            glyphs::severity_style(sev)
        } else {
            dim()
        };
        if counts.len() > 1 {
            counts.push(Span::raw(" "));
        }
        counts.push(Span::styled(
            format!("{} {}", glyphs::severity_glyph(sev), count(n, one, many)),
            style,
        ));
    }
    let planned = count(d.analysis.plan.len(), "planned write", "planned writes");
    let snap = &d.snapshot;
    if !unread.is_empty() {
        counts.push(Span::styled(
            format!(" in what could be read; ⊘ {} not read", unread.join(", ")),
            alarm(),
        ));
    }
    vec![
        (0, counts),
        (1, vec![Span::raw(planned)]),
        (
            3,
            vec![Span::raw(format!(
                "{}, {}, {}, {}",
                count(snap.templates.len(), "template", "templates"),
                count(snap.constraints.len(), "constraint", "constraints"),
                count(snap.policies.len(), "VAP", "VAPs"),
                count(snap.bindings.len(), "binding", "bindings"),
            ))],
        ),
    ]
}

fn draw_header(frame: &mut Frame, app: &App, area: Rect) {
    let data = app.data.as_deref();
    let sep = Span::styled(" │ ", dim());
    let unknown = || "–".to_string();
    let live = data.is_some_and(|d| matches!(d.origin, Origin::Live { .. }));
    let title = Span::styled(" kubectl-vap", bold().fg(Color::Cyan));
    let mode = header_field("mode", mode_label(app, data));
    // The context and the mode always stay (which cluster; does this copy write?): a long
    // context is shortened to what is left, the other fields are dropped whole; on a narrow
    // screen the program's name goes first.
    let mode_w = mode.iter().map(Span::width).sum::<usize>();
    let room = |fixed: usize| usize::from(area.width).saturating_sub(fixed + "context: ".len());
    let with_title = room(title.width() + 2 * sep.width() + mode_w);
    let keep_title = with_title >= 8;
    let room = if keep_title {
        with_title.max(8)
    } else {
        room(1 + sep.width() + mode_w).max(4)
    };
    let context = data.map(|d| d.context.clone()).unwrap_or_else(unknown);
    let mut context_field = header_field("context", shorten(&context, room));
    if !keep_title {
        context_field.insert(0, Span::raw(" "));
    }
    // Display order left to right; the number is what goes first when the line is short.
    let mut l1 = Vec::new();
    if keep_title {
        l1.push((0, vec![title]));
    }
    l1.push((0, context_field));
    l1.push((0, mode));
    // Offline nothing leads; live the leader's fields take the lease's place.
    let later = match data.filter(|_| live) {
        Some(d) => {
            l1.extend(leader_fields(app, d));
            4
        }
        None => {
            let holder = data.and_then(|d| d.live.lease.holder.clone());
            l1.push((2, header_field("lease", holder.unwrap_or_else(unknown))));
            3
        }
    };
    let vap_api = data.and_then(|d| d.live.vap_api.as_deref());
    let vap_api = vap_api.map(|v| v.trim_start_matches("admissionregistration.k8s.io/"));
    let vap_api = vap_api.map_or_else(unknown, str::to_string);
    l1.push((later, header_field("VAP API", vap_api)));
    let server = data.and_then(|d| d.live.server_version.clone());
    l1.push((
        later + 1,
        header_field("server", server.unwrap_or_else(unknown)),
    ));
    let mut l2: Vec<Part> = Vec::new();
    if let Some(d) = data {
        l2.extend(counts(d));
    }
    // Whether the tree may be partial, and what narrows or orders it: in yellow.
    let flag = |text: String| vec![Span::styled(text, warn())];
    if data.is_some_and(|d| d.running() && !d.live.synced && d.unreachable().is_none()) {
        l2.push((0, flag("syncing: the tree may be partial".into())));
    }
    if app.filter.faults_only {
        l2.push((0, flag("faults only".into())));
    }
    if !app.filter.text.is_empty() {
        l2.push((0, flag(format!("filter: {}", app.filter.text))));
    }
    if app.filter.sort != SortBy::Name {
        l2.push((2, flag(format!("sort: {}", app.filter.sort.as_str()))));
    }
    let lines = vec![fit(l1, area.width, &sep), fit(l2, area.width, &sep)];
    frame.render_widget(Paragraph::new(lines), area);
}

fn draw_main(frame: &mut Frame, app: &mut App, area: Rect) {
    let wants = u16::try_from(app.tree.widest + 2).unwrap_or(u16::MAX);
    let (tree, detail) = split_main(area, wants);
    app.page = usize::from(tree.height.saturating_sub(2)).max(1);
    draw_tree(frame, app, tree);
    match detail {
        Some(detail) => draw_detail(frame, app, detail),
        None => app.drawn.detail = None,
    }
}

/// Rows and columns inside a bordered pane.
fn inside(area: Rect) -> (usize, usize) {
    (
        usize::from(area.height.saturating_sub(2)),
        usize::from(area.width.saturating_sub(2)),
    )
}

/// The tree's title: the selection's row of the rows shown (so a selection scrolled out of
/// sight is found), and the nodes, or under a filter how many of them it keeps.
pub fn tree_title(app: &App) -> String {
    let nodes = if app.filter.is_active() {
        format!(
            "{} of {}",
            app.tree.shown,
            count(app.tree.total, "node", "nodes")
        )
    } else {
        count(app.tree.total, "node", "nodes")
    };
    match app.tree.position() {
        (0, 0) => format!(" Tree ({nodes}) "),
        (at, rows) => format!(" Tree ({at}/{rows} · {nodes}) "),
    }
}

fn draw_tree(frame: &mut Frame, app: &mut App, area: Rect) {
    let title = tree_title(app);
    let block = Block::default().borders(Borders::ALL).title(title);
    let Some(data) = app.data.clone() else {
        frame.render_widget(Paragraph::new("loading…").style(dim()).block(block), area);
        return;
    };
    if app.tree.items.is_empty() {
        let mut lines = Vec::new();
        if app.filter.is_active() {
            lines.push(Line::raw("nothing matches the filter (esc clears it)"));
        } else if let Some(link) = link_line(app).filter(|_| data.connecting.is_some()) {
            lines.push(link);
            lines.push(Line::styled(
                "the tree appears once the reconciler has listed the cluster (:ctx switches context)",
                dim(),
            ));
        } else if data.live.access_errors.iter().any(is_tree_resource) {
            lines.push(Line::styled(
                "nothing can be shown: the cluster refused or lacks what the tree is made of",
                Style::new().fg(Color::Red),
            ));
            for e in &data.live.access_errors {
                lines.push(Line::raw(format!(
                    "• {} {}: {}",
                    e.resource,
                    access_label(e),
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
                .highlight_style(glyphs::selection_style())
                .highlight_symbol("› ");
            frame.render_stateful_widget(tree, area, &mut app.tree.state);
            // A row cut at the pane's edge ends in `…`, so a cut reason is not read as whole.
            let inner = Block::default().borders(Borders::ALL).inner(area);
            let cut = app
                .tree
                .cut_rows(usize::from(inner.width), usize::from(inner.height));
            for row in cut {
                let at = (inner.right().saturating_sub(1), inner.y + row as u16);
                if let Some(cell) = frame.buffer_mut().cell_mut(at) {
                    cell.set_symbol("…");
                }
            }
        }
        Err(e) => frame.render_widget(Paragraph::new(e.to_string()).block(block), area),
    }
}

/// The detail pane's lines for the selection, before wrapping.
pub fn detail_lines(app: &App) -> Vec<Line<'static>> {
    match (&app.data, app.selected_node()) {
        (Some(d), Some(n)) => [
            detail::summary(d, n),
            detail::violations(&app.violations, d, n),
        ]
        .concat(),
        _ => vec![Line::styled("nothing selected", dim())],
    }
}

/// The detail pane, wrapped to its width and scrolled (`J`/`K`); its title says which rows
/// show when they are not all in sight, so what is below is never a surprise.
fn draw_detail(frame: &mut Frame, app: &mut App, area: Rect) {
    let (rows, width) = inside(area);
    let lines = wrap_lines(&detail_lines(app), width);
    app.drawn.detail = Some(Extent {
        rows,
        len: lines.len(),
    });
    let scroll = app.detail_scroll().min(lines.len().saturating_sub(rows));
    let title = if lines.len() > rows {
        format!(
            " Detail ({} · J/K scroll) ",
            in_sight(scroll, rows, lines.len())
        )
    } else {
        " Detail ".to_string()
    };
    draw_scrolled(frame, area, title, String::new(), lines, scroll);
}

/// A scrolled, bordered view of lines (detail, YAML, diff, help, the event log).
fn draw_scrolled(
    frame: &mut Frame,
    area: Rect,
    title: String,
    footer: String,
    lines: Vec<Line<'static>>,
    scroll: usize,
) {
    let block = Block::default()
        .borders(Borders::ALL)
        .title(title)
        .title_bottom(Line::styled(footer, dim()));
    let rows = usize::from(block.inner(area).height);
    let shown: Vec<Line> = lines.into_iter().skip(scroll).take(rows).collect();
    frame.render_widget(Paragraph::new(shown).block(block), area);
}

fn position(scroll: usize, rows: usize, len: usize) -> String {
    format!(" lines {} ", in_sight(scroll, rows, len))
}

/// The rows in sight of `len`, from `scroll`, `rows` of them: `3–10 of 42`.
fn in_sight(scroll: usize, rows: usize, len: usize) -> String {
    let last = (scroll + rows).min(len);
    format!("{}–{last} of {len}", (scroll + 1).min(len))
}

fn draw_doc(frame: &mut Frame, app: &mut App, area: Rect) {
    let (rows, width) = inside(area);
    let wrap = app.wrap;
    let Some(doc) = &mut app.doc else { return };
    let lines = doc_lines(&doc.lines, width, wrap);
    let extent = Extent {
        rows,
        len: lines.len(),
    };
    app.drawn.doc = Some(extent);
    doc.scroll = doc.scroll.min(extent.last_top());
    let wrap = if app.wrap { "w: cut" } else { "w: wrap" };
    let footer = format!(
        "{}· {wrap} · c: copy ",
        position(doc.scroll, rows, lines.len())
    );
    draw_scrolled(
        frame,
        area,
        format!(" {} ", doc.title),
        footer,
        lines,
        doc.scroll,
    );
}

/// The help screen: the keymap table, the states table, the severities, the findings table.
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
            spans.push(Span::styled("  (write)", warn()));
        }
        out.push(Line::from(spans));
    }
    if app.keymap.readonly() {
        out.push(Line::styled(format!("  {}", keymap::READONLY), dim()));
    }
    out.push(Line::default());
    out.push(Line::styled("States (what a node is)", bold()));
    for l in STATES {
        out.push(Line::from(vec![
            Span::styled(
                format!("  {} {:<12}", l.glyph, l.state.as_str()),
                glyphs::style(l.state),
            ),
            Span::raw(l.meaning),
        ]));
    }
    out.push(Line::default());
    out.push(Line::styled("Severities (how bad a finding is)", bold()));
    for (sev, glyph, meaning) in SEVERITIES {
        out.push(Line::from(vec![
            Span::styled(
                format!("  {glyph} {:<12}", sev.as_str()),
                glyphs::severity_style(*sev),
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
                    "  {} {:<22}",
                    glyphs::severity_glyph(c.severity()),
                    c.as_str()
                ),
                glyphs::severity_style(c.severity()),
            ),
            Span::raw(c.title()),
        ]));
    }
    out
}

/// The help screen's rows at `width` columns (wrapped: the keys' explanations are long).
pub fn help_rows(app: &App, width: usize) -> Vec<Line<'static>> {
    wrap_lines(&help_lines(app), width)
}

fn draw_help(frame: &mut Frame, app: &mut App, area: Rect) {
    let (rows, width) = inside(area);
    let lines = help_rows(app, width);
    let extent = Extent {
        rows,
        len: lines.len(),
    };
    app.drawn.help = Some(extent);
    app.help_scroll = app.help_scroll.min(extent.last_top());
    let footer = position(app.help_scroll, rows, lines.len());
    draw_scrolled(
        frame,
        area,
        " Help (esc or ? to close) ".into(),
        footer,
        lines,
        app.help_scroll,
    );
}

/// A log line as drawn: its time dimmed, its text in its level's colour.
fn event_line(time: &str, level: Level, text: String) -> Line<'static> {
    let style = match level {
        Level::Error => Style::new().fg(Color::Red),
        Level::Warn => warn(),
        Level::Info => Style::new(),
    };
    Line::from(vec![
        Span::styled(format!("{time} "), dim()),
        Span::styled(text, style),
    ])
}

/// A log line wrapped at `width` columns, its continuations under its text. A text of several
/// lines (the API server's caret diagram under a CEL error) keeps them: each further line
/// starts under the text, never as a literal `\n`.
fn wrapped_event(e: &crate::tui::model::data::EventLine, width: usize) -> Vec<Line<'static>> {
    let time = e.time();
    let hang = time.len() + 1;
    let text = e.text();
    let mut lines = text.split('\n');
    let first = crate::text::printable(lines.next().unwrap_or_default()).into_owned();
    let mut rows = wrap_line(&event_line(&time, e.level(), first), width, hang);
    for more in lines {
        // `event_line` adds the space after the time.
        let under = " ".repeat(time.len());
        let more = crate::text::printable(more).into_owned();
        let row = event_line(&under, e.level(), more);
        rows.extend(wrap_line(&row, width, hang));
    }
    rows
}

/// The event log's rows at `width` columns: every line wrapped, its continuations under its
/// text (the time stays alone in its column), as a log reader expects — a verdict or an
/// error is read whole, without a key to scroll sideways.
pub fn log_rows(app: &App, width: usize) -> Vec<Line<'static>> {
    app.log
        .iter()
        .flat_map(|e| wrapped_event(e, width))
        .collect()
}

/// The newest `rows` rows of the event log (the pane under the tree): only the lines that
/// can show are wrapped.
fn log_tail(app: &App, width: usize, rows: usize) -> Vec<Line<'static>> {
    let mut out: Vec<Line<'static>> = Vec::new();
    for e in app.log.iter().rev() {
        if out.len() >= rows {
            break;
        }
        let mut wrapped = wrapped_event(e, width);
        wrapped.append(&mut out);
        out = wrapped;
    }
    let extra = out.len().saturating_sub(rows);
    out.split_off(extra)
}

/// The event log: the newest rows in the pane under the tree, or full-screen (`e`) from
/// `log_scroll` (following the newest until scrolled up); long lines wrap.
fn draw_events(frame: &mut Frame, app: &mut App, area: Rect, full: bool) {
    let (rows, width) = inside(area);
    let len = app.log.len();
    if !full {
        let lines = log_tail(app, width, rows);
        let title = " Events (e: full screen) ".to_string();
        draw_scrolled(frame, area, title, String::new(), lines, 0);
        return;
    }
    let lines = log_rows(app, width);
    let total = lines.len();
    let extent = Extent { rows, len: total };
    app.drawn.events = Some(extent);
    let tail = extent.last_top();
    // Scrolled to the end (the screen grew): follow new lines again.
    app.log_scroll = app.log_scroll.filter(|at| *at < tail);
    let scroll = app.log_scroll.unwrap_or(tail);
    let title = format!(" Events ({len}) — esc or e closes ");
    let footer = format!(
        "{}· {}",
        position(scroll, rows, total),
        if app.log_scroll.is_some() {
            "scrolled: G follows "
        } else {
            "following "
        }
    );
    draw_scrolled(frame, area, title, footer, lines, scroll);
}

fn draw_status(frame: &mut Frame, app: &App, area: Rect, events_hidden: bool) {
    let line = if let Mode::Prompt(p) = &app.mode {
        let (lead, help) = p.kind.words();
        let names = app.context_suggestions();
        let help = if names.is_empty() {
            help.to_string()
        } else {
            format!("  (contexts: {}; tab completes)", names.join(", "))
        };
        Line::from(vec![
            Span::styled(lead, warn()),
            Span::raw(p.line.clone()),
            Span::styled("█", warn()),
            Span::styled(help, dim()),
        ])
    } else if let Some(f) = &app.flash {
        let style = match f.level {
            Level::Info => Style::new().fg(Color::Green),
            Level::Warn => warn(),
            Level::Error => alarm(),
        };
        // One row: what does not fit ends in `…`; the event log has the whole line.
        let room = usize::from(area.width).saturating_sub(1);
        Line::styled(format!(" {}", shorten(&f.text, room)), style)
    } else if let Some(e) = app
        .log
        .back()
        .filter(|_| events_hidden && app.screen != Screen::Events)
    {
        // No room for the event pane: the newest event stays in sight, cut with `…` (`e`
        // shows it whole).
        let time = e.time();
        let room = usize::from(area.width).saturating_sub(1 + time.len() + 1);
        // One row: the first line of a text of several (`e` shows them all).
        let text = e.text();
        let first = text.lines().next().unwrap_or_default();
        let first = crate::text::printable(first);
        let mut l = event_line(&time, e.level(), shorten(&first, room));
        l.spans.insert(0, Span::raw(" "));
        l
    } else {
        Line::default()
    };
    frame.render_widget(Paragraph::new(line), area);
}

/// The hint bar: `? help` first and `q quit` last always; the rest in the keymap's order as
/// far as they fit, dropped from the end — except that where replay and reconcile can run (a
/// live view: they go to the lease holder) they are kept before the other hints, and where
/// they never can (an offline snapshot) they are not offered.
fn draw_hints(frame: &mut Frame, app: &App, area: Rect) {
    let key_style = Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD);
    let writes_run = app.write_refusal().is_none();
    let offline = app
        .data
        .as_deref()
        .is_some_and(|d| matches!(d.origin, Origin::Offline { .. }));
    let parts: Vec<Part> = app
        .keymap
        .hint_groups(app.screen)
        .into_iter()
        .filter(|(_, e)| !(offline && e.write))
        .enumerate()
        .map(|(i, (keys, e))| {
            let word = e.hint.unwrap_or_default();
            let i = u8::try_from(i).unwrap_or(u8::MAX);
            let importance = match (word, e.write && writes_run) {
                ("help" | "quit", _) => 0,
                (_, true) => 1 + i,
                (_, false) if writes_run => 64 + i,
                (_, false) => 1 + i,
            };
            (
                importance,
                vec![Span::styled(keys, key_style), Span::raw(format!(" {word}"))],
            )
        })
        .collect();
    let (mut quit, rest): (Vec<Part>, Vec<Part>) = parts
        .into_iter()
        .partition(|p| p.1.get(1).is_some_and(|s| s.content == " quit"));
    let mut ordered = rest;
    ordered.append(&mut quit);
    let mut line = fit(ordered, area.width.saturating_sub(1), &Span::raw("  "));
    line.spans.insert(0, Span::raw(" "));
    frame.render_widget(Paragraph::new(line), area);
}

fn draw_confirm(frame: &mut Frame, app: &App, cmd: &WriteCommand, area: Rect) {
    let w = area.width.min(70);
    // Who carries out a replay or reconcile: another copy, when this one does not lead.
    let leader = app
        .data
        .as_deref()
        .filter(|d| matches!(d.origin, Origin::Live { .. }))
        .map(|d| &d.live.lease)
        .filter(|l| !l.leading);
    let request = matches!(
        cmd,
        WriteCommand::Replay(_) | WriteCommand::Reconcile(_) | WriteCommand::ReconcileAll
    );
    let who = match leader.filter(|_| request) {
        Some(l) if l.vacant => Line::styled(
            "no copy holds the Lease now: the request may find nobody to carry it out",
            warn(),
        ),
        Some(l) => Line::styled(
            format!(
                "goes to the leader ({}), which carries it out",
                leader_name(l).unwrap_or_else(|| "the lease holder".to_string())
            ),
            dim(),
        ),
        None => Line::default(),
    };
    let text = Text::from(vec![
        Line::styled(cmd.prompt(), bold()),
        Line::styled(format!("same as `{}`", cmd.cli()), dim()),
        who,
        Line::from(vec![
            Span::styled(
                "y",
                Style::new().fg(Color::Green).add_modifier(Modifier::BOLD),
            ),
            Span::raw(" yes   "),
            Span::styled("n", alarm()),
            Span::raw(" no"),
        ]),
    ]);
    // Tall enough for every wrapped line, so y/n never falls out of the box.
    let inner = usize::from(w.saturating_sub(2)).max(1);
    let rows: usize = text
        .lines
        .iter()
        .map(|l| l.width().div_ceil(inner).max(1))
        .sum();
    let h = u16::try_from(rows + 2).unwrap_or(u16::MAX);
    let body = Paragraph::new(text).wrap(Wrap { trim: false });
    popup(
        frame,
        centered(area, w, h),
        " Confirm ".into(),
        warn(),
        body,
    );
}

/// A box of `w`×`h` columns and rows in the middle of `area`, cut to fit it.
fn centered(area: Rect, w: u16, h: u16) -> Rect {
    Rect {
        x: area.x + (area.width.saturating_sub(w)) / 2,
        y: area.y + (area.height.saturating_sub(h)) / 2,
        width: w.min(area.width),
        height: h.min(area.height),
    }
}

/// A box drawn over whatever is under it (the confirmation, the context list).
fn popup(frame: &mut Frame, rect: Rect, title: String, border: Style, body: Paragraph) {
    frame.render_widget(Clear, rect);
    let block = Block::default()
        .borders(Borders::ALL)
        .title(title)
        .border_style(border);
    frame.render_widget(body.block(block), rect);
}

/// The context list `:ctx` opens: the current one marked, the selection a bar.
fn draw_picker(frame: &mut Frame, p: &crate::tui::model::app::Picker, area: Rect) {
    let widest = p.names.iter().map(|n| Span::raw(n.as_str()).width()).max();
    let w = u16::try_from(widest.unwrap_or(0) + 16)
        .unwrap_or(u16::MAX)
        .clamp(40, area.width.max(1));
    let h = u16::try_from(p.names.len() + 3)
        .unwrap_or(u16::MAX)
        .min(area.height.saturating_sub(2).max(3));
    let rect = centered(area, w, h);
    // Rows for names: the box's inside less the footer line.
    let rows = usize::from(rect.height.saturating_sub(3)).max(1);
    let top = p.selected.saturating_sub(rows - 1);
    let mut lines: Vec<Line> = p
        .names
        .iter()
        .enumerate()
        .skip(top)
        .take(rows)
        .map(|(i, n)| {
            let current = *n == p.current;
            let text = format!(
                "{} {n}{}",
                if current { "●" } else { " " },
                if current { "  (current)" } else { "" }
            );
            if i == p.selected {
                Line::styled(format!("› {text}"), glyphs::selection_style())
            } else {
                Line::raw(format!("  {text}"))
            }
        })
        .collect();
    lines.push(Line::styled(
        "↑/↓ move · enter switches · esc closes",
        dim(),
    ));
    let title = format!(" Contexts ({}) ", p.names.len());
    let border = Style::new().fg(Color::Cyan);
    popup(frame, rect, title, border, Paragraph::new(lines));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tree_takes_the_width_its_rows_need_and_leaves_the_detail_a_third() {
        let main = Rect::new(0, 0, 160, 40);
        // Wide rows: the tree stops where the detail pane keeps a third.
        let (tree, detail) = split_main(main, 150);
        assert_eq!((tree.width, detail.map(|d| d.width)), (107, Some(53)));
        // Narrow rows: the detail pane gets the rest, the tree at least two fifths.
        let (tree, detail) = split_main(main, 30);
        assert_eq!((tree.width, detail.map(|d| d.width)), (64, Some(96)));
        let (tree, _) = split_main(main, 90);
        assert_eq!(tree.width, 90);
        // 100 columns: the detail pane keeps 40.
        let (tree, detail) = split_main(Rect::new(0, 0, 100, 30), 150);
        assert_eq!((tree.width, detail.map(|d| d.width)), (60, Some(40)));
    }
}
