use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http_body_util::{BodyExt, Full};
use kube::Client;
use kube::client::Body;
use tokio::sync::mpsc;
use wasmformer_protobuf::ManagedFields;

use super::{PageKey, json_continue_token as continue_token};
use crate::informer::guard::{StreamHealth, guarded_client};

/// A page of a list with `token` as its continue token.
fn page_body(n: usize, token: Option<&str>) -> String {
    let token = token.map_or(String::new(), |t| format!(r#","continue":"{t}""#));
    format!(
        r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"7"{token}}},"items":[{{"metadata":{{"name":"p{n}"}}}}]}}"#
    )
}

/// A protobuf field: its key and, length-delimited, `bytes`.
fn field(number: u8, bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![number << 3 | 2, u8::try_from(bytes.len()).unwrap()];
    out.extend_from_slice(bytes);
    out
}

/// [`page_body`] in protobuf, as the API server sends it (`k8s\0` and a `runtime.Unknown`).
fn protobuf_page(n: usize, token: Option<&str>) -> Vec<u8> {
    let mut list_meta = field(2, b"7");
    if let Some(token) = token {
        list_meta.extend(field(3, token.as_bytes()));
    }
    let pod = field(1, &field(1, format!("p{n}").as_bytes()));
    let list = [field(1, &list_meta), field(2, &pod)].concat();
    let type_meta = [field(1, b"v1"), field(2, b"PodList")].concat();
    [b"k8s\0".to_vec(), field(1, &type_meta), field(2, &list)].concat()
}

/// A server of a three-page list (`continue` unset, `t1`, `t2`) that reports the `continue`
/// of every request it receives; the first `fail_first` requests for page 2 get a 500. Pages are
/// JSON, or protobuf with `protobuf`.
fn raw_server(fail_first: usize, protobuf: bool) -> (Client, mpsc::UnboundedReceiver<String>) {
    let (seen, received) = mpsc::unbounded_channel();
    let failures = Arc::new(AtomicUsize::new(fail_first));
    let service = tower::service_fn(move |request: http::Request<Body>| {
        let seen = seen.clone();
        let failures = failures.clone();
        async move {
            let token = form_urlencoded::parse(request.uri().query().unwrap_or("").as_bytes())
                .find(|(name, _)| name == "continue")
                .map_or(String::new(), |(_, value)| value.into_owned());
            seen.send(token.clone()).unwrap();
            let page = |n, next| match protobuf {
                true => (200, protobuf_page(n, next)),
                false => (200, page_body(n, next).into_bytes()),
            };
            let (status, body) = match token.as_str() {
                "" => page(1, Some("t1")),
                "t1" if failures
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok() =>
                {
                    (500, br#"{"kind":"Status","code":500}"#.to_vec())
                }
                "t1" => page(2, Some("t2")),
                "t2" => page(3, None),
                other => panic!("no page {other:?}"),
            };
            let content_type = match protobuf && status == 200 {
                true => wasmformer_protobuf::MEDIA_TYPE,
                false => "application/json",
            };
            Ok::<_, Infallible>(
                http::Response::builder()
                    .status(status)
                    .header(CONTENT_TYPE, content_type)
                    .body(Full::new(Bytes::from(body)))
                    .unwrap(),
            )
        }
    });
    (Client::new(service, "default"), received)
}

/// [`raw_server`] of JSON pages, through the informer's client ([`guarded_client`]).
fn server(fail_first: usize) -> (Client, mpsc::UnboundedReceiver<String>) {
    let (client, received) = raw_server(fail_first, false);
    let health = Arc::new(StreamHealth::default());
    (guarded_client(client, 1 << 20, None, health), received)
}

fn list_request(token: Option<&str>) -> http::Request<Body> {
    let token = token.map_or(String::new(), |t| format!("&continue={t}"));
    http::Request::get(format!("/api/v1/pods?limit=1{token}"))
        .header("accept", "application/json")
        .body(Body::empty())
        .unwrap()
}

/// Asks `client` for a page: its status and body.
async fn ask(client: &Client, token: Option<&str>) -> (u16, String) {
    let response = client.send(list_request(token)).await.unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

/// The next request the server receives, within 10 s.
async fn next_request(received: &mut mpsc::UnboundedReceiver<String>) -> String {
    tokio::time::timeout(Duration::from_secs(10), received.recv())
        .await
        .expect("the server received no request within 10 s")
        .unwrap()
}

#[tokio::test]
async fn the_next_page_is_asked_for_before_it_is_wanted_and_not_asked_again() {
    let (client, mut received) = server(0);
    assert_eq!(ask(&client, None).await, (200, page_body(1, Some("t1"))));
    assert_eq!(next_request(&mut received).await, "");
    // Page 2 reaches the server while nobody has asked for it yet.
    assert_eq!(next_request(&mut received).await, "t1");
    assert_eq!(
        ask(&client, Some("t1")).await,
        (200, page_body(2, Some("t2")))
    );
    assert_eq!(next_request(&mut received).await, "t2");
    assert_eq!(ask(&client, Some("t2")).await, (200, page_body(3, None)));
    // The last page names no next one, and pages 2 and 3 were not asked for twice.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(received.try_recv().is_err(), "no request beyond the three");
}

#[tokio::test]
async fn a_protobuf_page_is_fetched_ahead_and_handed_over_as_json() {
    let (client, mut received) = raw_server(0, true);
    let health = Arc::new(StreamHealth::default());
    let client = guarded_client(client, 1 << 20, Some(ManagedFields::Drop), health);
    /// The page's continue token and its one Pod's name.
    async fn ask_json(client: &Client, token: Option<&str>) -> (String, String) {
        let (status, body) = ask(client, token).await;
        assert_eq!(status, 200, "{body}");
        let page: serde_json::Value = serde_json::from_str(&body).unwrap();
        let text = |value: &serde_json::Value| value.as_str().unwrap_or_default().to_owned();
        (
            text(&page["metadata"]["continue"]),
            text(&page["items"][0]["metadata"]["name"]),
        )
    }
    assert_eq!(ask_json(&client, None).await, ("t1".into(), "p1".into()));
    assert_eq!(next_request(&mut received).await, "");
    // The token was read from the page turned into JSON.
    assert_eq!(next_request(&mut received).await, "t1");
    assert_eq!(
        ask_json(&client, Some("t1")).await,
        ("t2".into(), "p2".into())
    );
    assert_eq!(next_request(&mut received).await, "t2");
    assert_eq!(
        ask_json(&client, Some("t2")).await,
        (String::new(), "p3".into())
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(received.try_recv().is_err(), "no request beyond the three");
}

#[tokio::test]
async fn a_failed_fetch_ahead_is_dropped_and_the_page_asked_for_again() {
    let (client, mut received) = server(1);
    assert_eq!(ask(&client, None).await.0, 200);
    assert_eq!(next_request(&mut received).await, "");
    assert_eq!(
        next_request(&mut received).await,
        "t1",
        "the fetch ahead (a 500)"
    );
    assert_eq!(
        ask(&client, Some("t1")).await,
        (200, page_body(2, Some("t2")))
    );
    assert_eq!(
        next_request(&mut received).await,
        "t1",
        "asked again when wanted"
    );
}

#[tokio::test]
async fn a_request_for_another_page_is_sent_as_it_is() {
    let (client, mut received) = server(0);
    assert_eq!(ask(&client, None).await.0, 200);
    assert_eq!(next_request(&mut received).await, "");
    assert_eq!(next_request(&mut received).await, "t1");
    // The list starts over (a relist): the first page again, from the server.
    assert_eq!(ask(&client, None).await, (200, page_body(1, Some("t1"))));
    assert_eq!(next_request(&mut received).await, "");
}

#[test]
fn only_paged_lists_are_fetched_ahead() {
    let request = |uri: &str| http::Request::get(uri).body(()).unwrap();
    assert!(PageKey::of(&request("/api/v1/pods?limit=500")).is_some());
    assert!(PageKey::of(&request("/api/v1/pods")).is_none());
    let watch = request("/api/v1/pods?limit=500&watch=true&resourceVersion=1");
    assert!(PageKey::of(&watch).is_none());
    let post = http::Request::post("/api/v1/pods?limit=500")
        .body(())
        .unwrap();
    assert!(PageKey::of(&post).is_none());
    let a = PageKey::of(&request(
        "/api/v1/pods?limit=5&labelSelector=a%3D1&continue=x",
    ))
    .unwrap();
    let b = PageKey::of(&request(
        "/api/v1/pods?continue=x&labelSelector=a=1&limit=5",
    ))
    .unwrap();
    assert_eq!(a, b, "the same page, its parameters in another order");
    assert_ne!(a, a.next("y".to_owned()));
}

#[test]
fn the_continue_token_is_read_from_the_list_metadata_only() {
    assert_eq!(
        continue_token(page_body(1, Some("abc=")).as_bytes()).as_deref(),
        Some("abc=")
    );
    assert_eq!(continue_token(page_body(1, None).as_bytes()), None);
    assert_eq!(
        continue_token(br#"{"kind":"PodList","metadata":{"continue":""},"items":[]}"#),
        None
    );
    // Items first: the metadata found would be an item's.
    assert_eq!(
        continue_token(br#"{"items":[{"metadata":{"continue":"x"}}],"metadata":{"continue":"y"}}"#),
        None
    );
    assert_eq!(continue_token(b"not json"), None);
    assert_eq!(continue_token(br#"{"metadata":{"continue":"#), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_page_is_sent_before_this_one_is_decoded() {
    let (server, mut received) = raw_server(0, false);
    // On a worker, as the informer's task runs (the test's own body does not).
    let asked = tokio::spawn(async move {
        let fetch = |request| {
            let server = server.clone();
            async move {
                let (parts, body) = server.send(request).await?.into_parts();
                Ok(http::Response::from_parts(
                    parts,
                    body.collect_bytes().await?,
                ))
            }
        };
        // Decoding holds the worker, as turning a page of 500 Pods into JSON does (about 10 ms).
        let decode = |page| {
            std::thread::sleep(Duration::from_millis(300));
            let mut tokens = Vec::new();
            while let Ok(token) = received.try_recv() {
                tokens.push(token);
            }
            assert_eq!(
                tokens,
                ["", "t1"],
                "page 2 asked for while page 1 is decoded"
            );
            Ok(page)
        };
        let prefetch = super::Prefetch::default();
        prefetch.page(list_request(None), fetch, decode).await
    });
    asked.await.unwrap().unwrap();
}
