//! A bound on every request but a watch: its answer, body included, must arrive within a
//! time, or the request is abandoned (its connection closed) and fails with [`TimedOut`],
//! an error without an HTTP status, like a refused connection.
//!
//! Why a layer of our own: kube's `read_timeout` bounds each socket read, so it would also cut
//! a watch that is idle between events, and it says nothing of a request whose bytes trickle;
//! tower's `Timeout` bounds every request alike (watches too) and only until the headers.
//! Watches are bounded elsewhere: the server ends them after `timeoutSeconds`, and their
//! readers give up on a stream that stays silent longer than that.

use hyper::body::{Body, Frame};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The request got no complete answer within its bound.
#[derive(Debug, thiserror::Error)]
#[error("no complete answer within {}s (request abandoned)", .0.as_secs_f32())]
pub struct TimedOut(pub Duration);

/// Whether a request is a watch (`?watch=true`, or `1`): a long request, not bounded here.
pub fn is_watch(uri: &http::Uri) -> bool {
    uri.query().is_some_and(|q| {
        q.split('&')
            .any(|kv| matches!(kv, "watch=true" | "watch=1" | "watch=True"))
    })
}

/// Bounds every request but watches by `limit` ([`Bounded`]).
#[derive(Debug, Clone, Copy)]
pub struct BoundLayer {
    pub limit: Duration,
}

impl<S> tower::Layer<S> for BoundLayer {
    type Service = Bounded<S>;
    fn layer(&self, inner: S) -> Bounded<S> {
        Bounded {
            inner,
            limit: self.limit,
        }
    }
}

/// The service [`BoundLayer`] makes.
#[derive(Debug, Clone)]
pub struct Bounded<S> {
    inner: S,
    limit: Duration,
}

impl<S, ReqB, ResB> tower::Service<http::Request<ReqB>> for Bounded<S>
where
    S: tower::Service<http::Request<ReqB>, Response = http::Response<ResB>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    ResB: Body + Unpin,
    ResB::Error: Into<BoxError>,
{
    type Response = http::Response<Deadline<ResB>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: http::Request<ReqB>) -> Self::Future {
        let limit = self.limit;
        let deadline = (!is_watch(req.uri())).then(|| Instant::now() + limit);
        let answer = self.inner.call(req);
        Box::pin(async move {
            let res = match deadline {
                None => answer.await.map_err(Into::into)?,
                Some(at) => tokio::time::timeout_at(at, answer)
                    .await
                    .map_err(|_| Box::new(TimedOut(limit)) as BoxError)?
                    .map_err(Into::into)?,
            };
            Ok(res.map(|body| Deadline {
                body,
                limit,
                at: deadline.map(|at| Box::pin(tokio::time::sleep_until(at))),
            }))
        })
    }
}

/// A response body that fails with [`TimedOut`] once its request's bound has passed.
pub struct Deadline<B> {
    body: B,
    limit: Duration,
    at: Option<Pin<Box<Sleep>>>,
}

impl<B> Body for Deadline<B>
where
    B: Body + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let limit = self.limit;
        if let Some(at) = self.at.as_mut()
            && at.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(Some(Err(Box::new(TimedOut(limit)))));
        }
        Pin::new(&mut self.body)
            .poll_frame(cx)
            .map(|f| f.map(|r| r.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_watches_are_long() {
        let uri = |s: &str| s.parse::<http::Uri>().expect("uri");
        assert!(is_watch(&uri(
            "/api/v1/configmaps?watch=true&resourceVersion=1"
        )));
        assert!(is_watch(&uri(
            "/api/v1/configmaps?timeoutSeconds=290&watch=1"
        )));
        assert!(!is_watch(&uri("/api/v1/configmaps?watchy=true")));
        assert!(!is_watch(&uri("/api/v1/namespaces/ns/configmaps/watch")));
        assert!(!is_watch(&uri("/api/v1/configmaps")));
    }

    /// A listener that accepts connections and never answers: a GET fails at its bound; a
    /// watch is left waiting (its reader bounds it).
    #[tokio::test]
    async fn a_request_nobody_answers_ends_at_its_bound_and_a_watch_does_not() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let held = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((s, _)) = listener.accept().await {
                open.push(s);
            }
        });
        let mut config = kube::Config::new(url.parse().expect("url"));
        config.default_retry = false;
        let limit = Duration::from_millis(300);
        let client = kube::client::ClientBuilder::try_from(config)
            .expect("builder")
            .with_layer(&BoundLayer { limit })
            .build();
        let get = http::Request::get("/api/v1/namespaces/default/configmaps/x")
            .body(Vec::new())
            .expect("request");
        let started = std::time::Instant::now();
        let e = tokio::time::timeout(Duration::from_secs(10), client.request_text(get))
            .await
            .expect("the bound ends it, not the test's")
            .expect_err("nobody answers");
        assert!(started.elapsed() >= limit, "{e}");
        assert!(
            crate::text::error_text(&e).contains("no complete answer within 0.3s"),
            "{e}"
        );
        let watch = http::Request::get("/api/v1/configmaps?watch=true")
            .body(Vec::new())
            .expect("request");
        let waited = tokio::time::timeout(limit * 3, client.request_text(watch)).await;
        assert!(
            waited.is_err(),
            "a watch is not cut by the bound: {waited:?}"
        );
        held.abort();
    }
}
