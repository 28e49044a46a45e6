//! `-o jsonpath=TEMPLATE` with kubectl's template syntax, on the report's JSON: text outside
//! braces printed as it is; `{.a.b}`, `{.items[*].name}`, `{$.a}`, `{..name}`, filters such as
//! `{.findings[?(@.severity=="error")].code}` (each path evaluated by `serde_json_path`, RFC
//! 9535 JSONPath, after kubectl's leading `.` is read as `$.`); `{range PATH}…{end}` repeats its
//! body for each match, paths inside it relative to the match; `{"\n"}` and `{'\t'}` are
//! literal strings with escapes. Several matches print separated by a space, as kubectl's; a
//! string prints bare, anything else as compact JSON; a path that matches nothing prints
//! nothing (kubectl's default `--allow-missing-template-keys`).

use serde_json::Value;
use serde_json_path::JsonPath;

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    source: String,
    nodes: Vec<Node>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Text(String),
    /// RFC 9535 text, checked when parsed.
    Path(String),
    Range(String, Vec<Node>),
}

impl Template {
    /// Parses kubectl's syntax; the message says what is wrong and where.
    pub fn parse(source: &str) -> Result<Template, String> {
        let mut stack: Vec<(String, Vec<Node>)> = Vec::new();
        let mut nodes: Vec<Node> = Vec::new();
        let mut rest = source;
        while !rest.is_empty() {
            let Some(open) = rest.find('{') else {
                nodes.push(Node::Text(rest.to_string()));
                break;
            };
            if open > 0 {
                nodes.push(Node::Text(rest[..open].to_string()));
            }
            let inner_start = &rest[open + 1..];
            let close = closing_brace(inner_start)
                .ok_or_else(|| format!("jsonpath {source:?}: a '{{' is not closed"))?;
            let inner = inner_start[..close].trim();
            rest = &inner_start[close + 1..];
            if let Some(path) = inner.strip_prefix("range ") {
                stack.push((checked(path.trim(), source)?, std::mem::take(&mut nodes)));
            } else if inner == "end" {
                let (path, outer) = stack
                    .pop()
                    .ok_or_else(|| format!("jsonpath {source:?}: {{end}} without {{range}}"))?;
                let body = std::mem::replace(&mut nodes, outer);
                nodes.push(Node::Range(path, body));
            } else if let Some(text) = literal(inner) {
                nodes.push(Node::Text(text));
            } else {
                nodes.push(Node::Path(checked(inner, source)?));
            }
        }
        if !stack.is_empty() {
            return Err(format!("jsonpath {source:?}: {{range}} without {{end}}"));
        }
        Ok(Template {
            source: source.to_string(),
            nodes,
        })
    }

    /// The template applied to `value`.
    pub fn render(&self, value: &Value) -> String {
        let mut out = String::new();
        render(&self.nodes, value, &mut out);
        out
    }

    pub fn source(&self) -> &str {
        &self.source
    }
}

/// Where the `}` closing an expression is (braces inside quoted strings do not count).
fn closing_brace(s: &str) -> Option<usize> {
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match (quote, c) {
            (Some(_), '\\') if !escaped => {
                escaped = true;
                continue;
            }
            (Some(q), c) if c == q && !escaped => quote = None,
            (None, '"' | '\'') => quote = Some(c),
            (None, '}') => return Some(i),
            _ => {}
        }
        escaped = false;
    }
    None
}

/// `"…"` or `'…'` with `\n`, `\t`, `\r`, `\\` and the quote escaped.
fn literal(inner: &str) -> Option<String> {
    let quote = inner.chars().next().filter(|c| *c == '"' || *c == '\'')?;
    let body = inner.strip_prefix(quote)?.strip_suffix(quote)?;
    let mut out = String::new();
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    Some(out)
}

/// kubectl's path as RFC 9535 JSONPath (`.a` → `$.a`, `@.a` → `$.a`), checked.
fn checked(path: &str, source: &str) -> Result<String, String> {
    let rfc = if path.starts_with('$') {
        path.to_string()
    } else if let Some(rest) = path.strip_prefix('@') {
        format!("${rest}")
    } else if path.starts_with('.') || path.starts_with('[') {
        format!("${path}")
    } else {
        format!("$.{path}")
    };
    JsonPath::parse(&rfc)
        .map(|_| rfc.clone())
        .map_err(|e| format!("jsonpath {source:?}: {{{path}}} is not a path ({e})"))
}

fn matches<'v>(path: &str, value: &'v Value) -> Vec<&'v Value> {
    // Checked when parsed: a path that parsed then cannot fail to parse now.
    JsonPath::parse(path)
        .map(|p| p.query(value).all())
        .unwrap_or_default()
}

fn render(nodes: &[Node], value: &Value, out: &mut String) {
    for node in nodes {
        match node {
            Node::Text(t) => out.push_str(t),
            Node::Path(p) => {
                let shown: Vec<String> = matches(p, value).into_iter().map(show).collect();
                out.push_str(&shown.join(" "));
            }
            Node::Range(p, body) => {
                for item in matches(p, value) {
                    render(body, item, out);
                }
            }
        }
    }
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(t: &str, v: &Value) -> String {
        Template::parse(t).expect("parses").render(v)
    }

    #[test]
    fn kubectl_templates() {
        let v = json!({"findings": [
            {"code": "a", "severity": "error", "object": {"name": "x"}},
            {"code": "b", "severity": "info", "object": {"name": "y"}}
        ], "summary": {"errors": 1}});
        assert_eq!(run("{.summary.errors}", &v), "1");
        assert_eq!(run("{.findings[*].code}", &v), "a b");
        assert_eq!(run("{$.findings[0].object.name}", &v), "x");
        assert_eq!(run("errors={.summary.errors}\n", &v), "errors=1\n");
        assert_eq!(
            run(
                r#"{range .findings[*]}{.code}{"\t"}{.object.name}{"\n"}{end}"#,
                &v
            ),
            "a\tx\nb\ty\n"
        );
        assert_eq!(run(r#"{.findings[?(@.severity=="error")].code}"#, &v), "a");
        assert_eq!(run("{..name}", &v), "x y");
        assert_eq!(run("{.nothing}", &v), "");
        assert_eq!(run("{.summary}", &v), r#"{"errors":1}"#);
    }

    #[test]
    fn bad_templates_say_why() {
        for bad in ["{.a", "{range .a}x", "{end}", "{.a[}"] {
            let e = Template::parse(bad).expect_err(bad);
            assert!(e.contains("jsonpath"), "{e}");
        }
    }
}
