//! A fault-injecting HTTP proxy in front of the real kube-apiserver: what a copy of
//! kubectl-vap sends through it is forwarded as it is (its own token and User-Agent, so RBAC
//! and the audit log see the sender), unless a [`Rule`] says otherwise — answer a status of
//! its own (a 429 storm with Retry-After), hold the request unanswered, or reset the
//! connection. Every request is logged ([`Proxy::seen`]) with what was done with it, so a test
//! can assert what reached the server and when.
//!
//! The copy talks plain HTTP to the proxy (a kubeconfig from [`Proxy::kubeconfig`]), the proxy
//! TLS to the API server. It runs on the runtime of the test that starts it and stops when
//! dropped.

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::UnsyncBoxBody};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// What the proxy does with a request a rule matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Forward it (a rule that lets some requests through before a broader one).
    Forward,
    /// Answer `code` itself, as kube-apiserver would (a Status body; for 429 and 503 with
    /// `Retry-After` and `details.retryAfterSeconds` = `retry_after`).
    Status { code: u16, retry_after: u32 },
    /// Never answer (the connection stays open until the client gives up).
    Hold,
    /// Close the connection without an answer.
    Reset,
}

/// Which requests a rule applies to, and how often.
#[derive(Debug, Clone)]
pub struct Rule {
    /// The HTTP method (`GET`, `PUT`, …); `None`: any.
    pub method: Option<String>,
    /// A part of the path and query that must appear (e.g. `/leases/`, `validatingadmissionpolicybindings`).
    pub path: String,
    pub action: Action,
    /// How many requests it applies to; `None`: every one, until removed.
    pub times: Option<usize>,
}

impl Rule {
    pub fn new(method: Option<&str>, path: &str, action: Action) -> Rule {
        Rule {
            method: method.map(str::to_string),
            path: path.to_string(),
            action,
            times: None,
        }
    }

    fn matches(&self, method: &str, path: &str) -> bool {
        self.times != Some(0)
            && self.method.as_deref().is_none_or(|m| m == method)
            && path.contains(&self.path)
    }
}

/// What became of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Forwarded; the API server's status (0: it did not answer).
    Forwarded(u16),
    /// Answered by the proxy with this status.
    Answered(u16),
    Held,
    Reset,
}

/// One request the proxy saw.
#[derive(Debug, Clone)]
pub struct Seen {
    pub at: Instant,
    pub method: String,
    /// Path and query.
    pub path: String,
    pub user_agent: String,
    pub outcome: Outcome,
}

#[derive(Default)]
struct State {
    rules: Vec<Rule>,
    seen: Vec<Seen>,
}

/// The proxy; stops when dropped.
pub struct Proxy {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
    dir: PathBuf,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Proxy {
    /// A proxy in front of `env`'s API server, on a free loopback port.
    pub async fn start(env: &crate::TestEnv) -> anyhow::Result<Proxy> {
        let mut config = kube::Config::new(env.server_url().parse().context("server URL")?);
        let ca = std::fs::read(env.dir().join("certs").join("apiserver.crt"))
            .context("reading the API server's CA")?;
        config.root_cert = Some(pem_certs(&ca)?);
        // What the sender retries is its own business: the proxy forwards each request once.
        config.default_retry = false;
        config.connect_timeout = None;
        config.write_timeout = None;
        let upstream = kube::Client::try_from(config).context("the upstream client")?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the proxy")?;
        let addr = listener.local_addr().context("the proxy's address")?;
        let state: Arc<Mutex<State>> = Arc::default();
        let serving = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (state, upstream) = (serving.clone(), upstream.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        handle(req, state.clone(), upstream.clone())
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                        .await;
                });
            }
        });
        Ok(Proxy {
            addr,
            state,
            task,
            dir: env.dir().to_path_buf(),
        })
    }

    /// `http://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A copy of `kubeconfig` whose cluster is this proxy (same user and token), in the env's
    /// folder.
    pub fn kubeconfig(&self, kubeconfig: &Path) -> anyhow::Result<PathBuf> {
        let text = std::fs::read_to_string(kubeconfig)
            .with_context(|| format!("reading {}", kubeconfig.display()))?;
        let mut doc: serde_json::Value =
            serde_norway::from_str(&text).context("parsing the kubeconfig")?;
        for c in doc["clusters"].as_array_mut().into_iter().flatten() {
            let cluster = &mut c["cluster"];
            cluster["server"] = self.url().into();
            if let Some(o) = cluster.as_object_mut() {
                o.remove("certificate-authority");
                o.remove("certificate-authority-data");
                o.remove("insecure-skip-tls-verify");
            }
        }
        let name = format!(
            "{}-via-proxy-{}",
            kubeconfig
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            self.addr.port()
        );
        let path = self.dir.join(name);
        std::fs::write(&path, serde_norway::to_string(&doc)?)
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }

    /// Adds a rule; the first rule that matches a request decides (earlier rules first).
    pub fn rule(&self, rule: Rule) {
        lock(&self.state).rules.push(rule);
    }

    /// Removes every rule: everything is forwarded again.
    pub fn clear_rules(&self) {
        lock(&self.state).rules.clear();
    }

    /// Every request seen so far, oldest first.
    pub fn seen(&self) -> Vec<Seen> {
        lock(&self.state).seen.clone()
    }
}

/// The certificates of a PEM bundle, DER-encoded (what `Config::root_cert` holds).
fn pem_certs(pem: &[u8]) -> anyhow::Result<Vec<Vec<u8>>> {
    let text = std::str::from_utf8(pem).context("the CA is not PEM text")?;
    let mut out = Vec::new();
    let mut inside: Option<String> = None;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with("-----BEGIN CERTIFICATE") {
            inside = Some(String::new());
        } else if line.starts_with("-----END CERTIFICATE") {
            if let Some(b64) = inside.take() {
                use base64::Engine as _;
                let der = base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .context("decoding the CA")?;
                out.push(der);
            }
        } else if let Some(b) = inside.as_mut() {
            b.push_str(line);
        }
    }
    anyhow::ensure!(!out.is_empty(), "no certificate in the CA file");
    Ok(out)
}

fn full(b: impl Into<Bytes>) -> ProxyBody {
    Full::new(b.into()).map_err(|e| match e {}).boxed_unsync()
}

/// The Status kube-apiserver answers with `code`.
fn status_response(code: u16, retry_after: u32) -> http::Response<ProxyBody> {
    let reason = match code {
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        500 => "InternalError",
        _ => "Unknown",
    };
    let mut status = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("injected by the test proxy: {code}"), "reason": reason, "code": code,
    });
    if retry_after > 0 {
        status["details"] = serde_json::json!({ "retryAfterSeconds": retry_after });
    }
    let mut res = http::Response::builder()
        .status(code)
        .header(http::header::CONTENT_TYPE, "application/json");
    if retry_after > 0 {
        res = res.header(http::header::RETRY_AFTER, retry_after.to_string());
    }
    res.body(full(status.to_string()))
        .unwrap_or_else(|_| http::Response::new(full("")))
}

/// Hop-by-hop headers (and the proxy's own Host): not forwarded.
const NOT_FORWARDED: &[&str] = &[
    "host",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "upgrade",
    "proxy-connection",
];

async fn handle(
    req: http::Request<hyper::body::Incoming>,
    state: Arc<Mutex<State>>,
    upstream: kube::Client,
) -> Result<http::Response<ProxyBody>, BoxError> {
    let method = req.method().to_string();
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    let user_agent = req
        .headers()
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let action = {
        let mut st = lock(&state);
        let rule = st.rules.iter_mut().find(|r| r.matches(&method, &path));
        match rule {
            Some(r) => {
                if let Some(n) = r.times.as_mut() {
                    *n -= 1;
                }
                r.action.clone()
            }
            None => Action::Forward,
        }
    };
    let record = |outcome: Outcome| {
        lock(&state).seen.push(Seen {
            at: Instant::now(),
            method: method.clone(),
            path: path.clone(),
            user_agent: user_agent.clone(),
            outcome,
        })
    };
    match action {
        Action::Status { code, retry_after } => {
            record(Outcome::Answered(code));
            Ok(status_response(code, retry_after))
        }
        Action::Hold => {
            record(Outcome::Held);
            std::future::pending().await
        }
        Action::Reset => {
            record(Outcome::Reset);
            Err("reset by the test proxy".into())
        }
        Action::Forward => {
            let (parts, body) = req.into_parts();
            let body = body.collect().await?.to_bytes();
            let mut out = http::Request::builder()
                .method(parts.method)
                .uri(path.as_str());
            for (k, v) in &parts.headers {
                if !NOT_FORWARDED.contains(&k.as_str()) {
                    out = out.header(k, v);
                }
            }
            let out = out.body(kube::client::Body::from(body.to_vec()))?;
            match upstream.send(out).await {
                Ok(res) => {
                    record(Outcome::Forwarded(res.status().as_u16()));
                    let (parts, body) = res.into_parts();
                    Ok(http::Response::from_parts(
                        parts,
                        body.map_err(|e| Box::new(e) as BoxError).boxed_unsync(),
                    ))
                }
                Err(e) => {
                    record(Outcome::Forwarded(0));
                    Err(Box::new(e))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_matching_rule_decides_and_a_counted_one_runs_out() {
        let mut r = Rule::new(Some("PUT"), "/leases/", Action::Hold);
        r.times = Some(1);
        assert!(r.matches("PUT", "/apis/coordination.k8s.io/v1/namespaces/x/leases/l"));
        assert!(!r.matches("GET", "/apis/coordination.k8s.io/v1/namespaces/x/leases/l"));
        r.times = Some(0);
        assert!(!r.matches("PUT", "/leases/l"));
    }
}
