//! Counters and gauges for `/metrics` (prometheus-client, OpenMetrics text), and the small HTTP
//! server that serves them next to `/healthz` and `/readyz`.

use crate::controller::reconcile::keys::Obj;
use crate::controller::reconcile::world::Unwritten;
use crate::core::Verb;
use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Metric, Registry};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Label name and value pairs, in the order they are rendered.
type Labels<const N: usize> = [(&'static str, &'static str); N];

/// The copy's metrics, and what `/healthz` and `/readyz` answer.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    writes: Family<Labels<2>, Counter>,
    errors: Family<Labels<1>, Counter>,
    reconciles: Counter,
    queue_depth: Gauge,
    leader: Gauge,
    contested: Gauge,
    /// Every write the API server accepted (the sum of `writes`, which a family cannot give).
    written: AtomicU64,
    /// Ready, or why `/readyz` fails (what cannot be read).
    ready: Mutex<Result<(), String>>,
    /// A task of the copy failed: `/healthz` and `/readyz` fail for good, saying this.
    failed: Mutex<Option<String>>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut r = Registry::with_prefix("kubectl_vap");
        Metrics {
            writes: registered(&mut r, "writes", "Writes the API server accepted"),
            errors: registered(
                &mut r,
                "write_errors",
                "Writes that changed nothing, by reason (already_gone: a delete found nothing)",
            ),
            reconciles: registered(&mut r, "reconciles", "Reconciles run"),
            queue_depth: registered(
                &mut r,
                "queue_depth",
                "Work items queued, delayed or in progress",
            ),
            leader: registered(
                &mut r,
                "leader",
                "Whether this copy holds the lease (1) or not (0)",
            ),
            contested: registered(
                &mut r,
                "contested_objects",
                "Objects not written for now because another writer keeps undoing this copy's writes",
            ),
            registry: r,
            written: AtomicU64::new(0),
            ready: Mutex::new(Err(String::new())),
            failed: Mutex::default(),
        }
    }
}

/// A new metric, registered as `kubectl_vap_<name>`.
fn registered<M: Metric + Clone + Default>(registry: &mut Registry, name: &str, help: &str) -> M {
    let metric = M::default();
    registry.register(name, help, metric.clone());
    metric
}

impl Metrics {
    pub fn write(&self, verb: Verb, obj: Obj) {
        let labels = [("verb", verb.as_str()), ("resource", obj.resource())];
        self.writes.get_or_create(&labels).inc();
        self.written.fetch_add(1, Ordering::Relaxed);
    }

    pub fn error(&self, reason: Unwritten) {
        self.errors
            .get_or_create(&[("reason", reason.label())])
            .inc();
    }

    pub fn reconciled(&self) {
        self.reconciles.inc();
    }

    pub fn set_queue_depth(&self, depth: usize) {
        self.queue_depth
            .set(i64::try_from(depth).unwrap_or(i64::MAX));
    }

    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    pub fn set_contested(&self, objects: usize) {
        self.contested
            .set(i64::try_from(objects).unwrap_or(i64::MAX));
    }

    pub fn set_ready(&self, ready: Result<(), String>) {
        *self.ready.lock() = ready;
    }

    pub fn set_failed(&self, why: String) {
        *self.failed.lock() = Some(why);
    }

    fn health(&self) -> Result<(), String> {
        self.failed.lock().clone().map_or(Ok(()), Err)
    }

    fn readiness(&self) -> Result<(), String> {
        self.health()?;
        self.ready.lock().clone()
    }

    pub fn writes_total(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail; an encoder error would leave the text short.
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::warn!("encoding /metrics: {e}");
        }
        out
    }
}

/// The content type of [`Metrics::render`]'s text.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How long a connection may take to send a request's headers, and may stay open between
/// requests: a probe or a scrape sends its request at once, so a connection that sends
/// nothing for this long (left open by a client, or opened to hold a file descriptor) is
/// closed rather than kept for the life of the process.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The first wait after a failed `accept`, doubled while it keeps failing up to
/// [`ACCEPT_BACKOFF_MAX`]: a failure such as "too many open files" leaves the listener
/// readable, so accepting again at once would spin a core until a descriptor is free.
const ACCEPT_BACKOFF_FIRST: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Binds the listener of [`serve`] (`--metrics-addr 127.0.0.1:0` says which port it got).
pub async fn bind(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tracing::info!("serving /metrics, /healthz, /readyz on {bound}");
    Ok(listener)
}

/// A run of failed accepts, told once when it starts and once when it ends.
#[derive(Debug, Default)]
struct AcceptFailures {
    /// Failures in a row, and when the first of them happened.
    run: Option<(u64, std::time::Instant)>,
}

impl AcceptFailures {
    /// One more failure; how long to wait before accepting again.
    fn failed(&mut self, error: &std::io::Error) -> Duration {
        let (count, _) = self.run.get_or_insert_with(|| {
            tracing::warn!(
                "the /metrics, /healthz, /readyz server cannot accept a connection: {error}; it retries (said again when it accepts)"
            );
            (0, std::time::Instant::now())
        });
        *count += 1;
        let doublings = u32::try_from(*count - 1).unwrap_or(u32::MAX).min(16);
        ACCEPT_BACKOFF_FIRST
            .saturating_mul(2u32.saturating_pow(doublings))
            .min(ACCEPT_BACKOFF_MAX)
    }

    /// A connection was accepted: the run, if any, is over.
    fn accepted(&mut self) {
        if let Some((count, since)) = self.run.take() {
            tracing::info!(
                "the /metrics, /healthz, /readyz server accepts connections again, after {count} failed accept(s) in {:.1}s",
                since.elapsed().as_secs_f64()
            );
        }
    }
}

/// Serves `/metrics`, `/healthz` (200 until a task of the copy fails) and `/readyz` (200 once
/// every watch has synced, and while every store is known) on `listener` for as long as the
/// copy runs: a failed `accept` (too many open files) is logged once per run of failures and
/// retried after a short backoff, never the end of the server; a connection that sends no
/// request within [`HEADER_READ_TIMEOUT`] is closed. It is a task of the copy's lifetime, so
/// if it ever ends the supervisor says so; a panic of a connection's task (dropped with this
/// one) is this task's.
pub async fn serve(listener: tokio::net::TcpListener, metrics: std::sync::Arc<Metrics>) {
    let mut connections = tokio::task::JoinSet::new();
    let mut failures = AcceptFailures::default();
    loop {
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _)) => {
                    failures.accepted();
                    stream
                }
                Err(e) => {
                    tokio::time::sleep(failures.failed(&e)).await;
                    continue;
                }
            },
            Some(Err(e)) = connections.join_next() => {
                if e.is_panic() {
                    std::panic::resume_unwind(e.into_panic());
                }
                continue;
            }
        };
        connections.spawn(serve_connection(stream, metrics.clone()));
    }
}

/// One connection: its requests answered until the client closes it or sends nothing for
/// [`HEADER_READ_TIMEOUT`].
async fn serve_connection(stream: tokio::net::TcpStream, metrics: std::sync::Arc<Metrics>) {
    use http_body_util::Full;
    use hyper::body::Bytes;
    use hyper::{Response, StatusCode};
    let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let metrics = metrics.clone();
        async move {
            let probe = |r: Result<(), String>| match r {
                Ok(()) => (StatusCode::OK, "ok\n".to_string()),
                Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
            };
            let ((status, body), content_type) = match req.uri().path() {
                "/metrics" => ((StatusCode::OK, metrics.render()), Some(OPENMETRICS)),
                "/healthz" => (probe(metrics.health()), None),
                "/readyz" => (probe(metrics.readiness()), None),
                _ => ((StatusCode::NOT_FOUND, "not found\n".to_string()), None),
            };
            let mut resp = Response::new(Full::new(Bytes::from(body)));
            *resp.status_mut() = status;
            if let Some(t) = content_type {
                let t = hyper::header::HeaderValue::from_static(t);
                resp.headers_mut().insert(hyper::header::CONTENT_TYPE, t);
            }
            Ok::<_, std::convert::Infallible>(resp)
        }
    });
    let io = hyper_util::rt::TokioIo::new(stream);
    // The header timeout also runs while a kept-alive connection waits for its next request
    // (hyper starts it whenever it reads a request head), which is what closes idle ones.
    if let Err(e) = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(io, service)
        .await
    {
        tracing::debug!("metrics connection: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run of failed accepts backs off from 10 ms doubling to 1 s, and starts again from
    /// 10 ms after an accept.
    #[test]
    fn failed_accepts_back_off_and_an_accept_resets() {
        let mut f = AcceptFailures::default();
        let e = std::io::Error::from_raw_os_error(24);
        let waits: Vec<u128> = (0..10).map(|_| f.failed(&e).as_millis()).collect();
        assert_eq!(waits, [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000]);
        f.accepted();
        assert_eq!(f.failed(&e), ACCEPT_BACKOFF_FIRST);
    }
    use crate::cluster::apply::ApplyError;
    use crate::controller::reconcile::world::WriteError;
    use std::sync::Arc;

    #[test]
    fn renders_prometheus_text() {
        let m = Metrics::default();
        m.write(Verb::Create, Obj::Policy);
        m.write(Verb::Create, Obj::Policy);
        let conflict = ApplyError::Conflict("409".into());
        m.error(Unwritten::from(&WriteError::Conflict(Arc::new(conflict))));
        m.set_leader(true);
        let text = m.render();
        assert!(text.contains(
            "kubectl_vap_writes_total{verb=\"create\",resource=\"validatingadmissionpolicies\"} 2"
        ));
        assert!(text.contains("kubectl_vap_write_errors_total{reason=\"conflict\"} 1"));
        assert!(text.contains("kubectl_vap_leader 1"));
        // Only the sample says 1: tests look for it as text.
        m.set_leader(false);
        assert!(!m.render().contains("kubectl_vap_leader 1"));
        assert!(text.contains("# TYPE kubectl_vap_queue_depth gauge"));
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert_eq!(m.writes_total(), 2);
    }
}
