//! A template's CEL with some of its `variables.<name>` read under other names
//! (`variables.params` → `variables.c3_params`): what one VAP holding several constraints
//! (`core::fold`) needs, since each constraint's copy of the template's CEL must read that
//! constraint's own variables. Done on the parsed form, never by searching the text: the
//! parser finds the selects `variables.<name>` (and only where `variables` is the VAP's, not
//! a macro's own variable of that name); the source offsets it records place each field
//! name; and the result is parsed again and must be the same tree with those names changed,
//! or there is no result. Needs [`PARSER_STACK`](super::cel_syntax::PARSER_STACK), like every
//! parse.

use super::cel_syntax::{parse, parser};
use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue, SourceInfo, operators};
use std::collections::BTreeMap;

/// The identifier every VAP variable is read through.
const VARIABLES: &str = "variables";

/// One field name to replace: its bytes in the source and the new name.
struct Edit {
    start: usize,
    end: usize,
    to: String,
}

/// What the walk needs besides the node: the source and its offsets, and the renames.
struct Rewrite<'a> {
    source: &'a str,
    info: &'a SourceInfo,
    renames: &'a BTreeMap<String, String>,
    edits: Vec<Edit>,
}

/// `expression` with every `variables.<from>` (a select on the identifier `variables`, as a
/// member, inside macros, in `has()`, optional `variables.?from`) read as `variables.<to>`,
/// for each `from → to` of `renames`; a macro's own variable named `variables` is left
/// alone, as are strings and other fields. `Err` says why it cannot be done: the expression
/// does not parse, or reads `variables` other than through a field (`variables[...]`, a
/// bare `variables`), where a renamed read could not be told from another.
pub fn rename_variables(
    expression: &str,
    renames: &BTreeMap<String, String>,
) -> Result<String, String> {
    parse(expression).map_err(|e| format!("CEL syntax error at {e}"))?;
    let (mut tree, info) = parser()
        .parse_with_source_info(expression)
        .map_err(|e| format!("CEL syntax error: {e}"))?;
    let mut rewrite = Rewrite {
        source: expression,
        info: &info,
        renames,
        edits: Vec::new(),
    };
    rewrite.visit(&mut tree, false)?;
    let mut edits = rewrite.edits;
    // A macro's expansion may hold a node twice: one edit per place in the source.
    edits.sort_by_key(|e| e.start);
    edits.dedup_by_key(|e| e.start);
    let mut out = String::with_capacity(expression.len());
    let mut at = 0;
    for e in &edits {
        out.push_str(&expression[at..e.start]);
        out.push_str(&e.to);
        at = e.end;
    }
    out.push_str(&expression[at..]);
    // The proof: the new text parses to the old tree with those fields renamed (`tree`, renamed
    // in place by the walk). The token stream is the same, so are the node ids.
    let reparsed = parser()
        .parse(&out)
        .map_err(|e| format!("the renamed expression does not parse: {e}"))?;
    if reparsed != tree {
        return Err(format!(
            "renaming the variables would change more than their names: {out}"
        ));
    }
    Ok(out)
}

impl Rewrite<'_> {
    /// Walks `e`, renaming the selects of [`Rewrite::renames`] in the tree and recording where
    /// their field names are in the source. `bound`: a comprehension here names its own
    /// variable `variables`.
    fn visit(&mut self, e: &mut IdedExpr, bound: bool) -> Result<(), String> {
        match &mut e.expr {
            Expr::Ident(name) => {
                if !bound && name.trim_start_matches('.') == VARIABLES {
                    return Err(format!(
                        "it reads `{name}` other than as `variables.<name>`, so its variables cannot be renamed"
                    ));
                }
                Ok(())
            }
            Expr::Unspecified | Expr::Literal(_) => Ok(()),
            Expr::Select(select) => {
                if !bound && is_variables(&select.operand) {
                    if let Some(to) = self.renames.get(&select.field) {
                        self.rename_field(&select.operand, &select.field, to)?;
                        select.field = to.clone();
                    }
                    return Ok(());
                }
                self.visit(&mut select.operand, bound)
            }
            Expr::Call(call) => {
                // `variables.?name`: the optional select, a call with the field as a string.
                if call.func_name == operators::OPT_SELECT
                    && !bound
                    && let [operand, field] = call.args.as_mut_slice()
                    && is_variables(operand)
                    && let Expr::Literal(LiteralValue::String(name)) = &mut field.expr
                {
                    if let Some(to) = self.renames.get(name.inner()) {
                        self.rename_field(operand, name, to)?;
                        *name = to.clone().into();
                    }
                    return Ok(());
                }
                if let Some(target) = call.target.as_deref_mut() {
                    self.visit(target, bound)?;
                }
                for a in &mut call.args {
                    self.visit(a, bound)?;
                }
                Ok(())
            }
            Expr::List(list) => {
                for x in &mut list.elements {
                    self.visit(x, bound)?;
                }
                Ok(())
            }
            Expr::Map(map) => self.visit_entries(&mut map.entries, bound),
            Expr::Struct(s) => self.visit_entries(&mut s.entries, bound),
            Expr::Comprehension(c) => {
                // Its variables are bound in its condition, step and result only.
                self.visit(&mut c.iter_range, bound)?;
                self.visit(&mut c.accu_init, bound)?;
                let binds = c.iter_var == VARIABLES
                    || c.iter_var2.as_deref() == Some(VARIABLES)
                    || c.accu_var == VARIABLES;
                let inside = bound || binds;
                self.visit(&mut c.loop_cond, inside)?;
                self.visit(&mut c.loop_step, inside)?;
                self.visit(&mut c.result, inside)
            }
        }
    }

    fn visit_entries(
        &mut self,
        entries: &mut [cel::common::ast::IdedEntryExpr],
        bound: bool,
    ) -> Result<(), String> {
        for entry in entries {
            match &mut entry.expr {
                EntryExpr::MapEntry(m) => {
                    self.visit(&mut m.key, bound)?;
                    self.visit(&mut m.value, bound)?;
                }
                EntryExpr::StructField(f) => self.visit(&mut f.value, bound)?,
            }
        }
        Ok(())
    }

    /// Records the edit of the field `from` selected on `operand` (the identifier
    /// `variables`). The parser records where `variables` is; the field is the next name
    /// after it and its `.` (or `.?`), with only spaces, comments and closing parentheses
    /// between (`(variables) . params`).
    fn rename_field(&mut self, operand: &IdedExpr, from: &str, to: &str) -> Result<(), String> {
        let unplaced = || format!("the parser did not say where `variables.{from}` is");
        let (start, _) = self.info.offset_for(operand.id).ok_or_else(unplaced)?;
        // Offsets are bytes (the parser's input is the `str`).
        let start = usize::try_from(start).map_err(|_| unplaced())?;
        if self.source.get(start..start + VARIABLES.len()) != Some(VARIABLES) {
            return Err(unplaced());
        }
        let rest = self.source.as_bytes();
        let mut at = skip_hidden(rest, start + VARIABLES.len(), true);
        if rest.get(at) != Some(&b'.') {
            return Err(unplaced());
        }
        at = skip_hidden(rest, at + 1, false);
        if rest.get(at) == Some(&b'?') {
            at = skip_hidden(rest, at + 1, false);
        }
        let end = name_end(rest, at).ok_or_else(unplaced)?;
        self.edits.push(Edit {
            start: at,
            end,
            to: to.to_string(),
        });
        Ok(())
    }
}

fn is_variables(e: &IdedExpr) -> bool {
    matches!(&e.expr, Expr::Ident(name) if name == VARIABLES)
}

/// The first byte at or after `at` that is not CEL whitespace, a `//` comment or (with
/// `parens`) a closing parenthesis.
fn skip_hidden(s: &[u8], mut at: usize, parens: bool) -> usize {
    loop {
        match s.get(at) {
            Some(b' ' | b'\t' | b'\r' | b'\n' | 0x0c) => at += 1,
            Some(b')') if parens => at += 1,
            Some(b'/') if s.get(at + 1) == Some(&b'/') => {
                while s.get(at).is_some_and(|c| *c != b'\n') {
                    at += 1;
                }
            }
            _ => return at,
        }
    }
}

/// The end of the field name that starts at `at`: CEL's identifier (`[_a-zA-Z][_a-zA-Z0-9]*`)
/// or a backquoted one (`` `a.b` ``).
fn name_end(s: &[u8], at: usize) -> Option<usize> {
    match s.get(at)? {
        b'`' => {
            let close = s.get(at + 1..)?.iter().position(|c| *c == b'`')?;
            Some(at + 1 + close + 1)
        }
        c if c.is_ascii_alphabetic() || *c == b'_' => {
            let len = s[at..]
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
                .count();
            Some(at + len)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c3() -> BTreeMap<String, String> {
        BTreeMap::from([
            ("params".to_string(), "c3_params".to_string()),
            ("x".to_string(), "c3_x".to_string()),
        ])
    }

    /// On a thread with the parser's stack, as the edge runs it.
    fn renamed(e: &str) -> Result<String, String> {
        let e = e.to_string();
        std::thread::Builder::new()
            .stack_size(super::super::cel_syntax::PARSER_STACK)
            .spawn(move || rename_variables(&e, &c3()))
            .expect("thread")
            .join()
            .expect("no panic")
    }

    #[test]
    fn selects_on_variables_are_renamed_wherever_they_are() {
        for (before, after) in [
            ("variables.params", "variables.c3_params"),
            ("variables.params.labels", "variables.c3_params.labels"),
            (
                "variables.params.a.b[0] == variables.x",
                "variables.c3_params.a.b[0] == variables.c3_x",
            ),
            // Inside macros: the range and the bodies.
            (
                "object.spec.containers.all(c, c.image in variables.params.repos)",
                "object.spec.containers.all(c, c.image in variables.c3_params.repos)",
            ),
            (
                "variables.params.repos.map(r, r + variables.x).exists(s, s == variables.params.y)",
                "variables.c3_params.repos.map(r, r + variables.c3_x).exists(s, s == variables.c3_params.y)",
            ),
            (
                "[1].all(i, [2].exists(j, variables.params.filter(p, p == i).size() > j))",
                "[1].all(i, [2].exists(j, variables.c3_params.filter(p, p == i).size() > j))",
            ),
            // has(): the test select and the select inside it.
            ("has(variables.params.x)", "has(variables.c3_params.x)"),
            ("has(variables.params)", "has(variables.c3_params)"),
            (
                "!has(variables.params.allowed) ? [] : variables.params.allowed",
                "!has(variables.c3_params.allowed) ? [] : variables.c3_params.allowed",
            ),
            // Spaces, comments, parentheses, optional and backquoted fields.
            (
                "variables . params // variables.params\n .a",
                "variables . c3_params // variables.params\n .a",
            ),
            ("(variables).params", "(variables).c3_params"),
            (
                "variables.?params.orValue(1)",
                "variables.?c3_params.orValue(1)",
            ),
            ("variables.`params`.a", "variables.c3_params.a"),
            // Other variables, other fields, other roots: untouched.
            (
                "variables.anyObject.metadata.params",
                "variables.anyObject.metadata.params",
            ),
            ("object.params == params.x", "object.params == params.x"),
            // Strings holding the text.
            (
                "'variables.params' + \"variables.x\" + variables.x",
                "'variables.params' + \"variables.x\" + variables.c3_x",
            ),
            // A macro's own variable named `variables` is not the VAP's; outside it, renamed.
            (
                "[{'params': 1}].all(variables, variables.params == 1) && variables.params != null",
                "[{'params': 1}].all(variables, variables.params == 1) && variables.c3_params != null",
            ),
            // A macro variable named like a variable.
            (
                "object.items.all(params, params.x == variables.x)",
                "object.items.all(params, params.x == variables.c3_x)",
            ),
            // Multi-byte characters before the field: offsets are bytes, not characters.
            (
                "'é€😀' == variables.x && \"ü\" != variables.params.a",
                "'é€😀' == variables.c3_x && \"ü\" != variables.c3_params.a",
            ),
            ("{'€': variables.params}", "{'€': variables.c3_params}"),
        ] {
            assert_eq!(renamed(before).as_deref(), Ok(after), "{before}");
        }
    }

    #[test]
    fn what_cannot_be_renamed_is_said() {
        for e in [
            "variables['params']",
            "variables",
            "f(variables).params",
            "cel.bind(variables, 1, variables + 1)",
            ".variables.params",
        ] {
            let got = renamed(e);
            assert!(
                got.as_ref().is_err_and(|m| m.contains("other than as")),
                "{e}: {got:?}"
            );
        }
        assert!(renamed("variables.params ==").is_err());
    }
}
