//! The `/wasmformer-dev/` HTTP control endpoints, driven with a real kube client: fail (500,
//! and 429 that kube-rs retries after `Retry-After`), delay, pause/resume, close-watches,
//! compact, and the request log.

use std::time::{Duration, Instant};

use axum::http::Request;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, Client,
    api::{ListParams, WatchEvent, WatchParams},
};
use serde_json::Value;
use wasmformer_devcluster::Verb;

use crate::common::{start, within};

async fn control(client: &Client, method: &str, path: &str) -> Value {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .body(Vec::new())
        .unwrap();
    let text = within(path, client.request_text(request))
        .await
        .expect("control endpoint answers");
    serde_json::from_str(&text).unwrap()
}

#[tokio::test]
async fn failures_and_delays_apply_to_the_next_matching_requests() -> anyhow::Result<()> {
    let dev = start().await;
    let client = dev.client()?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

    let ack = control(
        &client,
        "POST",
        "/wasmformer-dev/faults/fail-next?count=1&code=500&verb=list&resource=configmaps",
    )
    .await;
    assert_eq!(ack["ok"], true);
    api.get_opt("unrelated").await?;
    match api.list(&ListParams::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(
            (status.code, status.reason.as_str()),
            (500, "InternalError")
        ),
        other => panic!("expected an injected 500, got {other:?}"),
    }
    api.list(&ListParams::default()).await?;

    // kube-rs retries 429 after the server's Retry-After.
    control(
        &client,
        "POST",
        "/wasmformer-dev/faults/fail-next?count=1&code=429",
    )
    .await;
    let before = dev.request_log().last_seq();
    api.list(&ListParams::default()).await?;
    assert_eq!(
        dev.request_log()
            .count_since(before, Verb::List, "configmaps"),
        2
    );

    control(
        &client,
        "POST",
        "/wasmformer-dev/faults/delay-next?count=1&ms=300",
    )
    .await;
    let started = Instant::now();
    api.list(&ListParams::default()).await?;
    assert!(started.elapsed() >= Duration::from_millis(300));

    let log = control(
        &client,
        "GET",
        &format!("/wasmformer-dev/requests?since={before}"),
    )
    .await;
    let requests = log["requests"].as_array().unwrap();
    assert!(
        requests
            .iter()
            .all(|r| r["verb"] == "list" && r["resource"] == "configmaps"),
        "{requests:?}"
    );
    dev.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn pause_holds_requests_until_resume() -> anyhow::Result<()> {
    let dev = start().await;
    let client = dev.client()?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    control(&client, "POST", "/wasmformer-dev/faults/pause").await;
    let before = dev.request_log().last_seq();
    let held = tokio::spawn(async move { api.list(&ListParams::default()).await });
    within(
        "the held list",
        dev.request_log()
            .wait_for(before, |r| r.is(Verb::List, "configmaps")),
    )
    .await;
    assert!(!held.is_finished());
    control(&client, "POST", "/wasmformer-dev/faults/resume").await;
    within("the released list", held).await??;
    dev.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn close_watches_and_compact_endpoints() -> anyhow::Result<()> {
    let dev = start().await;
    let client = dev.client()?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let rv = dev.store().resource_version().to_string();
    let watch = api
        .watch(&WatchParams::default().disable_bookmarks(), &rv)
        .await?
        .boxed();
    within(
        "the watch to be served",
        dev.request_log()
            .wait_for(0, |r| r.is(Verb::Watch, "configmaps")),
    )
    .await;
    control(&client, "POST", "/wasmformer-dev/faults/close-watches").await;
    let events: Vec<_> = within("the closed watch to end", watch.try_collect::<Vec<_>>()).await?;
    assert!(events.is_empty());

    dev.store()
        .create_object(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "after", "namespace": "default"}}))?;
    control(&client, "POST", "/wasmformer-dev/faults/compact").await;
    let mut expired = api.watch(&WatchParams::default(), &rv).await?.boxed();
    match within("the expired watch", expired.try_next()).await? {
        Some(WatchEvent::Error(status)) => assert_eq!(status.code, 410),
        other => panic!("expected 410, got {other:?}"),
    }
    dev.shutdown().await?;
    Ok(())
}
