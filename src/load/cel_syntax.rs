//! CEL syntax, checked offline: every expression of a template is parsed (never type-checked
//! or evaluated), so a template the API server would refuse is an error finding here instead of
//! a planned create. The parser is cel-rust's port of cel-go's grammar, set up as Kubernetes
//! sets up cel-go: the standard macros, optional syntax (`?.`, `[?…]`, `.orValue()`, served
//! since Kubernetes 1.29), cel-go's default recursion limit; backquoted field names too.
//! Functions and macros of Kubernetes' libraries (`cel.bind`, `optMap`, two-variable `all`, …)
//! are calls to the parser, so it accepts them; whether they exist is the type checker's
//! question, which stays the server's. Where in doubt, it accepts: a false error would block a
//! valid template.
//!
//! The core asks through [`CelSyntax`](crate::core::cel_syntax::CelSyntax) (its
//! `core::cel_syntax`); this is the parse behind it, at the edge because cel-rust's parser
//! keeps caches behind locks and needs [`PARSER_STACK`] ([`super::cel`] gives it a thread).

/// cel-go's default parser recursion limit, which Kubernetes keeps.
const MAX_RECURSION: u16 = 250;

/// One syntax error: where (1-based line and column within the expression) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl std::fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.column, self.message)
    }
}

/// cel-rust's parser set up as Kubernetes sets up cel-go's (the module's doc).
pub(super) fn parser() -> cel::parser::Parser {
    cel::parser::Parser::new()
        .enable_optional_syntax(true)
        // `` a.`b.c` ``: newer cel-go parses it; accepting more is never a false error.
        .enable_ident_escape_syntax(true)
        .max_recursion_depth(MAX_RECURSION)
}

/// Parses `expression`; the first error (by position) if it is not CEL. Runs on the calling
/// thread: see [`PARSER_STACK`] for the stack it needs.
pub fn parse(expression: &str) -> Result<(), SyntaxError> {
    if let Some(e) = too_deep(expression) {
        return Err(e);
    }
    let Err(errors) = parser().parse(expression) else {
        return Ok(());
    };
    let Some(e) = errors.errors.into_iter().next() else {
        return Err(SyntaxError {
            line: 1,
            column: 1,
            message: "not a CEL expression".into(),
        });
    };
    let message = if e.msg.contains("Recursion limit") {
        // cel's own limit: its message is a debug dump of the inner error.
        format!("nested deeper than {MAX_RECURSION} levels (CEL's recursion limit)")
    } else {
        e.msg.trim_start_matches("Syntax error: ").to_string()
    };
    Err(SyntaxError {
        // cel's positions are 1-based.
        line: usize::try_from(e.pos.0).unwrap_or(1).max(1),
        column: usize::try_from(e.pos.1).unwrap_or(1).max(1),
        message,
    })
}

/// The stack [`check_all`] needs: cel's ANTLR parser takes ~130 KiB of stack per bracket level
/// in a debug build, so the 250 levels CEL allows need ~33 MiB, far more than the 2 MiB of a
/// worker thread. Reserved, not used, until a deep expression needs it.
pub const PARSER_STACK: usize = 64 << 20;

/// Parses every `(field, expression)`; the first error as
/// `field: CEL syntax error at line:column: what`. Pure, but it needs [`PARSER_STACK`] bytes of
/// stack for the deepest expression CEL allows: the core calls it through a
/// [`CelChecker`](crate::core::cel_syntax::CelChecker), whose implementation
/// ([`super::cel::checker`]) provides the stack.
pub fn check_all(expressions: &[(String, &str)]) -> Result<(), String> {
    for (field, e) in expressions {
        if let Err(err) = parse(e) {
            return Err(format!("{field}: CEL syntax error at {err}"));
        }
    }
    Ok(())
}

/// Whether `expression` reads the variable `name` where nothing binds it: an identifier `name`
/// outside every macro whose own variable has that name (`l.exists(params, …)` reads no
/// `params`). `variables.params` is a field of `variables`, not a read of `params`. An
/// expression that does not parse reads nothing here (its syntax error is [`check_all`]'s).
/// Needs [`PARSER_STACK`], like [`parse`].
pub fn reads_free(expression: &str, name: &str) -> bool {
    if too_deep(expression).is_some() {
        return false;
    }
    parser()
        .parse(expression)
        .is_ok_and(|e| reads_unbound(&e, name))
}

/// The walk behind [`reads_free`]: a comprehension binds its iteration variables and its
/// accumulator in its condition, step and result, not in its range or initial value.
fn reads_unbound(e: &cel::common::ast::IdedExpr, name: &str) -> bool {
    use cel::common::ast::{EntryExpr, Expr};
    match &e.expr {
        Expr::Ident(ident) => ident == name,
        Expr::Unspecified | Expr::Literal(_) => false,
        Expr::Select(select) => reads_unbound(&select.operand, name),
        Expr::Call(call) => {
            call.target
                .as_deref()
                .is_some_and(|t| reads_unbound(t, name))
                || call.args.iter().any(|a| reads_unbound(a, name))
        }
        Expr::List(list) => list.elements.iter().any(|x| reads_unbound(x, name)),
        Expr::Map(map) => map.entries.iter().any(|entry| match &entry.expr {
            EntryExpr::MapEntry(m) => reads_unbound(&m.key, name) || reads_unbound(&m.value, name),
            EntryExpr::StructField(f) => reads_unbound(&f.value, name),
        }),
        Expr::Struct(s) => s.entries.iter().any(|entry| match &entry.expr {
            EntryExpr::MapEntry(m) => reads_unbound(&m.key, name) || reads_unbound(&m.value, name),
            EntryExpr::StructField(f) => reads_unbound(&f.value, name),
        }),
        Expr::Comprehension(c) => {
            let outside = reads_unbound(&c.iter_range, name) || reads_unbound(&c.accu_init, name);
            let bound =
                c.iter_var == name || c.iter_var2.as_deref() == Some(name) || c.accu_var == name;
            let inside = [&c.loop_cond, &c.loop_step, &c.result]
                .into_iter()
                .any(|x| reads_unbound(x, name));
            outside || (!bound && inside)
        }
    }
}

/// Nesting cel-go refuses, found before cel-rust's parser sees it: that parser counts only
/// bracket nesting, and recurses (on the stack) once per operator of a `+`, `==` or `.field`
/// chain, where cel-go counts each chain against the same limit. The counts here are lower
/// bounds of cel-go's, so what is refused here cel-go refuses too.
#[expect(
    clippy::too_many_lines,
    reason = "one scanner loop over the expression's characters, its cases side by side"
)]
fn too_deep(expression: &str) -> Option<SyntaxError> {
    /// Open chains of one bracket level: relation (`==`, `<`, `in`, …), arithmetic (`+`, `*`,
    /// …, since the last relation) and member (`.f`, `[i]`, since the last arithmetic).
    #[derive(Clone, Copy, Default)]
    struct Chains {
        relation: usize,
        calc: usize,
        member: usize,
    }
    let limit = MAX_RECURSION as usize;
    let chars: Vec<char> = expression.chars().collect();
    // Totals of the enclosing levels (their chains stay open while a bracket is parsed).
    let mut outer: Vec<Chains> = Vec::new();
    let (mut base, mut here) = (Chains::default(), Chains::default());
    let (mut line, mut line_start) = (1usize, 0usize);
    // Whether the last token ends an operand (so `-` is binary and `[` indexes).
    let mut after_operand = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let at = |line: usize, line_start: usize, i: usize| SyntaxError {
            line,
            column: i - line_start + 1,
            message: format!("nested deeper than {limit} levels (CEL's recursion limit)"),
        };
        let next = chars.get(i + 1).copied();
        let mut operand = false;
        let mut width = 1;
        match c {
            '\n' => {
                line += 1;
                line_start = i + 1;
                i += 1;
                continue;
            }
            c if c.is_whitespace() => {
                i += 1;
                continue;
            }
            '"' | '\'' => {
                // r'…', R'…', rb'…', br'…': backslashes are literal.
                let raw = chars[i.saturating_sub(2)..i]
                    .iter()
                    .any(|p| matches!(p, 'r' | 'R'));
                let triple = next == Some(c) && chars.get(i + 2) == Some(&c);
                let quote_len = if triple { 3 } else { 1 };
                let mut j = i + quote_len;
                while j < chars.len() {
                    if chars[j] == '\n' {
                        line += 1;
                        line_start = j + 1;
                    }
                    if !raw && chars[j] == '\\' {
                        j += 2;
                        continue;
                    }
                    if chars[j] == c && (!triple || chars[j..].starts_with(&[c, c, c])) {
                        break;
                    }
                    j += 1;
                }
                i = j + quote_len;
                after_operand = true;
                continue;
            }
            c if c.is_ascii_digit() => {
                // Numbers, with their `.5`, `e-3`, `0x1F`, `u`: no `.` inside one is a member.
                let mut j = i + 1;
                while j < chars.len() {
                    let d = chars[j];
                    let sign = matches!(d, '+' | '-') && matches!(chars[j - 1], 'e' | 'E');
                    let point = d == '.' && chars.get(j + 1).is_some_and(char::is_ascii_digit);
                    if d.is_ascii_alphanumeric() || point || sign {
                        j += 1;
                    } else {
                        break;
                    }
                }
                width = j - i;
                operand = true;
            }
            c if c.is_alphabetic() || c == '_' => {
                let mut j = i + 1;
                while j < chars.len() && (chars[j].is_alphanumeric() || chars[j] == '_') {
                    j += 1;
                }
                let word: String = chars[i..j].iter().collect();
                width = j - i;
                if word == "in" {
                    here.relation += 1;
                    here.calc = 0;
                    here.member = 0;
                } else {
                    operand = true;
                }
            }
            '(' | '[' | '{' => {
                if c == '[' && after_operand {
                    here.member += 1;
                }
                outer.push(base);
                base = Chains {
                    relation: base.relation + here.relation,
                    calc: base.calc + here.calc,
                    member: base.member + here.member,
                };
                outer.push(here);
                here = Chains::default();
                // `(((…)))`: one level of cel-go's `expr` rule each (the innermost may be empty).
                if outer.len() / 2 > limit + 1 {
                    return Some(at(line, line_start, i));
                }
            }
            ')' | ']' | '}' => {
                here = outer.pop().unwrap_or_default();
                base = outer.pop().unwrap_or_default();
                operand = true;
            }
            '.' if after_operand => here.member += 1,
            '=' | '!' | '<' | '>' if next == Some('=') => {
                width = 2;
                here.relation += 1;
                here.calc = 0;
                here.member = 0;
            }
            '<' | '>' => {
                here.relation += 1;
                here.calc = 0;
                here.member = 0;
            }
            '+' | '*' | '/' | '%' => {
                here.calc += 1;
                here.member = 0;
            }
            '-' if after_operand => {
                here.calc += 1;
                here.member = 0;
            }
            '&' | '|' | ',' | ':' => here = Chains::default(),
            // A ternary's `?`; after `[`, `{`, `,` or `.` it marks an optional element.
            '?' if after_operand => here = Chains::default(),
            _ => {}
        }
        if base.relation + here.relation > limit
            || base.calc + here.calc > limit
            || base.member + here.member > limit
        {
            return Some(at(line, line_start, i));
        }
        after_operand = operand;
        i += width;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_cel_parses() {
        for e in [
            "object.metadata.name == 'a'",
            "has(object.spec) && object.spec.containers.all(c, c.image.startsWith('r/'))",
            "object.spec.containers.exists(c, c.name == 'x')",
            "object.spec.containers.exists_one(c, c.name == 'x')",
            "object.spec.containers.map(c, c.name)",
            "object.spec.containers.map(c, c.name != '', c.name)",
            "object.spec.containers.filter(c, c.name == 'x').size() > 0",
            "object.metadata.?labels.orValue({}).size() >= 0",
            "object.?spec.?replicas.orValue(1) <= 5",
            "[?object.?metadata.name].size() == 1",
            "{?'a': object.?metadata.name}.size() >= 0",
            "cel.bind(x, object.metadata.name, x == 'a')",
            "object.spec.containers.all(i, c, i >= 0 && c.name != '')",
            "object.metadata.labels.transformMap(k, v, v + 'x').size() >= 0",
            "optional.of(1).optMap(x, x + 1).orValue(0) == 2",
            "object.metadata.name.matches('^[a-z]+$') && 'a'.lowerAscii() == 'a'",
            "quantity('1Gi').isGreaterThan(quantity('1Mi'))",
            "url('https://x').getHost() == 'x'",
            "int(object.spec.replicas) < 3 ? 'few' : 'many'",
            "duration('1s') < duration('2s') && timestamp('2020-01-01T00:00:00Z') > timestamp('2019-01-01T00:00:00Z')",
            "b'abc'.size() == 3 && r'\\d' == '\\\\d' && '''multi\nline''' != ''",
            "0x1F == 31 && 1u == uint(1) && 1.5e3 > 0.0 && -1 < 0",
            "!has(params.spec) ? null : params.spec.parameters",
            "request.kind.kind in ['Pod', 'Deployment'] && !(object.metadata.name in [])",
            "object.metadata.name.split('-')[0] == 'a'",
            "object.metadata.annotations.`example.com/x` == 'y'",
        ] {
            assert_eq!(parse(e), Ok(()), "{e}");
        }
    }

    #[test]
    fn our_matchers_and_variables_parse() {
        for (name, e) in crate::core::cel::matchers() {
            assert_eq!(parse(&e), Ok(()), "{name}: {e}");
        }
        assert_eq!(parse(crate::core::cel::ANY_OBJECT), Ok(()));
        assert_eq!(parse(crate::core::cel::PARAMS), Ok(()));
        let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        let exempted = crate::core::cel::global_exempted(&set(&["kube-"]), &set(&["-system"]));
        let excluded = crate::core::cel::global_excluded(&set(&["kube-*", "*-x-*", "a.b"]));
        for e in [exempted, excluded] {
            let e = e.expect("a condition");
            assert_eq!(parse(&e), Ok(()), "{e}");
        }
    }

    #[test]
    fn errors_say_where() {
        let e = parse("object.metadata.name.startsWith(").unwrap_err();
        assert_eq!((e.line, e.column), (1, 33), "{e}");
        assert!(e.message.starts_with("mismatched input '<EOF>'"), "{e}");
        let e = parse("a &&\n  || b").unwrap_err();
        assert_eq!(e.line, 2, "{e}");
        assert!(
            parse("a.all(1, true)").is_err(),
            "a macro's variable must be a name"
        );
        assert!(parse("").is_err());
        assert!(parse("a ==").is_err());
    }
}
