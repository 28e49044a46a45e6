//! The kubeconfig's contexts, for the header and `:ctx`: read the way the client reads the
//! kubeconfig (`--kubeconfig`, else `KUBECONFIG`, else `~/.kube/config`; several files merged
//! as kubectl merges them). Reading is IO: the live source does it on its task, never the UI loop.

use crate::cluster::client::ConnectionOptions;
use kube::config::Kubeconfig;

/// What `:ctx` offers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Contexts {
    /// Every context by name, sorted.
    pub names: Vec<String>,
    /// The one in use: `--context`, else the kubeconfig's `current-context`.
    pub current: Option<String>,
}

/// The contexts of the kubeconfig `conn` names.
pub fn read(conn: &ConnectionOptions) -> Result<Contexts, String> {
    let kubeconfig = match conn.kubeconfig.as_deref().filter(|k| !k.is_empty()) {
        Some(paths) => {
            let mut merged: Option<Kubeconfig> = None;
            for path in std::env::split_paths(paths).filter(|p| !p.as_os_str().is_empty()) {
                let next =
                    Kubeconfig::read_from(&path).map_err(|e| format!("{}: {e}", path.display()))?;
                merged = Some(match merged {
                    None => next,
                    Some(m) => m.merge(next).map_err(|e| e.to_string())?,
                });
            }
            merged.ok_or_else(|| "--kubeconfig is empty".to_string())?
        }
        None => Kubeconfig::read().map_err(|e| e.to_string())?,
    };
    Ok(of(&kubeconfig, conn.context.as_deref()))
}

/// The contexts of a parsed kubeconfig; `chosen` (`--context`) wins over `current-context`.
pub fn of(kubeconfig: &Kubeconfig, chosen: Option<&str>) -> Contexts {
    let mut names: Vec<String> = kubeconfig.contexts.iter().map(|c| c.name.clone()).collect();
    names.sort();
    names.dedup();
    Contexts {
        names,
        current: chosen
            .map(str::to_string)
            .or_else(|| kubeconfig.current_context.clone()),
    }
}

/// The connection to context `name`: the context decides the cluster and user, so overrides
/// of those (`--cluster`, `--user`, `--server`, `--token`, …) no longer apply; impersonation
/// and timeouts stay.
pub fn switched(conn: &ConnectionOptions, name: &str) -> ConnectionOptions {
    conn.with_context(name)
}

/// The contexts that `typed` could mean (prefix first, then substring), for completion and
/// for "did you mean".
pub fn matches<'a>(names: &'a [String], typed: &str) -> Vec<&'a str> {
    let mut out: Vec<&str> = names
        .iter()
        .filter(|n| n.starts_with(typed))
        .map(String::as_str)
        .collect();
    out.extend(
        names
            .iter()
            .filter(|n| !n.starts_with(typed) && n.contains(typed))
            .map(String::as_str),
    );
    out
}

/// What tab completes `typed` to: the longest prefix the contexts starting with it share.
pub fn complete(names: &[String], typed: &str) -> Option<String> {
    let mut starting = names.iter().filter(|n| n.starts_with(typed));
    let first = starting.next()?;
    let mut common = first.clone();
    for n in starting {
        let shared = common
            .char_indices()
            .zip(n.chars())
            .find(|((_, a), b)| a != b)
            .map_or(common.len().min(n.len()), |((i, _), _)| i);
        common.truncate(shared);
    }
    (common.len() > typed.len()).then_some(common)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBECONFIG: &str = r#"
apiVersion: v1
kind: Config
current-context: kind-payments
clusters:
- name: c
  cluster: { server: "https://c.example:6443" }
users:
- name: u
  user: { token: t }
contexts:
- name: prod-eu
  context: { cluster: c, user: u }
- name: kind-payments
  context: { cluster: c, user: u }
- name: kind-payroll
  context: { cluster: c, user: u }
"#;

    fn names() -> Vec<String> {
        of(&Kubeconfig::from_yaml(KUBECONFIG).unwrap(), None).names
    }

    #[test]
    fn contexts_are_sorted_and_the_chosen_one_is_current() {
        let kc = Kubeconfig::from_yaml(KUBECONFIG).unwrap();
        let c = of(&kc, None);
        assert_eq!(c.names, ["kind-payments", "kind-payroll", "prod-eu"]);
        assert_eq!(c.current.as_deref(), Some("kind-payments"));
        assert_eq!(of(&kc, Some("prod-eu")).current.as_deref(), Some("prod-eu"));
    }

    #[test]
    fn completion_stops_where_contexts_differ() {
        let n = names();
        assert_eq!(complete(&n, "k").as_deref(), Some("kind-pay"));
        assert_eq!(complete(&n, "kind-paym").as_deref(), Some("kind-payments"));
        assert_eq!(complete(&n, "pr").as_deref(), Some("prod-eu"));
        assert_eq!(complete(&n, "kind-pay"), None, "nothing more to add");
        assert_eq!(complete(&n, "x"), None);
        assert_eq!(matches(&n, "pay"), ["kind-payments", "kind-payroll"]);
        assert_eq!(matches(&n, "kind-payr"), ["kind-payroll"]);
    }

    #[test]
    fn a_switch_drops_cluster_and_user_overrides_only() {
        let conn = ConnectionOptions {
            kubeconfig: Some("/k".into()),
            context: Some("a".into()),
            cluster: Some("c".into()),
            user: Some("u".into()),
            as_user: Some("jane".into()),
            ..ConnectionOptions::default()
        };
        let s = switched(&conn, "b");
        assert_eq!(s.context.as_deref(), Some("b"));
        assert_eq!((s.cluster, s.user), (None, None));
        assert_eq!(s.kubeconfig.as_deref(), Some("/k"));
        assert_eq!(s.as_user.as_deref(), Some("jane"));
    }

    #[test]
    fn several_kubeconfig_files_are_merged() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        std::fs::write(&a, KUBECONFIG).unwrap();
        std::fs::write(
            &b,
            KUBECONFIG
                .replace("kind-payments", "staging")
                .replace("kind-payroll", "dev")
                .replace("prod-eu", "qa"),
        )
        .unwrap();
        let paths = std::env::join_paths([&a, &b]).unwrap();
        let conn = ConnectionOptions {
            kubeconfig: Some(paths.to_string_lossy().into_owned()),
            ..ConnectionOptions::default()
        };
        let c = read(&conn).unwrap();
        assert_eq!(c.names.len(), 6, "{:?}", c.names);
        // The first file's current-context wins, as in kubectl.
        assert_eq!(c.current.as_deref(), Some("kind-payments"));
        let missing = ConnectionOptions {
            kubeconfig: Some(dir.path().join("nope").display().to_string()),
            ..ConnectionOptions::default()
        };
        assert!(read(&missing).unwrap_err().contains("nope"));
    }
}
