//! The generation options as a leader publishes them, and how a view judges a cluster by
//! them: the leader acts on its own flags, so a view that judged by different ones would
//! report as wrong what the leader wrote on purpose (issue 21, item 1).
//!
//! [`Settings`] is a map from flag name to the value as typed on the command line
//! (`"default-failure-policy": "Ignore"`), built from [`Options`] by the one table below: a
//! new option is one line there. Values are text so that a leader of another version, with
//! flags this copy does not know, is read without error (unknown flags are shown, not used).

use super::options::{FailurePolicy, Options, PolicyShape};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// A value of a generation flag, as typed on the command line and back.
pub trait FlagValue: Sized + PartialEq {
    fn text(&self) -> String;
    fn parse(s: &str) -> Option<Self>;
}

impl FlagValue for bool {
    fn text(&self) -> String {
        self.to_string()
    }
    fn parse(s: &str) -> Option<Self> {
        s.parse().ok()
    }
}

impl FlagValue for FailurePolicy {
    fn text(&self) -> String {
        self.as_str().to_string()
    }
    fn parse(s: &str) -> Option<Self> {
        FailurePolicy::parse(s)
    }
}

impl FlagValue for PolicyShape {
    fn text(&self) -> String {
        self.as_str().to_string()
    }
    fn parse(s: &str) -> Option<Self> {
        PolicyShape::parse(s)
    }
}

impl FlagValue for String {
    fn text(&self) -> String {
        self.clone()
    }
    fn parse(s: &str) -> Option<Self> {
        Some(s.to_string())
    }
}

/// A set flag (repeatable, order free): its values sorted, joined by commas.
impl FlagValue for std::collections::BTreeSet<String> {
    fn text(&self) -> String {
        self.iter().cloned().collect::<Vec<_>>().join(",")
    }
    fn parse(s: &str) -> Option<Self> {
        Some(
            s.split(',')
                .filter(|v| !v.is_empty())
                .map(str::to_string)
                .collect(),
        )
    }
}

/// `30s`, `1500ms`: what `--binding-wait` accepts.
impl FlagValue for Duration {
    fn text(&self) -> String {
        if self.subsec_millis() == 0 {
            format!("{}s", self.as_secs())
        } else {
            format!("{}ms", self.as_millis())
        }
    }
    fn parse(s: &str) -> Option<Self> {
        let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit())?);
        let n: u64 = n.parse().ok()?;
        match unit {
            "ms" => Some(Duration::from_millis(n)),
            "s" => Some(Duration::from_secs(n)),
            "m" => Some(Duration::from_secs(n.checked_mul(60)?)),
            "h" => Some(Duration::from_secs(n.checked_mul(3600)?)),
            _ => None,
        }
    }
}

/// The table: each [`Options`] field a leader publishes, and its flag (without `--`).
macro_rules! published {
    ($($($field:ident).+ = $flag:literal,)*) => {
        impl Settings {
            /// What a copy acting on `o` publishes.
            pub fn of(o: &Options) -> Settings {
                Settings(BTreeMap::from([$(($flag.to_string(), FlagValue::text(&o.$($field).+)),)*]))
            }

            /// `local`, with each value the leader published in its place; and each flag whose
            /// values differ.
            fn overlay(&self, local: &Options) -> (Options, Vec<Difference>) {
                let mut o = local.clone();
                let mut differ = Vec::new();
                $(
                    if let Some(v) = self.0.get($flag).and_then(|t| FlagValue::parse(t)) {
                        if v != o.$($field).+ {
                            differ.push(Difference {
                                flag: $flag.to_string(),
                                local: FlagValue::text(&o.$($field).+),
                                leader: FlagValue::text(&v),
                            });
                        }
                        o.$($field).+ = v;
                    }
                )*
                let known = [$($flag),*];
                let unknown = self.0.keys().filter(|k| !known.contains(&k.as_str())).cloned().collect();
                differ.sort_by(|a, b| a.flag.cmp(&b.flag));
                (o, differ.into_iter().chain(unknown_differences(&self.0, unknown)).collect())
            }
        }
    };
}

published! {
    default_create_vap_for_templates = "default-create-vap-for-templates",
    default_create_vap_binding_for_constraints = "default-create-vap-binding-for-constraints",
    default_failure_policy = "default-failure-policy",
    binding_wait = "binding-wait",
    policy_shape = "policy-shape",
    // The Lease's namespace is among them: a copy exempts its own.
    exemptions.namespaces = "exempt-namespace",
    exemptions.prefixes = "exempt-namespace-prefix",
    exemptions.suffixes = "exempt-namespace-suffix",
    gatekeeper_namespace = "gatekeeper-namespace",
    // The flags' own names, without the Lease's namespace: what Gatekeeper's shapes exempt.
    exemptions.flagged = "exempt-namespace-flagged",
    webhook_configuration_name = "validating-webhook-configuration-name",
    emit_admission_audit_annotations = "emit-admission-audit-annotations",
}

/// The generation flags a copy acts on: flag name (without `--`) → value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings(pub BTreeMap<String, String>);

/// A flag whose value here is not the leader's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Difference {
    pub flag: String,
    /// The value here; empty for a flag this copy does not know.
    pub local: String,
    pub leader: String,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.local.is_empty() {
            write!(
                f,
                "--{} {} on the leader (not known here, not applied)",
                self.flag, self.leader
            )
        } else {
            write!(
                f,
                "--{} {} (leader: {}) — judged by the leader's",
                self.flag, self.local, self.leader
            )
        }
    }
}

fn unknown_differences(all: &BTreeMap<String, String>, unknown: Vec<String>) -> Vec<Difference> {
    unknown
        .into_iter()
        .map(|flag| Difference {
            leader: all.get(&flag).cloned().unwrap_or_default(),
            local: String::new(),
            flag,
        })
        .collect()
}

/// Whose settings a view judged by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "source")]
pub enum Judged {
    /// The leader's, as it published them.
    Leader {
        holder: String,
        /// Local flags that differ from the leader's (not used).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        differences: Vec<Difference>,
        /// Flags typed on this command line that replace the leader's (`plan --policy-shape
        /// inline`): what is shown is a preview of that change, not what the leader writes.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        preview: Vec<Difference>,
    },
    /// This copy's own flags: no copy leads (or the leader publishes none, or the Lease
    /// cannot be read), and why.
    Local { why: String },
}

impl Judged {
    /// One line for people: `settings: the leader's (HOLDER)`, then each differing flag.
    pub fn lines(&self) -> Vec<String> {
        match self {
            Judged::Leader {
                holder,
                differences,
                preview,
            } if preview.is_empty() => {
                std::iter::once(format!("settings: the leader's ({holder})"))
                    .chain(differences.iter().map(|d| format!("  {d}")))
                    .collect()
            }
            Judged::Leader {
                holder,
                differences,
                preview,
            } => {
                let first = format!(
                    "settings: the leader's ({holder}) with this command line's flags below: a PREVIEW of that change, not what the leader writes"
                );
                let previewed = preview.iter().map(|d| {
                    format!(
                        "  --{} {} (leader: {}) — previewed",
                        d.flag, d.local, d.leader
                    )
                });
                let rest = differences.iter().map(|d| format!("  {d}"));
                std::iter::once(first)
                    .chain(previewed)
                    .chain(rest)
                    .collect()
            }
            Judged::Local { why } => vec![format!("settings: local flags ({why})")],
        }
    }
}

/// The options to judge by: the leader's when `leader` (holder, what it published) is given,
/// otherwise `local`, with `why` there is no leader's.
pub fn judge(
    local: &Options,
    leader: Option<(&str, &Settings)>,
    why_local: &str,
) -> (Options, Judged) {
    match leader {
        Some((holder, settings)) => {
            let (options, differences) = settings.overlay(local);
            (
                options,
                Judged::Leader {
                    holder: holder.to_string(),
                    differences,
                    preview: Vec::new(),
                },
            )
        }
        None => (
            local.clone(),
            Judged::Local {
                why: why_local.to_string(),
            },
        ),
    }
}

/// The leader's settings with `typed` (flags given on this command line, without `--`) taken
/// from `local` instead: what the cluster would look like if the leader ran with them (`plan
/// --policy-shape inline` beside a leader that runs `auto`).
pub fn preview(
    local: &Options,
    holder: &str,
    settings: &Settings,
    typed: &[String],
) -> (Options, Judged) {
    let mut theirs = settings.clone();
    theirs.0.retain(|flag, _| !typed.contains(flag));
    let (options, differences) = theirs.overlay(local);
    let (_, all) = settings.overlay(local);
    let preview = all
        .into_iter()
        .filter(|d| typed.contains(&d.flag))
        .collect();
    let judged = Judged::Leader {
        holder: holder.to_string(),
        differences,
        preview,
    };
    (options, judged)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> Options {
        crate::core::options::testing::options()
    }

    /// `plan --policy-shape inline` beside a leader that runs `narrowed` with `--binding-wait
    /// 0s`: the typed flag is this command line's (a preview, said so), the rest the leader's.
    #[test]
    fn a_typed_flag_previews_a_change_over_the_leaders_settings() {
        use crate::core::PolicyShape;
        let leader = Options {
            policy_shape: PolicyShape::Narrowed,
            binding_wait: Duration::ZERO,
            ..options()
        };
        let local = Options {
            policy_shape: PolicyShape::Inline,
            ..options()
        };
        let typed = ["policy-shape".to_string()];
        let (opts, how) = preview(&local, "leader-1", &Settings::of(&leader), &typed);
        assert_eq!(opts.policy_shape, PolicyShape::Inline, "the typed flag");
        assert_eq!(opts.binding_wait, Duration::ZERO, "the leader's");
        let lines = how.lines();
        assert!(lines[0].contains("PREVIEW"), "{lines:?}");
        assert_eq!(
            lines[1],
            "  --policy-shape inline (leader: narrowed) — previewed"
        );
        assert_eq!(
            lines[2],
            "  --binding-wait 30s (leader: 0s) — judged by the leader's"
        );
        // Nothing typed: the leader's settings as before.
        let (opts, how) = preview(&local, "leader-1", &Settings::of(&leader), &[]);
        assert_eq!(opts.policy_shape, PolicyShape::Narrowed);
        assert!(!how.lines()[0].contains("PREVIEW"));
    }

    #[test]
    fn the_leaders_values_replace_the_local_ones_and_each_difference_is_named() {
        let leader = Options {
            default_failure_policy: FailurePolicy::Ignore,
            binding_wait: Duration::ZERO,
            ..options()
        };
        let published = Settings::of(&leader);
        assert_eq!(published.0["default-failure-policy"], "Ignore");
        assert_eq!(published.0["binding-wait"], "0s");
        let wire = serde_json::to_string(&published).expect("serializes");
        let read: Settings = serde_json::from_str(&wire).expect("reads back");
        let (judged, how) = judge(&options(), Some(("leader-1", &read)), "");
        assert_eq!(judged.default_failure_policy, FailurePolicy::Ignore);
        assert_eq!(judged.binding_wait, Duration::ZERO);
        assert_eq!(
            how.lines(),
            [
                "settings: the leader's (leader-1)",
                "  --binding-wait 30s (leader: 0s) — judged by the leader's",
                "  --default-failure-policy Fail (leader: Ignore) — judged by the leader's",
            ]
        );
    }

    #[test]
    fn unknown_and_unreadable_values_are_shown_not_applied() {
        let mut s = Settings::of(&options());
        s.0.insert("binding-wait".into(), "soon".into());
        s.0.insert("a-future-flag".into(), "x".into());
        let (judged, how) = judge(&options(), Some(("l", &s)), "");
        assert_eq!(judged.binding_wait, Duration::from_secs(30));
        let Judged::Leader { differences, .. } = how else {
            panic!("the leader's")
        };
        assert_eq!(differences.len(), 1, "{differences:?}");
        assert!(differences[0].to_string().contains("not known here"));
    }

    #[test]
    fn durations_read_back_as_written() {
        for d in [0, 1500, 30_000, 90_000] {
            let d = Duration::from_millis(d);
            assert_eq!(<Duration as FlagValue>::parse(&d.text()), Some(d));
        }
        assert_eq!(
            <Duration as FlagValue>::parse("2m"),
            Some(Duration::from_secs(120))
        );
        assert_eq!(<Duration as FlagValue>::parse("2"), None);
    }
}
