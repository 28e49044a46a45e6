//! TUI benchmark: first frame and frame time at 10,000 bindings, against a lower bound measured
//! in the same run (a plain ratatui `List` of the same labels on the same backend), and peak RSS.
//!
//! `cargo bench --bench tui` (release). Under `cargo test --all-targets` (no `--bench`
//! argument) it runs a small smoke version so the test command stays fast.
//!
//! Frames are drawn through the real crossterm backend into `io::sink()`, so the cost includes
//! diffing and escape-sequence generation, not the terminal's own painting.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

use kubectl_vap::load::cel::default_options;
use kubectl_vap::model::Source;
use kubectl_vap::snapshot::Snapshot;
use kubectl_vap::tui::{Action, App, Offline, update, view};
use ratatui::backend::CrosstermBackend;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::widgets::{Block, Borders, List, ListItem, ListState};
use ratatui::{Terminal, TerminalOptions, Viewport};
#[path = "../tests/support/mod.rs"]
mod support;

use serde_json::{Value, json};
use std::io::Sink;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::bench::{median, peak_rss_mib};

const W: u16 = 200;
const H: u16 = 60;

fn terminal() -> Terminal<CrosstermBackend<Sink>> {
    Terminal::with_options(
        CrosstermBackend::new(std::io::sink()),
        TerminalOptions {
            viewport: Viewport::Fixed(Rect::new(0, 0, W, H)),
        },
    )
    .expect("a fixed viewport needs no terminal")
}

fn constraint(t: usize, c: usize) -> Value {
    let mut v = testenv::gatekeeper::constraint(
        &format!("K8sBench{t:03}"),
        &format!("c-{c:05}"),
        json!({"enforcementAction": "deny", "parameters": {"labels": ["owner"]}}),
    );
    // Unique across kinds (`support::objects::constraint`'s uid is per name).
    v["metadata"]["uid"] = json!(format!("uid-c-{t}-{c}"));
    v
}

/// The time of each of `n` frames after a key press (Down).
fn frame_times(
    term: &mut Terminal<CrosstermBackend<Sink>>,
    app: &mut App,
    n: usize,
) -> Vec<Duration> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        update(app, Action::Down);
        term.draw(|f| view::draw(f, app)).unwrap();
        out.push(t.elapsed());
    }
    out
}

/// `templates` × `per` constraints, every VAP and binding written (from the plan), then 1%
/// of the bindings removed (missing) and 1% changed (out of sync).
fn snapshot(templates: usize, per: usize) -> Snapshot {
    let mut snap = Snapshot {
        now: Some(chrono::Utc::now()),
        ..Default::default()
    };
    for t in 0..templates {
        snap.insert(
            support::objects::template(
                &format!("k8sbench{t:03}"),
                &format!("K8sBench{t:03}"),
                support::objects::cel_source(Some(true)),
            ),
            Source::default(),
        )
        .unwrap();
        for c in 0..per {
            snap.insert(constraint(t, c), Source::default()).unwrap();
        }
    }
    let plan = kubectl_vap::core::analyze(&snap, &default_options()).plan;
    for (i, w) in plan.into_iter().enumerate() {
        let Some(mut body) = w.body else { continue };
        let binding = w.object.kind == kubectl_vap::model::VAPB_KIND;
        if binding && i % 100 == 7 {
            continue;
        }
        if binding && i % 100 == 42 {
            body["spec"]["validationActions"] = json!(["Warn"]);
        }
        body["metadata"]["uid"] = json!(format!("uid-o-{i}"));
        snap.insert(body, Source::default()).unwrap();
    }
    snap
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

struct Result {
    first_frame: Duration,
    frame_median: Duration,
    frame_max: Duration,
}

/// The lower bound: a plain List of the same labels, built and drawn; then select-next + draw.
fn baseline(labels: &[String], frames: usize) -> Result {
    let mut term = terminal();
    let start = Instant::now();
    let items: Vec<ListItem> = labels
        .iter()
        .map(|l| ListItem::new(l.as_str()).style(Style::new().fg(Color::Green)))
        .collect();
    let list = List::new(items)
        .block(Block::default().borders(Borders::ALL).title("baseline"))
        .highlight_symbol("› ");
    let mut state = ListState::default().with_selected(Some(0));
    term.draw(|f| f.render_stateful_widget(&list, f.area(), &mut state))
        .unwrap();
    let first_frame = start.elapsed();
    let mut times = Vec::with_capacity(frames);
    for _ in 0..frames {
        let t = Instant::now();
        state.select_next();
        term.draw(|f| f.render_stateful_widget(&list, f.area(), &mut state))
            .unwrap();
        times.push(t.elapsed());
    }
    let frame_max = times.iter().max().copied().unwrap_or_default();
    Result {
        first_frame,
        frame_median: median(&times),
        frame_max,
    }
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let (templates, per, frames) = if full { (100, 100, 300) } else { (4, 10, 10) };
    let bindings = templates * per;
    println!(
        "TUI benchmark: {templates} templates × {per} constraints = {bindings} bindings{}",
        if full {
            ""
        } else {
            " (smoke run; `cargo bench --bench tui` for the real one)"
        }
    );

    let t = Instant::now();
    let snap = snapshot(templates, per);
    println!("  building the synthetic snapshot: {}", ms(t.elapsed()));
    let rss_start = peak_rss_mib(std::process::id());

    // Analysis: done once per change, on the source's thread (not per frame).
    let t = Instant::now();
    let data = Arc::new(Offline::data(
        snap,
        vec!["bench".into()],
        &default_options(),
    ));
    let analysis = t.elapsed();
    let nodes: usize = data.analysis.tree.iter().map(|n| n.walk().len()).sum();

    // The lower bound on the same labels, first (so peak RSS after it is its own).
    let labels: Vec<String> = data
        .analysis
        .tree
        .iter()
        .flat_map(|n| n.walk())
        .map(|n| {
            format!(
                "{} {}  {}  {}",
                kubectl_vap::tui::glyphs::glyph(n.state),
                n.label,
                n.state.as_str(),
                n.reason
            )
        })
        .collect();
    let base = baseline(&labels, frames);
    let rss_baseline = peak_rss_mib(std::process::id());

    // The TUI: data in, first frame out.
    let mut term = terminal();
    let t = Instant::now();
    let mut app = App::new(false);
    update(&mut app, Action::Resize(W, H));
    update(&mut app, Action::Data(data.clone()));
    term.draw(|f| view::draw(f, &mut app)).unwrap();
    let first_frame = t.elapsed();

    // Navigating with the tree as opened by default (templates collapsed, one row each).
    let nav = frame_times(&mut term, &mut app, frames);
    // Everything expanded: the worst case for the tree widget (every node visible).
    let mut all: Vec<Vec<u64>> = Vec::new();
    fn open_all(
        items: &[tui_tree_widget::TreeItem<'static, u64>],
        path: &mut Vec<u64>,
        out: &mut Vec<Vec<u64>>,
    ) {
        for i in items {
            path.push(*i.identifier());
            if !i.children().is_empty() {
                out.push(path.clone());
                open_all(i.children(), path, out);
            }
            path.pop();
        }
    }
    open_all(&app.tree.items, &mut Vec::new(), &mut all);
    for p in all {
        app.tree.state.open(p);
    }
    term.draw(|f| view::draw(f, &mut app)).unwrap();
    let expanded = frame_times(&mut term, &mut app, frames);
    // Typing in the filter: one rebuild of the items per key.
    let mut typing = Vec::new();
    update(&mut app, Action::StartFilter);
    for c in "c-0004".chars() {
        let t = Instant::now();
        update(&mut app, Action::PromptPush(c));
        term.draw(|f| view::draw(f, &mut app)).unwrap();
        typing.push(t.elapsed());
    }
    update(&mut app, Action::PromptCancel);
    // Peak RSS before the live-update part, which analyses a second snapshot.
    let rss_tui = peak_rss_mib(std::process::id());
    // A live update: one binding disappears, then comes back (analysed off the UI thread, as
    // the source does); the UI re-indexes and rebuilds only the template that changed.
    let mut changed = (*data.snapshot).clone();
    let gone = changed
        .bindings
        .remove(changed.bindings.len() / 2)
        .meta
        .name;
    let data2 = Arc::new(Offline::data(
        changed,
        vec!["bench".into()],
        &default_options(),
    ));
    let mut refresh = Vec::new();
    let mut rebuilt = 0;
    for i in 0..20u32 {
        let next = if i.is_multiple_of(2) { &data2 } else { &data };
        let t = Instant::now();
        update(&mut app, Action::Data(next.clone()));
        let u = t.elapsed();
        term.draw(|f| view::draw(f, &mut app)).unwrap();
        refresh.push(t.elapsed());
        if std::env::var_os("TUI_BENCH_DEBUG").is_some() {
            eprintln!("update {:?} total {:?}", u, t.elapsed());
        }
        rebuilt = rebuilt.max(app.tree.rebuilt);
    }

    let nav_max = nav.iter().max().copied().unwrap_or_default();
    let exp_max = expanded.iter().max().copied().unwrap_or_default();
    println!("  tree nodes: {nodes}; screen {W}×{H}; {frames} frames per measurement");
    println!(
        "  analysis (source thread, once per change):      {}",
        ms(analysis)
    );
    println!(
        "  first frame (tree built from data + draw):      {}",
        ms(first_frame)
    );
    println!(
        "    lower bound: plain List of the same labels:   {}",
        ms(base.first_frame)
    );
    println!(
        "  frame, default expansion (median / max):        {} / {}",
        ms(median(&nav)),
        ms(nav_max)
    );
    println!(
        "  frame, everything expanded (median / max):      {} / {}",
        ms(median(&expanded)),
        ms(exp_max)
    );
    println!(
        "    lower bound: plain List, select next (median / max): {} / {}",
        ms(base.frame_median),
        ms(base.frame_max)
    );
    println!(
        "  filter keystroke (rebuild + draw, median):      {}",
        ms(median(&typing))
    );
    println!(
        "  live update, binding {gone} gone/back (UI thread, median; {rebuilt} of {templates} templates rebuilt): {}",
        ms(median(&refresh))
    );
    if let (Some(a), Some(b), Some(c)) = (rss_start, rss_baseline, rss_tui) {
        println!(
            "  peak RSS: after building the snapshot {a:.1} MiB; after the List lower bound {b:.1} MiB; after the TUI {c:.1} MiB"
        );
    }
}
