//! The CEL syntax check's edge: [`check_all`] (the pure parse of [`super::cel_syntax`]) run on
//! the process's one parser thread, which has the [`PARSER_STACK`] cel-rust's parser needs; its
//! answers remembered per checker. Every command checks templates with [`checker`] (through
//! `Options`); [`default_options`] is here because that checker is (the core crate cannot give
//! `Options` a `Default`: its checker is the edge's).
//!
//! Why one long-lived thread: the parse needs a stack no tokio worker has, and a thread started
//! per answer not remembered cost a 64 MiB mapping each time, and ran as many parses at once as
//! there were callers, on a machine whose cores also carry the runtime (the Lease renewal). The
//! thread is started on the first question and serves the questions in turn, over a channel;
//! each caller waits for its answer on a reply channel of its own. Async callers do not wait
//! on the runtime's workers: the reconciler takes its decisions on tokio's blocking pool
//! (`controller::reconcile::reconcilers`), and any other caller on a worker announces the wait
//! with `block_in_place`, which hands the worker's other tasks to another thread.

use super::cel_syntax::{PARSER_STACK, check_all, reads_free};
use crate::core::Options;
use crate::core::cel_syntax::{CelChecker, CelSyntax};
use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

/// The checker of the commands, the TUI and the reconciler: [`ParserThread`].
pub fn checker() -> CelChecker {
    CelChecker::new(ParserThread::default())
}

/// The flags' defaults: Gatekeeper v3.20+ ([`Options::with_cel`]), CEL checked by [`checker`];
/// but for the shape, which is `narrowed` here and `auto` on the command line.
pub fn default_options() -> Options {
    Options::with_cel(checker())
}

/// Parses on the process's parser thread ([`on_parser_thread`]), and remembers each answer by
/// the hash of what was checked: the reconciler decides a template again on every event of its
/// kind.
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
            let owned = owned(expressions);
            // Fail closed: an unchecked template is not declared valid.
            on_parser_thread(move || check_all(&borrowed(&owned))).unwrap_or_else(Err)
        })
    }

    fn first_free_read(&self, expressions: &[(String, &str)], name: &str) -> Option<String> {
        remembered(&self.free_reads, key_of(expressions, name), || {
            let (owned, name) = (owned(expressions), name.to_string());
            let first = move || {
                owned
                    .iter()
                    .find(|(_, e)| reads_free(e, &name))
                    .map(|(field, _)| field.clone())
            };
            // Unparsed, nothing is known to read it: the syntax check reports the template.
            on_parser_thread(first).unwrap_or_default()
        })
    }

    /// Not remembered: each answer is one expression for one constraint, asked only by the
    /// folded shape's generator (`core::fold`), which nothing calls on every event yet.
    fn rename_variables(
        &self,
        expression: &str,
        renames: &std::collections::BTreeMap<String, String>,
    ) -> Result<String, String> {
        let (expression, renames) = (expression.to_string(), renames.clone());
        on_parser_thread(move || super::cel_rename::rename_variables(&expression, &renames))
            .and_then(|r| r)
    }
}

/// The question's expressions, owned: they travel to the parser thread.
fn owned(expressions: &[(String, &str)]) -> Vec<(String, String)> {
    expressions
        .iter()
        .map(|(field, e)| (field.clone(), (*e).to_string()))
        .collect()
}

/// The expressions as [`check_all`] takes them.
fn borrowed(expressions: &[(String, String)]) -> Vec<(String, &str)> {
    expressions
        .iter()
        .map(|(field, e)| (field.clone(), e.as_str()))
        .collect()
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

/// One question for the parser thread: it computes the answer and sends it back itself.
type Job = Box<dyn FnOnce() + Send>;

/// The parser thread's queue, once it is started; why it could not be, otherwise.
fn parser_thread() -> &'static Result<mpsc::Sender<Job>, String> {
    static PARSER: OnceLock<Result<mpsc::Sender<Job>, String>> = OnceLock::new();
    PARSER.get_or_init(|| {
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("cel-syntax".into())
            .stack_size(PARSER_STACK)
            .spawn(move || serve(&queue))
            .map(|_| jobs)
            .map_err(|e| format!("cannot check the CEL syntax: {e}"))
    })
}

/// The parser thread's loop, for the life of the process: one question at a time. A parse that
/// panics loses its own answer (its caller hears why), not the thread.
fn serve(queue: &mpsc::Receiver<Job>) {
    for job in queue {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
    }
}

/// `parse` on the parser thread, with its [`PARSER_STACK`]; `Err` says why there is no answer
/// (no such thread could be started, or the parser panicked). Waited for on a worker thread of
/// a multi-threaded tokio runtime, the wait is announced to tokio first (`block_in_place`),
/// which hands the worker's other tasks — the Lease renewal among them — to another thread
/// meanwhile.
fn on_parser_thread<T: Send + 'static>(
    parse: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let jobs = parser_thread().as_ref().map_err(Clone::clone)?;
    let (reply, answer) = mpsc::sync_channel(1);
    let job: Job = Box::new(move || {
        // The caller may have gone (its task aborted): the answer is simply dropped.
        let _ = reply.send(parse());
    });
    let failed = || "the CEL parser failed on this template".to_string();
    jobs.send(job).map_err(|_| failed())?;
    let wait = move || answer.recv().map_err(|_| failed());
    let in_workers =
        Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
    if in_workers {
        tokio::task::block_in_place(wait)
    } else {
        // No runtime, one thread only (where block_in_place cannot be used), or tokio's blocking
        // pool: just wait.
        wait()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The parse answers the same from a runtime's worker (announced with block_in_place),
    /// from its blocking pool, from a single-threaded runtime (where block_in_place would
    /// panic) and from no runtime.
    #[test]
    fn the_parse_answers_in_and_out_of_a_runtime() {
        let parse = || on_parser_thread(|| super::super::cel_syntax::parse("1 + ").is_err());
        assert_eq!(parse(), Ok(true));
        let multi = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .expect("a runtime");
        let in_worker = multi.block_on(async { tokio::spawn(async move { parse() }).await });
        assert_eq!(in_worker.expect("the task ends"), Ok(true));
        let in_pool = multi.block_on(async { tokio::task::spawn_blocking(parse).await });
        assert_eq!(in_pool.expect("the task ends"), Ok(true));
        let single = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        assert_eq!(single.block_on(async { parse() }), Ok(true));
    }

    /// Every parse runs on the one parser thread (no thread started per question), and a parse
    /// that panics costs its own answer, not the thread.
    #[test]
    fn one_parser_thread_serves_every_question_and_outlives_a_panic() {
        let first = on_parser_thread(|| std::thread::current().id()).expect("an answer");
        let panicked: Result<(), String> = on_parser_thread(|| panic!("a parser bug"));
        assert_eq!(
            panicked,
            Err("the CEL parser failed on this template".to_string())
        );
        let again = std::thread::spawn(|| on_parser_thread(|| std::thread::current().id()))
            .join()
            .expect("the asking thread ends");
        assert_eq!(again, Ok(first), "the same thread, after the panic too");
        assert_ne!(first, std::thread::current().id());
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
