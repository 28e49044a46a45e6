//! The pure core: decisions, generation, normalization, the per-object steps and the
//! analysis that folds them. No IO here.

pub mod analysis;
pub mod cel;
pub mod cel_literal;
pub mod cel_syntax;
pub mod compare;
pub mod contest;
pub mod crd;
pub mod decide;
pub mod desired;
pub mod findings;
pub mod fold;
pub mod gatekeeper_cel;
pub mod generate;
pub mod guard;
pub mod matching;
pub mod names;
pub mod normalize;
pub mod options;
pub mod ownership;
pub mod plan;
pub mod pod_status;
pub mod probe;
pub mod render;
pub mod scope;
pub mod settings;
pub mod shape;
pub mod step;
pub mod tree;
pub mod verdict;

pub use analysis::{Analysis, analyze};
pub use findings::{Code, Finding, Severity, Summary};
pub use options::{Exemptions, FailurePolicy, Options, PolicyShape};
pub use plan::{PlannedWrite, Verb};
