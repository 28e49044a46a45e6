//! CEL syntax, checked offline: every expression of a template is parsed (never type-checked
//! or evaluated), so a template the API server would refuse is an error finding instead of a
//! planned create. Here are what the core asks ([`CelSyntax`], carried as a [`CelChecker`] in
//! [`Options::cel`](super::Options)) and what it asks about ([`expressions`]). The parse itself
//! is the main crate's (`load::cel_syntax`): cel-rust's parser keeps its caches behind
//! parking_lot locks and needs a thread with a large stack, none of which belongs in this crate.

/// What parses a template's CEL for [`decide_template`](super::decide::decide_template). The
/// edges implement it (`load::cel`): the parser's stack means a thread of its own, and
/// remembering results across calls (the reconciler decides a template on every event of its
/// kind) is state; neither belongs in the core.
pub trait CelSyntax: Send + Sync {
    /// Every `(field, expression)` parsed; the first error as
    /// `field: CEL syntax error at line:column: what` (the edge's `check_all`), or the same answer
    /// remembered.
    fn check(&self, expressions: &[(String, &str)]) -> Result<(), String>;

    /// The field of the first expression that reads the variable `name` where nothing binds
    /// it (`name` itself, not `variables.name`, and not a macro's own variable of that name);
    /// `None` when none does. An expression that does not parse reads nothing here: its error
    /// is [`CelSyntax::check`]'s.
    fn first_free_read(&self, expressions: &[(String, &str)], name: &str) -> Option<String>;

    /// `expression` with every read of `variables.<from>` made a read of `variables.<to>`,
    /// for each `from → to` of `renames` (`params` → `c3_params`), rewritten on its parsed
    /// form: selects on the identifier `variables` only, not strings, not a macro's own
    /// variable of that name. `Err` says why not (it does not parse; it reads `variables`
    /// other than through a field). What one VAP holding several constraints needs
    /// ([`fold`](super::fold)).
    fn rename_variables(
        &self,
        expression: &str,
        renames: &std::collections::BTreeMap<String, String>,
    ) -> Result<String, String>;
}

/// The [`CelSyntax`] a decision uses, carried in [`Options`](super::Options); clones share it
/// (and so what it remembers).
#[derive(Clone)]
pub struct CelChecker(std::sync::Arc<dyn CelSyntax>);

impl CelChecker {
    pub fn new(syntax: impl CelSyntax + 'static) -> Self {
        CelChecker(std::sync::Arc::new(syntax))
    }

    /// Every expression of a `K8sNativeValidation` source ([`expressions`]) checked.
    pub fn check_source(&self, s: &crate::model::NativeSource) -> Result<(), String> {
        self.check(&expressions(s))
    }

    /// The field of the first expression of `s` that reads `params` itself, the constraint
    /// a `paramKind` VAP is given (`params.spec.parameters.x`), rather than
    /// `variables.params`: such a template works only in a shape with a `paramKind`.
    pub fn reads_params(&self, s: &crate::model::NativeSource) -> Option<String> {
        self.0.first_free_read(&expressions(s), "params")
    }

    /// `expression` with its `variables.<from>` read as `variables.<to>`
    /// ([`CelSyntax::rename_variables`]).
    pub fn rename_variables(
        &self,
        expression: &str,
        renames: &std::collections::BTreeMap<String, String>,
    ) -> Result<String, String> {
        self.0.rename_variables(expression, renames)
    }

    /// Every `(field, expression)` checked (what we generate, too: an inline VAP's literals).
    pub fn check(&self, all: &[(String, &str)]) -> Result<(), String> {
        if all.is_empty() {
            return Ok(());
        }
        self.0.check(all)
    }
}

impl std::fmt::Debug for CelChecker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CelChecker")
    }
}

/// Every expression of a `K8sNativeValidation` source, named by its field: validations'
/// `expression` and `messageExpression`, `matchConditions`, `variables`.
pub fn expressions(s: &crate::model::NativeSource) -> Vec<(String, &str)> {
    let mut all: Vec<(String, &str)> = Vec::new();
    for (i, v) in s.validations.iter().enumerate() {
        all.push((format!("validations[{i}].expression"), &v.expression));
        if let Some(m) = &v.message_expression {
            all.push((format!("validations[{i}].messageExpression"), m));
        }
    }
    for (i, m) in s.match_conditions.iter().enumerate() {
        all.push((
            format!("matchConditions[{i}] ({:?}).expression", m.name),
            &m.expression,
        ));
    }
    for (i, v) in s.variables.iter().enumerate() {
        all.push((
            format!("variables[{i}] ({:?}).expression", v.name),
            &v.expression,
        ));
    }
    all
}
