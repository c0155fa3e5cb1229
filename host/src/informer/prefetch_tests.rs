use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use kube::Client;
use kube::client::Body;
use tokio::sync::mpsc;

use super::{PageKey, Prefetch, continue_token};
use crate::informer::guard::{StreamHealth, guarded_client};

/// A page of a list with `token` as its continue token.
fn page_body(n: usize, token: Option<&str>) -> String {
    let token = token.map_or(String::new(), |t| format!(r#","continue":"{t}""#));
    format!(
        r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"7"{token}}},"items":[{{"metadata":{{"name":"p{n}"}}}}]}}"#
    )
}

/// A server of a three-page list (`continue` unset, `t1`, `t2`) that reports the `continue`
/// of every request it receives; the first `fail_first` requests for page 2 get a 500. The
/// client is the informer's: through [`guarded_client`].
fn server(fail_first: usize) -> (Client, mpsc::UnboundedReceiver<String>) {
    let (client, received) = raw_server(fail_first);
    (
        guarded_client(client, 1 << 20, Arc::new(StreamHealth::default())),
        received,
    )
}

/// [`server`], its client as it is.
fn raw_server(fail_first: usize) -> (Client, mpsc::UnboundedReceiver<String>) {
    let (seen, received) = mpsc::unbounded_channel();
    let failures = Arc::new(std::sync::atomic::AtomicUsize::new(fail_first));
    let service = tower::service_fn(move |request: http::Request<Body>| {
        let seen = seen.clone();
        let failures = failures.clone();
        async move {
            let token = form_urlencoded::parse(request.uri().query().unwrap_or("").as_bytes())
                .find(|(name, _)| name == "continue")
                .map_or(String::new(), |(_, value)| value.into_owned());
            seen.send(token.clone()).unwrap();
            let (status, body) = match token.as_str() {
                "" => (200, page_body(1, Some("t1"))),
                "t1" if failures
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok() =>
                {
                    (500, r#"{"kind":"Status","code":500}"#.to_owned())
                }
                "t1" => (200, page_body(2, Some("t2"))),
                "t2" => (200, page_body(3, None)),
                other => panic!("no page {other:?}"),
            };
            Ok::<_, Infallible>(
                http::Response::builder()
                    .status(status)
                    .body(Full::new(Bytes::from(body)))
                    .unwrap(),
            )
        }
    });
    (Client::new(service, "default"), received)
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

#[tokio::test]
async fn a_held_page_is_counted_when_handed_over() {
    let (server, mut received) = raw_server(0);
    let prefetch = Prefetch::default();
    prefetch.page(&server, list_request(None)).await.unwrap();
    prefetch
        .page(&server, list_request(Some("t1")))
        .await
        .unwrap();
    let last = prefetch
        .page(&server, list_request(Some("t2")))
        .await
        .unwrap();
    assert_eq!(last.body(), &Bytes::from(page_body(3, None)));
    assert_eq!(prefetch.served.load(Ordering::Relaxed), 2);
    let mut tokens = Vec::new();
    while let Ok(token) = received.try_recv() {
        tokens.push(token);
    }
    assert_eq!(tokens, ["", "t1", "t2"]);
}

#[test]
fn only_paged_lists_are_fetched_ahead() {
    let request = |uri: &str| http::Request::get(uri).body(()).unwrap();
    assert!(Prefetch::handles(&request("/api/v1/pods?limit=500")));
    assert!(!Prefetch::handles(&request("/api/v1/pods")));
    assert!(!Prefetch::handles(&request(
        "/api/v1/pods?limit=500&watch=true&resourceVersion=1"
    )));
    let post = http::Request::post("/api/v1/pods?limit=500")
        .body(())
        .unwrap();
    assert!(!Prefetch::handles(&post));
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
