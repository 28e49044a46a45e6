//! JSON values written as CEL literals, for the inline shape: a constraint's `spec.parameters`
//! become the expression of `variables.params`, and its `spec.match` lists the matchers'
//! constants. Built from the parsed value, never by splicing text: every string is escaped
//! here, so no value can end a literal or add CEL of its own.
//!
//! Kubernetes' CEL environment checks that list and map literals are homogeneous
//! (`cel.HomogeneousAggregateLiterals`, k8s.io/apiserver `pkg/cel/environment/base.go`): `[1,
//! "a"]` does not compile. An aggregate whose elements are scalars of one type is written
//! plainly; any other wraps each element in `dyn()`, which every element type unifies with.
//! Numbers keep the type the API server gives them in a param object: an integer is an `int`,
//! anything else (a fraction, an exponent, an integer beyond int64) a `double`.

use serde_json::Value;

/// cel-go's parser limit on an expression's length, in code points; Kubernetes keeps it.
pub const MAX_CODE_POINTS: usize = 100_000;
/// How deeply a value may nest. cel-go's parser stops at 250 levels of its own recursion,
/// and each level of a value costs it several (the aggregate, the `dyn()` call, the entry);
/// parameters are rarely nested more than a few levels.
pub const MAX_DEPTH: usize = 32;

/// Why a value cannot be written as a literal Kubernetes would accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LiteralError {
    #[error(
        "written as CEL it would be {code_points} characters long, over the limit of {MAX_CODE_POINTS} for one expression"
    )]
    TooLong { code_points: usize },
    #[error("it nests more than {MAX_DEPTH} levels deep")]
    TooDeep,
}

/// `value` as a CEL literal, or why it cannot be one.
pub fn literal(value: &Value) -> Result<String, LiteralError> {
    let mut out = String::new();
    write(&mut out, value, 0)?;
    within_limit(out)
}

/// A CEL string literal of `s`.
pub fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    write_string(&mut out, s);
    out
}

/// A CEL list of string literals (`list(string)`).
pub fn string_list<'a>(values: impl IntoIterator<Item = &'a String>) -> String {
    let items: Vec<String> = values.into_iter().map(|v| string(v)).collect();
    format!("[{}]", items.join(", "))
}

/// `expression` if it is within [`MAX_CODE_POINTS`].
pub fn within_limit(expression: String) -> Result<String, LiteralError> {
    let code_points = expression.chars().count();
    if code_points > MAX_CODE_POINTS {
        return Err(LiteralError::TooLong { code_points });
    }
    Ok(expression)
}

fn write(out: &mut String, value: &Value, depth: usize) -> Result<(), LiteralError> {
    if depth > MAX_DEPTH {
        return Err(LiteralError::TooDeep);
    }
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            let wrap = !homogeneous(items.iter());
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_element(out, item, wrap, depth)?;
            }
            out.push(']');
        }
        Value::Object(entries) => {
            let wrap = !homogeneous(entries.values());
            out.push('{');
            for (i, (key, item)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_string(out, key);
                out.push_str(": ");
                write_element(out, item, wrap, depth)?;
            }
            out.push('}');
        }
    }
    Ok(())
}

fn write_element(
    out: &mut String,
    item: &Value,
    wrap: bool,
    depth: usize,
) -> Result<(), LiteralError> {
    if wrap {
        out.push_str("dyn(");
    }
    write(out, item, depth + 1)?;
    if wrap {
        out.push(')');
    }
    Ok(())
}

/// The CEL type of a scalar, `None` for an aggregate (whose element types would have to be
/// compared in depth: it is wrapped instead).
fn scalar_type(v: &Value) -> Option<&'static str> {
    match v {
        Value::Null => Some("null"),
        Value::Bool(_) => Some("bool"),
        Value::Number(n) if n.is_i64() => Some("int"),
        Value::Number(_) => Some("double"),
        Value::String(_) => Some("string"),
        Value::Array(_) | Value::Object(_) => None,
    }
}

/// Whether the elements are scalars of one type (an empty aggregate is).
fn homogeneous<'a>(mut items: impl Iterator<Item = &'a Value>) -> bool {
    let Some(first) = items.next() else {
        return true;
    };
    let Some(t) = scalar_type(first) else {
        return false;
    };
    items.all(|v| scalar_type(v) == Some(t))
}

fn write_number(out: &mut String, n: &serde_json::Number) {
    if let Some(i) = n.as_i64() {
        out.push_str(&i.to_string());
        return;
    }
    // An integer beyond int64 is a double in a param object too (JSON decoding's rule).
    let f = n.as_f64().unwrap_or(f64::MAX);
    // `{:?}` always writes a fraction or an exponent (`1.0`, `1e21`, `1.5e-7`), as CEL's
    // double literal needs; JSON has no NaN or infinity.
    out.push_str(&format!("{f:?}"));
}

fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            // Every other control character (all in the Basic Multilingual Plane) as a code point
            // escape; the rest as it is (CEL strings are Unicode).
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lit(v: Value) -> String {
        literal(&v).expect("a literal")
    }

    #[test]
    fn scalars() {
        assert_eq!(lit(json!(null)), "null");
        assert_eq!(lit(json!(true)), "true");
        assert_eq!(lit(json!(-7)), "-7");
        assert_eq!(lit(json!(i64::MIN)), "-9223372036854775808");
        assert_eq!(lit(json!(1.0)), "1.0");
        assert_eq!(lit(json!(0.1)), "0.1");
        assert_eq!(lit(json!(1e300)), "1e300");
        // Beyond int64: a double, as the API server decodes it.
        assert_eq!(lit(json!(u64::MAX)), "1.8446744073709552e19");
    }

    #[test]
    fn strings_are_escaped_so_no_value_ends_the_literal() {
        assert_eq!(string(r#"a"b"#), r#""a\"b""#);
        assert_eq!(string(r"a\b"), r#""a\\b""#);
        assert_eq!(string("a\nb\r\t"), r#""a\nb\r\t""#);
        assert_eq!(string("\u{0}\u{7f}\u{85}"), r#""\u0000\u007f\u0085""#);
        // Printable Unicode stays as it is.
        assert_eq!(string("é€😀"), "\"é€😀\"");
        // What would be CEL if spliced stays text.
        assert_eq!(string(r#"" || true || ""#), r#""\" || true || \"""#);
    }

    #[test]
    fn aggregates_of_one_scalar_type_are_plain_others_wrap_each_element() {
        assert_eq!(lit(json!(["a", "b"])), r#"["a", "b"]"#);
        assert_eq!(lit(json!([])), "[]");
        assert_eq!(lit(json!({})), "{}");
        assert_eq!(lit(json!([1, 2.5])), "[dyn(1), dyn(2.5)]");
        assert_eq!(lit(json!([["a"]])), r#"[dyn(["a"])]"#);
        assert_eq!(
            lit(json!({"labels": ["owner"], "message": "m"})),
            r#"{"labels": dyn(["owner"]), "message": dyn("m")}"#
        );
        assert_eq!(lit(json!({"a": 1, "b": 2})), r#"{"a": 1, "b": 2}"#);
        // Keys are escaped like any string.
        assert_eq!(lit(json!({"a\"": 1})), r#"{"a\"": 1}"#);
    }

    #[test]
    fn limits() {
        let mut deep = json!(1);
        for _ in 0..=MAX_DEPTH {
            deep = json!([deep]);
        }
        assert_eq!(literal(&deep), Err(LiteralError::TooDeep));
        let long = json!(["x".repeat(MAX_CODE_POINTS)]);
        assert!(matches!(
            literal(&long),
            Err(LiteralError::TooLong { code_points }) if code_points == MAX_CODE_POINTS + 4
        ));
        // Code points, not bytes.
        let wide = json!("é".repeat(MAX_CODE_POINTS - 2));
        assert!(literal(&wide).is_ok());
    }
}
