//! The API client's requests: `wasmformer_api_requests_total{verb,code}` and
//! `wasmformer_api_request_duration_seconds{verb}` (time to the response headers; a watch counts
//! until the server accepts it, not while it streams). `verb` is the HTTP method, or `WATCH` for
//! a `GET` with `watch=true`; `code` is the HTTP status, or `error` when no response came.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use http::{Request, Response};
use kube::client::Body;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    verb: String,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerbLabel {
    verb: String,
}

/// Buckets for a request to the API server, a plugin's writes included: 1 ms to about 33 s (a
/// write's timeout is 10 s by default).
pub(super) fn request_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

#[derive(Debug, Clone)]
pub(super) struct Families {
    requests: Family<RequestLabels, Counter>,
    duration: Family<VerbLabel, Histogram, fn() -> Histogram>,
}

impl Families {
    pub(super) fn register(registry: &mut Registry) -> Self {
        let families = Self {
            requests: Family::default(),
            duration: Family::new_with_constructor(request_histogram),
        };
        registry.register(
            "wasmformer_api_requests",
            "Requests to the API server by verb and HTTP status",
            families.requests.clone(),
        );
        registry.register(
            "wasmformer_api_request_duration_seconds",
            "Time from sending a request to the API server to its response headers",
            families.duration.clone(),
        );
        families
    }

    /// A client that sends through `client` and counts every request.
    pub(super) fn instrument(&self, client: kube::Client) -> kube::Client {
        let namespace = client.default_namespace().to_owned();
        kube::Client::new(
            Instrumented {
                client,
                families: self.clone(),
            },
            namespace,
        )
    }
}

fn verb_of<B>(request: &Request<B>) -> String {
    let watch = request
        .uri()
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    if watch && request.method() == http::Method::GET {
        "WATCH".to_owned()
    } else {
        request.method().as_str().to_owned()
    }
}

/// A tower service over a [`kube::Client`] that records each request's outcome.
#[derive(Clone)]
struct Instrumented {
    client: kube::Client,
    families: Families,
}

impl tower::Service<Request<Body>> for Instrumented {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, kube::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let (client, families) = (self.client.clone(), self.families.clone());
        let verb = verb_of(&request);
        Box::pin(async move {
            let started = Instant::now();
            let response = client.send(request).await;
            let code = match &response {
                Ok(response) => response.status().as_str().to_owned(),
                Err(_) => "error".to_owned(),
            };
            families
                .duration
                .get_or_create(&VerbLabel { verb: verb.clone() })
                .observe(started.elapsed().as_secs_f64());
            families
                .requests
                .get_or_create(&RequestLabels { verb, code })
                .inc();
            response
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_get_with_watch_true_is_a_watch() {
        let request = |uri: &str, method: http::Method| {
            Request::builder().method(method).uri(uri).body(()).unwrap()
        };
        assert_eq!(
            verb_of(&request(
                "/api/v1/pods?watch=true&resourceVersion=5",
                http::Method::GET
            )),
            "WATCH"
        );
        assert_eq!(
            verb_of(&request("/api/v1/pods?limit=500", http::Method::GET)),
            "GET"
        );
        assert_eq!(
            verb_of(&request("/api/v1/namespaces/a/pods", http::Method::POST)),
            "POST"
        );
    }
}
