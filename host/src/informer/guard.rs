//! The guard between the API server's responses and kube's decoder: a broken or hostile watch
//! stream never reaches the cache, and a protobuf LIST page reaches kube as JSON.
//!
//! kube's client reads a watch response line by line with no bound on a line's length, skips a
//! line whose JSON ends early without a word, and reports any other undecodable line but keeps
//! reading the stream. The informer's client is wrapped ([`guarded_client`]) so that the body of
//! every WATCH response passes a [`LineGuard`] first, which hands kube only complete, well-formed
//! event lines within the size bound:
//!
//! - a line longer than the bound (`host.maxObjectBytes` plus room for the event envelope) is
//!   dropped as it streams (at most the bound is ever buffered), logged as an error naming the
//!   object, and counted in the informer's `rejected`; the stream goes on;
//! - a line that is not a JSON watch event (`{"type": …, "object": {…}}`) — truncated, garbled —
//!   is logged and counted in `undecodable`, and the stream ends there, so kube re-watches from
//!   the last resourceVersion it saw (client-go's reflector restarts its watch the same way);
//! - a partial line when the stream ends (a connection cut inside an event) counts the same way.
//!
//! Objects of another kind than the informer's, and objects over the bound that arrive in a LIST
//! response, are refused later by the [`Reflector`](super::reflector::Reflector), which decodes them.
//!
//! The same client reads LIST pages in protobuf where it can (`host.listEncoding`, see
//! [`read_protobuf`]): it asks for protobuf with JSON as the fallback, and turns a protobuf answer
//! into the JSON the server would have sent before kube parses it, so that kube's watcher, its
//! retries and its `410 Gone` handling work as with JSON.

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use bytes::Bytes;
use futures::StreamExt;
use http::HeaderValue;
use http::header::{ACCEPT, CONTENT_LENGTH, CONTENT_TYPE};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use kube::Client;
use kube::client::Body;
use serde_json::value::RawValue;
use wasmformer_protobuf::ManagedFields;

use super::informer::LastError;
use super::prefetch::{Page, Prefetch};
use super::watch::ListEncoding;

/// How much of an oversize line is kept to name the object in the error.
const PREFIX_KEPT: usize = 16 << 10;
/// Room for the event envelope (`{"type":"MODIFIED","object":…}`) around an object.
const ENVELOPE: usize = 1 << 10;

/// What a guard has refused in one informer's watch streams.
#[derive(Debug, Default)]
pub(crate) struct StreamHealth {
    /// Event lines that were not a JSON watch event (each ended its stream).
    pub(crate) undecodable: AtomicU64,
    /// Event lines over the size bound (dropped).
    pub(crate) too_large: AtomicU64,
    /// The most recent refusal.
    pub(crate) last_error: Mutex<Option<LastError>>,
    /// How the last LIST page came: 0 none yet, 1 JSON, 2 protobuf.
    list_encoding: AtomicU8,
}

impl StreamHealth {
    fn record(&self, counter: &AtomicU64, message: String) {
        counter.fetch_add(1, Ordering::Relaxed);
        *self.last_error.lock().expect("stream health lock poisoned") = Some(LastError {
            message,
            at: SystemTime::now(),
        });
    }

    /// How the last LIST page came.
    pub(crate) fn list_encoding(&self) -> Option<ListEncoding> {
        match self.list_encoding.load(Ordering::Relaxed) {
            1 => Some(ListEncoding::Json),
            2 => Some(ListEncoding::Protobuf),
            _ => None,
        }
    }

    fn record_list(&self, encoding: ListEncoding) {
        let code = match encoding {
            ListEncoding::Json => 1,
            ListEncoding::Protobuf => 2,
        };
        self.list_encoding.store(code, Ordering::Relaxed);
    }

    /// Counts an event kube could not decode although the guard let it through.
    pub(crate) fn record_undecodable(&self, message: String) {
        self.record(&self.undecodable, message);
    }
}

/// The shape every watch event line must have: a `type` string and an `object` (decoded by kube).
#[derive(serde::Deserialize)]
struct Envelope<'a> {
    #[serde(rename = "type", borrow)]
    kind: &'a RawValue,
    #[serde(borrow)]
    object: &'a RawValue,
}

impl Envelope<'_> {
    fn check(&self) -> Result<(), String> {
        if !self.kind.get().starts_with('"') {
            return Err("the event's type is not a string".to_owned());
        }
        if !self.object.get().starts_with('{') {
            return Err("the event's object is not a JSON object".to_owned());
        }
        Ok(())
    }

    /// Whether `object` comes before `type`. kube decodes the object straight from the line only
    /// when `type` comes first, as the API server writes it; otherwise the line is rewritten.
    fn object_first(&self) -> bool {
        self.object.get().as_ptr() < self.kind.get().as_ptr()
    }
}

/// An oversize line being skipped.
struct Oversize {
    prefix: Vec<u8>,
    bytes: usize,
}

/// Splits a watch response into lines and passes on the good ones (see the module docs).
pub(crate) struct LineGuard {
    max_object_bytes: usize,
    health: Arc<StreamHealth>,
    line: Vec<u8>,
    oversize: Option<Oversize>,
    ended: bool,
}

impl LineGuard {
    pub(crate) fn new(max_object_bytes: usize, health: Arc<StreamHealth>) -> Self {
        Self {
            max_object_bytes,
            health,
            line: Vec::new(),
            oversize: None,
            ended: false,
        }
    }

    /// Whether the stream must end (an undecodable line was seen).
    pub(crate) fn ended(&self) -> bool {
        self.ended
    }

    /// Takes one chunk of the response; returns the complete good lines in it (each with its
    /// newline). After an undecodable line, returns what came before it and ends.
    pub(crate) fn feed(&mut self, mut chunk: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        while !self.ended && !chunk.is_empty() {
            let (part, rest, complete) = match memchr::memchr(b'\n', chunk) {
                Some(i) => (&chunk[..i], &chunk[i + 1..], true),
                None => (chunk, &chunk[chunk.len()..], false),
            };
            self.push(part);
            if complete {
                self.finish_line(&mut out);
            }
            chunk = rest;
        }
        out
    }

    /// The response ended: a partial line left over was cut inside an event.
    pub(crate) fn finish(&mut self) {
        if self.ended {
            return;
        }
        if let Some(oversize) = self.oversize.take() {
            self.too_large(&oversize);
        } else if !self.line.iter().all(u8::is_ascii_whitespace) {
            let line = std::mem::take(&mut self.line);
            self.undecodable(&line, "the stream ended inside an event".to_owned());
        }
    }

    fn limit(&self) -> usize {
        self.max_object_bytes.saturating_add(ENVELOPE)
    }

    fn push(&mut self, part: &[u8]) {
        if let Some(oversize) = &mut self.oversize {
            oversize.bytes += part.len();
            return;
        }
        self.line.extend_from_slice(part);
        if self.line.len() > self.limit() {
            let mut prefix = std::mem::take(&mut self.line);
            let bytes = prefix.len();
            prefix.truncate(PREFIX_KEPT);
            self.oversize = Some(Oversize { prefix, bytes });
        }
    }

    fn finish_line(&mut self, out: &mut Vec<u8>) {
        if let Some(oversize) = self.oversize.take() {
            self.too_large(&oversize);
            return;
        }
        let line = std::mem::take(&mut self.line);
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        let envelope = serde_json::from_slice::<Envelope>(&line)
            .map_err(|error| error.to_string())
            .and_then(|envelope| envelope.check().map(|()| envelope));
        match envelope {
            Ok(envelope) if envelope.object_first() => {
                out.extend_from_slice(b"{\"type\":");
                out.extend_from_slice(envelope.kind.get().as_bytes());
                out.extend_from_slice(b",\"object\":");
                out.extend_from_slice(envelope.object.get().as_bytes());
                out.extend_from_slice(b"}\n");
            }
            Ok(_) => {
                out.extend_from_slice(&line);
                out.push(b'\n');
            }
            Err(error) => return self.undecodable(&line, error),
        }
        self.line = line;
        self.line.clear();
    }

    fn too_large(&self, oversize: &Oversize) {
        let object = identify(&oversize.prefix);
        tracing::error!(
            object.ref = %object,
            object.bytes = oversize.bytes,
            limit.bytes = self.max_object_bytes,
            "watch event larger than host.maxObjectBytes; object rejected"
        );
        let message = format!(
            "{object}: watch event of {} bytes is over host.maxObjectBytes ({} bytes); not cached",
            oversize.bytes, self.max_object_bytes
        );
        self.health.record(&self.health.too_large, message);
    }

    fn undecodable(&mut self, line: &[u8], error: String) {
        self.ended = true;
        let start = String::from_utf8_lossy(&line[..line.len().min(120)]).into_owned();
        tracing::warn!(error = %error, event.bytes = line.len(), event.start = %start, "undecodable watch event; restarting the watch");
        self.health.record(
            &self.health.undecodable,
            format!("undecodable watch event ({error}); watch restarted"),
        );
    }
}

/// `Kind namespace/name` of the object whose event starts with `prefix`, as far as it shows.
fn identify(prefix: &[u8]) -> String {
    let text = String::from_utf8_lossy(prefix);
    fn string_after(text: &str, key: &str) -> Option<String> {
        let at = text.find(&format!("\"{key}\":"))? + key.len() + 3;
        let rest = text[at..].trim_start().strip_prefix('"')?;
        Some(rest[..rest.find('"')?].to_owned())
    }
    let object = text.find("\"object\":").map_or(&text[..], |at| &text[at..]);
    let kind = string_after(object, "kind").unwrap_or_else(|| "object".to_owned());
    let Some(metadata) = object.find("\"metadata\":").map(|at| &object[at..]) else {
        return format!("{kind} (name not in its first {} bytes)", prefix.len());
    };
    match (
        string_after(metadata, "namespace"),
        string_after(metadata, "name"),
    ) {
        (Some(ns), Some(name)) if !ns.is_empty() => format!("{kind} {ns}/{name}"),
        (_, Some(name)) => format!("{kind} {name}"),
        _ => format!("{kind} (name not in its first {} bytes)", prefix.len()),
    }
}

/// A response body of either kind.
type AnyBody = UnsyncBoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// The body of a WATCH response, through a [`LineGuard`].
fn guard_body(body: Body, guard: LineGuard) -> AnyBody {
    let chunks = body.into_data_stream();
    let lines = futures::stream::unfold((chunks, guard), |(mut chunks, mut guard)| async move {
        loop {
            if guard.ended() {
                return None;
            }
            match chunks.next().await {
                Some(Ok(chunk)) => {
                    let out = guard.feed(&chunk);
                    if !out.is_empty() {
                        return Some((Ok(Bytes::from(out)), (chunks, guard)));
                    }
                }
                Some(Err(error)) => return Some((Err(error), (chunks, guard))),
                None => {
                    guard.finish();
                    return None;
                }
            }
        }
    });
    StreamBody::new(lines.map(|chunk| chunk.map(http_body::Frame::data)))
        .map_err(Into::into)
        .boxed_unsync()
}

/// `client`, with the body of every WATCH response passed through a [`LineGuard`] that reports
/// to `health`; with `protobuf`, LIST pages asked for in protobuf and turned into the JSON kube
/// decodes, with or without the objects' managed fields (see [`read_protobuf`]).
pub(crate) fn guarded_client(
    client: Client,
    max_object_bytes: usize,
    protobuf: Option<ManagedFields>,
    health: Arc<StreamHealth>,
) -> Client {
    let namespace = client.default_namespace().to_owned();
    let prefetch = Arc::new(Prefetch::default());
    let service = tower::service_fn(move |mut request: http::Request<Body>| {
        let client = client.clone();
        let health = health.clone();
        let prefetch = prefetch.clone();
        async move {
            let watch = request
                .uri()
                .query()
                .is_some_and(|query| query.split('&').any(|pair| pair == "watch=true"));
            if watch {
                let response = client.send(request).await?;
                return Ok(
                    response.map(|body| guard_body(body, LineGuard::new(max_object_bytes, health)))
                );
            }
            if protobuf.is_some() {
                read_protobuf(&mut request);
            }
            let page = prefetch
                .page(
                    request,
                    |request| fetch(client.clone(), request, health.clone()),
                    |page| decode(page, protobuf),
                )
                .await?;
            let body = |body| {
                Full::new(body)
                    .map_err(|never| match never {})
                    .boxed_unsync()
            };
            Ok::<_, kube::Error>(page.map(body))
        }
    });
    Client::new(service, namespace)
}

/// Asks for a LIST page in protobuf, with JSON as the fallback (custom resources, and servers that
/// serve no protobuf), when kube asked for plain JSON (not a metadata-only view). The API server
/// spends less than half the CPU per object on a protobuf page (BENCHMARKS.md, "what the API
/// server spends on a list").
fn read_protobuf(request: &mut http::Request<Body>) {
    let plain_json = request
        .headers()
        .get(ACCEPT)
        .is_none_or(|accept| accept.as_bytes() == b"application/json");
    if request.method() == http::Method::GET && plain_json {
        request.headers_mut().insert(
            ACCEPT,
            HeaderValue::from_static("application/vnd.kubernetes.protobuf, application/json"),
        );
    }
}

/// Sends `request` and reads its answer (a LIST page, or an error `Status`) to its end.
async fn fetch(
    client: Client,
    request: http::Request<Body>,
    health: Arc<StreamHealth>,
) -> Result<Page, kube::Error> {
    let (parts, body) = client.send(request).await?.into_parts();
    if parts.status.is_success() {
        health.record_list(match is_protobuf(&parts.headers) {
            true => ListEncoding::Protobuf,
            false => ListEncoding::Json,
        });
    }
    let bytes = body.collect_bytes().await?;
    Ok(http::Response::from_parts(parts, bytes))
}

/// A protobuf answer as the JSON the server would have sent (but for the managed fields, when
/// they are dropped); a JSON one as it is.
fn decode(page: Page, protobuf: Option<ManagedFields>) -> Result<Page, kube::Error> {
    if !is_protobuf(page.headers()) {
        return Ok(page);
    }
    let (mut parts, bytes) = page.into_parts();
    let managed_fields = protobuf.unwrap_or(ManagedFields::Keep);
    let json = wasmformer_protobuf::to_json(&bytes, managed_fields)
        .map_err(|e| kube::Error::Service(e.into()))?;
    parts
        .headers
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    parts.headers.remove(CONTENT_LENGTH);
    Ok(http::Response::from_parts(parts, Bytes::from(json)))
}

/// Whether a response's `Content-Type` is the protobuf encoding.
pub(super) fn is_protobuf(headers: &http::HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(wasmformer_protobuf::is_protobuf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_guard(max: usize) -> (LineGuard, Arc<StreamHealth>) {
        let health = Arc::new(StreamHealth::default());
        (LineGuard::new(max, health.clone()), health)
    }

    fn counts(health: &StreamHealth) -> (u64, u64) {
        (
            health.undecodable.load(Ordering::Relaxed),
            health.too_large.load(Ordering::Relaxed),
        )
    }

    const GOOD: &str = r#"{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"a"}}}"#;

    /// A client whose server answers every request with `body` as protobuf, recording each
    /// request's `Accept` header.
    fn protobuf_server(
        body: &'static [u8],
        protobuf: Option<ManagedFields>,
    ) -> (Client, Arc<Mutex<Vec<String>>>) {
        let accepts = Arc::new(Mutex::new(Vec::new()));
        let seen = accepts.clone();
        let service = tower::service_fn(move |request: http::Request<Body>| {
            let accept = request
                .headers()
                .get(ACCEPT)
                .map(|v| v.to_str().unwrap().to_owned());
            seen.lock().unwrap().push(accept.unwrap_or_default());
            async move {
                http::Response::builder()
                    .header(CONTENT_TYPE, wasmformer_protobuf::MEDIA_TYPE)
                    .body(Body::from(body.to_vec()))
            }
        });
        let health = Arc::new(StreamHealth::default());
        let client = guarded_client(Client::new(service, "default"), 1 << 20, protobuf, health);
        (client, accepts)
    }

    #[tokio::test]
    async fn a_list_asks_for_protobuf_and_a_broken_page_fails_with_the_cause() {
        use k8s_openapi::api::core::v1::Pod;
        use kube::api::{Api, ListParams};

        // The magic, then a runtime.Unknown whose first field claims 100 bytes it does not have.
        let (client, accepts) = protobuf_server(b"k8s\0\x0a\x64\x0a", Some(ManagedFields::Drop));
        let error = Api::<Pod>::default_namespaced(client)
            .list(&ListParams::default())
            .await
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "ServiceError: decoding the protobuf k8s.io.apimachinery.pkg.runtime.Unknown: \
             a field runs past the end of its message"
        );
        assert_eq!(
            *accepts.lock().unwrap(),
            ["application/vnd.kubernetes.protobuf, application/json"]
        );

        // A metadata-only list keeps kube's own Accept; an informer without protobuf asks for
        // nothing else.
        let (client, accepts) = protobuf_server(b"", Some(ManagedFields::Drop));
        let metadata = Api::<Pod>::default_namespaced(client);
        let _ = metadata.list_metadata(&ListParams::default()).await;
        assert!(
            accepts.lock().unwrap()[0].starts_with("application/json;as=PartialObjectMetadataList")
        );
        let (client, accepts) = protobuf_server(b"", None);
        let _ = Api::<Pod>::default_namespaced(client)
            .list(&ListParams::default())
            .await;
        assert_eq!(*accepts.lock().unwrap(), [""]);
    }

    #[test]
    fn passes_good_lines_across_chunk_boundaries() {
        let (mut guard, health) = new_guard(1 << 20);
        let stream = format!("{GOOD}\n\n{GOOD}\n");
        let (a, b) = stream.as_bytes().split_at(10);
        let mut out = guard.feed(a);
        out.extend(guard.feed(b));
        guard.finish();
        assert_eq!(String::from_utf8(out).unwrap(), format!("{GOOD}\n{GOOD}\n"));
        assert_eq!(counts(&health), (0, 0));
    }

    #[test]
    fn an_event_with_its_object_first_is_passed_on_type_first() {
        let (mut guard, health) = new_guard(1 << 20);
        let out = guard.feed(b"{\"object\":{\"kind\":\"Pod\"},\"type\":\"ADDED\"}\n");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"type\":\"ADDED\",\"object\":{\"kind\":\"Pod\"}}\n"
        );
        assert!(guard.feed(b"{\"type\":1,\"object\":{}}\n").is_empty());
        assert_eq!(counts(&health), (1, 0), "a type that is not a string");
    }

    #[test]
    fn a_truncated_event_ends_the_stream_and_is_counted() {
        let (mut guard, health) = new_guard(1 << 20);
        let stream = format!("{GOOD}\n{}\n{GOOD}\n", &GOOD[..30]);
        let out = guard.feed(stream.as_bytes());
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("{GOOD}\n"),
            "nothing after the bad line"
        );
        assert!(guard.ended());
        assert_eq!(counts(&health), (1, 0));
        let message = health.last_error.lock().unwrap().clone().unwrap().message;
        assert!(
            message.starts_with("undecodable watch event (EOF while parsing"),
            "{message}"
        );

        let (mut guard, health) = new_guard(1 << 20);
        guard.feed(&GOOD.as_bytes()[..20]);
        guard.finish();
        assert_eq!(counts(&health), (1, 0), "a stream cut inside an event");
        let (mut guard, health) = new_guard(1 << 20);
        assert!(
            guard
                .feed(b"{\"type\":\"ADDED\",\"object\":[1]}\n")
                .is_empty()
        );
        assert_eq!(counts(&health), (1, 0), "an object that is not an object");
    }

    #[test]
    fn an_oversize_line_is_dropped_unbuffered_and_named() {
        let (mut guard, health) = new_guard(100);
        let big = format!(
            r#"{{"type":"MODIFIED","object":{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"big","namespace":"default"}},"data":"{}"}}}}"#,
            "x".repeat(5000)
        );
        let stream = format!("{big}\n{GOOD}\n");
        let mut out = Vec::new();
        for chunk in stream.as_bytes().chunks(300) {
            out.extend(guard.feed(chunk));
            assert!(
                guard.line.len() <= 100 + ENVELOPE,
                "never buffers past the bound"
            );
        }
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("{GOOD}\n"),
            "the stream goes on"
        );
        assert_eq!(counts(&health), (0, 1));
        let message = health.last_error.lock().unwrap().clone().unwrap().message;
        assert_eq!(
            message,
            format!(
                "Pod default/big: watch event of {} bytes is over host.maxObjectBytes (100 bytes); not cached",
                big.len()
            )
        );
    }

    #[test]
    fn identifies_objects_by_what_their_prefix_shows() {
        let id = |s: &str| identify(s.as_bytes());
        assert_eq!(
            id(r#"{"type":"ADDED","object":{"kind":"Node","metadata":{"name":"n1","uid":"#),
            "Node n1"
        );
        assert_eq!(
            id(
                r#"{"type":"ADDED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns""#
            ),
            "Pod ns/p"
        );
        assert_eq!(
            id(r#"{"type":"ADDED","object":{"data":"xxxx"#),
            "object (name not in its first 38 bytes)"
        );
    }
}
