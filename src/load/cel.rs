//! The CEL syntax check's edge: [`check_all`] (the pure parse of [`super::cel_syntax`]) run on
//! a thread with the [`PARSER_STACK`] cel-rust's parser needs, its answers remembered per
//! checker. Every command
//! checks templates with [`checker`] (through `Options`); [`default_options`] is here because
//! that checker is (the core crate cannot give `Options` a `Default`: its checker is the edge's).

use super::cel_syntax::{PARSER_STACK, check_all, reads_free};
use crate::core::Options;
use crate::core::cel_syntax::{CelChecker, CelSyntax};
use std::collections::HashMap;
use std::sync::Mutex;

/// The checker of the commands, the TUI and the reconciler: [`ParserThread`].
pub fn checker() -> CelChecker {
    CelChecker::new(ParserThread::default())
}

/// The flags' defaults: Gatekeeper v3.20+ ([`Options::with_cel`]), CEL checked by [`checker`];
/// but for the shape, which is `narrowed` here and `auto` on the command line.
pub fn default_options() -> Options {
    Options::with_cel(checker())
}

/// Parses on a thread of its own with [`PARSER_STACK`], and remembers each answer by the hash
/// of what was checked: the reconciler decides a template again on every event of its kind.
#[derive(Default)]
pub struct ParserThread {
    answers: Mutex<HashMap<[u8; 32], Result<(), String>>>,
    /// [`CelSyntax::first_free_read`]'s answers, by the hash of the expressions and the name.
    free_reads: Mutex<HashMap<[u8; 32], Option<String>>>,
}

/// Answers remembered before the memory is cleared: the working set is one entry per
/// template, far below it.
const ANSWERS: usize = 4096;

impl CelSyntax for ParserThread {
    fn check(&self, expressions: &[(String, &str)]) -> Result<(), String> {
        remembered(&self.answers, key_of(expressions, ""), || {
            // Fail closed: an unchecked template is not declared valid.
            on_big_stack(|| check_all(expressions)).unwrap_or_else(Err)
        })
    }

    fn first_free_read(&self, expressions: &[(String, &str)], name: &str) -> Option<String> {
        remembered(&self.free_reads, key_of(expressions, name), || {
            let first = || {
                expressions
                    .iter()
                    .find(|(_, e)| reads_free(e, name))
                    .map(|(field, _)| field.clone())
            };
            // Unparsed, nothing is known to read it: the syntax check reports the template.
            on_big_stack(first).unwrap_or_default()
        })
    }

    /// Not remembered: each answer is one expression for one constraint, asked only by the
    /// folded shape's generator (`core::fold`), which nothing calls on every event yet.
    fn rename_variables(
        &self,
        expression: &str,
        renames: &std::collections::BTreeMap<String, String>,
    ) -> Result<String, String> {
        on_big_stack(|| super::cel_rename::rename_variables(expression, renames)).and_then(|r| r)
    }
}

/// The hash of what was asked: every `(field, expression)` and `extra`.
fn key_of(expressions: &[(String, &str)], extra: &str) -> [u8; 32] {
    let mut h = hmac_sha256::Hash::new();
    for (field, e) in expressions {
        h.update(field.as_bytes());
        h.update([0]);
        h.update(e.as_bytes());
        h.update([0]);
    }
    h.update(extra.as_bytes());
    h.finalize()
}

/// The answer remembered under `key` in `memory`, or `compute`'s, then remembered. A poisoned
/// lock only loses the memory: the answer is computed again.
fn remembered<T: Clone>(
    memory: &Mutex<HashMap<[u8; 32], T>>,
    key: [u8; 32],
    compute: impl FnOnce() -> T,
) -> T {
    if let Some(known) = memory.lock().ok().and_then(|a| a.get(&key).cloned()) {
        return known;
    }
    let answer = compute();
    if let Ok(mut a) = memory.lock() {
        if a.len() >= ANSWERS {
            a.clear();
        }
        a.insert(key, answer.clone());
    }
    answer
}

/// `parse` on a thread of its own with [`PARSER_STACK`]; `Err` says why there is no answer (no
/// such thread could be started, or the parser panicked). Called from a worker thread of a
/// multi-threaded tokio runtime (the reconciler decides templates there), the wait is
/// announced to tokio first (`block_in_place`), which hands the worker's other tasks — the
/// Lease renewal among them — to another thread while the parse runs.
fn on_big_stack<T: Send>(parse: impl FnOnce() -> T + Send) -> Result<T, String> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let in_workers =
        Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
    if in_workers {
        tokio::task::block_in_place(|| parse_on_big_stack(parse))
    } else {
        // No runtime, or one thread only (where block_in_place cannot be used): just wait.
        parse_on_big_stack(parse)
    }
}

fn parse_on_big_stack<T: Send>(parse: impl FnOnce() -> T + Send) -> Result<T, String> {
    std::thread::scope(|s| {
        match std::thread::Builder::new()
            .name("cel-syntax".into())
            .stack_size(PARSER_STACK)
            .spawn_scoped(s, parse)
        {
            Ok(handle) => handle
                .join()
                .map_err(|_| "the CEL parser failed on this template".to_string()),
            Err(e) => Err(format!("cannot check the CEL syntax: {e}")),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The parse answers the same from a runtime's worker (announced with block_in_place),
    /// from a single-threaded runtime (where block_in_place would panic) and from no runtime.
    #[test]
    fn the_parse_answers_in_and_out_of_a_runtime() {
        let parse = || on_big_stack(|| super::super::cel_syntax::parse("1 + ").is_err());
        assert_eq!(parse(), Ok(true));
        let multi = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .expect("a runtime");
        let in_worker = multi.block_on(async { tokio::spawn(async move { parse() }).await });
        assert_eq!(in_worker.expect("the task ends"), Ok(true));
        let single = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        assert_eq!(single.block_on(async { parse() }), Ok(true));
    }

    #[test]
    fn deep_or_long_input_fails_without_exhausting_the_stack() {
        let nest =
            |open: &str, close: &str, n: usize| format!("{}1{}", open.repeat(n), close.repeat(n));
        let chain = |sep: &str, n: usize| vec!["a"; n + 1].join(sep);
        // Within CEL's limit: parses. One past it: refused. Far past it: refused at once.
        let cases: Vec<(String, bool)> = vec![
            (nest("(", ")", 250), true),
            (nest("[", "]", 250), true),
            (nest("f(", ")", 250), true),
            (nest("(", ")", 252), false),
            (nest("(", ")", 100_000), false),
            (nest("a[", "]", 100_000), false),
            (chain(" + ", 250), true),
            (chain(" + ", 251), false),
            (chain(" == ", 250), true),
            (chain(" == ", 100_000), false),
            (chain(".b", 250), true),
            (chain(".f()", 100_000), false),
            (chain("[0]", 100_000), false),
            ("a ? b : ".repeat(100_000) + "c", false),
            // `&&` and `||` chains are loops in CEL's grammar, not nesting: no limit.
            (chain(" && ", 5_000), true),
            (format!("{}a", "!".repeat(20_000)), true),
            (format!("{}a", "-".repeat(20_000)), true),
            // Strings are not counted, whatever brackets or quotes they hold.
            (
                format!(
                    r#"'{}' == r'\' && '''{}''' != "\"" "#,
                    "(".repeat(1000),
                    "[".repeat(1000)
                ),
                true,
            ),
        ];
        // From a thread with a worker's 2 MiB stack, as the reconciler and the TUI call it.
        let cel = checker();
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                for (e, ok) in &cases {
                    let got = cel.check_source(&source(e));
                    let short: String = e.chars().take(40).collect();
                    assert_eq!(got.is_ok(), *ok, "{short}…: {got:?}");
                }
            })
            .expect("thread")
            .join()
            .expect("no stack overflow");
    }

    fn source(expression: &str) -> crate::model::NativeSource {
        serde_json::from_value(serde_json::json!({
            "validations": [{ "expression": expression }]
        }))
        .expect("a source")
    }

    #[test]
    fn an_answer_is_remembered() {
        let parser = ParserThread::default();
        let bad = [("e".to_string(), "a ==")];
        let first = parser.check(&bad);
        assert!(first.is_err());
        assert_eq!(parser.answers.lock().expect("lock").len(), 1);
        assert_eq!(parser.check(&bad), first);
        assert_eq!(parser.answers.lock().expect("lock").len(), 1);
    }
}
