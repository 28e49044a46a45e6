//! Shell completion, two ways:
//!
//! - `kubectl vap completion SHELL` prints clap's static script for the `kubectl-vap`
//!   executable (subcommands, flags, and the values clap knows: `-o`, `--policy-shape`, …).
//! - `kubectl-vap __complete WORDS…` answers kubectl's plugin completion (kubectl ≥ 1.26 runs
//!   `kubectl_complete-vap WORDS…` for `kubectl vap <TAB>`, the words after `vap`, the last one
//!   being typed; the krew archive's `kubectl_complete-vap` script execs this). The answer is cobra's: one candidate a line
//!   (`value<TAB>description`), then `:DIRECTIVE`. Besides subcommands and flags it completes
//!   names only a cluster or the kubeconfig knows: templates, constraints (`Kind/name`) and
//!   `--context`/`--cluster`/`--user`.

use super::args::Cli;
use crate::cluster::client::ConnectionOptions;
use std::time::Duration;

/// The hidden first argument kubectl's plugin completion passes.
pub const COMPLETE: &str = "__complete";

/// cobra's ShellCompDirective bits that we use.
const DEFAULT: u32 = 0; // the shell may fall back to file names
const NO_FILE: u32 = 4;

/// A cluster that does not answer at once must not hang the user's shell: completion gives up
/// on names rather than wait for `--request-timeout`'s minute.
const CLUSTER_BOUND: Duration = Duration::from_secs(3);

/// `kubectl vap completion SHELL`: clap's script for `kubectl-vap`.
pub fn print_script(shell: clap_complete::Shell) -> anyhow::Result<super::exit::Exit> {
    // The script completes the executable a shell runs (`kubectl-vap`); `kubectl vap` is
    // kubectl's to complete, and it asks `kubectl_complete-vap`.
    let mut cmd = renamed(Cli::clap_command(), "kubectl-vap", shell);
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "kubectl-vap", &mut out);
    super::stdio::stdout(&String::from_utf8_lossy(&out))?;
    Ok(super::exit::Exit::Clean)
}

/// `cmd` under the executable's name, its subcommands under the name of the bash function
/// clap_complete writes for it (`kubectl__vap`): clap_complete 4.6 names a subcommand's branch
/// from the subcommand's bin name with every `-` doubled, but dispatches to it from the
/// top-level name with `-` as `__`; for a bin name with a `-` (ours) the two differ and bash
/// completes no subcommand's flags. The other shells show the names: they get them as typed.
fn renamed(cmd: clap::Command, bin: &str, shell: clap_complete::Shell) -> clap::Command {
    fn subs(cmd: clap::Command, prefix: &str) -> clap::Command {
        let names: Vec<String> = cmd
            .get_subcommands()
            .map(|s| s.get_name().to_string())
            .collect();
        let mut cmd = cmd;
        for name in names {
            let bin = format!("{prefix} {name}");
            cmd = cmd.mut_subcommand(&name, |s| subs(s.bin_name(&bin), &bin));
        }
        cmd
    }
    let prefix = match shell {
        clap_complete::Shell::Bash => bin.replace('-', "__"),
        _ => bin.to_string(),
    };
    subs(cmd.bin_name(bin), &prefix)
}

/// One candidate: the word, and what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub value: String,
    pub help: Option<String>,
}

/// What `__complete WORDS…` answers: the candidates and cobra's directive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub candidates: Vec<Candidate>,
    pub directive: u32,
}

impl Answer {
    /// cobra's wire format.
    pub fn to_cobra(&self) -> String {
        let mut out = String::new();
        for c in &self.candidates {
            out.push_str(&c.value);
            if let Some(h) = c.help.as_deref().filter(|h| !h.is_empty()) {
                out.push('\t');
                out.push_str(h);
            }
            out.push('\n');
        }
        out.push_str(&format!(":{}\n", self.directive));
        out
    }
}

/// Names only a cluster or the kubeconfig knows, looked up on demand.
pub trait Names {
    fn contexts(&self, conn: &ConnectionOptions) -> Vec<String>;
    fn clusters(&self, conn: &ConnectionOptions) -> Vec<String>;
    fn users(&self, conn: &ConnectionOptions) -> Vec<String>;
    /// ConstraintTemplate names, and constraints as `Kind/name`.
    fn templates_and_constraints(&self, conn: &ConnectionOptions) -> (Vec<String>, Vec<String>);
}

/// What a positional argument names.
enum Positional {
    Template,
    TemplateOrConstraint,
    Other,
}

fn positional_kind(command: &str, arg: &clap::Arg) -> Positional {
    match (command, arg.get_id().as_str()) {
        ("replay" | "reconcile", "template") => Positional::Template,
        ("audit", "target") | ("render", "names") => Positional::TemplateOrConstraint,
        _ => Positional::Other,
    }
}

/// The candidates for the last of `words` (the word being typed, maybe empty), the words before
/// it read as clap reads them.
pub fn answer(words: &[String], names: &dyn Names) -> Answer {
    let mut root = Cli::clap_command();
    root.build();
    let (typed, before) = match words.split_last() {
        Some((last, rest)) => (last.as_str(), rest),
        None => ("", &[][..]),
    };
    let mut node = &root;
    let mut pending: Option<&clap::Arg> = None;
    let mut positionals = 0usize;
    let mut only_positionals = false;
    let mut conn = ConnectionOptions::default();
    for w in before {
        if let Some(arg) = pending.take() {
            remember(&mut conn, arg.get_id().as_str(), w);
            continue;
        }
        if !only_positionals && w == "--" {
            only_positionals = true;
        } else if !only_positionals && let Some(long) = w.strip_prefix("--") {
            let (name, value) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (long, None),
            };
            if let Some(arg) = find_long(node, name) {
                match value {
                    Some(v) => remember(&mut conn, arg.get_id().as_str(), v),
                    None if takes_value(arg) => pending = Some(arg),
                    None => {}
                }
            }
        } else if !only_positionals && w.len() > 1 && w.starts_with('-') {
            let short = w.chars().nth(1);
            if let Some(arg) = node.get_arguments().find(|a| a.get_short() == short)
                && takes_value(arg)
                && w.chars().count() == 2
            {
                pending = Some(arg);
            }
        } else if positionals == 0
            && let Some(sub) = node.find_subcommand(w)
        {
            node = sub;
        } else {
            positionals += 1;
        }
    }
    if let Some(arg) = pending {
        return values(node, arg, typed, "", &conn, names);
    }
    if !only_positionals
        && let Some(long) = typed.strip_prefix("--")
        && let Some((name, value)) = long.split_once('=')
    {
        return match find_long(node, name) {
            Some(arg) => values(node, arg, value, &format!("--{name}="), &conn, names),
            None => nothing(),
        };
    }
    if !only_positionals && typed.starts_with('-') {
        let mut candidates: Vec<Candidate> = node
            .get_arguments()
            .filter(|a| !a.is_hide_set() && !a.is_positional())
            .filter_map(|a| {
                a.get_long().map(|l| Candidate {
                    value: format!("--{l}"),
                    help: a.get_help().map(|h| first_line(&h.to_string())),
                })
            })
            .filter(|c| c.value.starts_with(typed))
            .collect();
        candidates.sort_by(|a, b| a.value.cmp(&b.value));
        return Answer {
            candidates,
            directive: NO_FILE,
        };
    }
    let mut candidates = Vec::new();
    if positionals == 0 {
        candidates.extend(
            node.get_subcommands()
                .filter(|s| !s.is_hide_set() && s.get_name().starts_with(typed))
                .map(|s| Candidate {
                    value: s.get_name().to_string(),
                    help: s.get_about().map(|h| first_line(&h.to_string())),
                }),
        );
    }
    let positional = node
        .get_arguments()
        .filter(|a| a.is_positional())
        .nth(positionals)
        .or_else(|| {
            // A repeatable positional (render's NAMES) takes every later word too.
            node.get_arguments()
                .filter(|a| a.is_positional())
                .last()
                .filter(|a| a.get_num_args().is_some_and(|n| n.max_values() > 1))
        });
    if let Some(arg) = positional {
        let more = values(node, arg, typed, "", &conn, names);
        candidates.extend(more.candidates);
    }
    Answer {
        candidates,
        directive: NO_FILE,
    }
}

fn nothing() -> Answer {
    Answer {
        candidates: Vec::new(),
        directive: NO_FILE,
    }
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or_default().to_string()
}

fn find_long<'a>(node: &'a clap::Command, name: &str) -> Option<&'a clap::Arg> {
    node.get_arguments().find(|a| {
        a.get_long() == Some(name)
            || a.get_all_aliases()
                .is_some_and(|aliases| aliases.contains(&name))
    })
}

fn takes_value(arg: &clap::Arg) -> bool {
    arg.get_num_args()
        .is_some_and(|n| n.takes_values() && n.min_values() > 0)
}

/// The connection flags typed so far decide which kubeconfig and cluster names come from.
fn remember(conn: &mut ConnectionOptions, id: &str, value: &str) {
    let v = Some(value.to_string());
    match id {
        "kubeconfig" => conn.kubeconfig = v,
        "context" => conn.context = v,
        "cluster" => conn.cluster = v,
        "user" => conn.user = v,
        "server" => conn.server = v,
        "token" => conn.token = v,
        "certificate_authority" => conn.certificate_authority = v,
        "insecure_skip_tls_verify" => conn.insecure_skip_tls_verify = value != "false",
        "as_user" => conn.as_user = v,
        _ => {}
    }
}

/// The values `arg` can take that start with `typed`, each written after `prefix`.
fn values(
    node: &clap::Command,
    arg: &clap::Arg,
    typed: &str,
    prefix: &str,
    conn: &ConnectionOptions,
    names: &dyn Names,
) -> Answer {
    let plain = |list: Vec<String>| Answer {
        candidates: list
            .into_iter()
            .filter(|n| n.starts_with(typed))
            .map(|n| Candidate {
                value: format!("{prefix}{n}"),
                help: None,
            })
            .collect(),
        directive: NO_FILE,
    };
    match arg.get_id().as_str() {
        "context" => return plain(names.contexts(conn)),
        "cluster" => return plain(names.clusters(conn)),
        "user" => return plain(names.users(conn)),
        _ => {}
    }
    let possible = arg.get_possible_values();
    if !possible.is_empty() {
        return Answer {
            candidates: possible
                .iter()
                .filter(|p| !p.is_hide_set() && p.get_name().starts_with(typed))
                .map(|p| Candidate {
                    value: format!("{prefix}{}", p.get_name()),
                    help: p.get_help().map(|h| first_line(&h.to_string())),
                })
                .collect(),
            directive: NO_FILE,
        };
    }
    match positional_kind(node.get_name(), arg) {
        Positional::Template => plain(names.templates_and_constraints(conn).0),
        Positional::TemplateOrConstraint => {
            let (mut all, constraints) = names.templates_and_constraints(conn);
            all.extend(constraints);
            plain(all)
        }
        Positional::Other => {
            let files = matches!(
                arg.get_value_names()
                    .and_then(|v| v.first())
                    .map(|n| n.as_str()),
                Some("PATH" | "FILE" | "DIR")
            );
            Answer {
                candidates: Vec::new(),
                directive: if files { DEFAULT } else { NO_FILE },
            }
        }
    }
}

/// The kubeconfig and the cluster, as the command being completed would reach them.
pub struct Live;

impl Live {
    fn kubeconfig(conn: &ConnectionOptions) -> Option<kube::config::Kubeconfig> {
        match conn.kubeconfig.as_deref().filter(|k| !k.is_empty()) {
            Some(paths) => std::env::split_paths(paths)
                .filter(|p| !p.as_os_str().is_empty())
                .filter_map(|p| kube::config::Kubeconfig::read_from(p).ok())
                .reduce(|a, b| a.clone().merge(b).unwrap_or(a)),
            None => kube::config::Kubeconfig::read().ok(),
        }
    }
}

impl Names for Live {
    fn contexts(&self, conn: &ConnectionOptions) -> Vec<String> {
        sorted(Self::kubeconfig(conn).map(|k| k.contexts.into_iter().map(|c| c.name).collect()))
    }
    fn clusters(&self, conn: &ConnectionOptions) -> Vec<String> {
        sorted(Self::kubeconfig(conn).map(|k| k.clusters.into_iter().map(|c| c.name).collect()))
    }
    fn users(&self, conn: &ConnectionOptions) -> Vec<String> {
        sorted(Self::kubeconfig(conn).map(|k| k.auth_infos.into_iter().map(|c| c.name).collect()))
    }
    fn templates_and_constraints(&self, conn: &ConnectionOptions) -> (Vec<String>, Vec<String>) {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return Default::default();
        };
        let mut conn = conn.clone();
        conn.request_timeout = Some(CLUSTER_BOUND);
        conn.command = Some("completion".into());
        rt.block_on(async {
            tokio::time::timeout(CLUSTER_BOUND, cluster_names(conn))
                .await
                .unwrap_or_default()
        })
    }
}

fn sorted(names: Option<Vec<String>>) -> Vec<String> {
    let mut names = names.unwrap_or_default();
    names.sort();
    names.dedup();
    names
}

/// Template names and `Kind/name` of every constraint of their kinds; what cannot be read is
/// left out (completion says nothing rather than an error in the middle of a command line).
async fn cluster_names(conn: ConnectionOptions) -> (Vec<String>, Vec<String>) {
    use kube::api::{Api, DynamicObject, ListParams};
    let Ok(client) = crate::cluster::client::client_from(&conn, false).await else {
        return Default::default();
    };
    let ar = crate::cluster::discovery::templates_resource();
    let templates: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let Ok(list) = templates.list(&ListParams::default()).await else {
        return Default::default();
    };
    let mut template_names = Vec::new();
    let mut kinds = Vec::new();
    for t in &list.items {
        if let Some(name) = &t.metadata.name {
            template_names.push(name.clone());
        }
        let kind = t.data["spec"]["crd"]["spec"]["names"]["kind"].as_str();
        if let Some(kind) = kind {
            kinds.push(kind.to_string());
        }
    }
    // Gatekeeper names a constraint CRD's plural after the kind in lower case.
    let lists = kinds.iter().map(|kind| {
        let ar = crate::cluster::discovery::constraint_resource(kind, &kind.to_lowercase());
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        async move {
            api.list(&ListParams::default())
                .await
                .map(|l| {
                    l.items
                        .into_iter()
                        .filter_map(|c| c.metadata.name.map(|n| format!("{kind}/{n}")))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        }
    });
    let constraints = futures::future::join_all(lists)
        .await
        .into_iter()
        .flatten()
        .collect();
    (sorted(Some(template_names)), sorted(Some(constraints)))
}

/// `kubectl-vap __complete WORDS…`: the answer on stdout, always exit 0 (a shell shows
/// nothing rather than an error while a user types).
pub fn kubectl_complete(words: &[String]) -> std::process::ExitCode {
    let answer = answer(words, &Live);
    let _ = super::stdio::stdout(&answer.to_cobra());
    std::process::ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed;
    impl Names for Fixed {
        fn contexts(&self, _: &ConnectionOptions) -> Vec<String> {
            vec!["kind-a".into(), "prod".into()]
        }
        fn clusters(&self, _: &ConnectionOptions) -> Vec<String> {
            vec!["c1".into()]
        }
        fn users(&self, _: &ConnectionOptions) -> Vec<String> {
            vec!["u1".into()]
        }
        fn templates_and_constraints(&self, _: &ConnectionOptions) -> (Vec<String>, Vec<String>) {
            (
                vec!["k8srequiredlabels".into()],
                vec!["K8sRequiredLabels/must-have-owner".into()],
            )
        }
    }

    fn values_of(words: &[&str]) -> Vec<String> {
        let words: Vec<String> = words.iter().map(|w| w.to_string()).collect();
        answer(&words, &Fixed)
            .candidates
            .into_iter()
            .map(|c| c.value)
            .collect()
    }

    #[test]
    fn subcommands_flags_values_and_names() {
        let top = values_of(&[""]);
        for sub in ["check", "plan", "audit", "completion", "replay"] {
            assert!(top.contains(&sub.to_string()), "{sub} in {top:?}");
        }
        assert!(!top.iter().any(|s| s.starts_with("__")), "{top:?}");
        assert_eq!(values_of(&["ch"]), ["check"]);
        assert!(values_of(&["check", "--ou"]).contains(&"--output".to_string()));
        assert_eq!(values_of(&["check", "-o", "ya"]), ["yaml"]);
        assert_eq!(values_of(&["check", "--output=j"]), ["--output=json"]);
        assert_eq!(values_of(&["check", "--context", "k"]), ["kind-a"]);
        assert_eq!(values_of(&["--context", ""]), ["kind-a", "prod"]);
        assert_eq!(values_of(&["replay", "k8s"]), ["k8srequiredlabels"]);
        assert_eq!(
            values_of(&["audit", "--context", "prod", "K8s"]),
            ["K8sRequiredLabels/must-have-owner"]
        );
        assert_eq!(
            values_of(&["completion", ""]),
            ["bash", "elvish", "fish", "powershell", "zsh"]
        );
        let words = ["check".to_string(), "-f".to_string(), String::new()];
        assert_eq!(answer(&words, &Fixed).directive, DEFAULT, "files after -f");
    }

    #[test]
    fn cobra_format() {
        let a = Answer {
            candidates: vec![
                Candidate {
                    value: "check".into(),
                    help: Some("Report".into()),
                },
                Candidate {
                    value: "plan".into(),
                    help: None,
                },
            ],
            directive: NO_FILE,
        };
        assert_eq!(a.to_cobra(), "check\tReport\nplan\n:4\n");
    }
}
