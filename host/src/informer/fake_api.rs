//! An in-process API server for informer tests: a `tower` service behind a real `kube::Client`,
//! answering each request from a test's closure and recording what was asked. No sockets, so
//! tests can run on paused time.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use http_body::Frame;
use http_body_util::StreamBody;
use serde_json::{Value, json};

/// An answer to one request.
pub(crate) enum Reply {
    /// A JSON document with a status code.
    Json(u16, Value),
    /// A watch response: these events, then the stream stays open if `hang`, else ends.
    Watch(Vec<Value>, bool),
}

/// The requests a fake server received, as `METHOD path?query accept=…`.
#[derive(Clone, Default)]
pub(crate) struct RequestLog(Arc<Mutex<Vec<String>>>);

impl RequestLog {
    pub(crate) fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    /// How many requests contain `needle`.
    pub(crate) fn count(&self, needle: &str) -> usize {
        self.all().iter().filter(|r| r.contains(needle)).count()
    }
}

type Body = StreamBody<BoxStream<'static, Result<Frame<Bytes>, Infallible>>>;

/// A client whose requests `handler` answers (`path?query` → reply).
pub(crate) fn client(handler: impl Fn(&str) -> Reply + Send + Sync + 'static) -> (kube::Client, RequestLog) {
    let log = RequestLog::default();
    let handler = Arc::new(handler);
    let requests = log.clone();
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let target = request.uri().path_and_query().map(ToString::to_string).unwrap_or_default();
        let accept = request.headers().get(http::header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
        requests.0.lock().unwrap().push(format!("{} {target} accept={accept}", request.method()));
        let reply = handler(&target);
        async move {
            let (status, body): (u16, Body) = match reply {
                Reply::Json(code, value) => (code, StreamBody::new(futures::stream::once(async move { Ok(data(&value)) }).boxed())),
                Reply::Watch(events, hang) => {
                    let lines = futures::stream::iter(events.into_iter().map(|e| Ok(data(&e))));
                    let body = if hang { lines.chain(futures::stream::pending()).boxed() } else { lines.boxed() };
                    (200, StreamBody::new(body))
                }
            };
            Ok::<_, Infallible>(http::Response::builder().status(status).body(body).unwrap())
        }
    });
    (kube::Client::new(service, "default"), log)
}

fn data(value: &Value) -> Frame<Bytes> {
    let mut text = value.to_string();
    text.push('\n');
    Frame::data(Bytes::from(text))
}

/// A pod as the server returns it.
pub(crate) fn pod(name: &str, rv: &str) -> Value {
    json!({"metadata": {"namespace": "default", "name": name, "uid": format!("uid-{name}"), "resourceVersion": rv,
        "labels": {"app": "web"}}, "spec": {"nodeName": "n1"}})
}

/// A list response.
pub(crate) fn list(items: Vec<Value>, rv: &str) -> Reply {
    Reply::Json(200, json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": rv}, "items": items}))
}

/// A watch event line.
pub(crate) fn event(kind: &str, object: Value) -> Value {
    json!({"type": kind, "object": object})
}

/// A bookmark marking the end of a streaming list's initial events.
pub(crate) fn initial_events_end(rv: &str) -> Value {
    event("BOOKMARK", json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": rv,
        "annotations": {"k8s.io/initial-events-end": "true"}}}))
}

/// A `Status` failure.
pub(crate) fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": code, "reason": reason, "message": message})
}

/// `/version` at `1.minor`.
pub(crate) fn version(minor: u32) -> Reply {
    Reply::Json(200, json!({"major": "1", "minor": minor.to_string(), "gitVersion": format!("v1.{minor}.0"), "gitCommit": "",
        "gitTreeState": "", "buildDate": "", "goVersion": "", "compiler": "", "platform": ""}))
}
