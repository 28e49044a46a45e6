//! `kubectl vap help [TOPIC|COMMAND]`: what a user of the plugin needs to know, in the binary
//! (a krew install has no docs/ folder). Errors point here (`kubectl vap help rbac`), never to
//! a file of the repository.

use super::exit::{Exit, TABLE};

/// A topic: its name, one line for the list, and its text.
pub struct Topic {
    pub name: &'static str,
    pub summary: &'static str,
    pub text: &'static str,
}

/// Every topic, in the order `kubectl vap help` lists them.
pub const TOPICS: &[Topic] = &[
    Topic {
        name: "prerequisites",
        summary: "what must be true before `kubectl vap run`, and how to check it",
        text: PREREQUISITES,
    },
    Topic {
        name: "gatekeeper",
        summary: "switching Gatekeeper's own VAP generator off (or --take-over)",
        text: GATEKEEPER,
    },
    Topic {
        name: "rbac",
        summary: "what `install --print` grants, the operator's role, and the guard policy",
        text: RBAC,
    },
    Topic {
        name: "exit-codes",
        summary: "the exit codes every command follows",
        text: TABLE,
    },
];

const PREREQUISITES: &str = "\
Before `kubectl vap run` (or `install --print | kubectl apply -f -`), on the cluster:

1. Gatekeeper's ConstraintTemplate CRD is installed (Gatekeeper itself, or its chart's CRDs).
   Check: kubectl get crd constrainttemplates.templates.gatekeeper.sh
   Without it nothing can be judged: `check` and `plan` exit 2 saying so.

2. Gatekeeper's own generate operation is off, so that one generator writes the constraint
   CRDs, VAPs and bindings (two would fight). `run` refuses to write while it looks active.
   Check: kubectl -n gatekeeper-system get deploy -o yaml | grep -e '--operation'
   No container may list `--operation=generate`, and every Gatekeeper container needs explicit
   --operation flags (without any, Gatekeeper runs every operation, generate included).
   How to switch it off: kubectl vap help gatekeeper

3. The API server serves ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1:
   Kubernetes 1.30 or later).
   Check: kubectl api-resources --api-group=admissionregistration.k8s.io
   Without it every command that connects (and the TUI) exits 2 saying so.

4. The Lease's namespace exists (--lease-namespace, default gatekeeper-system).
   Check: kubectl get namespace gatekeeper-system

5. Whoever runs it has the rights of `install --print` (kubectl vap help rbac). Without one,
   `run` says once what it lacks and exits 2 after its first attempt; --wait-for-access (and
   --in-cluster, always) keeps it up, unready, until it is granted.

Then `kubectl vap check` on the cluster lists what `run` would fix, and `kubectl vap plan`
the writes it would make.
";

const GATEKEEPER: &str = "\
kubectl-vap writes what Gatekeeper's generate operation wrote: constraint CRDs, VAPs and
bindings. With both writing, they fight over the same objects, so `run` refuses to write while
Gatekeeper's generator looks active (a Deployment whose container runs --operation=generate,
or no --operation flag at all).

To switch it off:
  Helm:   --set audit.disableGenerateOperation=true
          and keep controllerManager.disableGenerateOperation=true
  Plain manifests: remove --operation=generate from the gatekeeper-audit container, and give
          every Gatekeeper container explicit --operation flags.

To write anyway (you switch Gatekeeper's generator off yourself, or take over from it):
  kubectl vap run --take-over

What kubectl-vap writes, and its names (--policy-shape, default auto): a template of at most 10
constraints gets one VAP per constraint, gatekeeper-<template>.<constraint>, its parameters in
its CEL, and a template without constraints none; beyond 10 constraints one VAP per template,
gatekeeper-<template>, with the constraints as params. Bindings are
gatekeeper-<template>-<constraint>. Gatekeeper wrote gatekeeper-<template> only: dashboards,
alerts on the API server's apiserver_validating_admission_policy_* metrics and scripts keyed on
that name want --policy-shape narrowed (one VAP per template) or gatekeeper (Gatekeeper's
objects byte for byte).
";

const RBAC: &str = "\
`kubectl vap install --print` prints what the in-cluster reconciler needs, and no more:

- ClusterRole kubectl-vap: list/watch templates, constraints (get too: the API server asks it
  of whoever writes a VAP with a paramKind) and Gatekeeper's Config; create/update/delete of
  CRDs, VAPs and bindings.
- Role kubectl-vap-lease in its namespace: its Lease and the requests ConfigMap by name
  (get/list/watch/update, patch), create of Leases and ConfigMaps (a create cannot be narrowed
  to a name), and Events. Role kubectl-vap-events in `default`: Events about templates.
  Role kubectl-vap-status in gatekeeper-system: Gatekeeper's pod statuses (list, create,
  patch, delete), where kubectl-vap says what it generated for each template and constraint,
  and list Deployments there only (to see whether Gatekeeper's generator runs).
- ValidatingAdmissionPolicy kubectl-vap-guard and its binding: RBAC cannot name the objects
  the reconciler writes in advance, so this policy confines the service account's writes:
  CRDs only of the group constraints.gatekeeper.sh; Leases and ConfigMaps in its namespace only
  by their names; pod statuses only those labelled internal.gatekeeper.sh/pod=kubectl-vap. Kubernetes evaluates no admission policy on VAPs and bindings themselves (so
  that a policy cannot lock out the admission chain): those stay confined by RBAC alone.
- ClusterRole kubectl-vap-operator: what a person at the TUI needs wherever the reconciler
  runs: read everything it shows, the Lease and Events, and ask the leader through the
  requests ConfigMap. Bind it:
    kubectl create clusterrolebinding vap-operator-alice \\
      --clusterrole=kubectl-vap-operator --user=alice

A command that reports `forbidden: cannot list/watch X` needs the rule for X from one of
these roles: the reconciler's (kubectl-vap) to reconcile, the operator's to look.
";

/// `kubectl vap help` and `kubectl vap help TOPIC`: a topic's text, a command's help, or the
/// list of both; an unknown name is a usage error that lists them.
pub fn help(topic: Option<&str>) -> anyhow::Result<Exit> {
    let mut cli = super::args::Cli::clap_command();
    // Built, subcommands know their full name (`kubectl vap check`) for their usage line.
    cli.build();
    let text = match topic {
        None => format!("{}\n{}", cli.render_long_help(), topic_list()),
        Some(name) => match TOPICS.iter().find(|t| t.name == name) {
            Some(t) => format!("{}\n", t.text.trim_end()),
            None => match cli.find_subcommand_mut(name) {
                Some(sub) => sub.render_long_help().to_string(),
                None => {
                    return Err(super::exit::usage(format!(
                        "no help topic or command {name:?}\n{}",
                        topic_list()
                    )));
                }
            },
        },
    };
    super::stdio::stdout(&text)?;
    Ok(Exit::Clean)
}

/// The topics, one a line.
fn topic_list() -> String {
    let mut out = String::from("Help topics (kubectl vap help TOPIC):\n");
    for t in TOPICS {
        out.push_str(&format!("  {:<14} {}\n", t.name, t.summary));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every topic has text and a unique name that is not also a command's (which `help NAME`
    /// would then hide).
    #[test]
    fn topics_are_unique_and_not_commands() {
        let cli = super::super::args::Cli::clap_command();
        let mut names: Vec<&str> = TOPICS.iter().map(|t| t.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), TOPICS.len());
        for t in TOPICS {
            assert!(!t.text.trim().is_empty(), "{}", t.name);
            assert!(
                cli.get_subcommands().all(|c| c.get_name() != t.name),
                "{} is a command",
                t.name
            );
            assert!(topic_list().contains(t.name));
        }
    }
}
