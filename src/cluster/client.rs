//! A client from kubectl's connection settings ([`ConnectionOptions`]: `--kubeconfig`,
//! `--context`, `--cluster`, `--user`, `--server`, `--token`, `--certificate-authority`,
//! `--insecure-skip-tls-verify`, `-n`, `--as`, `--request-timeout`) or from the in-cluster
//! service account.
//!
//! The options are the cluster layer's own: `cli` converts its arguments into them
//! (`From<&ConnectionArgs>` lives there), so nothing below `cli` knows about clap. The
//! functions take anything that converts: the options (by reference too) or those arguments.

use super::{ConfigError, KubeError};
use kube::config::{KubeConfigOptions, Kubeconfig};
use std::time::Duration;

/// kubectl's connection settings. Empty means kubectl's default (the current context of
/// `KUBECONFIG` or `~/.kube/config`, no impersonation, no request timeout).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnectionOptions {
    /// Kubeconfig file(s), separated like `PATH` (kubectl merges them).
    pub kubeconfig: Option<String>,
    /// The kubeconfig context to use.
    pub context: Option<String>,
    /// The kubeconfig cluster to use (overrides the context's).
    pub cluster: Option<String>,
    /// The kubeconfig user to use (overrides the context's).
    pub user: Option<String>,
    /// The API server's URL (`--server`): overrides the cluster's; with no kubeconfig at all,
    /// the cluster.
    pub server: Option<String>,
    /// A bearer token (`--token`): replaces the user's credentials.
    pub token: Option<String>,
    /// A CA file to verify the server with (`--certificate-authority`).
    pub certificate_authority: Option<String>,
    /// Do not verify the server's certificate (`--insecure-skip-tls-verify`).
    pub insecure_skip_tls_verify: bool,
    /// The namespace of requests that name none (`-n`; default: the context's, then
    /// `default`).
    pub namespace: Option<String>,
    /// Username to impersonate (`--as`).
    pub as_user: Option<String>,
    /// Groups to impersonate (`--as-group`); needs `as_user`.
    pub as_group: Vec<String>,
    /// Timeout of a single API request (watches excepted); zero or none:
    /// [`DEFAULT_REQUEST_TIMEOUT`].
    pub request_timeout: Option<Duration>,
    /// The kubectl-vap command this connection serves (`run`, `check`, …): said in the
    /// User-Agent, so the API server's audit log tells its requests from kubectl's.
    pub command: Option<String>,
}

/// The bound of a request without `--request-timeout`: the API server's own (it answers 504
/// to a request it could not finish in a minute), so whatever it would still answer is
/// waited for, and a request nobody answers ends. Watches are not bounded by it.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// `kubectl-vap/<version> (<command>)`: the User-Agent of every request.
pub fn user_agent(command: Option<&str>) -> String {
    let version = env!("CARGO_PKG_VERSION");
    match command {
        Some(c) if !c.is_empty() => format!("kubectl-vap/{version} ({c})"),
        _ => format!("kubectl-vap/{version}"),
    }
}

impl ConnectionOptions {
    /// The connection to kubeconfig context `name`: the context decides the cluster, the user
    /// and the namespace, so the flags that override them no longer apply; impersonation and
    /// timeouts stay.
    pub fn with_context(&self, name: &str) -> Self {
        ConnectionOptions {
            context: Some(name.to_string()),
            cluster: None,
            user: None,
            server: None,
            token: None,
            certificate_authority: None,
            insecure_skip_tls_verify: false,
            namespace: None,
            ..self.clone()
        }
    }

    /// Whether a flag overrides what the kubeconfig says of the server or the credentials.
    fn overrides(&self) -> bool {
        self.server.is_some()
            || self.token.is_some()
            || self.certificate_authority.is_some()
            || self.insecure_skip_tls_verify
    }

    /// The same connection as oneself: no impersonation.
    pub fn without_impersonation(&self) -> Self {
        ConnectionOptions {
            as_user: None,
            as_group: Vec::new(),
            ..self.clone()
        }
    }
}

/// So the client functions take `&options` as well as anything else that converts.
impl From<&ConnectionOptions> for ConnectionOptions {
    fn from(o: &ConnectionOptions) -> Self {
        o.clone()
    }
}

/// The client configuration the settings describe.
pub async fn config_from(
    conn: impl Into<ConnectionOptions>,
    in_cluster: bool,
) -> Result<kube::Config, KubeError> {
    let conn: ConnectionOptions = conn.into();
    let mut config = if in_cluster {
        kube::Config::incluster().map_err(KubeError::InCluster)?
    } else {
        let kubeconfig = match conn.kubeconfig.as_deref().filter(|k| !k.is_empty()) {
            // KUBECONFIG may list several files, like kubectl merges them.
            Some(paths) => {
                let mut merged: Option<Kubeconfig> = None;
                for path in std::env::split_paths(paths) {
                    if path.as_os_str().is_empty() {
                        continue;
                    }
                    let next = Kubeconfig::read_from(&path).map_err(|cause| {
                        KubeError::Config(ConfigError::Read {
                            path: path.clone(),
                            cause,
                        })
                    })?;
                    merged = Some(match merged {
                        None => next,
                        Some(m) => m
                            .merge(next)
                            .map_err(|e| KubeError::Config(ConfigError::Kubeconfig(e)))?,
                    });
                }
                merged.ok_or(KubeError::Config(ConfigError::Empty))?
            }
            // kubectl works from flags alone (`--server`): no kubeconfig is then no error.
            None => match Kubeconfig::read() {
                Ok(k) => k,
                Err(_) if conn.server.is_some() => Kubeconfig::default(),
                Err(e) => return Err(KubeError::Config(ConfigError::Default(e))),
            },
        };
        let kubeconfig = with_overrides(kubeconfig, &conn).map_err(KubeError::Config)?;
        if let Some(name) = conn.context.as_deref()
            && !kubeconfig.contexts.iter().any(|c| c.name == name)
        {
            return Err(no_context(name, &kubeconfig));
        }
        let options = KubeConfigOptions {
            context: conn.context.clone(),
            cluster: conn.cluster.clone(),
            user: conn.user.clone(),
        };
        kube::Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .map_err(|e| KubeError::Config(ConfigError::Kubeconfig(e)))?
    };
    if let Some(ns) = conn.namespace.as_ref().filter(|n| !n.is_empty()) {
        config.default_namespace = ns.clone();
    }
    if let Some(user) = &conn.as_user {
        config.auth_info.impersonate = Some(user.clone());
    }
    if !conn.as_group.is_empty() {
        // The API server refuses groups without a user to impersonate; say so first.
        if conn.as_user.is_none() {
            return Err(KubeError::GroupWithoutUser);
        }
        config.auth_info.impersonate_groups = Some(conn.as_group.clone());
    }
    if let Some(timeout) = conn.request_timeout.filter(|t| !t.is_zero()) {
        // kubectl's --request-timeout bounds one request; the whole of it is bounded in
        // `connect` (`deadline`), watches excepted.
        config.connect_timeout = Some(timeout);
        config.write_timeout = Some(timeout);
    }
    // No retries inside the client: each attempt must pass the caller's own checks (the
    // reconciler's fence, before every write), and its backoff and logs see every 429, 503
    // and 504. kube's default would resend a refused write up to 15 times, unseen.
    config.default_retry = false;
    let ua = user_agent(conn.command.as_deref());
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_str(&ua).map_err(|_| KubeError::UserAgent(ua.clone()))?,
    ));
    Ok(config)
}

/// `--context NAME` not in the kubeconfig: kubectl's words, a close name, or where to look.
fn no_context(name: &str, kubeconfig: &Kubeconfig) -> KubeError {
    let known: Vec<&str> = kubeconfig
        .contexts
        .iter()
        .map(|c| c.name.as_str())
        .filter(|n| *n != FROM_FLAGS)
        .collect();
    let close = crate::text::did_you_mean_text(name, &known);
    let hint = if !close.is_empty() {
        close
    } else if known.is_empty() {
        " (the kubeconfig has no contexts: give --kubeconfig, or --server)".to_string()
    } else {
        format!(
            " (the kubeconfig's contexts: {}; kubectl config get-contexts lists them)",
            known.join(", ")
        )
    };
    KubeError::NoContext {
        name: name.to_string(),
        hint,
    }
}

/// What the context, cluster and user of the flags are called when the kubeconfig has none
/// (`--server` alone).
const FROM_FLAGS: &str = "kubectl-vap-flags";

/// `kubeconfig` with `--server`, `--token`, `--certificate-authority` and
/// `--insecure-skip-tls-verify` written into the cluster and user the connection uses, as
/// kubectl's flags override them (the insecure flag drops the CA, as kubectl does; the token
/// replaces the user's other credentials).
fn with_overrides(
    mut kubeconfig: Kubeconfig,
    conn: &ConnectionOptions,
) -> Result<Kubeconfig, ConfigError> {
    use kube::config::{AuthInfo, Cluster, Context, NamedAuthInfo, NamedCluster, NamedContext};
    if !conn.overrides() {
        return Ok(kubeconfig);
    }
    if conn.insecure_skip_tls_verify && conn.certificate_authority.is_some() {
        return Err(ConfigError::InsecureWithCa);
    }
    // No context at all and a server given: the flags make one (kubectl works from flags).
    if conn.context.is_none() && kubeconfig.current_context.is_none() && conn.server.is_some() {
        kubeconfig.contexts.push(NamedContext {
            name: FROM_FLAGS.into(),
            context: Some(Context {
                cluster: FROM_FLAGS.into(),
                ..Context::default()
            }),
            ..NamedContext::default()
        });
        kubeconfig.current_context = Some(FROM_FLAGS.into());
    }
    let context_name = conn
        .context
        .as_ref()
        .or(kubeconfig.current_context.as_ref());
    let Some(context) = kubeconfig
        .contexts
        .iter_mut()
        .find(|c| Some(&c.name) == context_name)
        .and_then(|c| c.context.as_mut())
    else {
        // A context that is not there: kube says so, naming it.
        return Ok(kubeconfig);
    };
    let cluster_name = conn
        .cluster
        .clone()
        .unwrap_or_else(|| context.cluster.clone());
    // A token needs a user to hold it: a context without one gets the flags' user.
    let user_name = conn.user.clone().or_else(|| context.user.clone());
    let user_name = match (&conn.token, user_name) {
        (Some(_), None) => {
            context.user = Some(FROM_FLAGS.into());
            Some(FROM_FLAGS.to_string())
        }
        (_, name) => name,
    };
    if !kubeconfig.clusters.iter().any(|c| c.name == cluster_name) {
        kubeconfig.clusters.push(NamedCluster {
            name: cluster_name.clone(),
            ..NamedCluster::default()
        });
    }
    for named in kubeconfig
        .clusters
        .iter_mut()
        .filter(|c| c.name == cluster_name)
    {
        let cluster = named.cluster.get_or_insert_with(Cluster::default);
        if let Some(server) = &conn.server {
            cluster.server = Some(server.clone());
        }
        if let Some(ca) = &conn.certificate_authority {
            cluster.certificate_authority = Some(ca.clone());
            cluster.certificate_authority_data = None;
            cluster.insecure_skip_tls_verify = None;
        }
        if conn.insecure_skip_tls_verify {
            cluster.insecure_skip_tls_verify = Some(true);
            cluster.certificate_authority = None;
            cluster.certificate_authority_data = None;
        }
    }
    if let (Some(token), Some(user_name)) = (&conn.token, user_name) {
        kubeconfig.auth_infos.retain(|u| u.name != user_name);
        kubeconfig.auth_infos.push(NamedAuthInfo {
            name: user_name,
            auth_info: Some(AuthInfo {
                token: Some(token.clone().into()),
                ..AuthInfo::default()
            }),
            ..NamedAuthInfo::default()
        });
    }
    Ok(kubeconfig)
}

/// The bound of every request but watches, for the settings.
pub fn request_bound(conn: &ConnectionOptions) -> Duration {
    conn.request_timeout
        .filter(|t| !t.is_zero())
        .unwrap_or(DEFAULT_REQUEST_TIMEOUT)
}

/// A client for the settings.
pub async fn client_from(
    conn: impl Into<ConnectionOptions>,
    in_cluster: bool,
) -> Result<kube::Client, KubeError> {
    Ok(connect(conn, in_cluster).await?.0)
}

/// A client for the settings, and the API server's URL (to say where, when it cannot be
/// reached).
pub async fn connect(
    conn: impl Into<ConnectionOptions>,
    in_cluster: bool,
) -> Result<(kube::Client, String), KubeError> {
    let conn: ConnectionOptions = conn.into();
    let limit = request_bound(&conn);
    let config = config_from(&conn, in_cluster).await?;
    let url = config.cluster_url.to_string();
    let client = kube::client::ClientBuilder::try_from(config)
        .map_err(|e| KubeError::Client(Box::new(e)))?
        .with_layer(&super::deadline::BoundLayer { limit })
        .build();
    Ok((client, url.trim_end_matches('/').to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const A: &str = r#"
apiVersion: v1
kind: Config
current-context: a
clusters:
- name: cluster-a
  cluster: { server: "https://a.example:6443", insecure-skip-tls-verify: true }
- name: cluster-c
  cluster: { server: "https://c.example:6443", insecure-skip-tls-verify: true }
users:
- name: user-a
  user: { token: token-a }
contexts:
- name: a
  context: { cluster: cluster-a, user: user-a }
"#;
    const B: &str = r#"
apiVersion: v1
kind: Config
clusters:
- name: cluster-b
  cluster: { server: "https://b.example:6443", insecure-skip-tls-verify: true }
users:
- name: user-b
  user: { token: token-b }
contexts:
- name: b
  context: { cluster: cluster-b, user: user-b }
"#;

    fn files() -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = dir.path().join("a.yaml");
        let b = dir.path().join("b.yaml");
        std::fs::write(&a, A).expect("write");
        std::fs::write(&b, B).expect("write");
        let joined = std::env::join_paths([a, b]).expect("join");
        (dir, joined.to_string_lossy().into_owned())
    }

    fn args(kubeconfig: &str) -> ConnectionOptions {
        ConnectionOptions {
            kubeconfig: Some(kubeconfig.to_string()),
            ..ConnectionOptions::default()
        }
    }

    #[tokio::test]
    async fn kubectl_connection_flags_are_honoured() {
        let (_dir, paths) = files();
        let c = config_from(&args(&paths), false).await.expect("config");
        assert_eq!(c.cluster_url.host(), Some("a.example"), "current-context");

        // A context from the second file of a KUBECONFIG list.
        let mut a = args(&paths);
        a.context = Some("b".into());
        let c = config_from(&a, false).await.expect("config");
        assert_eq!(c.cluster_url.host(), Some("b.example"));

        // --cluster overrides the context's cluster; --as impersonates; --request-timeout.
        let mut a = args(&paths);
        a.cluster = Some("cluster-c".into());
        a.as_user = Some("alice".into());
        a.request_timeout = Some(Duration::from_secs(5));
        let c = config_from(&a, false).await.expect("config");
        assert_eq!(c.cluster_url.host(), Some("c.example"));
        assert_eq!(c.auth_info.impersonate.as_deref(), Some("alice"));
        assert_eq!(c.connect_timeout, Some(Duration::from_secs(5)));
        assert_eq!(c.read_timeout, None, "watches must not be cut");
    }

    /// kubectl's `--server`, `--token`, `--certificate-authority`, `--insecure-skip-tls-verify`
    /// and `-n` override what the kubeconfig says, on the context in use; `--server` works with
    /// no kubeconfig at all.
    #[tokio::test]
    async fn server_token_ca_and_namespace_override_the_kubeconfig() {
        let (dir, paths) = files();
        let ca = dir.path().join("ca.crt");
        std::fs::write(&ca, "not read until a request").expect("write");
        let mut a = args(&paths);
        a.server = Some("https://override.example:7443".into());
        a.token = Some("flag-token".into());
        a.namespace = Some("team".into());
        let c = config_from(&a, false).await.expect("config");
        assert_eq!(c.cluster_url.host(), Some("override.example"));
        assert_eq!(c.cluster_url.port_u16(), Some(7443));
        assert!(c.auth_info.token.is_some(), "the token is the credential");
        assert_eq!(c.default_namespace, "team");
        assert!(c.accept_invalid_certs, "the cluster's own setting stays");

        // On another context: its cluster gets the CA, which replaces "insecure".
        a.context = Some("b".into());
        a.certificate_authority = Some(ca.display().to_string());
        let k = with_overrides(
            Kubeconfig::from_yaml(B).expect("kubeconfig"),
            &ConnectionOptions::from(&a),
        )
        .expect("overrides");
        let cluster = k.clusters[0].cluster.as_ref().expect("cluster");
        assert_eq!(
            cluster.server.as_deref(),
            Some("https://override.example:7443")
        );
        assert_eq!(cluster.certificate_authority.as_deref(), ca.to_str());
        assert_eq!(cluster.insecure_skip_tls_verify, None);

        // The two TLS flags together are refused, as kubectl refuses them.
        a.insecure_skip_tls_verify = true;
        let e = config_from(&a, false).await.expect_err("CA and insecure");
        assert!(e.to_string().contains("--insecure-skip-tls-verify"), "{e}");

        // No kubeconfig at all: the flags are the whole connection.
        let only = ConnectionOptions {
            server: Some("https://flags.example:6443".into()),
            token: Some("t".into()),
            insecure_skip_tls_verify: true,
            ..ConnectionOptions::default()
        };
        let k = with_overrides(Kubeconfig::default(), &only).expect("overrides");
        let c = kube::Config::from_custom_kubeconfig(k, &KubeConfigOptions::default())
            .await
            .expect("a config from flags alone");
        assert_eq!(c.cluster_url.host(), Some("flags.example"));
        assert!(c.accept_invalid_certs);
        assert!(c.auth_info.token.is_some());
        assert_eq!(c.default_namespace, "default");
    }

    /// A `:ctx` switch drops every flag that overrides the context's cluster or user.
    #[test]
    fn another_context_drops_the_overrides() {
        let a = ConnectionOptions {
            kubeconfig: Some("k".into()),
            server: Some("s".into()),
            token: Some("t".into()),
            namespace: Some("n".into()),
            as_user: Some("alice".into()),
            ..ConnectionOptions::default()
        };
        let b = a.with_context("other");
        assert_eq!(
            b,
            ConnectionOptions {
                kubeconfig: Some("k".into()),
                context: Some("other".into()),
                as_user: Some("alice".into()),
                ..ConnectionOptions::default()
            }
        );
    }

    /// Every attempt is the caller's to make (the reconciler's fence is checked before each),
    /// and every request says who sent it.
    #[tokio::test]
    async fn no_client_retries_and_a_user_agent_naming_the_command() {
        let (_dir, paths) = files();
        let mut a = args(&paths);
        a.command = Some("run".into());
        let c = config_from(&a, false).await.expect("config");
        assert!(
            !c.default_retry,
            "kube's retry layer would resend writes unfenced"
        );
        let ua: Vec<_> = c
            .headers
            .iter()
            .filter(|(k, _)| k == http::header::USER_AGENT)
            .map(|(_, v)| v.to_str().expect("ascii"))
            .collect();
        assert_eq!(
            ua,
            [format!("kubectl-vap/{} (run)", env!("CARGO_PKG_VERSION"))]
        );
        assert_eq!(request_bound(&a), DEFAULT_REQUEST_TIMEOUT);
        a.request_timeout = Some(Duration::from_secs(3));
        assert_eq!(request_bound(&a), Duration::from_secs(3));
    }

    #[tokio::test]
    async fn unknown_context_and_missing_file_are_clear_errors() {
        let (_dir, paths) = files();
        let mut a = args(&paths);
        a.context = Some("nope".into());
        let e = config_from(&a, false).await.expect_err("unknown context");
        assert!(e.to_string().contains("kubeconfig"), "{e}");
        let e = config_from(&args("/nonexistent/kubeconfig"), false)
            .await
            .expect_err("missing file");
        assert!(e.to_string().contains("/nonexistent/kubeconfig"), "{e}");
    }
}
