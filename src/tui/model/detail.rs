//! The texts shown for the selection: the detail pane (summary, findings with their fix,
//! Gatekeeper's per-pod status, the lease), and the YAML and diff documents. Pure functions of
//! the data and the node.

use super::data::{Data, Origin};
use super::tree_view::kind_tag;
use crate::core::tree::{Node, NodeKind};
use crate::model::{VAP_KIND, VAPB_KIND};
use crate::tui::say::glyphs::{self, bold, dim};
use crate::tui::say::words::count;
use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use serde_json::Value;

fn field(name: &str, value: impl Into<String>) -> Line<'static> {
    Line::from(vec![
        Span::styled(format!("{name:<10}"), dim()),
        Span::raw(value.into()),
    ])
}

/// The detail pane for a node.
#[expect(
    clippy::too_many_lines,
    reason = "one match over the node kinds, a few lines each; to be one function per kind"
)]
pub fn summary(data: &Data, node: &Node) -> Vec<Line<'static>> {
    let mut out = Vec::new();
    let kind_word = match node.kind {
        NodeKind::Template => "ConstraintTemplate",
        NodeKind::Crd => "CustomResourceDefinition",
        NodeKind::Policy => VAP_KIND,
        NodeKind::Constraint => "Constraint",
        NodeKind::Binding => VAPB_KIND,
        NodeKind::Group => "Group",
    };
    out.push(Line::from(vec![
        Span::styled(kind_word.to_string(), dim()),
        Span::raw(" "),
        Span::styled(node.label.clone(), bold()),
    ]));
    let st = glyphs::style(node.state);
    let mut state = vec![
        Span::styled(format!("{:<10}", "state"), dim()),
        Span::styled(
            format!("{} {}", glyphs::glyph(node.state), node.state.as_str()),
            st,
        ),
    ];
    if !node.reason.is_empty() {
        state.push(Span::raw(format!(" — {}", node.reason)));
    }
    out.push(Line::from(state));
    if let Some(obj) = &node.object {
        out.push(field("object", format!("{} {}", obj.api_version, obj)));
        // A missing object was read from nowhere: say so instead of "read from not present".
        let source = data.source_of(&obj.kind, &obj.name);
        let nowhere = || "nowhere: it does not exist".to_string();
        out.push(field("read from", source.unwrap_or_else(nowhere)));
    }
    if node.kind == NodeKind::Group {
        out.push(field(
            "holds",
            count(node.children.len(), "object", "objects"),
        ));
    }

    // Findings, each with its fix.
    if !node.findings.is_empty() {
        out.push(Line::default());
        out.push(Line::styled(
            format!("Findings ({})", node.findings.len()),
            bold(),
        ));
        for &i in &node.findings {
            let Some(f) = data.analysis.findings.get(i) else {
                continue;
            };
            out.push(Line::from(vec![
                Span::styled(
                    format!(
                        "{} {} ",
                        glyphs::severity_glyph(f.severity),
                        f.severity.as_str()
                    ),
                    glyphs::severity_style(f.severity),
                ),
                Span::styled(f.code.as_str(), bold()),
                Span::styled(format!(" — {}", f.code.title()), dim()),
            ]));
            out.push(Line::raw(format!("  {}", f.message)));
            if let Some(src) = &f.source {
                out.push(Line::styled(format!("  at {src}"), dim()));
            }
        }
    }

    // Planned writes for the object itself.
    if let Some(obj) = &node.object {
        let writes: Vec<_> = data.plan_for(&obj.kind, &obj.name).collect();
        if !writes.is_empty() {
            out.push(Line::default());
            out.push(Line::styled("Planned", bold()));
            for w in writes {
                out.push(Line::raw(format!(
                    "  {} {} — {} (d: diff)",
                    w.verb.as_str(),
                    w.object,
                    w.reason
                )));
            }
        }
    }

    // Writes planned further down (a template's VAP and bindings, the orphans' deletes).
    let below: usize = node
        .walk()
        .into_iter()
        .skip(1)
        .filter_map(|n| n.object.as_ref())
        .map(|o| data.plan_for(&o.kind, &o.name).count())
        .sum();
    if below > 0 {
        out.push(Line::default());
        out.push(Line::from(vec![
            Span::styled("Below    ", dim()),
            Span::raw(format!(
                "{} (d: diff)",
                count(below, "planned write", "planned writes")
            )),
        ]));
    }

    // Gatekeeper's own per-pod status, when the snapshot has it.
    let about = matches!(node.kind, NodeKind::Template | NodeKind::Constraint);
    if let Some(ids) = data.pod_status_index.get(&node.label).filter(|_| about) {
        out.push(Line::default());
        out.push(Line::styled("Gatekeeper pod status", bold()));
        for &i in ids {
            let Some(p) = data.snapshot.pod_statuses.get(i) else {
                continue;
            };
            let pod = if p.pod.is_empty() { &p.name } else { &p.pod };
            out.push(Line::raw(format!("  {pod}")));
            for line in pod_status_lines(&p.status) {
                out.push(Line::raw(format!("    {line}")));
            }
        }
    }

    if let Origin::Live { .. } = data.origin {
        out.push(Line::default());
        let leader = &data.live.lease;
        let text = match (&leader.holder, leader.vacant) {
            _ if leader.unreadable.is_some() => format!(
                "unreadable ({}): which copy reconciles is unknown",
                leader
                    .unreadable
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default()
            ),
            _ if data.unreachable().is_some() => format!(
                "{} when the API server last answered",
                leader
                    .holder
                    .as_deref()
                    .map_or("unknown".to_string(), |h| format!("held by {h}"))
            ),
            (_, true) => "nobody renews it: no copy reconciles".to_string(),
            (Some(holder), false) if leader.leading => format!("held by {holder} (this copy)"),
            (Some(holder), false) => format!("held by {holder}"),
            (None, false) => "held by nobody".to_string(),
        };
        out.push(field("lease", text));
    }
    out
}

/// The kept audit results for a constraint or template node (`a`), stale ones marked.
pub fn violations(
    store: &super::violations::Store,
    data: &Data,
    node: &Node,
) -> Vec<Line<'static>> {
    match node.kind {
        // Offline there is no cluster to audit against.
        _ if !matches!(data.origin, Origin::Live { .. }) => Vec::new(),
        NodeKind::Constraint | NodeKind::Template => {
            super::violations::section(store, &data.snapshot, &node.id)
        }
        _ => Vec::new(),
    }
}

/// `vapGenerationStatus` and `enforcementPointsStatus`, one line each.
fn pod_status_lines(status: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let scalars = |v: &Value| -> String {
        match v.as_object() {
            Some(m) => m
                .iter()
                .filter(|(_, v)| !v.is_object() && !v.is_array())
                .map(|(k, v)| match v.as_str() {
                    Some(s) => format!("{k}={s}"),
                    None => format!("{k}={v}"),
                })
                .collect::<Vec<_>>()
                .join(" "),
            None => v.to_string(),
        }
    };
    if let Some(v) = status.get("vapGenerationStatus") {
        out.push(format!("vapGenerationStatus: {}", scalars(v)));
    }
    if let Some(points) = status
        .get("enforcementPointsStatus")
        .and_then(Value::as_array)
    {
        for p in points {
            out.push(format!("enforcementPointsStatus: {}", scalars(p)));
        }
    }
    if let Some(errs) = status.get("errors").and_then(Value::as_array) {
        for e in errs {
            out.push(format!("error: {}", scalars(e)));
        }
    }
    if out.is_empty() {
        out.push("no VAP status reported".to_string());
    }
    out
}

/// The YAML view: the object as read, without `managedFields`. A missing object shows what
/// the reconciler would create.
pub fn yaml(data: &Data, node: &Node) -> (String, Vec<Line<'static>>) {
    let Some(obj) = &node.object else {
        return (
            node.label.clone(),
            vec![Line::raw(format!(
                "{} is a group: select an object",
                node.label
            ))],
        );
    };
    let title = format!("{}{} (YAML)", kind_tag(node.kind), node.label);
    if let Some(mut v) = data.raw(&obj.kind, &obj.name) {
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("managedFields");
        }
        return (title, yaml_lines(&v));
    }
    let mut out = vec![Line::styled(
        format!("# {obj} does not exist ({}).", node.state.as_str()),
        dim(),
    )];
    match data
        .plan_for(&obj.kind, &obj.name)
        .find_map(|w| w.body.as_ref())
    {
        Some(body) => {
            out.push(Line::styled("# The reconciler would create:", dim()));
            out.extend(yaml_lines(body));
        }
        None => out.push(Line::styled("# Nothing is planned for it.", dim())),
    }
    (title, out)
}

/// A value as YAML, a line each.
fn yaml_lines(v: &impl serde::Serialize) -> Vec<Line<'static>> {
    let text = serde_norway::to_string(v).unwrap_or_else(|e| format!("unprintable: {e}"));
    text.lines().map(yaml_line).collect()
}

/// Keys in cyan, the rest plain.
fn yaml_line(l: &str) -> Line<'static> {
    let body = l.trim_start();
    let indent = &l[..l.len() - body.len()];
    let (dash, rest) = match body.strip_prefix("- ") {
        Some(r) => ("- ", r),
        None => ("", body),
    };
    if let Some((k, v)) = rest.split_once(':')
        && !k.is_empty()
        && !k.contains(' ')
        && !k.starts_with(['#', '"', '\''])
    {
        return Line::from(vec![
            Span::raw(format!("{indent}{dash}")),
            Span::styled(k.to_string(), Style::new().fg(Color::Cyan)),
            Span::raw(format!(":{v}")),
        ]);
    }
    Line::raw(l.to_string())
}

/// The diff view: every write planned for the node and below, or "in sync".
pub fn diff(data: &Data, node: &Node) -> (String, Vec<Line<'static>>) {
    let title = format!(
        "{}{} (diff: live → desired)",
        kind_tag(node.kind),
        node.label
    );
    let mut out = Vec::new();
    for n in node.walk() {
        let Some(obj) = &n.object else { continue };
        for w in data.plan_for(&obj.kind, &obj.name) {
            out.push(Line::styled(
                format!(
                    "# {} {} — {} ({})",
                    w.verb.as_str(),
                    w.object,
                    w.reason,
                    w.code
                ),
                bold(),
            ));
            for l in w.diff.lines() {
                let style = if l.starts_with("+++") || l.starts_with("---") {
                    bold()
                } else if l.starts_with('+') {
                    Style::new().fg(Color::Green)
                } else if l.starts_with('-') {
                    Style::new().fg(Color::Red)
                } else if l.starts_with("@@") {
                    Style::new().fg(Color::Cyan)
                } else {
                    Style::new()
                };
                out.push(Line::styled(l.to_string(), style));
            }
            out.push(Line::default());
        }
    }
    if out.is_empty() {
        let line = if node.has_fault() {
            format!(
                "no write planned for {} and below: {} — {}",
                node.label,
                node.state.as_str(),
                if node.reason.is_empty() {
                    "left as it is"
                } else {
                    &node.reason
                }
            )
        } else {
            format!("in sync: nothing to write for {} and below", node.label)
        };
        out.push(Line::styled(line, Style::new().fg(Color::Green)));
    }
    (title, out)
}
