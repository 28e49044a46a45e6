//! The tree pane's model: tree-widget items built from the analysis tree, once per data or
//! filter change (never per frame), keyed by stable ids so expansion and selection survive
//! refreshes.

use crate::core::Analysis;
use crate::core::tree::{Node, NodeKind, State};
use crate::core::{Finding, Severity};
use crate::tui::say::glyphs;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use std::collections::HashMap;
use std::sync::Arc;
use tui_tree_widget::{TreeItem, TreeState};

/// A node's identifier in the widget: a hash of its stable id (cheap to clone and compare).
pub type Key = u64;

/// FNV-1a of the node id: stable across runs and refreshes.
pub fn key_of(id: &str) -> Key {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The order of siblings. Both are total orders on stable fields, so the tree looks the
/// same between refreshes and between runs whatever order the cluster lists objects in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SortBy {
    /// Kind (template, CRD, VAP, constraints, bindings), then name.
    #[default]
    Name,
    /// Worst state in the subtree first, then as `Name`.
    State,
}

impl SortBy {
    pub fn next(self) -> SortBy {
        match self {
            SortBy::Name => SortBy::State,
            SortBy::State => SortBy::Name,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            SortBy::Name => "name",
            SortBy::State => "state",
        }
    }
}

/// What the tree shows: a text filter (names and states), faults only, and the order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    pub text: String,
    pub faults_only: bool,
    pub sort: SortBy,
}

impl Filter {
    /// Whether it hides anything (the order hides nothing).
    pub fn is_active(&self) -> bool {
        !self.text.is_empty() || self.faults_only
    }
    /// Whether a node's name or state contains `query` (already lowercased).
    fn matches(node: &Node, query: &str) -> bool {
        query.is_empty()
            || contains_ignore_case(&node.label, query)
            || node.state.as_str().contains(query)
    }
}

/// State of one rebuild walk.
struct Walk<'a> {
    filter: &'a Filter,
    /// The filter text, lowercased once.
    query: &'a str,
    path: Vec<Key>,
    /// Nodes with shown children: opened when a filter is active.
    open: Vec<Vec<Key>>,
    /// Open the way to every match (a new filter or new data), not after a collapse.
    open_matches: bool,
    shown: usize,
    /// The widest row built, in columns (selection mark, indentation, fold mark included).
    widest: usize,
    /// Each row built and its width, in those columns.
    widths: Vec<(Key, usize)>,
}

/// `hay` contains `needle` (lowercase), ignoring case; no allocation for ASCII.
fn contains_ignore_case(hay: &str, needle: &str) -> bool {
    if hay.is_ascii() && needle.is_ascii() {
        let n = needle.as_bytes();
        n.is_empty()
            || n.len() <= hay.len()
                && hay
                    .as_bytes()
                    .windows(n.len())
                    .any(|w| w.eq_ignore_ascii_case(n))
    } else {
        hay.to_lowercase().contains(needle)
    }
}

/// Findings in a subtree, by severity.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub errors: usize,
    pub warnings: usize,
    pub infos: usize,
}

impl Counts {
    fn add(&mut self, o: Counts) {
        self.errors += o.errors;
        self.warnings += o.warnings;
        self.infos += o.infos;
    }
    pub fn total(&self) -> usize {
        self.errors + self.warnings + self.infos
    }
}

/// A top-level item reused as it was built: the item, the rows it shows, its widest row.
type Reused = (TreeItem<'static, Key>, usize, usize);

#[derive(Default)]
pub struct TreeView {
    pub items: Vec<TreeItem<'static, Key>>,
    pub state: TreeState<Key>,
    counts: HashMap<Key, Counts>,
    /// Nodes in `items` (all levels).
    pub shown: usize,
    /// Nodes in the analysis tree.
    pub total: usize,
    /// Nodes with children seen in earlier data: only nodes new to the tree are auto-opened,
    /// so what the user collapsed stays collapsed.
    known: std::collections::HashSet<Key>,
    /// The analysis the items were built from.
    analysis: Option<Arc<Analysis>>,
    /// The filter the items were built with: reuse needs the same one.
    built_with: Option<Filter>,
    /// Nodes shown under each top-level item.
    shown_top: HashMap<Key, usize>,
    /// The widest row under each top-level item, expanded or not (so the split between tree
    /// and detail does not move as nodes open and close).
    widest_top: HashMap<Key, usize>,
    /// The widest row of the whole tree, expanded or not: the width the tree pane asks for.
    pub widest: usize,
    /// Top-level items rebuilt by the last `set_tree` (the rest were reused).
    pub rebuilt: usize,
    /// Audit results on nodes (`set_badges`).
    badges: HashMap<Key, super::violations::Badge>,
    /// The width of each row built (reused rows keep theirs): the view marks a row the pane
    /// cuts with `…`.
    row_widths: HashMap<Key, usize>,
}

/// Whether two nodes look the same on screen (finding indices aside: they shift when other
/// templates' findings change; the counts are compared separately).
fn same_view(a: &Node, b: &Node) -> bool {
    a.id == b.id
        && a.kind == b.kind
        && a.state == b.state
        && a.label == b.label
        && a.reason == b.reason
        && a.children.len() == b.children.len()
        && a.children
            .iter()
            .zip(&b.children)
            .all(|(x, y)| same_view(x, y))
}

impl TreeView {
    /// New data: re-index, rebuild what changed (a top-level subtree that looks the same keeps
    /// its items), keep selection and expansion (ids are stable).
    pub fn set_tree(&mut self, analysis: &Arc<Analysis>, filter: &Filter) {
        let tree = &analysis.tree;
        let findings = &analysis.findings;
        let old_counts = std::mem::take(&mut self.counts);
        // Findings by severity for each top-level subtree (the badge on templates and groups).
        self.counts = tree
            .iter()
            .filter(|n| matches!(n.kind, NodeKind::Template | NodeKind::Group))
            .map(|n| (key_of(&n.id), subtree_counts(n, findings)))
            .collect();
        self.total = tree.iter().map(|n| n.walk().len()).sum();
        // Templates (and the orphans group) start collapsed, showing the worst state below
        // them; what is under them opens with them: all of it in small trees, the way to
        // every fault in big ones.
        let small = self.total <= 1000;
        let mut open = Vec::new();
        let mut known = std::collections::HashSet::new();
        collect_open(
            tree,
            &mut Vec::new(),
            &mut open,
            &mut known,
            &self.known,
            &|n: &Node| small || n.has_fault(),
        );
        for p in open {
            self.state.open(p);
        }
        self.known = known;

        // Reuse the items of unchanged top-level subtrees (same filter).
        let previous = self.analysis.replace(analysis.clone());
        let same_build = self.built_with.as_ref() == Some(filter);
        let mut reusable: HashMap<Key, Reused> = HashMap::new();
        if let (Some(prev), true) = (previous, same_build) {
            let old_nodes: HashMap<Key, &Node> =
                prev.tree.iter().map(|n| (key_of(&n.id), n)).collect();
            let new_nodes: HashMap<Key, &Node> = tree.iter().map(|n| (key_of(&n.id), n)).collect();
            for item in std::mem::take(&mut self.items) {
                let key = *item.identifier();
                let unchanged = new_nodes.get(&key).is_some_and(|n| {
                    old_nodes.get(&key).is_some_and(|o| same_view(o, n))
                        && old_counts.get(&key) == self.counts.get(&key)
                });
                if unchanged {
                    reusable.insert(key, self.reused(item));
                }
            }
        }
        self.build_items(filter, reusable, true);
    }

    /// Audit results changed (or went stale): every item is rebuilt when they did.
    pub fn set_badges(
        &mut self,
        badges: HashMap<String, super::violations::Badge>,
        filter: &Filter,
    ) {
        let badges: HashMap<Key, _> = badges.into_iter().map(|(id, b)| (key_of(&id), b)).collect();
        if badges != self.badges {
            self.badges = badges;
            self.rebuild(filter);
        }
    }

    /// Filter changed: rebuild every item; with a filter, open the way to every match.
    pub fn rebuild(&mut self, filter: &Filter) {
        self.build_items(filter, HashMap::new(), true);
    }

    /// After a key opened or closed nodes (`before`: what was open): rebuild the top-level
    /// subtrees whose expansion changed, so a collapsed row shows the worst state below it.
    pub fn refresh_open(&mut self, filter: &Filter, before: &std::collections::HashSet<Vec<Key>>) {
        let now = self.state.opened();
        let changed: std::collections::HashSet<Key> = now
            .symmetric_difference(before)
            .filter_map(|p| p.first().copied())
            .collect();
        if changed.is_empty() {
            return;
        }
        let mut reusable = HashMap::new();
        for item in std::mem::take(&mut self.items) {
            let key = *item.identifier();
            if !changed.contains(&key) {
                reusable.insert(key, self.reused(item));
            }
        }
        self.build_items(filter, reusable, false);
    }

    /// A top-level item kept as built, with the rows it showed and its widest row.
    fn reused(&self, item: TreeItem<'static, Key>) -> Reused {
        let key = item.identifier();
        let rows = self.shown_top.get(key).copied().unwrap_or(0);
        let widest = self.widest_top.get(key).copied().unwrap_or(0);
        (item, rows, widest)
    }

    fn build_items(
        &mut self,
        filter: &Filter,
        mut reusable: HashMap<Key, Reused>,
        open_matches: bool,
    ) {
        let Some(analysis) = self.analysis.clone() else {
            return;
        };
        let tree = &analysis.tree;
        let query = filter.text.to_lowercase();
        let mut walk = Walk {
            filter,
            query: &query,
            path: Vec::new(),
            open: Vec::new(),
            open_matches,
            shown: 0,
            widest: 0,
            widths: Vec::new(),
        };
        let mut items = Vec::with_capacity(tree.len());
        let mut shown_top = HashMap::new();
        let mut widest_top = HashMap::new();
        let mut widest = 0;
        let mut rebuilt = 0;
        for n in sorted(tree, filter.sort) {
            let key = key_of(&n.id);
            let before = walk.shown;
            walk.widest = 0;
            let item = match reusable.remove(&key) {
                Some((item, shown, w)) => {
                    walk.shown += shown;
                    walk.widest = w;
                    Some(item)
                }
                None => {
                    rebuilt += 1;
                    self.build(n, false, &mut walk)
                }
            };
            if let Some(item) = item {
                shown_top.insert(key, walk.shown - before);
                widest_top.insert(key, walk.widest);
                widest = widest.max(walk.widest);
                items.push(item);
            }
        }
        self.items = items;
        self.shown_top = shown_top;
        self.widest_top = widest_top;
        self.widest = widest;
        self.rebuilt = rebuilt;
        self.shown = walk.shown;
        self.row_widths.extend(walk.widths);
        self.built_with = Some(filter.clone());
        if filter.is_active() {
            for p in walk.open {
                self.state.open(p);
            }
        }
        self.fix_selection();
        // The rows changed under the selection (a filter cleared, faults-only off): scroll so
        // the next frame shows it instead of keeping an offset that hides it.
        self.state.scroll_selected_into_view();
    }

    fn build(
        &self,
        n: &Node,
        ancestor_matched: bool,
        walk: &mut Walk<'_>,
    ) -> Option<TreeItem<'static, Key>> {
        let key = key_of(&n.id);
        let self_match = Filter::matches(n, walk.query);
        let text_here = !walk.query.is_empty() && self_match;
        let text_ok = ancestor_matched || self_match;
        walk.path.push(key);
        let depth = walk.path.len() - 1;
        let mut children: Vec<_> = sorted(&n.children, walk.filter.sort)
            .into_iter()
            .filter_map(|c| self.build(c, ancestor_matched || text_here, walk))
            .collect();
        if children.len() > 1 {
            // Ids are unique among siblings by construction; drop a duplicate rather than fail.
            let mut seen = std::collections::HashSet::with_capacity(children.len());
            children.retain(|item| seen.insert(*item.identifier()));
        }
        let self_ok = text_ok && (!walk.filter.faults_only || self.is_fault(n));
        let keep = self_ok || !children.is_empty();
        let will_open =
            keep && !children.is_empty() && walk.filter.is_active() && walk.open_matches;
        if will_open {
            walk.open.push(walk.path.clone());
        }
        let collapsed =
            !children.is_empty() && !will_open && !self.state.opened().contains(&walk.path);
        walk.path.pop();
        if !keep {
            return None;
        }
        walk.shown += 1;
        let below = if collapsed { worst_below(n) } else { None };
        let mut line = node_line(n, self.counts.get(&key).copied(), below);
        if let Some(b) = self.badges.get(&key) {
            // Right after the label: long reasons are cut at the pane's edge, the count is not.
            let at = line
                .spans
                .iter()
                .position(|s| s.content == n.label)
                .map_or(line.spans.len(), |i| i + 1);
            line.spans.splice(at..at, super::violations::badge_spans(b));
        }
        // As the widget draws it: the selection mark, two columns a level, the fold mark.
        let width = 2 + depth * 2 + 2 + line.width();
        walk.widest = walk.widest.max(width);
        walk.widths.push((key, width));
        Some(
            TreeItem::new(key, line, children)
                .unwrap_or_else(|_| TreeItem::new_leaf(key, n.label.clone())),
        )
    }

    /// The rows the widget drew in `inner` columns that it had to cut, by their row from the
    /// top of the pane: the view ends each with `…`.
    pub fn cut_rows(&self, inner: usize, rows: usize) -> Vec<usize> {
        let start = self.state.get_offset();
        self.state
            .flatten(&self.items)
            .iter()
            .skip(start)
            .take(rows)
            .enumerate()
            .filter(|(_, f)| {
                let key = f.identifier.last();
                key.and_then(|k| self.row_widths.get(k))
                    .is_some_and(|w| *w > inner)
            })
            .map(|(i, _)| i)
            .collect()
    }

    /// What `f` keeps: a node in a faulty state, or one with an error or warning finding (a
    /// warning in the header with "nothing matches" under `f` said the opposite).
    fn is_fault(&self, n: &Node) -> bool {
        let findings = self.analysis.as_deref().map(|a| a.findings.as_slice());
        n.state.is_fault()
            || n.findings.iter().any(|&i| {
                findings
                    .and_then(|f| f.get(i))
                    .is_some_and(|f| f.code.severity() != Severity::Info)
            })
    }

    /// The selection's row among the rows shown (expanded), from 1, and how many rows there
    /// are: the tree's title, so a selection scrolled out of sight can be found.
    pub fn position(&self) -> (usize, usize) {
        // Counted on every frame: a walk of the shown rows with one path buffer, not the
        // widget's `flatten` (a path per row).
        fn walk(
            items: &[TreeItem<'static, Key>],
            state: &TreeState<Key>,
            path: &mut Vec<Key>,
            rows: &mut usize,
            at: &mut usize,
        ) {
            for item in items {
                *rows += 1;
                path.push(*item.identifier());
                if path.as_slice() == state.selected() {
                    *at = *rows;
                }
                if !item.children().is_empty() && state.opened().contains(path) {
                    walk(item.children(), state, path, rows, at);
                }
                path.pop();
            }
        }
        let (mut rows, mut at) = (0, 0);
        walk(
            &self.items,
            &self.state,
            &mut Vec::new(),
            &mut rows,
            &mut at,
        );
        (at, rows)
    }

    /// Keeps the selection on the same node when it is on screen, else on its nearest shown
    /// ancestor, else on the first node.
    pub fn fix_selection(&mut self) {
        let selected = self.state.selected().to_vec();
        let mut level: &[TreeItem<'static, Key>] = &self.items;
        let mut keep = Vec::new();
        for k in &selected {
            // A node inside a collapsed one is not on screen: its nearest shown ancestor is.
            if !keep.is_empty() && !self.state.opened().contains(&keep) {
                break;
            }
            match level.iter().find(|i| i.identifier() == k) {
                Some(item) => {
                    keep.push(*k);
                    level = item.children();
                }
                None => break,
            }
        }
        if keep.is_empty()
            && let Some(first) = self.items.first()
        {
            keep.push(*first.identifier());
        }
        if keep != selected {
            self.state.select(keep);
        }
    }
}

fn collect_open(
    nodes: &[Node],
    path: &mut Vec<Key>,
    out: &mut Vec<Vec<Key>>,
    now_known: &mut std::collections::HashSet<Key>,
    known: &std::collections::HashSet<Key>,
    want: &dyn Fn(&Node) -> bool,
) {
    for n in nodes {
        if n.children.is_empty() {
            continue;
        }
        let key = key_of(&n.id);
        now_known.insert(key);
        let top = path.is_empty();
        path.push(key);
        if !top && !known.contains(&key) && want(n) {
            out.push(path.clone());
        }
        collect_open(&n.children, path, out, now_known, known, want);
        path.pop();
    }
}

/// The node at a widget path (keys from the root), found by walking the tree: no index to
/// rebuild on every data change.
pub fn find<'a>(tree: &'a [Node], keys: &[Key]) -> Option<&'a Node> {
    let (first, rest) = keys.split_first()?;
    let mut n = tree.iter().find(|n| key_of(&n.id) == *first)?;
    for k in rest {
        n = n.children.iter().find(|c| key_of(&c.id) == *k)?;
    }
    Some(n)
}

/// Siblings in display order (a stable total order: kind, then name; `State` puts the worst
/// subtree first). The orphans group stays last.
fn sorted(nodes: &[Node], by: SortBy) -> Vec<&Node> {
    let mut out: Vec<&Node> = nodes.iter().collect();
    let kind_order = |k: NodeKind| match k {
        NodeKind::Template => 0u8,
        NodeKind::Crd => 1,
        NodeKind::Policy => 2,
        NodeKind::Constraint => 3,
        NodeKind::Binding => 4,
        NodeKind::Group => 9,
    };
    out.sort_by_cached_key(|n| {
        let worst = match by {
            SortBy::Name => 0,
            SortBy::State => worst_rank(n),
        };
        let group = n.kind == NodeKind::Group;
        (
            group,
            std::cmp::Reverse(worst),
            kind_order(n.kind),
            n.label.clone(),
            n.id.clone(),
        )
    });
    out
}

/// The worst state rank in a subtree, the node included.
fn worst_rank(n: &Node) -> u8 {
    n.children
        .iter()
        .map(worst_rank)
        .fold(glyphs::rank(n.state), u8::max)
}

/// The worst state below a node, when it is worse than the node's own: what a collapsed row
/// shows so that a green template does not hide errors under it.
pub fn worst_below(n: &Node) -> Option<State> {
    let mut worst: Option<State> = None;
    let mut stack: Vec<&Node> = n.children.iter().collect();
    while let Some(c) = stack.pop() {
        if worst.is_none_or(|w| glyphs::rank(c.state) > glyphs::rank(w)) {
            worst = Some(c.state);
        }
        stack.extend(c.children.iter());
    }
    worst.filter(|w| glyphs::rank(*w) > glyphs::rank(n.state))
}

fn subtree_counts(n: &Node, findings: &[Finding]) -> Counts {
    let mut c = Counts::default();
    for &f in &n.findings {
        match findings.get(f).map(|f| f.severity) {
            Some(Severity::Error) => c.errors += 1,
            Some(Severity::Warning) => c.warnings += 1,
            Some(Severity::Info) => c.infos += 1,
            None => {}
        }
    }
    for ch in &n.children {
        c.add(subtree_counts(ch, findings));
    }
    c
}

pub fn kind_tag(kind: NodeKind) -> &'static str {
    match kind {
        NodeKind::Template => "",
        NodeKind::Crd => "CRD ",
        NodeKind::Policy => "VAP ",
        NodeKind::Constraint => "",
        NodeKind::Binding => "VAPB ",
        NodeKind::Group => "",
    }
}

/// One tree line: glyph, label, state, what a collapsed row hides, the findings of a
/// template's subtree, and the reason (last: the longest, cut first on narrow screens).
pub fn node_line(n: &Node, counts: Option<Counts>, below: Option<State>) -> Line<'static> {
    let st = glyphs::style(n.state);
    // A collapsed row wears the worst state below it: a template hiding a missing binding
    // looks broken at a glance, and `[below: …]` says why.
    let lead = below.unwrap_or(n.state);
    let mut spans = vec![
        Span::styled(glyphs::glyph(lead), glyphs::style(lead)),
        Span::raw(" "),
    ];
    let tag = kind_tag(n.kind);
    if !tag.is_empty() {
        spans.push(Span::styled(tag, glyphs::dim()));
    }
    let label_style = match n.kind {
        NodeKind::Template | NodeKind::Group => glyphs::bold(),
        _ => Style::new(),
    };
    spans.push(Span::styled(n.label.clone(), label_style));
    if n.state != State::Group {
        spans.push(Span::raw("  "));
        spans.push(Span::styled(n.state.as_str(), st));
    }
    if let Some(w) = below {
        spans.push(Span::raw("  "));
        spans.push(Span::styled(
            format!("[below: {} {}]", glyphs::glyph(w), w.as_str()),
            glyphs::style(w),
        ));
    }
    if let Some(c) = counts.filter(|c| c.total() > 0) {
        spans.push(Span::raw(" "));
        for (n, sev) in [
            (c.errors, Severity::Error),
            (c.warnings, Severity::Warning),
            (c.infos, Severity::Info),
        ] {
            if n > 0 {
                spans.push(Span::raw(" "));
                spans.push(Span::styled(
                    format!("{}{n}", glyphs::severity_glyph(sev)),
                    glyphs::severity_style(sev),
                ));
            }
        }
    }
    // Every template that leaves generateVAP unset would repeat the flag's value on its row:
    // the row says unset, the detail pane the flag that decides.
    let unset = crate::core::decide::GENERATE_VAP_UNSET;
    let reason = match n.kind {
        NodeKind::Template if n.reason.starts_with(unset) => unset,
        _ => n.reason.as_str(),
    };
    if !reason.is_empty() {
        spans.push(Span::raw("  "));
        spans.push(Span::styled(reason.to_string(), glyphs::dim()));
    }
    Line::from(spans)
}
